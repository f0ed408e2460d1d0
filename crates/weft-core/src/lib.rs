//! weft-core: what every part of weft shares and that touches no socket.
//!
//! - [`config`]: reading `weft.toml` into per-subcommand key/value settings, with
//!   one-line errors that name the file, section and key;
//! - [`error`]: an error that records where a failure came from (client,
//!   upstream, internal) and whether retrying is safe;
//! - [`log`]: a minimal leveled logger to stderr (`--log-level`);
//! - [`units`]: parsing of sizes (`64KiB`) and durations (`10s`, `250ms`).

#![forbid(unsafe_code)]

pub mod config;
pub mod error;
pub mod log;
pub mod metrics;
pub mod units;

pub use error::{Error, Origin};
