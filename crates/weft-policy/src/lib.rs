//! weft-policy: pure decisions, with the clock and costs passed in.
//!
//! Policies here never touch a socket, a file or the system clock, so the live
//! servers and the trace-driven simulator run exactly the same code, and tests
//! are plain function calls.
//!
//! - [`replacement`]: cache replacement — LRU and Greedy-Dual-Size (Cao and
//!   Irani, as used by IO-Lite's unified cache in the thesis, 004 ch. 2).
//! - [`distribution`]: request distribution for a cluster front-end — WRR,
//!   LB, LB/GC, LARD, LARD/R (thesis 004 ch. 3) and bounded-load consistent
//!   hashing — behind one [`Dispatcher`] that holds loads, health and the
//!   admission limit. `weft sim` drives it today; `weft front` will.

#![forbid(unsafe_code)]

pub mod distribution;
pub mod replacement;

pub use distribution::{Dispatcher, DispatcherConfig, Placement, Policy, Request, Strategy};
pub use replacement::{Gds, GdsCost, Lru, PolicyKind, Replacement, LRU_MAX_OBJECT};
