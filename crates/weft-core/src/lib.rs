//! weft-core: what every part of weft shares and that touches no socket.
//!
//! - [`config`]: reading `weft.toml` into per-subcommand key/value settings, with
//!   one-line errors that name the file, section and key;
//! - [`log`]: a minimal leveled logger to stderr (`--log-level`);
//! - [`names`]: [`enum_names!`], the word ↔ variant table of a setting's values;
//! - [`units`]: parsing of sizes (`64KiB`) and durations (`10s`, `250ms`).

#![forbid(unsafe_code)]

pub mod config;
pub mod log;
pub mod metrics;
pub mod names;
pub mod units;
