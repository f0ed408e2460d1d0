//! A worker's two buffer pools seen together, the input [`BufPool`] and the
//! output [`OwnPool`]: what they hold now ([`PoolGauges`], one gauge group
//! every role embeds in its stats: `"pools":{...}` in JSON,
//! `weft_ROLE_pools_*` in Prometheus), and a connection's buffers given back
//! to them ([`release_idle`] between requests, [`release_all`] at close).

use crate::input::{BufPool, InputBuf};
use crate::output::{OutChain, OwnPool};
use std::time::{Duration, Instant};

/// How often a worker shrinks its pools after a burst, so that a burst's
/// idle buffers do not stay (a role's `max_wait` wakes the loop this often
/// while the pools hold more than their floor).
pub const DECAY_EVERY: Duration = Duration::from_secs(1);

weft_core::metrics! {
    /// Input and output buffers lent to connections and waiting in the pools.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct PoolGauges {
        /// Input buffers lent to connections now (held while bytes are pending).
        gauge input_bufs_lent,
        /// Bytes of the input buffers lent now.
        gauge input_bytes_lent,
        /// Input buffers waiting in the worker's pool (grown ones included).
        gauge input_bufs_pooled,
        /// Bytes of the input buffers waiting in the pool.
        gauge input_bytes_pooled,
        /// Output buffers lent to connections now (held while bytes are queued).
        gauge output_bufs_lent,
        /// Output buffers waiting in the worker's pool.
        gauge output_bufs_pooled,
        /// Bytes of the output buffers waiting in the pool.
        gauge output_bytes_pooled,
    }
    groups {}
}

impl PoolGauges {
    /// The gauges of a worker's two pools now.
    pub fn of(input: &BufPool, output: &OwnPool) -> PoolGauges {
        PoolGauges {
            input_bufs_lent: input.lent() as u64,
            input_bytes_lent: input.lent_bytes() as u64,
            input_bufs_pooled: input.idle_total() as u64,
            input_bytes_pooled: input.idle_bytes() as u64,
            output_bufs_lent: output.lent() as u64,
            output_bufs_pooled: output.idle() as u64,
            output_bytes_pooled: output.idle_bytes() as u64,
        }
    }
}

/// Between requests: a connection with nothing pending gives its input
/// buffer and its output buffer back (one with bytes still pending or queued
/// keeps it), so an idle connection holds none.
#[inline]
pub fn release_idle(input: &mut InputBuf, out: &mut OutChain, pool: &mut BufPool, own: &mut OwnPool) {
    input.release(pool);
    out.release_own(own);
}

/// At close: whatever the connection still held (unread input, unsent
/// output) is dropped and its buffers go back to the pools.
#[inline]
pub fn release_all(input: &mut InputBuf, out: &mut OutChain, pool: &mut BufPool, own: &mut OwnPool) {
    input.discard(pool);
    out.clear();
    out.release_own(own);
}

/// At most once every [`DECAY_EVERY`] (`next`: when the next shrink may
/// run): shrink both pools. True when it ran, for a role that shrinks more
/// of its own at the same pace.
pub fn decay(next: &mut Instant, now: Instant, pool: &mut BufPool, own: &mut OwnPool) -> bool {
    if now < *next {
        return false;
    }
    *next = now + DECAY_EVERY;
    pool.decay();
    own.decay();
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_pools_lend_nothing_and_nest_in_json() {
        let g = PoolGauges::of(&BufPool::new(4096, 4), &OwnPool::new(1024, 4096, 4));
        assert_eq!(g.input_bufs_lent + g.input_bytes_lent + g.output_bufs_lent, 0);
        assert!(g.to_json().starts_with("{\"input_bufs_lent\":0,"));
    }
}
