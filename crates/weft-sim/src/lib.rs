//! weft-sim: the trace-driven cluster simulator of the thesis's LARD chapter
//! (004, §3.2), over the same request-distribution code as `weft front`.
//!
//! - [`cost`]: the cost model of §3.2.1 (CPU, disk; blocks of 44 KB);
//! - [`cache`]: whole-file node caches with weft-policy's GDS or LRU;
//! - [`engine`]: the discrete-event cluster (Figure 3.4) behind weft-policy's
//!   [`weft_policy::Dispatcher`], with WRR/GMS's global memory;
//! - [`trace`]: Common/Combined Log Format input, streamed, gzip or plain;
//! - [`synth`]: synthetic traces fitted to the statistics the thesis gives
//!   for its Rice (MERGED), IBM, ECE, CS and Owlnet traces;
//! - [`tools`]: a trace's coverage curve, and a log cut to a data-set size and looped;
//! - [`input`]: a run's trace (log or synthetic) and the JSON document;
//! - [`report`]: throughput, miss ratio, idle time and delay (§3.2.3).
//!
//! It never opens a socket nor reads the clock: simulated time is a `u64` of
//! nanoseconds, and a run is a pure function of its configuration and trace.

#![forbid(unsafe_code)]

pub mod cache;
pub mod cost;
pub mod engine;
pub mod input;
pub mod report;
pub mod synth;
pub mod tools;
pub mod trace;

pub use cache::CachePolicy;
pub use cost::CostModel;
pub use engine::{simulate, SimConfig};
pub use input::{json_document, Input, SynthOptions};
pub use report::{table, SimReport};
pub use trace::{ClfTrace, TraceRequest, TraceSource, TraceStats};

/// The distribution code the simulator runs, for callers that configure it.
pub use weft_policy::{distribution::LardParams, Policy};

/// Simulated time, in nanoseconds.
pub type Nanos = u64;
