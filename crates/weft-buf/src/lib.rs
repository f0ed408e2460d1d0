//! weft-buf: IO-Lite in user space (thesis 004, chapter 2).
//!
//! IO-Lite's insight is that one immutable copy of the data can be shared by the
//! file cache, the application and the network: buffers are never modified
//! after they are filled, so they can be passed by reference, and a response is
//! an *aggregate* — an ordered list of (buffer, offset, length) slices —
//! assembled without copying. Here, immutable segments are `bytes::Bytes`;
//! [`Aggregate`] is the buffer aggregate (append, prepend, slice, split without
//! copying; written to a socket as an iovec).
//!
//! - [`segment`]: immutable segments and where their bytes live (heap, or a
//!   file mapping whose pages are the page cache);
//! - [`cache`]: the object cache of ready-to-send responses (head + body
//!   aggregate) keyed by path and content generation, under a byte budget,
//!   replaced by Greedy-Dual-Size or LRU, pinned entries evicted last.

#![forbid(unsafe_code)]

pub mod cache;
pub mod segment;

pub use cache::{CacheStats, CachedResponse, FileId, ObjectCache};
pub use segment::{Segment, SegmentKind};

use bytes::Bytes;
use std::io::IoSlice;

/// An ordered list of immutable segments: a response body or a cached object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Aggregate {
    segs: Vec<Bytes>,
    len: usize,
}

impl Aggregate {
    /// An empty aggregate.
    pub fn new() -> Aggregate {
        Aggregate::default()
    }

    /// Total length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Append a segment (no copy: `Bytes` is reference-counted).
    pub fn push(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.len += b.len();
            self.segs.push(b);
        }
    }

    /// Prepend a segment (e.g. a response head before a cached body).
    pub fn prepend(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.len += b.len();
            self.segs.insert(0, b);
        }
    }

    /// Append another aggregate's segments.
    pub fn append(&mut self, other: &Aggregate) {
        for s in &other.segs {
            self.push(s.clone());
        }
    }

    /// The bytes `[start, end)` as a new aggregate sharing the same buffers.
    pub fn slice(&self, start: usize, end: usize) -> Aggregate {
        let mut out = Aggregate::new();
        for b in self.range(start, end) {
            out.push(b);
        }
        out
    }

    /// The bytes `[start, end)` as slices of the segments, in order: shared,
    /// never copied, and without the allocation of a new aggregate (a
    /// response queues them one by one).
    pub fn range(&self, start: usize, end: usize) -> impl Iterator<Item = Bytes> + '_ {
        // An empty or inverted range yields nothing (end 0 stops at the
        // first segment): `Bytes::slice` panics on start > end.
        let end = end.min(self.len);
        let end = if start < end { end } else { 0 };
        let mut pos = 0;
        self.segs
            .iter()
            .map_while(move |s| {
                let (a, b) = (pos, pos + s.len());
                pos = b;
                (a < end).then_some((s, a, b))
            })
            .filter(move |&(_, _, b)| b > start)
            .map(move |(s, a, b)| s.slice(start.max(a) - a..end.min(b) - a))
    }

    /// Drop the first `n` bytes (after a partial write), without copying.
    pub fn advance(&mut self, mut n: usize) {
        n = n.min(self.len);
        self.len -= n;
        let mut drop_segs = 0;
        for s in self.segs.iter_mut() {
            if n == 0 {
                break;
            }
            if n >= s.len() {
                n -= s.len();
                drop_segs += 1;
            } else {
                *s = s.slice(n..);
                n = 0;
            }
        }
        self.segs.drain(..drop_segs);
    }

    /// Fill `iov` with up to `iov.len()` slices from the front; returns how many.
    pub fn io_slices<'a>(&'a self, iov: &mut [IoSlice<'a>]) -> usize {
        let n = iov.len().min(self.segs.len());
        for (slot, s) in iov.iter_mut().zip(self.segs.iter()) {
            *slot = IoSlice::new(s);
        }
        n
    }

    /// The segments.
    pub fn segments(&self) -> &[Bytes] {
        &self.segs
    }

    /// Copy out into one contiguous vector (tests, small bodies).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for s in &self.segs {
            v.extend_from_slice(s);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agg(parts: &[&'static [u8]]) -> Aggregate {
        let mut a = Aggregate::new();
        for p in parts {
            a.push(Bytes::from_static(p));
        }
        a
    }

    #[test]
    fn slice_shares_and_crosses_segments() {
        let a = agg(&[b"hello ", b"big ", b"world"]);
        assert_eq!(a.len(), 15);
        assert_eq!(a.slice(4, 12).to_vec(), b"o big wo");
        assert_eq!(a.slice(0, 100).to_vec(), a.to_vec());
        assert!(a.slice(9, 9).is_empty());
        assert!(a.slice(12, 4).is_empty());
        let parts: Vec<Bytes> = a.range(4, 12).collect();
        assert_eq!(parts, [&b"o "[..], b"big ", b"wo"]);
        assert_eq!(a.range(6, 10).collect::<Vec<_>>(), [&b"big "[..]]);
        assert_eq!(a.range(15, 20).count(), 0);
        // Inverted inside one segment (the fuzzer's find: it panicked).
        assert_eq!(a.range(7, 5).count(), 0);
        assert!(a.slice(7, 5).is_empty());
        let one = agg(&[b"0123456789"]);
        assert_eq!(one.range(8, 4).count(), 0);
        assert_eq!(one.range(4, 4).count(), 0);
    }

    #[test]
    fn advance_and_prepend() {
        let mut a = agg(&[b"abc", b"def"]);
        a.advance(4);
        assert_eq!(a.to_vec(), b"ef");
        a.prepend(Bytes::from_static(b"HEAD "));
        assert_eq!(a.to_vec(), b"HEAD ef");
        let mut iov = [IoSlice::new(&[]); 4];
        assert_eq!(a.io_slices(&mut iov), 2);
    }
}
