//! weft-policy: pure decisions, with the clock and costs passed in.
//!
//! Policies here never touch a socket, a file or the system clock, so the live
//! servers and the trace-driven simulator run exactly the same code, and tests
//! are plain function calls.
//!
//! - [`replacement`]: cache replacement — LRU and Greedy-Dual-Size (Cao and
//!   Irani, as used by IO-Lite's unified cache in the thesis, 004 ch. 2).
//!
//! Request distribution (WRR, LARD, LARD/R) and back-end health states will
//! live here too, shared by `weft front` and `weft sim`.

#![forbid(unsafe_code)]

pub mod replacement;

pub use replacement::{Gds, Lru, Replacement};
