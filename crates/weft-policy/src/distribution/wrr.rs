//! Weighted round-robin by load (§3.1.2): the back-end with the least load per
//! unit of weight, ties taken in round-robin order so equal back-ends share
//! work evenly even when every load is 0.

use super::{Backends, Nanos, Request, ServerId, Strategy};

/// Weighted round-robin by load.
#[derive(Debug, Default)]
pub struct Wrr {
    next: usize,
}

impl Wrr {
    /// A new strategy.
    pub fn new() -> Wrr {
        Wrr::default()
    }
}

impl Strategy for Wrr {
    fn name(&self) -> &'static str {
        "wrr"
    }
    fn choose(&mut self, _req: &Request, b: &Backends, _now: Nanos) -> Option<ServerId> {
        let n = b.len();
        let mut best: Option<ServerId> = None;
        for k in 0..n {
            let s = (self.next + k) % n;
            if !b.is_up(s) {
                continue;
            }
            // load_s / weight_s < load_b / weight_b, without division.
            let better = best.is_none_or(|c| {
                u64::from(b.load(s)) * u64::from(b.weight(c)) < u64::from(b.load(c)) * u64::from(b.weight(s))
            });
            if better {
                best = Some(s);
            }
        }
        if let Some(s) = best {
            self.next = s + 1;
        }
        best
    }
}
