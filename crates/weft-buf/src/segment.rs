//! Immutable segments and where their bytes live (IO-Lite §2.1, §2.2.5).
//!
//! Every segment is a `bytes::Bytes`: reference-counted, never modified after
//! it is filled, so one copy is shared by the cache and every response in
//! flight. What differs is the memory behind it, and issue 24's "one copy,
//! really" rule depends on it: file bytes must be the page cache itself
//! (a mapped chunk, `weft_io::sys::mmap::MappedChunk::into_bytes`), never a
//! heap copy of file pages; heap segments hold only what weft generates
//! (heads, dynamic output). [`SegmentKind`] records which, so the object
//! cache can report heap and page-cache bytes separately.

use bytes::Bytes;

/// Where a segment's bytes live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentKind {
    /// Heap memory weft filled (a response head, CGI output).
    Heap,
    /// A file mapping: the pages are the kernel's page cache.
    Mapped,
}

/// One immutable segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The bytes (shared, immutable).
    pub bytes: Bytes,
    /// Where they live.
    pub kind: SegmentKind,
}

impl Segment {
    /// Bytes weft generated.
    pub fn heap(bytes: Bytes) -> Segment {
        Segment {
            bytes,
            kind: SegmentKind::Heap,
        }
    }

    /// Bytes of a file mapping (page-cache pages).
    pub fn mapped(bytes: Bytes) -> Segment {
        Segment {
            bytes,
            kind: SegmentKind::Mapped,
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}
