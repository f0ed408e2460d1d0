//! One direction of a link as the router applies it: loss, then the rate
//! limit's serialisation queue (drop-tail when its backlog passes the queue
//! size), then the propagation delay. A packet leaves at
//! `max(now, busy) + size / rate + delay`; unless reordering is allowed it
//! never leaves before the packet ahead of it, so jitter reorders nothing.
//! With a rate per flow (001's modems: one 56 kbit/s line per connection)
//! each flow is its own line: its own serialisation clock and its own order,
//! so one client's full-size packet never holds back another's ACK.

use crate::config::{DelayDist, DirSpec, Loss, RatePer};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};
use std::collections::HashMap;

/// What happens to a packet offered to a direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Lost by the loss model.
    Lost,
    /// Dropped at the tail of the full rate-limit queue.
    QueueFull,
    /// Delivered at this time (ns on the router's clock).
    At(u64),
}

/// Counters of one direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirStats {
    /// Packets offered.
    pub packets: u64,
    /// Bytes offered.
    pub bytes: u64,
    /// Lost by the loss model.
    pub lost: u64,
    /// Dropped because the queue was full.
    pub queue_drops: u64,
}

/// At most this many flows keep their own rate-limit clock; idle ones are forgotten.
const MAX_FLOWS: usize = 65_536;

/// One flow's line when the rate is per flow.
#[derive(Clone, Copy, Debug, Default)]
struct FlowLine {
    busy: u64,
    last: u64,
}

/// The state of one direction.
#[derive(Debug)]
pub struct Direction {
    spec: DirSpec,
    rng: SmallRng,
    normal: Option<Normal<f64>>,
    lost_prev: bool,
    busy: u64,
    /// The queue's bound in bytes (`DirSpec::queue_limit`, worked out once).
    queue_limit: u64,
    /// Per flow (rate per flow): its serialisation clock and its last departure.
    flows: HashMap<u64, FlowLine>,
    last: u64,
    /// Counters.
    pub stats: DirStats,
}

impl Direction {
    /// A direction with its own random stream.
    pub fn new(spec: DirSpec, seed: u64) -> Direction {
        let normal = (spec.dist == DelayDist::Normal && spec.jitter.as_nanos() > 0)
            .then(|| Normal::new(spec.delay.as_nanos() as f64, spec.jitter.as_nanos() as f64).ok())
            .flatten();
        Direction {
            queue_limit: spec.queue_limit(),
            spec,
            rng: SmallRng::seed_from_u64(seed),
            normal,
            lost_prev: false,
            busy: 0,
            flows: HashMap::new(),
            last: 0,
            stats: DirStats::default(),
        }
    }

    /// The settings.
    pub fn spec(&self) -> &DirSpec {
        &self.spec
    }

    fn lose(&mut self) -> bool {
        let p = match self.spec.loss {
            Loss::None => return false,
            Loss::Bernoulli(p) => p,
            Loss::GilbertElliott { first, after } => {
                if self.lost_prev {
                    after
                } else {
                    first
                }
            }
        };
        self.lost_prev = self.rng.gen::<f64>() < p;
        self.lost_prev
    }

    fn delay_ns(&mut self) -> u64 {
        let d = self.spec.delay.as_nanos() as f64;
        let j = self.spec.jitter.as_nanos() as f64;
        let v = match (self.spec.dist, self.normal) {
            (_, _) if j == 0.0 => d,
            (DelayDist::Normal, Some(n)) => n.sample(&mut self.rng),
            (DelayDist::Uniform, _) => d - j + 2.0 * j * self.rng.gen::<f64>(),
            _ => d,
        };
        v.max(0.0) as u64
    }

    /// Offer a packet of `len` bytes of flow `flow` at `now`.
    pub fn offer(&mut self, now: u64, len: usize, flow: u64) -> Verdict {
        self.stats.packets += 1;
        self.stats.bytes += len as u64;
        if self.lose() {
            self.stats.lost += 1;
            return Verdict::Lost;
        }
        let Some(rate) = self.spec.rate else {
            let at = now + self.delay_ns();
            return Verdict::At(self.in_order(at, None));
        };
        let per_flow = self.spec.rate_per == RatePer::Flow;
        if per_flow && self.flows.len() >= MAX_FLOWS {
            self.flows.retain(|_, l| l.busy.max(l.last) > now);
        }
        let busy = if per_flow {
            self.flows.entry(flow).or_default().busy
        } else {
            self.busy
        };
        let start = busy.max(now);
        let backlog = ((start - now) as u128 * rate as u128 / 8_000_000_000) as u64;
        if backlog + len as u64 > self.queue_limit {
            self.stats.queue_drops += 1;
            return Verdict::QueueFull;
        }
        let sent = start + (len as u128 * 8_000_000_000 / rate as u128) as u64;
        let at = sent + self.delay_ns();
        if per_flow {
            self.flows.get_mut(&flow).expect("entered above").busy = sent;
            Verdict::At(self.in_order(at, Some(flow)))
        } else {
            self.busy = sent;
            Verdict::At(self.in_order(at, None))
        }
    }

    /// `at`, held back behind the last departure of the direction (or of
    /// the flow's own line) unless reordering is allowed.
    fn in_order(&mut self, at: u64, flow: Option<u64>) -> u64 {
        if self.spec.reorder {
            return at;
        }
        let last = match flow {
            Some(f) => &mut self.flows.get_mut(&f).expect("flow line exists").last,
            None => &mut self.last,
        };
        let at = at.max(*last);
        *last = at;
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn count_lost(loss: Loss, n: u64) -> u64 {
        let spec = DirSpec {
            loss,
            ..DirSpec::default()
        };
        let mut d = Direction::new(spec, 7);
        (0..n).filter(|&i| d.offer(i * 1000, 100, 0) == Verdict::Lost).count() as u64
    }

    #[test]
    fn bernoulli_and_gilbert_elliott_counts() {
        // 4·10^6 packets: even 0.05 % gives 2,000 losses (±2.2 % at one sigma).
        let n = 4_000_000;
        for p in [0.0005, 0.001, 0.01, 0.05] {
            let lost = count_lost(Loss::Bernoulli(p), n) as f64 / n as f64;
            eprintln!("Bernoulli {p}: {lost}");
            assert!((lost / p - 1.0).abs() < 0.05, "p={p} measured {lost}");
        }
        for first in [0.001, 0.01, 0.02] {
            let ge = Loss::GilbertElliott { first, after: 0.4 };
            let lost = count_lost(ge, n) as f64 / n as f64;
            eprintln!("GE {first}/0.4 (mean {}): {lost}", ge.mean());
            assert!(
                (lost / ge.mean() - 1.0).abs() < 0.05,
                "GE {first} measured {lost} vs {}",
                ge.mean()
            );
        }
    }

    #[test]
    fn rate_serialises_and_queue_drops() {
        let spec = DirSpec {
            rate: Some(8_000_000), // 1 byte per µs
            delay: Duration::from_millis(10),
            queue_bytes: Some(3000),
            ..DirSpec::default()
        };
        let mut d = Direction::new(spec, 1);
        assert_eq!(d.offer(0, 1000, 0), Verdict::At(1_000_000 + 10_000_000));
        assert_eq!(d.offer(0, 1000, 0), Verdict::At(2_000_000 + 10_000_000));
        assert_eq!(d.offer(0, 1000, 0), Verdict::At(3_000_000 + 10_000_000));
        assert_eq!(d.offer(0, 1000, 0), Verdict::QueueFull);
    }

    #[test]
    fn default_queue_holds_10_ms_at_a_fast_rate() {
        // 1 Gbit/s with no queue set: 1,250,000 bytes may wait (10 ms), not
        // the 150,000 of 100 packets; a burst at one instant fills exactly that.
        let spec = DirSpec {
            rate: Some(1_000_000_000),
            ..DirSpec::default()
        };
        let mut d = Direction::new(spec, 1);
        let accepted = (0..1000)
            .take_while(|_| d.offer(0, 1500, 0) != Verdict::QueueFull)
            .count();
        assert_eq!(accepted, 1_250_000 / 1500, "833 packets of 1,500 bytes, not 100");
    }

    #[test]
    fn rate_per_flow_gives_each_flow_its_own_clock() {
        // 001's modems: 56 kbit/s per connection, not shared.
        let spec = DirSpec {
            rate: Some(8_000_000), // 1 byte per µs
            rate_per: RatePer::Flow,
            queue_bytes: Some(2000),
            ..DirSpec::default()
        };
        let mut d = Direction::new(spec, 1);
        // Two flows offered at once each leave after their own serialisation.
        assert_eq!(d.offer(0, 1000, 1), Verdict::At(1_000_000));
        assert_eq!(d.offer(0, 1000, 2), Verdict::At(1_000_000));
        // A flow's second packet queues behind its first only.
        assert_eq!(d.offer(0, 1000, 1), Verdict::At(2_000_000));
        assert_eq!(d.offer(500_000, 500, 2), Verdict::At(1_500_000));
        // Each flow has its own queue: flow 1's is full, flow 3's empty.
        assert_eq!(d.offer(0, 1000, 1), Verdict::QueueFull);
        assert_eq!(d.offer(0, 1000, 3), Verdict::At(1_000_000));
        // An idle flow starts from now, not from its old clock.
        assert_eq!(d.offer(10_000_000, 1000, 1), Verdict::At(11_000_000));
        assert_eq!(d.stats.queue_drops, 1);
        // The same packets per host share one clock.
        let mut h = Direction::new(
            DirSpec {
                rate_per: RatePer::Host,
                ..d.spec().clone()
            },
            1,
        );
        assert_eq!(h.offer(0, 1000, 1), Verdict::At(1_000_000));
        assert_eq!(h.offer(0, 1000, 2), Verdict::At(2_000_000));
    }

    #[test]
    fn jitter_does_not_reorder() {
        let spec = DirSpec {
            delay: Duration::from_millis(10),
            jitter: Duration::from_millis(5),
            dist: DelayDist::Normal,
            ..DirSpec::default()
        };
        let mut d = Direction::new(spec, 3);
        let mut last = 0;
        for i in 0..10_000 {
            let Verdict::At(t) = d.offer(i * 10_000, 100, 0) else {
                panic!()
            };
            assert!(t >= last);
            last = t;
        }
    }
}
