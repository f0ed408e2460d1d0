//! Request distribution for a cluster front-end (thesis 004, chapter 3).
//!
//! Two layers:
//! - a [`Strategy`] picks a back-end for one request from a read-only view of
//!   the back-ends ([`Backends`]: load, weight, health). Strategies: weighted
//!   round-robin by load ([`Wrr`]), locality by hashing the target ([`Lb`]),
//!   the idealized global cache ([`LbGc`]), [`Lard`] and [`LardR`] exactly as
//!   in Figures 3.2 and 3.3, and bounded-load consistent hashing ([`Chash`],
//!   the algorithm behind HAProxy's `hash-balance-factor`);
//! - the [`Dispatcher`] owns the state every placement must see: the load of
//!   each back-end (requests in flight, moved only by the caller's
//!   [`Dispatcher::place`] and [`Dispatcher::finished`]), health, and the
//!   admission limit S = (n−1)·T_high + T_low − 1 with its bounded FIFO queue.
//!
//! Nothing here reads a clock: `now` is passed in (nanoseconds since any fixed
//! origin), so the live front-end and `weft sim` run the same code.

mod chash;
mod dispatcher;
mod hash;
mod lard;
pub mod lru_map;
mod wrr;

pub use chash::Chash;
pub use dispatcher::{Dispatcher, DispatcherConfig, Placement, Reject};
pub use hash::{mix64, Lb, LbGc};
pub use lard::{Lard, LardParams, LardR};
pub use wrr::Wrr;

use std::fmt;
use std::str::FromStr;

/// Index of a back-end, 0..n.
pub type ServerId = usize;
/// A target: a hash of the URL (live front-end) or a dense id (simulator).
pub type TargetId = u64;
/// Time in nanoseconds since an origin the caller chooses.
pub type Nanos = u64;

/// One request as a strategy sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// What is asked for.
    pub target: TargetId,
    /// The target's size when the caller knows it (LB/GC models caches with it).
    pub size: Option<u64>,
}

impl Request {
    /// A request for `target` of unknown size.
    pub fn new(target: TargetId) -> Request {
        Request { target, size: None }
    }
}

/// The back-ends as strategies see them.
#[derive(Clone, Debug)]
pub struct Backends {
    load: Vec<u32>,
    up: Vec<bool>,
    weight: Vec<u32>,
    up_count: usize,
}

impl Backends {
    /// `weights.len()` back-ends, all up and idle; a weight of 0 counts as 1.
    pub fn new(weights: &[u32]) -> Backends {
        Backends {
            load: vec![0; weights.len()],
            up: vec![true; weights.len()],
            weight: weights.iter().map(|&w| w.max(1)).collect(),
            up_count: weights.len(),
        }
    }
    /// Back-ends in a given state (tests, and a front-end restoring state):
    /// `loads[s]` in flight on `s`, `up[s]` its health.
    pub fn from_state(weights: &[u32], loads: &[u32], up: &[bool]) -> Backends {
        assert!(
            weights.len() == loads.len() && loads.len() == up.len(),
            "one entry per back-end"
        );
        Backends {
            load: loads.to_vec(),
            up: up.to_vec(),
            weight: weights.iter().map(|&w| w.max(1)).collect(),
            up_count: up.iter().filter(|&&u| u).count(),
        }
    }
    /// Number of back-ends, up or down.
    pub fn len(&self) -> usize {
        self.load.len()
    }
    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.load.is_empty()
    }
    /// Requests in flight on `s`.
    pub fn load(&self, s: ServerId) -> u32 {
        self.load[s]
    }
    /// Whether `s` may be chosen.
    pub fn is_up(&self, s: ServerId) -> bool {
        self.up[s]
    }
    /// The weight of `s` (≥ 1).
    pub fn weight(&self, s: ServerId) -> u32 {
        self.weight[s]
    }
    /// Back-ends up.
    pub fn up_count(&self) -> usize {
        self.up_count
    }
    /// The up back-end with the least load; ties go to the first at or after
    /// `from` (a rotating start keeps new targets spread at light load, when
    /// every load is 0).
    pub fn least_loaded(&self, from: usize) -> Option<ServerId> {
        let n = self.len();
        let mut best: Option<ServerId> = None;
        for k in 0..n {
            let s = (from + k) % n;
            if self.up[s] && best.is_none_or(|b| self.load[s] < self.load[b]) {
                best = Some(s);
            }
        }
        best
    }
    /// Is some up back-end's load below `t`?
    pub fn any_below(&self, t: u32) -> bool {
        (0..self.len()).any(|s| self.up[s] && self.load[s] < t)
    }
    fn add_load(&mut self, s: ServerId) {
        self.load[s] += 1;
    }
    fn sub_load(&mut self, s: ServerId) {
        self.load[s] = self.load[s].saturating_sub(1);
    }
    fn set_up(&mut self, s: ServerId, up: bool) -> bool {
        if self.up[s] == up {
            return false;
        }
        self.up[s] = up;
        if up {
            self.up_count += 1;
        } else {
            self.up_count -= 1;
        }
        true
    }
}

/// A request-distribution strategy. Implementations never choose a back-end
/// that is down, and return `None` only when every back-end is down.
pub trait Strategy: Send {
    /// Short name (`wrr`, `lb`, `lb-gc`, `lard`, `lard-r`, `chash`).
    fn name(&self) -> &'static str;
    /// Pick the back-end for `req`, given the loads before it is sent.
    fn choose(&mut self, req: &Request, backends: &Backends, now: Nanos) -> Option<ServerId>;
    /// `server` failed its health checks: forget what was assigned to it, so
    /// its targets are placed again as if new (§3.1.6).
    fn backend_down(&mut self, _server: ServerId) {}
    /// `server` is back.
    fn backend_up(&mut self, _server: ServerId) {}
    /// Targets in the strategy's target map (0 for stateless strategies).
    fn mapped_targets(&self) -> usize {
        0
    }
}

/// Which strategy, with its parameters; [`Policy::build`] makes one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Policy {
    /// Weighted round-robin by load.
    Wrr,
    /// Locality-based: a hash of the target picks the back-end.
    Lb,
    /// Locality-based with a global cache model of `cache_bytes` per back-end.
    LbGc {
        /// Modelled cache size of each back-end.
        cache_bytes: u64,
        /// Largest target the back-ends cache (LRU's 500 KB rule; else `cache_bytes`).
        max_file: u64,
    },
    /// Basic LARD (Figure 3.2).
    Lard(LardParams),
    /// LARD with replication (Figure 3.3).
    LardR(LardParams),
    /// Bounded-load consistent hashing; `balance_factor` in percent (≥ 100).
    Chash {
        /// HAProxy's `hash-balance-factor` (125 = at most 1.25× the average load).
        balance_factor: u32,
    },
}

impl Policy {
    /// Names accepted by [`FromStr`].
    pub const NAMES: &'static [&'static str] = &["wrr", "lb", "lb-gc", "lard", "lard-r", "chash"];

    /// A strategy for back-ends of the given weights.
    pub fn build(&self, weights: &[u32]) -> Box<dyn Strategy> {
        match *self {
            Policy::Wrr => Box::new(Wrr::new()),
            Policy::Lb => Box::new(Lb::new()),
            Policy::LbGc { cache_bytes, max_file } => Box::new(LbGc::new(weights.len(), cache_bytes, max_file)),
            Policy::Lard(p) => Box::new(Lard::new(p)),
            Policy::LardR(p) => Box::new(LardR::new(p)),
            Policy::Chash { balance_factor } => Box::new(Chash::new(weights, balance_factor)),
        }
    }

    /// The short name.
    pub fn name(&self) -> &'static str {
        match self {
            Policy::Wrr => "wrr",
            Policy::Lb => "lb",
            Policy::LbGc { .. } => "lb-gc",
            Policy::Lard(_) => "lard",
            Policy::LardR(_) => "lard-r",
            Policy::Chash { .. } => "chash",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses a name with default parameters (32 MiB caches for LB/GC, the
/// thesis's T_low/T_high/K for LARD, factor 125 for chash).
impl FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Policy, String> {
        Ok(match s {
            "wrr" => Policy::Wrr,
            "lb" => Policy::Lb,
            "lb-gc" | "lbgc" => Policy::LbGc {
                cache_bytes: 32 << 20,
                max_file: 32 << 20,
            },
            "lard" => Policy::Lard(LardParams::default()),
            "lard-r" | "lardr" => Policy::LardR(LardParams::default()),
            "chash" => Policy::Chash { balance_factor: 125 },
            _ => return Err(format!("unknown policy `{s}` (expected {})", Policy::NAMES.join(", "))),
        })
    }
}
