//! Locality-based strategies (§3.1.3 and §3.3): [`Lb`] partitions the target
//! name space by a hash; [`LbGc`] is the thesis's idealized "global cache",
//! where the front-end models every back-end's cache.

use super::lru_map::LruMap;
use super::{Backends, Nanos, Request, ServerId, Strategy};

/// A 64-bit finalizer (SplitMix64's): spreads ids and hashes evenly.
pub fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// LB: each target goes to the back-end its hash selects, whatever the load.
///
/// The hash is rendezvous (highest random weight) over the back-ends that are
/// up: with all up it partitions targets like `hash % n`, and when one goes
/// down only its own targets move, each to the back-end that ranks next.
#[derive(Debug, Default)]
pub struct Lb;

impl Lb {
    /// A new strategy.
    pub fn new() -> Lb {
        Lb
    }
}

impl Strategy for Lb {
    fn name(&self) -> &'static str {
        "lb"
    }
    fn choose(&mut self, req: &Request, b: &Backends, _now: Nanos) -> Option<ServerId> {
        (0..b.len())
            .filter(|&s| b.is_up(s))
            .max_by_key(|&s| mix64(req.target ^ mix64(s as u64 + 1)))
    }
}

/// LB/GC (§3.3): the front-end keeps a model of each back-end's cache. A
/// target the model holds goes to the back-end holding it; a miss goes to a
/// back-end with room, else to the one caching the globally oldest target,
/// whose oldest targets are then evicted from the model until the new one fits.
///
/// The model is LRU over whole targets of the request's `size` (unknown sizes
/// count as 0 bytes), so it mirrors back-ends whose caches are LRU; a target
/// larger than `max_file` (LRU's 500 KB rule in the thesis) is never cached
/// and goes to the least loaded back-end.
pub struct LbGc {
    cache_bytes: u64,
    max_file: u64,
    used: Vec<u64>,
    /// target → (back-end, size), in global recency order.
    model: LruMap<(ServerId, u64)>,
    next: usize,
}

impl LbGc {
    /// Back-ends with `cache_bytes` of cache each, caching targets of at most `max_file` bytes.
    pub fn new(backends: usize, cache_bytes: u64, max_file: u64) -> LbGc {
        LbGc {
            cache_bytes,
            max_file: max_file.min(cache_bytes),
            used: vec![0; backends],
            // The model is bounded by the caches' bytes; this only bounds
            // the count when targets are tiny.
            model: LruMap::new(1 << 22),
            next: 0,
        }
    }

    /// Bytes the model places in back-end `s`'s cache.
    pub fn modelled_bytes(&self, s: ServerId) -> u64 {
        self.used[s]
    }

    fn evict_from(&mut self, s: ServerId, need: u64) {
        let victims: Vec<u64> = {
            let mut freed = 0u64;
            let room = self.cache_bytes - self.used[s];
            self.model
                .iter_oldest()
                .filter(|(_, &(owner, _))| owner == s)
                .take_while(|(_, &(_, size))| {
                    let go_on = room + freed < need;
                    freed += size;
                    go_on
                })
                .map(|(k, _)| k)
                .collect()
        };
        for k in victims {
            if let Some((owner, size)) = self.model.remove(k) {
                self.used[owner] -= size;
            }
        }
    }
}

impl Strategy for LbGc {
    fn name(&self) -> &'static str {
        "lb-gc"
    }
    fn choose(&mut self, req: &Request, b: &Backends, _now: Nanos) -> Option<ServerId> {
        if let Some(&mut (s, _)) = self.model.get_mut(req.target) {
            if b.is_up(s) {
                return Some(s);
            }
        }
        let size = req.size.unwrap_or(0);
        if size > self.max_file {
            let s = b.least_loaded(self.next)?;
            self.next = s + 1;
            return Some(s);
        }
        let roomiest = (0..b.len())
            .filter(|&s| b.is_up(s))
            .max_by_key(|&s| (self.cache_bytes - self.used[s], std::cmp::Reverse(s)))?;
        let s = if self.cache_bytes - self.used[roomiest] >= size {
            roomiest
        } else {
            self.model
                .iter_oldest()
                .map(|(_, &(owner, _))| owner)
                .find(|&o| b.is_up(o))
                .unwrap_or(roomiest)
        };
        self.evict_from(s, size);
        if let Some((_, (owner, old))) = self.model.insert(req.target, (s, size)) {
            self.used[owner] -= old;
        }
        self.used[s] += size;
        Some(s)
    }
    fn backend_down(&mut self, server: ServerId) {
        self.model.retain(|_, &mut (owner, _)| owner != server);
        self.used[server] = 0;
    }
    fn mapped_targets(&self) -> usize {
        self.model.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(target: u64, size: u64) -> Request {
        Request {
            target,
            size: Some(size),
        }
    }

    #[test]
    fn lb_is_stable_and_moves_only_a_down_backends_targets() {
        let mut b = Backends::new(&[1, 1, 1, 1]);
        let mut lb = Lb::new();
        let before: Vec<_> = (0..200).map(|t| lb.choose(&Request::new(t), &b, 0).unwrap()).collect();
        assert!((0..4).all(|s| before.iter().filter(|&&x| x == s).count() > 20));
        b.set_up(2, false);
        for t in 0..200u64 {
            let now = lb.choose(&Request::new(t), &b, 0).unwrap();
            assert_ne!(now, 2);
            if before[t as usize] != 2 {
                assert_eq!(now, before[t as usize]);
            }
        }
    }

    #[test]
    fn lbgc_fills_then_evicts_the_oldest() {
        let b = Backends::new(&[1, 1]);
        let mut g = LbGc::new(2, 100, 100);
        let a = g.choose(&req(1, 60), &b, 0).unwrap();
        let c = g.choose(&req(2, 60), &b, 0).unwrap();
        assert_ne!(a, c, "the second goes where there is room");
        assert_eq!(g.choose(&req(1, 60), &b, 0), Some(a), "a hit stays");
        // No room anywhere: the globally oldest is target 2 (1 was just used).
        let d = g.choose(&req(3, 60), &b, 0).unwrap();
        assert_eq!(d, c);
        assert_eq!(g.modelled_bytes(c), 60);
        assert_eq!(g.mapped_targets(), 2);
    }
}
