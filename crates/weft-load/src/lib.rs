//! weft-load: the measuring instruments.
//!
//! - [`engine`]: the client, event-driven on weft-io's loop — open loop
//!   (httperf: new connections or sessions at a fixed, exponential or uniform
//!   rate, scheduled from the start time so the rate never drifts), closed
//!   loop (`--clients`), idle connections held and reopened (idleconn),
//!   pipelining, SSL-handshake emulation, per-request timeouts;
//! - [`workload`]: one-byte, file:SIZE, URL lists, SPECweb99, SURGE,
//!   PolyMix-4, trace replay; [`gen`] writes their file sets and traces;
//! - [`origin`]: `weft origin`, the workload server: sizes, cacheability and
//!   think times per URL or header, deterministic bodies ([`content`]),
//!   SPECweb99 files, SSL-emulation exchanges ([`ssl`]); its counters are
//!   [`origin_stats`];
//! - [`stats`]: counters, HDR histograms, one-second samples, Student-t
//!   confidence intervals; [`report`]: the summary and `--json`;
//! - [`run`](mod@run): threads, repeats, the live progress line.

#![forbid(unsafe_code)]

pub mod config;
pub mod content;
pub mod dist;
pub mod engine;
pub mod gen;
pub mod origin;
pub mod origin_stats;
pub mod report;
pub mod request;
pub mod run;
pub mod ssl;
pub mod stats;
pub mod trace_like;
pub mod urls;
pub mod workload;

pub use config::{Arrivals, LoadConfig};
pub use dist::Dist;
pub use origin::{Origin, OriginConfig};
pub use origin_stats::OriginStats;
pub use run::run;
