//! The IO-Lite object cache in `weft serve` (thesis 004 ch. 2,
//! `--object-cache BYTES`): each file as a ready-to-send response — its
//! header fields on the heap, its body as page-cache mappings
//! ([`MapCache`] chunks) — shared by every response in flight and reused
//! until the file's content generation changes. Bodies are sent with
//! `writev` from the mappings, or from 32 KiB on with `sendfile` of the
//! same file range (`crate::answer`): one copy of every byte (the page
//! cache's), none on weft's heap. Replacement is `weft-buf`'s [`ObjectCache`]
//! (Greedy-Dual-Size with cost 1, packets or bytes; LRU; LRU-500K), which
//! evicts entries no response is using first.
//!
//! A mapping is never read by weft itself (only the kernel reads it, in
//! `writev`), so a file truncated under a mapping makes that send fail with
//! EFAULT and the connection close, never a SIGBUS.

use crate::files::CachedFile;
use crate::stats::ServeStats;
use bytes::Bytes;
use std::sync::Arc;
use weft_buf::cache::{CachedResponse, FileId, ObjectCache};
use weft_buf::segment::Segment;
use weft_io::mapcache::{chunk_bytes, MapCache};
use weft_io::sys::mmap::{chunks, DEFAULT_CHUNK};

/// One worker's object cache and the mapped chunks its bodies are made of.
pub struct Objects {
    cache: ObjectCache,
    maps: MapCache,
}

impl Objects {
    /// A cache of `budget` bytes replaced by `policy`.
    pub fn new(budget: u64, policy: weft_policy::PolicyKind) -> Objects {
        Objects {
            cache: ObjectCache::new(budget, policy),
            maps: MapCache::new(DEFAULT_CHUNK, budget),
        }
    }

    /// The response for `key` built from `f`'s current content: from the
    /// cache, or mapped now (and kept if the policy admits it). `None` when
    /// the key is not UTF-8 or the file cannot be mapped (the caller sends
    /// it from the file).
    pub fn response(&mut self, key: &[u8], f: &CachedFile) -> Option<Arc<CachedResponse>> {
        let key = std::str::from_utf8(key).ok()?;
        let id = FileId {
            ino: f.stat.ino,
            size: f.stat.size,
            mtime_ns: f.stat.mtime_ns,
        };
        if let Some(r) = self.cache.get(key, &id) {
            return Some(r);
        }
        let generation = id.generation();
        let mut body = Vec::new();
        for (offset, len) in chunks(id.size, self.maps.chunk_size()) {
            let chunk = self.maps.get(&*f.fd, generation, id.size, offset).ok()?;
            body.push(Segment::mapped(chunk_bytes(&chunk, 0..len)));
        }
        let head = Bytes::copy_from_slice(&f.fields);
        Some(self.cache.insert(key, CachedResponse::new(id, head, body)))
    }

    /// Memory pressure: drop every entry and chunk no response in flight
    /// uses. Returns the bytes released.
    pub fn shrink(&mut self) -> u64 {
        let before = self.cache.stats().heap_bytes + self.maps.stats().mapped_bytes;
        let budget = self.cache.budget();
        self.cache.set_budget(0);
        self.cache.set_budget(budget);
        self.maps.unmap_inactive();
        before.saturating_sub(self.cache.stats().heap_bytes + self.maps.stats().mapped_bytes)
    }

    /// Copy the counters into `s`.
    pub fn report(&self, s: &mut ServeStats) {
        let c = self.cache.stats();
        s.object_lookups = c.lookups;
        s.object_hits = c.hits;
        s.object_bytes_looked_up = c.bytes_looked_up;
        s.object_bytes_hit = c.bytes_hit;
        s.object_evictions = c.evictions;
        s.object_invalidations = c.invalidations;
        s.object_entries = c.entries;
        s.object_heap_bytes = c.heap_bytes;
        s.object_mapped_bytes = c.mapped_bytes;
        s.mapped_chunk_bytes = self.maps.stats().mapped_bytes;
    }
}

/// The caches' gauges of a worker (file cache and object cache) into `s`.
pub(crate) fn report_caches(files: Option<&crate::files::FileCache>, objects: Option<&Objects>, s: &mut ServeStats) {
    if let Some(o) = objects {
        o.report(s);
    }
    if let Some(f) = files {
        (s.file_cache_entries, s.file_cache_bytes) = (f.len() as u64, f.held_bytes());
        (s.file_mapped_bytes, s.file_cache_evictions) = (f.mapped_bytes(), f.evictions());
    }
}
