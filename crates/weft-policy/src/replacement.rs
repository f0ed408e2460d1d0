//! Cache replacement policies over opaque keys.
//!
//! A policy only orders keys; the cache that owns the objects asks it which key
//! to evict next. A hit ([`Replacement::touch`]) is on every cached response's
//! path, so it costs one hash lookup and no reordering: the order is a map
//! from a position (a sequence number, and GDS's priority) to the key, and a
//! hit only records the key's new position in its entry. A key's place in the
//! order is therefore at or before its true one (positions only grow: the
//! sequence rises, and so does GDS's inflation); eviction takes the first
//! place, and when the key there has moved on it is placed again at its true
//! position and the next is tried. Each stale place costs one move at
//! eviction instead of one per hit, so eviction is O(log n) amortized, and
//! the order of eviction is exactly the eager one (the property test below
//! checks it against a model). No allocation after the tables have grown.

use std::collections::{BTreeMap, HashMap};
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
    /// Each key's last use on `clock` (unique), and its place in `order`
    /// (its last use when it was last placed: at or before the last use).
    stamp: HashMap<K, LruStamp>,
    /// Keys by last use as placed, oldest first.
    order: BTreeMap<u64, K>,
}

#[derive(Clone, Copy, Debug)]
struct LruStamp {
    used: u64,
    placed: u64,
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
            order: BTreeMap::new(),
        }
    }
}

impl<K: Hash + Eq + Ord + Clone> Replacement<K> for Lru<K> {
    fn insert(&mut self, key: K, _size: u64, _cost: f64) {
        self.remove(&key);
        self.clock += 1;
        let at = self.clock;
        self.stamp.insert(key.clone(), LruStamp { used: at, placed: at });
        self.order.insert(at, key);
    }
    fn touch(&mut self, key: &K) {
        if let Some(s) = self.stamp.get_mut(key) {
            self.clock += 1;
            s.used = self.clock;
        }
    }
    fn remove(&mut self, key: &K) {
        if let Some(s) = self.stamp.remove(key) {
            self.order.remove(&s.placed);
        }
    }
    fn evict(&mut self) -> Option<K> {
        loop {
            let (_, k) = self.order.pop_first()?;
            // Every placed key has its stamp (insert and remove keep both).
            let Some(s) = self.stamp.get_mut(&k) else { continue };
            if s.used == s.placed {
                self.stamp.remove(&k);
                return Some(k);
            }
            // Used since it was placed: to its last use, and look again.
            s.placed = s.used;
            self.order.insert(s.used, k);
        }
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
    entries: HashMap<K, GdsEntry>,
    /// Keys by (H, insertion or last use) as placed, the next to evict
    /// first; the sequence number makes every position unique (ties of H go
    /// oldest first).
    order: BTreeMap<(Priority, u64), K>,
}

/// A key's entry in [`Gds`]: its true position, its place in the order (at
/// or before the true one), and what its H is computed from at each use.
#[derive(Clone, Copy, Debug)]
struct GdsEntry {
    at: (Priority, u64),
    placed: (Priority, u64),
    size: u64,
    cost: f64,
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

/// H = L + cost / size (a cost that is not a positive number counts as 1).
fn priority(inflation: f64, size: u64, cost: f64) -> Priority {
    let cost = if cost.is_finite() && cost > 0.0 { cost } else { 1.0 };
    Priority(inflation + cost / size.max(1) as f64)
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
            order: BTreeMap::new(),
        }
    }

    /// The current inflation value L (for tests and stats).
    pub fn inflation(&self) -> f64 {
        self.inflation
    }
}

impl<K: Hash + Eq + Ord + Clone> Replacement<K> for Gds<K> {
    fn insert(&mut self, key: K, size: u64, cost: f64) {
        self.remove(&key);
        self.seq += 1;
        let at = (priority(self.inflation, size, cost), self.seq);
        self.entries.insert(
            key.clone(),
            GdsEntry {
                at,
                placed: at,
                size,
                cost,
            },
        );
        self.order.insert(at, key);
    }
    fn touch(&mut self, key: &K) {
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        self.seq += 1;
        e.at = (priority(self.inflation, e.size, e.cost), self.seq);
    }
    fn remove(&mut self, key: &K) {
        if let Some(e) = self.entries.remove(key) {
            self.order.remove(&e.placed);
        }
    }
    fn evict(&mut self) -> Option<K> {
        loop {
            let (_, k) = self.order.pop_first()?;
            // Every placed key has its entry (insert and remove keep both).
            let Some(e) = self.entries.get_mut(&k) else { continue };
            if e.at == e.placed {
                self.inflation = e.at.0 .0;
                self.entries.remove(&k);
                return Some(k);
            }
            // Used since it was placed (H and sequence only grow): to its
            // true position, and look again.
            e.placed = e.at;
            self.order.insert(e.at, k);
        }
    }
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The cost Greedy-Dual-Size assigns an object of `size` bytes (§2.4, §3.2.1;
/// Cao and Irani). Cost 1 maximizes the object hit ratio but favours small
/// objects (a lower byte hit ratio than LRU, usually); `Bytes` makes every
/// object's H equal at insertion, so GDS degenerates to FIFO-with-hits, close
/// to LRU; `Packets` (2 + size/536, the TCP segments of the transfer)
/// approximates network cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GdsCost {
    /// Every miss costs the same.
    One,
    /// 2 + size / 536: the packets a transfer takes.
    Packets,
    /// The object's size in bytes.
    Bytes,
}

impl GdsCost {
    /// The cost of fetching an object of `size` bytes again.
    pub fn cost(self, size: u64) -> f64 {
        match self {
            GdsCost::One => 1.0,
            GdsCost::Packets => (2 + size / 536) as f64,
            GdsCost::Bytes => size.max(1) as f64,
        }
    }
}

impl std::str::FromStr for GdsCost {
    type Err = String;
    fn from_str(s: &str) -> Result<GdsCost, String> {
        match s {
            "1" | "one" => Ok(GdsCost::One),
            "packets" => Ok(GdsCost::Packets),
            "bytes" => Ok(GdsCost::Bytes),
            _ => Err(format!("unknown GDS cost {s:?} (1, packets or bytes)")),
        }
    }
}

/// The largest object the LRU-500K variant caches (§3.2.1: the thesis's
/// back-ends never cache files over 500 KB under LRU).
pub const LRU_MAX_OBJECT: u64 = 500 * 1000;

/// A cache's choice of replacement (`--cache-policy`, `--gds-cost`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyKind {
    /// Least recently used.
    Lru,
    /// LRU that never admits objects over [`LRU_MAX_OBJECT`] bytes.
    LruMax500K,
    /// Greedy-Dual-Size with the given cost function.
    Gds(GdsCost),
}

impl PolicyKind {
    /// A fresh policy of this kind.
    pub fn build<K: Hash + Eq + Ord + Clone + Send + 'static>(self) -> Box<dyn Replacement<K> + Send> {
        match self {
            PolicyKind::Lru | PolicyKind::LruMax500K => Box::new(Lru::new()),
            PolicyKind::Gds(_) => Box::new(Gds::new()),
        }
    }

    /// Whether an object of `size` bytes may be cached at all.
    pub fn admits(self, size: u64) -> bool {
        self != PolicyKind::LruMax500K || size <= LRU_MAX_OBJECT
    }

    /// The cost to pass to [`Replacement::insert`] for an object of `size`.
    pub fn cost(self, size: u64) -> f64 {
        match self {
            PolicyKind::Gds(c) => c.cost(size),
            _ => 1.0,
        }
    }
}

impl std::str::FromStr for PolicyKind {
    type Err = String;
    /// `lru`, `lru-500k`, `gds` (cost 1), `gds-packets`, `gds-bytes`.
    fn from_str(s: &str) -> Result<PolicyKind, String> {
        match s {
            "lru" => Ok(PolicyKind::Lru),
            "lru-500k" => Ok(PolicyKind::LruMax500K),
            "gds" => Ok(PolicyKind::Gds(GdsCost::One)),
            _ => match s.strip_prefix("gds-") {
                Some(c) => Ok(PolicyKind::Gds(c.parse()?)),
                None => Err(format!(
                    "unknown cache policy {s:?} (lru, lru-500k, gds, gds-packets, gds-bytes)"
                )),
            },
        }
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
    fn cost_functions_and_kinds() {
        assert_eq!(GdsCost::One.cost(1 << 20), 1.0);
        assert_eq!(GdsCost::Packets.cost(0), 2.0);
        assert_eq!(GdsCost::Packets.cost(1072), 4.0);
        assert_eq!(GdsCost::Bytes.cost(8192), 8192.0);
        assert_eq!("gds-packets".parse(), Ok(PolicyKind::Gds(GdsCost::Packets)));
        assert_eq!("gds".parse(), Ok(PolicyKind::Gds(GdsCost::One)));
        assert_eq!("lru-500k".parse(), Ok(PolicyKind::LruMax500K));
        assert!("gds-x".parse::<PolicyKind>().is_err());
        assert!(PolicyKind::LruMax500K.admits(500_000) && !PolicyKind::LruMax500K.admits(500_001));
        assert!(PolicyKind::Lru.admits(u64::MAX));
        // GDS with byte cost: equal H at insertion, so the oldest goes first.
        let mut p = PolicyKind::Gds(GdsCost::Bytes).build();
        for (k, s) in [("a", 10u64), ("b", 1000), ("c", 5)] {
            p.insert(k, s, PolicyKind::Gds(GdsCost::Bytes).cost(s));
        }
        assert_eq!(p.evict(), Some("a"));
    }

    /// The policies against a model that keeps every key with its H and
    /// last use in a list and searches it for the smallest: the same keys
    /// evicted in the same order, and the same inflation, over random
    /// inserts, hits, removals and evictions.
    #[derive(Clone, Debug)]
    enum Op {
        Insert(u8, u64),
        Touch(u8),
        Remove(u8),
        Evict,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            (0u8..12, 1u64..5000).prop_map(|(k, s)| Op::Insert(k, s)),
            (0u8..12).prop_map(Op::Touch),
            (0u8..12).prop_map(Op::Remove),
            Just(Op::Evict),
        ]
    }

    /// (key, H, last use, size, cost); GDS when `gds`, else LRU (H = 0).
    struct Model {
        gds: bool,
        inflation: f64,
        clock: u64,
        keys: Vec<(u8, f64, u64, u64, f64)>,
    }

    impl Model {
        fn h(&self, size: u64, cost: f64) -> f64 {
            if self.gds {
                self.inflation + cost / size.max(1) as f64
            } else {
                0.0
            }
        }
        fn apply(&mut self, op: &Op) -> Option<u8> {
            self.clock += 1;
            match *op {
                Op::Insert(k, size) => {
                    self.keys.retain(|e| e.0 != k);
                    let cost = (k % 3 + 1) as f64;
                    self.keys.push((k, self.h(size, cost), self.clock, size, cost));
                }
                Op::Touch(k) => {
                    let at = self.keys.iter().position(|e| e.0 == k)?;
                    let (_, _, _, size, cost) = self.keys[at];
                    self.keys[at] = (k, self.h(size, cost), self.clock, size, cost);
                }
                Op::Remove(k) => self.keys.retain(|e| e.0 != k),
                Op::Evict => {
                    let at = (0..self.keys.len()).min_by(|&a, &b| {
                        let (x, y) = (self.keys[a], self.keys[b]);
                        x.1.total_cmp(&y.1).then(x.2.cmp(&y.2))
                    })?;
                    let e = self.keys.remove(at);
                    if self.gds {
                        self.inflation = e.1;
                    }
                    return Some(e.0);
                }
            }
            None
        }
    }

    fn run(policy: &mut dyn Replacement<u8>, gds: bool, ops: &[Op]) -> Result<(), String> {
        let mut model = Model {
            gds,
            inflation: 0.0,
            clock: 0,
            keys: Vec::new(),
        };
        for op in ops {
            let want = model.apply(op);
            let got = match *op {
                Op::Insert(k, size) => {
                    policy.insert(k, size, (k % 3 + 1) as f64);
                    None
                }
                Op::Touch(k) => {
                    policy.touch(&k);
                    None
                }
                Op::Remove(k) => {
                    policy.remove(&k);
                    None
                }
                Op::Evict => policy.evict(),
            };
            if got != want || policy.len() != model.keys.len() {
                return Err(format!("{op:?}: got {got:?}, model {want:?}"));
            }
        }
        Ok(())
    }

    proptest::proptest! {
        #[test]
        fn policies_evict_as_the_model(ops in proptest::collection::vec(op(), 1..200)) {
            run(&mut Lru::new(), false, &ops).map_err(proptest::test_runner::TestCaseError::fail)?;
            let mut g = Gds::new();
            run(&mut g, true, &ops).map_err(proptest::test_runner::TestCaseError::fail)?;
        }
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
