//! Every integration test of the `weft` binary, one module per file
//! (`tests/proxy.rs` is `proxy::`), built as one test binary.
//!
//! One binary, not one per file: each of two dozen binaries compiled and
//! linked its own copy of `common`, and `cargo test` ran them one after
//! another, each waiting on its slowest test. Together they build in less
//! time and overlap their waits (CI runs them with `RUST_TEST_THREADS=8`).
//! One file's tests: `cargo test --test integration proxy::`.

mod common;
mod fcgi_app;

mod arch;
mod booster;
mod cgi;
mod cli;
mod complete;
mod events;
mod faults;
mod fill_stream;
mod flash;
mod front;
mod handoff;
mod http_rules;
mod idle;
mod load;
mod packaging;
mod proxy;
mod proxy_log;
mod range_fill;
mod reload;
mod serve;
mod sim;
mod sockmap;
mod status;
mod vhost;
mod wan;
