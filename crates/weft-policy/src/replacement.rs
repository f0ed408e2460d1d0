//! Cache replacement policies over opaque keys.
//!
//! A policy only orders keys; the cache that owns the objects asks it which key
//! to evict next. Both policies are O(log n) per operation, with no allocation
//! after the tables have grown.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;

/// What a cache asks of a replacement policy.
pub trait Replacement<K> {
    /// An object of `size` bytes that costs `cost` to fetch again was inserted.
    fn insert(&mut self, key: K, size: u64, cost: f64);
    /// The object was used (a hit).
    fn touch(&mut self, key: &K);
    /// The object left the cache for another reason (invalidated, replaced).
    fn remove(&mut self, key: &K);
    /// Choose and forget the next object to evict.
    fn evict(&mut self) -> Option<K>;
    /// Number of tracked objects.
    fn len(&self) -> usize;
    /// True when nothing is tracked.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Least recently used.
pub struct Lru<K> {
    clock: u64,
    stamp: HashMap<K, u64>,
    order: BTreeSet<(u64, K)>,
}

impl<K: Hash + Eq + Ord + Clone> Default for Lru<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Hash + Eq + Ord + Clone> Lru<K> {
    /// An empty policy.
    pub fn new() -> Lru<K> {
        Lru {
            clock: 0,
            stamp: HashMap::new(),
            order: BTreeSet::new(),
        }
    }
}

impl<K: Hash + Eq + Ord + Clone> Replacement<K> for Lru<K> {
    fn insert(&mut self, key: K, _size: u64, _cost: f64) {
        self.remove(&key);
        self.clock += 1;
        self.stamp.insert(key.clone(), self.clock);
        self.order.insert((self.clock, key));
    }
    fn touch(&mut self, key: &K) {
        if let Some(s) = self.stamp.get_mut(key) {
            self.order.remove(&(*s, key.clone()));
            self.clock += 1;
            *s = self.clock;
            self.order.insert((self.clock, key.clone()));
        }
    }
    fn remove(&mut self, key: &K) {
        if let Some(s) = self.stamp.remove(key) {
            self.order.remove(&(s, key.clone()));
        }
    }
    fn evict(&mut self) -> Option<K> {
        let (_, k) = self.order.pop_first()?;
        self.stamp.remove(&k);
        Some(k)
    }
    fn len(&self) -> usize {
        self.stamp.len()
    }
}

/// Greedy-Dual-Size: each object gets H = L + cost/size; the object with the
/// lowest H is evicted and L rises to that H, so objects age without a sweep.
/// With cost 1 it favours small objects (maximizing hit ratio); with cost equal
/// to size it behaves like LRU on bytes (maximizing byte hit ratio).
pub struct Gds<K> {
    inflation: f64,
    seq: u64,
    entries: HashMap<K, (Priority, u64, u64, f64)>,
    order: BTreeSet<(Priority, u64, K)>,
}

/// An f64 priority with a total order (priorities are finite and non-negative).
#[derive(Clone, Copy, Debug)]
struct Priority(f64);
impl PartialEq for Priority {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == std::cmp::Ordering::Equal
    }
}
impl Eq for Priority {}
impl PartialOrd for Priority {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Priority {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

impl<K: Hash + Eq + Ord + Clone> Default for Gds<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Hash + Eq + Ord + Clone> Gds<K> {
    /// An empty policy.
    pub fn new() -> Gds<K> {
        Gds {
            inflation: 0.0,
            seq: 0,
            entries: HashMap::new(),
            order: BTreeSet::new(),
        }
    }

    fn h(&self, size: u64, cost: f64) -> Priority {
        let cost = if cost.is_finite() && cost > 0.0 { cost } else { 1.0 };
        Priority(self.inflation + cost / size.max(1) as f64)
    }

    /// The current inflation value L (for tests and stats).
    pub fn inflation(&self) -> f64 {
        self.inflation
    }
}

impl<K: Hash + Eq + Ord + Clone> Replacement<K> for Gds<K> {
    fn insert(&mut self, key: K, size: u64, cost: f64) {
        self.remove(&key);
        let h = self.h(size, cost);
        self.seq += 1;
        self.entries.insert(key.clone(), (h, self.seq, size, cost));
        self.order.insert((h, self.seq, key));
    }
    fn touch(&mut self, key: &K) {
        if let Some(&(_, _, size, cost)) = self.entries.get(key) {
            self.insert(key.clone(), size, cost);
        }
    }
    fn remove(&mut self, key: &K) {
        if let Some((h, seq, _, _)) = self.entries.remove(key) {
            self.order.remove(&(h, seq, key.clone()));
        }
    }
    fn evict(&mut self) -> Option<K> {
        let (h, _, k) = self.order.pop_first()?;
        self.inflation = h.0;
        self.entries.remove(&k);
        Some(k)
    }
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_evicts_least_recent() {
        let mut l = Lru::new();
        l.insert("a", 1, 1.0);
        l.insert("b", 1, 1.0);
        l.insert("c", 1, 1.0);
        l.touch(&"a");
        assert_eq!(l.evict(), Some("b"));
        assert_eq!(l.evict(), Some("c"));
        l.remove(&"a");
        assert_eq!(l.evict(), None);
    }

    #[test]
    fn gds_prefers_evicting_large_objects_and_ages() {
        let mut g = Gds::new();
        g.insert("big", 1000, 1.0);
        g.insert("small", 10, 1.0);
        assert_eq!(g.evict(), Some("big"));
        assert!((g.inflation() - 0.001).abs() < 1e-12);
        // A new big object now starts above the inflated floor, but the old
        // small one (H = 0.1) still outranks it.
        g.insert("big2", 1000, 1.0);
        assert_eq!(g.evict(), Some("big2"));
        assert_eq!(g.evict(), Some("small"));
        assert!(g.is_empty());
    }

    #[test]
    fn gds_touch_restores_priority() {
        let mut g = Gds::new();
        g.insert("x", 100, 1.0);
        g.insert("y", 100, 1.0);
        g.touch(&"x");
        assert_eq!(g.evict(), Some("y"));
        assert_eq!(g.len(), 1);
    }
}
