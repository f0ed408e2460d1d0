use super::*;
use proptest::prelude::*;
use weft_policy::GdsCost;

fn id(ino: u64, size: u64) -> FileId {
    FileId {
        ino,
        size,
        mtime_ns: 1_700_000_000_000_000_000,
    }
}

/// A response of `size` body bytes (heap; tests need no file) and a 10-byte head.
fn resp(file: FileId) -> CachedResponse {
    let body = Bytes::from(vec![b'x'; file.size as usize]);
    CachedResponse::new(file, Bytes::from_static(b"HTTP/1.1 2"), [Segment::heap(body)])
}

#[test]
fn hit_miss_and_ratios() {
    let mut c = ObjectCache::new(10_000, PolicyKind::Gds(GdsCost::One));
    let f = id(1, 100);
    assert!(c.get("/a", &f).is_none());
    let r = c.insert("/a", resp(f));
    assert_eq!((r.len(), r.heap_bytes(), r.mapped_bytes()), (110, 110, 0));
    let hit = c.get("/a", &f).unwrap();
    assert!(Arc::ptr_eq(&hit, &r), "the same response is shared");
    assert_eq!(hit.generation(), f.generation());
    let s = c.stats();
    assert_eq!((s.lookups, s.hits, s.bytes_looked_up, s.bytes_hit), (2, 1, 200, 100));
    assert_eq!((s.entries, s.bytes), (1, 110));
    assert!((s.hit_ratio() - 0.5).abs() < 1e-9 && (s.byte_hit_ratio() - 0.5).abs() < 1e-9);
}

#[test]
fn mapped_segments_are_counted_apart() {
    let f = id(1, 8);
    let r = CachedResponse::new(
        f,
        Bytes::from_static(b"head"),
        [
            Segment::mapped(Bytes::from_static(b"page")),
            Segment::heap(Bytes::from_static(b"gen!")),
        ],
    );
    assert_eq!(
        (r.heap_bytes(), r.mapped_bytes(), r.body().to_vec()),
        (8, 4, b"pagegen!".to_vec())
    );
    let mut c = ObjectCache::new(100, PolicyKind::Lru);
    drop(c.insert("/m", r));
    assert_eq!((c.stats().heap_bytes, c.stats().mapped_bytes), (8, 4));
    c.invalidate("/m");
    assert_eq!(
        (c.stats().bytes, c.stats().heap_bytes, c.stats().mapped_bytes),
        (0, 0, 0)
    );
}

#[test]
fn refuses_too_large_and_lru_500k() {
    let mut c = ObjectCache::new(1000, PolicyKind::Lru);
    drop(c.insert("/big", resp(id(1, 995))));
    assert!(!c.contains("/big"), "larger than the budget with its head");
    let mut c = ObjectCache::new(10_000_000, PolicyKind::LruMax500K);
    drop(c.insert("/big", resp(id(1, 500_001))));
    drop(c.insert("/ok", resp(id(2, 500_000))));
    assert!(!c.contains("/big") && c.contains("/ok"));
    assert_eq!(c.stats().refused, 1);
}

#[test]
fn pinned_entries_are_evicted_last() {
    let mut c = ObjectCache::new(350, PolicyKind::Lru);
    let a = c.insert("/a", resp(id(1, 100)));
    drop(c.insert("/b", resp(id(2, 100))));
    drop(c.insert("/c", resp(id(3, 100))));
    // /a is the least recent but in flight: /b goes instead.
    drop(c.insert("/d", resp(id(4, 100))));
    assert!(c.contains("/a") && !c.contains("/b"));
    // Passed over, /a went back as if just used: /c is now the oldest.
    drop(a);
    drop(c.insert("/e", resp(id(5, 100))));
    assert!(c.contains("/a") && !c.contains("/c"));
    // Everything pinned: the budget is exceeded only by pinned entries.
    let held: Vec<_> = ["/a", "/d", "/e"].iter().map(|p| c.get(p, &id(0, 0))).collect();
    assert!(held.iter().all(Option::is_none), "wrong generation misses");
    let held: Vec<_> = (10..14)
        .map(|i| c.insert(&format!("/p{i}"), resp(id(i, 100))))
        .collect();
    assert_eq!(c.pinned_bytes(), c.stats().bytes);
    assert!(c.stats().bytes > c.budget());
    drop(held);
    c.trim();
    assert!(c.stats().bytes <= c.budget());
}

#[test]
fn generation_is_stable_and_sensitive() {
    let f = id(7, 100);
    assert_eq!(f.generation(), id(7, 100).generation());
    assert_ne!(f.generation(), id(8, 100).generation());
    assert_ne!(f.generation(), id(7, 101).generation());
    let mut g = f;
    g.mtime_ns += 1;
    assert_ne!(f.generation(), g.generation());
}

#[derive(Clone, Debug)]
enum Op {
    Insert { path: u8, size: u16, pin: bool },
    Get { path: u8 },
    Unpin { which: u8 },
    Change { path: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..20, 0u16..2000, any::<bool>()).prop_map(|(path, size, pin)| Op::Insert { path, size, pin }),
        (0u8..20).prop_map(|path| Op::Get { path }),
        any::<u8>().prop_map(|which| Op::Unpin { which }),
        (0u8..20).prop_map(|path| Op::Change { path }),
    ]
}

fn kind() -> impl Strategy<Value = PolicyKind> {
    prop_oneof![
        Just(PolicyKind::Lru),
        Just(PolicyKind::LruMax500K),
        Just(PolicyKind::Gds(GdsCost::One)),
        Just(PolicyKind::Gds(GdsCost::Packets)),
        Just(PolicyKind::Gds(GdsCost::Bytes)),
    ]
}

proptest! {
    /// After every insert the bytes fit the budget, or every entry is pinned;
    /// a changed file never hits.
    #[test]
    fn budget_holds_except_for_pinned_entries(kind in kind(), budget in 0u64..8000, ops in proptest::collection::vec(op(), 1..200)) {
        let mut c = ObjectCache::new(budget, kind);
        let mut files: HashMap<u8, FileId> = HashMap::new();
        let mut held = Vec::new();
        let mut ino = 100;
        for op in ops {
            match op {
                Op::Insert { path, size, pin } => {
                    let f = *files.entry(path).or_insert(id(path as u64, size as u64));
                    // The inserter holds the response while it checks: it is
                    // being sent, so it is pinned too.
                    let r = c.insert(&format!("/{path}"), resp(f));
                    let s = c.stats();
                    prop_assert!(s.bytes <= budget || c.pinned_bytes() == s.bytes,
                        "bytes {} budget {} pinned {}", s.bytes, budget, c.pinned_bytes());
                    if pin { held.push(r); }
                }
                Op::Get { path } => {
                    if let Some(f) = files.get(&path) {
                        if let Some(r) = c.get(&format!("/{path}"), f) {
                            prop_assert_eq!(r.file(), *f);
                        }
                    }
                }
                Op::Unpin { which } => {
                    if !held.is_empty() { held.swap_remove(which as usize % held.len()); }
                }
                Op::Change { path } => {
                    ino += 1;
                    let old = files.insert(path, id(ino, path as u64 * 10));
                    let new = files[&path];
                    prop_assert!(c.get(&format!("/{path}"), &new).is_none(), "new content never hits old");
                    if let Some(old) = old {
                        prop_assert!(c.get(&format!("/{path}"), &old).is_none(), "the stale entry is gone");
                    }
                }
            }
            let s = c.stats();
            prop_assert_eq!(s.entries as usize, c.len());
            prop_assert_eq!(s.heap_bytes + s.mapped_bytes, s.bytes);
        }
        drop(held);
        c.trim();
        prop_assert!(c.stats().bytes <= budget);
    }

    /// Cost 1 and packets: H = L + cost/size falls with size, so shrinking the
    /// budget keeps the smallest objects; cost = bytes gives every object the
    /// same H, so the oldest go first; LRU keeps the most recently used.
    #[test]
    fn gds_orders_by_cost_over_size(sizes in proptest::collection::vec(1u16..5000, 2..30), keep in 1usize..29) {
        let keep = keep.min(sizes.len() - 1);
        for kind in [PolicyKind::Gds(GdsCost::One), PolicyKind::Gds(GdsCost::Packets), PolicyKind::Gds(GdsCost::Bytes), PolicyKind::Lru] {
            let mut c = ObjectCache::new(u64::MAX, kind);
            for (i, &s) in sizes.iter().enumerate() {
                drop(c.insert(&format!("/{i}"), resp(id(i as u64, s as u64))));
            }
            // Budget: what the `keep` objects the policy should keep occupy.
            let mut order: Vec<usize> = (0..sizes.len()).collect();
            match kind {
                PolicyKind::Gds(GdsCost::One) => order.sort_by_key(|&i| (sizes[i], std::cmp::Reverse(i))),
                PolicyKind::Gds(GdsCost::Packets) => order.sort_by(|&a, &b| {
                    let h = |i: usize| GdsCost::Packets.cost(sizes[i] as u64 + 10) / (sizes[i] as f64 + 10.0);
                    h(b).total_cmp(&h(a)).then(b.cmp(&a))
                }),
                _ => order.reverse(),
            }
            let survivors = &order[..keep];
            let budget: u64 = survivors.iter().map(|&i| sizes[i] as u64 + 10).sum();
            c.set_budget(budget);
            for &i in survivors {
                prop_assert!(c.contains(&format!("/{i}")), "{:?}: /{} (size {}) evicted", kind, i, sizes[i]);
            }
            prop_assert_eq!(c.len(), keep);
        }
    }
}

/// GDS vs LRU on a crafted trace (§2.4): 20 small objects requested every
/// round, then 3 of a cycle of 6 large ones that does not fit. LRU lets the large
/// cycle push the small objects out (and never hits a large one);
/// Greedy-Dual-Size with cost 1 keeps the small ones (higher object hit
/// ratio); with cost = bytes it no longer favours small objects.
#[test]
fn gds_vs_lru_on_a_crafted_trace() {
    let run = |kind: PolicyKind| {
        let mut c = ObjectCache::new(6_000, kind);
        for round in 0..60u64 {
            let ask = |c: &mut ObjectCache, path: String, f: FileId| {
                if c.get(&path, &f).is_none() {
                    c.insert(&path, resp(f));
                }
            };
            for i in 0..20 {
                ask(&mut c, format!("/s{i}"), id(i, 100));
            }
            for k in 0..3 {
                let j = 100 + (round * 3 + k) % 6;
                ask(&mut c, format!("/l{j}"), id(j, 2500));
            }
        }
        c.stats()
    };
    let lru = run(PolicyKind::Lru);
    let gds1 = run(PolicyKind::Gds(GdsCost::One));
    let gdsb = run(PolicyKind::Gds(GdsCost::Bytes));
    assert!(
        gds1.hit_ratio() > lru.hit_ratio(),
        "gds(1) {} vs lru {}",
        gds1.hit_ratio(),
        lru.hit_ratio()
    );
    assert!(
        gds1.hit_ratio() > 0.8,
        "the small objects stay (at most 20 of 23 hit): {}",
        gds1.hit_ratio()
    );
    // cost = bytes gives every object the same H - L: it degenerates to LRU here.
    assert!(
        (gdsb.hit_ratio() - lru.hit_ratio()).abs() < 0.05,
        "gds(bytes) {} vs lru {}",
        gdsb.hit_ratio(),
        lru.hit_ratio()
    );
}
