//! weft-wan: a user-space WAN emulator (`weft wan`).
//!
//! The hosts of a [`config::Topology`] are network namespaces, each with one
//! TUN device whose packets the [`router`] reads, delays, drops or paces as
//! the link between the two hosts says ([`model`]), and writes to the
//! destination host's TUN device. [`netns`] creates and removes the
//! namespaces (and finds those a killed run left behind); `mode = "veth"`
//! joins the namespaces with plain veth pairs instead, for real packet sizes
//! without emulation.

#![forbid(unsafe_code)]

pub mod config;
pub mod counters;
pub mod model;
pub mod netns;
pub mod router;
pub mod run;
pub mod shaper;
pub mod tuning;
pub mod veth;
pub use run::{run, RunOptions};
pub use tuning::Tuning;
