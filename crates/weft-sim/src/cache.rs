//! A back-end's whole-file main-memory cache (§3.2.1), ordered by one of
//! weft-policy's replacement policies: Greedy-Dual-Size (the thesis's
//! default) or LRU, which never caches files over 500 KB (§3.2.1).
//!
//! GDS is given each file's miss cost as its disk read time in this cost
//! model, so it keeps what is cheap to hold and dear to fetch again.

use weft_policy::distribution::lru_map::IdMap;
use weft_policy::{Gds, Lru, Replacement};

/// Which replacement policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CachePolicy {
    /// Greedy-Dual-Size.
    Gds,
    /// Least recently used; files over [`LRU_MAX_FILE`] are never cached.
    Lru,
}

/// The largest file the LRU variant caches (§3.2.1).
pub const LRU_MAX_FILE: u64 = 500 * 1000;

weft_core::enum_names!(CachePolicy, error = "unknown cache policy `{s}` (expected gds or lru)", {
    Gds => "gds",
    Lru => "lru",
});

/// A whole-file cache of a byte budget.
pub struct FileCache {
    capacity: u64,
    used: u64,
    max_file: u64,
    sizes: IdMap<u64>,
    order: Box<dyn Replacement<u64>>,
}

impl FileCache {
    /// An empty cache of `capacity` bytes.
    pub fn new(policy: CachePolicy, capacity: u64) -> FileCache {
        let (order, max_file): (Box<dyn Replacement<u64>>, u64) = match policy {
            CachePolicy::Gds => (Box::new(Gds::new()), capacity),
            CachePolicy::Lru => (Box::new(Lru::new()), LRU_MAX_FILE.min(capacity)),
        };
        FileCache {
            capacity,
            used: 0,
            max_file,
            sizes: IdMap::default(),
            order,
        }
    }

    /// Is `file` cached?
    pub fn contains(&self, file: u64) -> bool {
        self.sizes.contains_key(&file)
    }

    /// A hit on `file`: it is used now.
    pub fn touch(&mut self, file: u64) {
        self.order.touch(&file);
    }

    /// Bytes held.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// `file` of `size` bytes was read from disk at `cost`: keep it if it may
    /// be kept, evicting as the policy says.
    pub fn insert(&mut self, file: u64, size: u64, cost: f64) {
        if size > self.max_file || self.contains(file) {
            return;
        }
        while self.used + size > self.capacity {
            match self.order.evict() {
                Some(victim) => self.used -= self.sizes.remove(&victim).unwrap_or(0),
                None => return,
            }
        }
        self.sizes.insert(file, size);
        self.order.insert(file, size, cost);
        self.used += size;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_files_within_the_budget() {
        let mut c = FileCache::new(CachePolicy::Lru, 1000);
        c.insert(1, 400, 1.0);
        c.insert(2, 400, 1.0);
        c.touch(1);
        c.insert(3, 400, 1.0);
        assert!(c.contains(1) && !c.contains(2) && c.contains(3));
        assert_eq!(c.used(), 800);
        c.insert(4, 2000, 1.0);
        assert!(!c.contains(4), "larger than the cache");
        let mut big = FileCache::new(CachePolicy::Lru, 32 << 20);
        big.insert(5, 600_000, 1.0);
        assert!(!big.contains(5), "LRU never caches files over 500 KB");
        let mut g = FileCache::new(CachePolicy::Gds, 32 << 20);
        g.insert(5, 600_000, 1.0);
        assert!(g.contains(5));
    }
}
