//! The IO-Lite object cache (thesis 004 §2.2.5, §2.2.7, §2.4): files kept as
//! ready-to-send responses — an immutable head and a body [`Aggregate`] —
//! shared by every response in flight and reused until the file changes.
//!
//! - **Keyed by path, validated by content generation.** An entry remembers
//!   the [`FileId`] (inode, size, mtime) it was built from; a lookup passes
//!   the file's current id (from the stat the server makes anyway, or from its
//!   path cache), and an entry built from another id is dropped on the spot
//!   (`invalidations`). [`FileId::generation`] condenses the id into one
//!   number, stable across workers and restarts, for ETags and for the
//!   ready-to-send response's identity: the user-space form of IO-Lite's
//!   checksum cache and the booster paper's packet cache.
//! - **A byte budget**, charged with each entry's head + body length (mapped
//!   bodies count too: they hold page-cache pages and address space).
//! - **Replacement** by `weft-policy`'s [`PolicyKind`]: Greedy-Dual-Size with
//!   cost 1, packets or bytes, LRU, or LRU that never admits objects over
//!   500 KB. Objects larger than the whole budget are never admitted.
//! - **Pinned entries are evicted last** (§2.2.7): an entry whose
//!   `Arc<CachedResponse>` is also held by a response in flight (strong count
//!   above one) is passed over while unpinned entries remain; the budget is
//!   exceeded only by pinned entries, and the excess is reclaimed by the next
//!   insert or [`ObjectCache::trim`] after they are released. Evicting a
//!   pinned entry would free nothing: its bytes live until the send ends.
//! - **Counters**: object and byte hit ratios ([`CacheStats`]), evictions,
//!   invalidations, refusals, and the cache's heap and mapped bytes.
//!
//! One cache per worker (no lock) or behind the caller's lock; it never does
//! I/O.

use crate::segment::{Segment, SegmentKind};
use crate::Aggregate;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Arc;
use weft_policy::{PolicyKind, Replacement};

/// What identifies a file's content: if any part changes, it is new content.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FileId {
    /// Inode number (a file replaced by rename gets a new one).
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i128,
}

impl FileId {
    /// The content generation: a 64-bit mix of inode, size and mtime, the same
    /// in every worker and process for the same content.
    pub fn generation(&self) -> u64 {
        let mut h = 0x9e37_79b9_7f4a_7c15u64;
        for w in [self.ino, self.size, self.mtime_ns as u64, (self.mtime_ns >> 64) as u64] {
            h = splitmix(h ^ w);
        }
        h
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A ready-to-send response: head and body, immutable, shared.
#[derive(Debug)]
pub struct CachedResponse {
    file: FileId,
    head: Bytes,
    body: Aggregate,
    heap: usize,
    mapped: usize,
}

impl CachedResponse {
    /// A response built from `file`'s content: `head` (generated, heap) and the
    /// body's segments (mapped chunks of the file, or heap for generated bodies).
    pub fn new(file: FileId, head: Bytes, body: impl IntoIterator<Item = Segment>) -> CachedResponse {
        let mut agg = Aggregate::new();
        let (mut heap, mut mapped) = (head.len(), 0);
        for s in body {
            match s.kind {
                SegmentKind::Heap => heap += s.len(),
                SegmentKind::Mapped => mapped += s.len(),
            }
            agg.push(s.bytes);
        }
        CachedResponse {
            file,
            head,
            body: agg,
            heap,
            mapped,
        }
    }

    /// The file content this response was built from.
    pub fn file(&self) -> FileId {
        self.file
    }

    /// The content generation ([`FileId::generation`]).
    pub fn generation(&self) -> u64 {
        self.file.generation()
    }

    /// The response head.
    pub fn head(&self) -> &Bytes {
        &self.head
    }

    /// The body.
    pub fn body(&self) -> &Aggregate {
        &self.body
    }

    /// Head + body length: what the entry is charged.
    pub fn len(&self) -> usize {
        self.head.len() + self.body.len()
    }

    /// True when head and body are empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes on the heap (the head and any generated body).
    pub fn heap_bytes(&self) -> usize {
        self.heap
    }

    /// Bytes in file mappings (page cache).
    pub fn mapped_bytes(&self) -> usize {
        self.mapped
    }
}

/// The cache's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups.
    pub lookups: u64,
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Bytes the lookups asked for (the files' sizes).
    pub bytes_looked_up: u64,
    /// Bytes answered from the cache.
    pub bytes_hit: u64,
    /// Entries admitted.
    pub inserts: u64,
    /// Entries evicted for space.
    pub evictions: u64,
    /// Entries dropped because the file changed.
    pub invalidations: u64,
    /// Responses not admitted (too large for the budget or the policy).
    pub refused: u64,
    /// Entries now.
    pub entries: u64,
    /// Bytes charged now (head + body of every entry).
    pub bytes: u64,
    /// Of which on the heap.
    pub heap_bytes: u64,
    /// Of which in file mappings.
    pub mapped_bytes: u64,
}

impl CacheStats {
    /// Object hit ratio (0 with no lookups).
    pub fn hit_ratio(&self) -> f64 {
        ratio(self.hits, self.lookups)
    }

    /// Byte hit ratio (0 with no lookups).
    pub fn byte_hit_ratio(&self) -> f64 {
        ratio(self.bytes_hit, self.bytes_looked_up)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Files as ready-to-send responses under a byte budget.
pub struct ObjectCache {
    budget: u64,
    kind: PolicyKind,
    policy: Box<dyn Replacement<Arc<str>> + Send>,
    entries: HashMap<Arc<str>, Arc<CachedResponse>>,
    stats: CacheStats,
    passed_over: Vec<Arc<str>>,
}

impl ObjectCache {
    /// An empty cache of `budget` bytes replaced by `kind`.
    pub fn new(budget: u64, kind: PolicyKind) -> ObjectCache {
        ObjectCache {
            budget,
            kind,
            policy: kind.build(),
            entries: HashMap::new(),
            stats: CacheStats::default(),
            passed_over: Vec::new(),
        }
    }

    /// The budget in bytes.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Change the budget (memory pressure) and evict down to it.
    pub fn set_budget(&mut self, budget: u64) {
        self.budget = budget;
        self.trim();
    }

    /// The counters, with the current sizes.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// True when `path` has an entry (whatever its generation; not counted).
    pub fn contains(&self, path: &str) -> bool {
        self.entries.contains_key(path)
    }

    /// The response for `path` if one was built from `file`'s current content.
    /// An entry built from other content is dropped. Counts a lookup of
    /// `file.size` bytes.
    pub fn get(&mut self, path: &str, file: &FileId) -> Option<Arc<CachedResponse>> {
        self.stats.lookups += 1;
        self.stats.bytes_looked_up += file.size;
        let e = self.entries.get_key_value(path)?;
        if e.1.file != *file {
            let key = Arc::clone(e.0);
            self.remove_entry(&key);
            self.policy.remove(&key);
            self.stats.invalidations += 1;
            return None;
        }
        let (key, hit) = (Arc::clone(e.0), Arc::clone(e.1));
        self.policy.touch(&key);
        self.stats.hits += 1;
        self.stats.bytes_hit += file.size;
        Some(hit)
    }

    /// Keep `response` for `path` (replacing any entry), evict down to the
    /// budget, and return it shared for sending. A response larger than the
    /// budget, or one the policy refuses (LRU-500K), is returned uncached.
    pub fn insert(&mut self, path: &str, response: CachedResponse) -> Arc<CachedResponse> {
        let response = Arc::new(response);
        self.invalidate(path);
        let size = response.len() as u64;
        if size > self.budget || !self.kind.admits(response.body.len() as u64) {
            self.stats.refused += 1;
            // Entries left over budget by earlier pins may be free now.
            self.trim();
            return response;
        }
        let key: Arc<str> = Arc::from(path);
        self.charge(&response, true);
        self.entries.insert(Arc::clone(&key), Arc::clone(&response));
        self.policy.insert(key, size, self.kind.cost(size));
        self.stats.inserts += 1;
        self.trim();
        response
    }

    /// Drop the entry for `path`, if any (the file is known to have changed).
    pub fn invalidate(&mut self, path: &str) -> bool {
        let Some(key) = self.entries.get_key_value(path).map(|(k, _)| Arc::clone(k)) else {
            return false;
        };
        self.remove_entry(&key);
        self.policy.remove(&key);
        self.stats.invalidations += 1;
        true
    }

    /// Evict unpinned entries, in the policy's order, until the bytes fit the
    /// budget or only pinned entries remain.
    pub fn trim(&mut self) {
        while self.stats.bytes > self.budget {
            let Some(key) = self.policy.evict() else { break };
            let pinned = self.entries.get(&key).is_some_and(|e| Arc::strong_count(e) > 1);
            if pinned {
                self.passed_over.push(key);
            } else {
                self.remove_entry(&key);
                self.stats.evictions += 1;
            }
        }
        // Pinned entries go back, as if just inserted: evicted last.
        for key in std::mem::take(&mut self.passed_over) {
            if let Some(e) = self.entries.get(&key) {
                let size = e.len() as u64;
                self.policy.insert(key, size, self.kind.cost(size));
            }
        }
    }

    /// Bytes of entries also held by a response in flight.
    pub fn pinned_bytes(&self) -> u64 {
        self.entries
            .values()
            .filter(|e| Arc::strong_count(e) > 1)
            .map(|e| e.len() as u64)
            .sum()
    }

    fn remove_entry(&mut self, key: &Arc<str>) {
        if let Some(e) = self.entries.remove(key) {
            self.charge(&e, false);
        }
    }

    fn charge(&mut self, e: &CachedResponse, add: bool) {
        let s = &mut self.stats;
        let (n, h, m) = (e.len() as u64, e.heap as u64, e.mapped as u64);
        if add {
            s.entries += 1;
            s.bytes += n;
            s.heap_bytes += h;
            s.mapped_bytes += m;
        } else {
            s.entries -= 1;
            s.bytes -= n;
            s.heap_bytes -= h;
            s.mapped_bytes -= m;
        }
    }
}

#[cfg(test)]
mod tests;
