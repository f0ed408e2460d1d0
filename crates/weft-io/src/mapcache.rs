//! Flash's mapped-file cache (thesis 004 §4.4.4): files mapped in fixed-size
//! chunks, chunks in use kept, inactive chunks on an LRU list and unmapped
//! lazily when too much is mapped.
//!
//! "Small files occupy one chunk each, while large files are split into
//! multiple chunks. Inactive chunks are maintained in an LRU free list, and
//! are unmapped when this list grows too large." Here a chunk is a
//! [`MappedChunk`] behind an `Arc`; a chunk is *active* while something other
//! than the cache holds it — a response's `Bytes` made by [`chunk_bytes`]
//! holds it until the send completes — so activity needs no bookkeeping
//! calls. [`MapCache::trim`] (run by every mapping) unmaps the least recently
//! used inactive chunks until the mapped bytes fit `max_mapped`; active
//! chunks are never unmapped under a sender.
//!
//! Entries are keyed by the file's content generation (weft-buf's
//! `FileId::generation`), so a changed file never reuses an old mapping; the
//! old chunks age out. Residency of a chunk is tested with
//! [`MappedChunk::residency`] before the loop touches it (AMPED: a miss goes
//! to a helper's `DiskJob::Load`).

use crate::sys::mmap::MappedChunk;
use crate::sys::FdArg;
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A mapped chunk, when it was last used (the cache's clock) and when a
/// residency test last found it all in the page cache.
struct Entry {
    chunk: Arc<MappedChunk>,
    used: u64,
    resident_at: Option<Instant>,
}

/// Which chunk of which file content.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkKey {
    /// The file's content generation.
    pub generation: u64,
    /// The chunk's index (offset / chunk size).
    pub index: u64,
}

/// Counters of a [`MapCache`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapStats {
    /// Lookups answered by an existing mapping.
    pub hits: u64,
    /// Chunks mapped.
    pub maps: u64,
    /// Chunks unmapped by trimming.
    pub unmaps: u64,
    /// Bytes mapped now.
    pub mapped_bytes: u64,
    /// Chunks mapped now.
    pub chunks: u64,
}

/// The chunks of mapped files, per worker.
pub struct MapCache {
    chunk: usize,
    max_mapped: u64,
    clock: u64,
    entries: HashMap<ChunkKey, Entry>,
    by_use: BTreeMap<u64, ChunkKey>,
    stats: MapStats,
}

impl MapCache {
    /// A cache mapping `chunk`-byte chunks (rounded up to a page multiple by
    /// the caller's choice; [`crate::sys::mmap::DEFAULT_CHUNK`] is typical),
    /// unmapping inactive ones beyond `max_mapped` bytes.
    pub fn new(chunk: usize, max_mapped: u64) -> MapCache {
        MapCache {
            chunk: chunk.max(1),
            max_mapped,
            clock: 0,
            entries: HashMap::new(),
            by_use: BTreeMap::new(),
            stats: MapStats::default(),
        }
    }

    /// The chunk size.
    pub fn chunk_size(&self) -> usize {
        self.chunk
    }

    /// The counters.
    pub fn stats(&self) -> MapStats {
        self.stats
    }

    /// The chunk holding byte `offset` of the file open as `fd` whose content
    /// generation is `generation` and size `file_size`: mapped now if it is
    /// not already. `offset` must be below `file_size`.
    pub fn get(
        &mut self,
        fd: impl FdArg,
        generation: u64,
        file_size: u64,
        offset: u64,
    ) -> io::Result<Arc<MappedChunk>> {
        let index = offset / self.chunk as u64;
        let key = ChunkKey { generation, index };
        self.clock += 1;
        if let Some(e) = self.entries.get_mut(&key) {
            self.by_use.remove(&e.used);
            e.used = self.clock;
            self.by_use.insert(self.clock, key);
            self.stats.hits += 1;
            return Ok(Arc::clone(&e.chunk));
        }
        let start = index * self.chunk as u64;
        let len = file_size.saturating_sub(start).min(self.chunk as u64) as usize;
        let c = Arc::new(MappedChunk::map(fd, start, len)?);
        self.entries.insert(
            key,
            Entry {
                chunk: Arc::clone(&c),
                used: self.clock,
                resident_at: None,
            },
        );
        self.by_use.insert(self.clock, key);
        self.stats.maps += 1;
        self.stats.chunks += 1;
        self.stats.mapped_bytes += len as u64;
        self.trim();
        Ok(c)
    }

    /// Unmap least recently used inactive chunks until the mapped bytes fit
    /// (or only active chunks remain).
    pub fn trim(&mut self) {
        if self.stats.mapped_bytes <= self.max_mapped {
            return;
        }
        let victims: Vec<ChunkKey> = self.inactive().map(|(_, k)| k).collect();
        for key in victims {
            if self.stats.mapped_bytes <= self.max_mapped {
                break;
            }
            self.unmap(key);
        }
    }

    /// Advance the cache's clock and return it: a caller keeping its own
    /// entries on the same LRU scale (the file cache's one byte budget) stamps
    /// them with this.
    pub fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// The inactive chunks (no response holds them), least recently used
    /// first, with their clock stamps.
    pub fn inactive(&self) -> impl Iterator<Item = (u64, ChunkKey)> + '_ {
        self.by_use
            .iter()
            .filter(|(_, k)| self.entries.get(k).is_some_and(|e| Arc::strong_count(&e.chunk) == 1))
            .map(|(&u, &k)| (u, k))
    }

    /// Unmap `key`'s chunk now (a response holding it keeps its pages
    /// until it is sent; the bytes stop counting here).
    pub fn unmap(&mut self, key: ChunkKey) {
        if let Some(e) = self.entries.remove(&key) {
            self.by_use.remove(&e.used);
            self.stats.mapped_bytes -= e.chunk.len() as u64;
            self.stats.chunks -= 1;
            self.stats.unmaps += 1;
        }
    }

    /// Unmap every inactive chunk (memory pressure).
    pub fn unmap_inactive(&mut self) {
        let keys: Vec<ChunkKey> = self.inactive().map(|(_, k)| k).collect();
        for k in keys {
            self.unmap(k);
        }
    }

    /// Is the chunk `key` in the page cache? A positive answer (mincore on
    /// its mapping) is trusted for `trust`, so a hot chunk costs no test per
    /// send. mincore rather than RWF_NOWAIT: the chunk is mapped anyway, and
    /// a RWF_NOWAIT probe would copy all of it to learn the same. (mincore
    /// reports every page resident for a file the process may neither write
    /// nor owns: for such files the test always passes, as `--residency none`.)
    pub fn resident(&mut self, key: ChunkKey, now: Instant, trust: Duration) -> bool {
        let Some(e) = self.entries.get_mut(&key) else {
            return false;
        };
        if e.resident_at.is_some_and(|t| now.saturating_duration_since(t) < trust) {
            return true;
        }
        let all = e.chunk.residency().map_or(true, |r| r.all());
        e.resident_at = all.then_some(now);
        all
    }
}

/// `Bytes` over `range` of a shared chunk, holding the chunk (and so keeping
/// it active in its [`MapCache`]) until the last clone is dropped. No copy.
pub fn chunk_bytes(chunk: &Arc<MappedChunk>, range: std::ops::Range<usize>) -> Bytes {
    Bytes::from_owner(SharedChunk(Arc::clone(chunk))).slice(range)
}

struct SharedChunk(Arc<MappedChunk>);

impl AsRef<[u8]> for SharedChunk {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn chunks_are_shared_and_inactive_ones_unmapped_lru_first() {
        let path = crate::testutil::temp_path("mapcache");
        let data: Vec<u8> = (0..40_000u32).map(|i| (i % 253) as u8).collect();
        std::fs::File::create(&path).unwrap().write_all(&data).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let size = data.len() as u64;
        // 8 KiB chunks, at most 16 KiB mapped when idle.
        let mut m = MapCache::new(8192, 16_384);
        let c0 = m.get(&f, 1, size, 100).unwrap();
        assert_eq!(&c0[..], &data[..8192]);
        let last = m.get(&f, 1, size, 39_999).unwrap();
        assert_eq!((last.offset(), last.len()), (32_768, 40_000 - 32_768));
        let again = m.get(&f, 1, size, 8191).unwrap();
        assert!(Arc::ptr_eq(&c0, &again));
        assert_eq!(m.stats().hits, 1);
        // A response holds bytes of chunk 0; the handles go.
        let body = chunk_bytes(&c0, 10..20);
        drop((c0, again, last));
        // Mapping chunks 1 and 2 overflows: the inactive LRU one (chunk 4) goes,
        // chunk 0 stays while the response holds it.
        let c1 = m.get(&f, 1, size, 8192).unwrap();
        let _c2 = m.get(&f, 1, size, 16_384).unwrap();
        assert!(m.stats().unmaps >= 1);
        assert!(m.stats().mapped_bytes > 16_384, "active chunks are never unmapped");
        assert_eq!(&body[..], &data[10..20]);
        drop((body, c1));
        m.trim();
        assert!(m.stats().mapped_bytes <= 16_384);
        // A new generation maps afresh.
        let maps = m.stats().maps;
        drop(m.get(&f, 2, size, 0).unwrap());
        assert_eq!(m.stats().maps, maps + 1);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_cached_response_holds_page_cache_pages_not_a_copy() {
        use weft_buf::{CachedResponse, FileId, ObjectCache, Segment};
        let path = crate::testutil::temp_path("mapcache-obj");
        std::fs::write(&path, b"the file's bytes").unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let st = crate::sys::fstat(&f).unwrap();
        let id = FileId {
            ino: st.ino,
            size: st.size,
            mtime_ns: st.mtime_ns,
        };
        let mut maps = MapCache::new(crate::sys::mmap::DEFAULT_CHUNK, 1 << 20);
        let chunk = maps.get(&f, id.generation(), st.size, 0).unwrap();
        let body = Segment::mapped(chunk_bytes(&chunk, 0..chunk.len()));
        let mut cache = ObjectCache::new(1 << 20, "gds-packets".parse().unwrap());
        let r = cache.insert(
            "/f",
            CachedResponse::new(id, bytes::Bytes::from_static(b"HEAD"), [body]),
        );
        assert_eq!((r.heap_bytes(), r.mapped_bytes()), (4, 16));
        assert_eq!(
            r.body().segments()[0].as_ptr(),
            chunk.as_slice().as_ptr(),
            "same pages, no copy"
        );
        assert_eq!(cache.get("/f", &id).unwrap().body().to_vec(), b"the file's bytes");
        std::fs::remove_file(path).unwrap();
    }
}
