//! Bounded-load consistent hashing: the algorithm behind HAProxy's
//! `hash-balance-factor` (Mirrokni, Thorup and Zadimoghaddam, "Consistent
//! Hashing with Bounded Loads"), the modern comparison for LARD.
//!
//! Each back-end owns `POINTS_PER_WEIGHT × weight` points on a 64-bit ring. A
//! target hashes to a point and walks clockwise to the first back-end that is
//! up and *eligible*: its load is below its share of
//! `ceil((total load + 1) × factor / 100)` slots, the share split by weight as
//! HAProxy's `chash_server_is_eligible()` does (whole slots per weight unit,
//! the remainder spread by cumulative weight, never 0).

use super::hash::mix64;
use super::{Backends, Nanos, Request, ServerId, Strategy};

/// Ring points per unit of weight.
const POINTS_PER_WEIGHT: u64 = 64;

/// Bounded-load consistent hashing.
pub struct Chash {
    ring: Vec<(u64, ServerId)>,
    balance_factor: u32,
}

impl Chash {
    /// A ring over back-ends of these weights; `balance_factor` is in percent
    /// (HAProxy accepts 100 and up; 0 turns the bound off).
    pub fn new(weights: &[u32], balance_factor: u32) -> Chash {
        let mut ring = Vec::new();
        for (s, &w) in weights.iter().enumerate() {
            for i in 0..POINTS_PER_WEIGHT * u64::from(w.max(1)) {
                ring.push((mix64(((s as u64) << 32) ^ i), s));
            }
        }
        ring.sort_unstable();
        Chash { ring, balance_factor }
    }

    fn eligible(&self, s: ServerId, b: &Backends) -> bool {
        if self.balance_factor == 0 {
            return true;
        }
        let (mut total_load, mut tot_weight, mut cumulative) = (0u64, 0u64, 0u64);
        for x in 0..b.len() {
            if b.is_up(x) {
                total_load += u64::from(b.load(x));
                tot_weight += u64::from(b.weight(x));
                if x < s {
                    cumulative += u64::from(b.weight(x));
                }
            }
        }
        let tot_slots = ((total_load + 1) * u64::from(self.balance_factor)).div_ceil(100);
        let w = u64::from(b.weight(s));
        let (per_weight, remainder) = (tot_slots / tot_weight, tot_slots % tot_weight);
        let mut slots = w * per_weight;
        slots += ((cumulative + w) * remainder) / tot_weight - (cumulative * remainder) / tot_weight;
        u64::from(b.load(s)) < slots.max(1)
    }
}

impl Strategy for Chash {
    fn name(&self) -> &'static str {
        "chash"
    }
    fn choose(&mut self, req: &Request, b: &Backends, _now: Nanos) -> Option<ServerId> {
        if b.up_count() == 0 || self.ring.is_empty() {
            return None;
        }
        let h = mix64(req.target);
        let start = self.ring.partition_point(|&(p, _)| p < h);
        let len = self.ring.len();
        let mut first_up = None;
        for k in 0..len {
            let s = self.ring[(start + k) % len].1;
            if !b.is_up(s) {
                continue;
            }
            first_up.get_or_insert(s);
            if self.eligible(s, b) {
                return Some(s);
            }
        }
        first_up
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_load_a_target_always_maps_to_the_same_backend() {
        let b = Backends::new(&[1, 1, 1]);
        let mut c = Chash::new(&[1, 1, 1], 125);
        for t in 0..100 {
            let s = c.choose(&Request::new(t), &b, 0).unwrap();
            assert_eq!(c.choose(&Request::new(t), &b, 0), Some(s));
        }
    }

    #[test]
    fn a_loaded_backend_is_skipped() {
        let mut b = Backends::new(&[1, 1]);
        let mut c = Chash::new(&[1, 1], 125);
        let s = c.choose(&Request::new(7), &b, 0).unwrap();
        // Load s with 10; total 10, slots = ceil(11 × 1.25) = 14 → 7 each.
        for _ in 0..10 {
            b.add_load(s);
        }
        assert_eq!(c.choose(&Request::new(7), &b, 0), Some(1 - s));
    }
}
