//! Read-only file mappings in chunks (Flash's mapped-file cache, thesis 004
//! §4.4.4), whose pages are the page cache itself.
//!
//! Flash maps large files in fixed-size chunks rather than whole: a chunk is
//! the unit of residency testing and of the LRU list of inactive mappings, so
//! a 1 GB file in which clients read one region costs one chunk of address
//! space, not a gigabyte. A [`MappedChunk`] owns one mapping of a file range
//! (unmapped on drop), reads as `&[u8]`, and becomes a `bytes::Bytes` without
//! copying ([`MappedChunk::into_bytes`], through `Bytes::from_owner`), so an
//! IO-Lite aggregate in `weft-buf` holds page-cache pages, not a heap copy of
//! them (§2.1, §2.2.5: one copy of every byte).
//!
//! The one hazard of any file mapping: if another process *truncates* the
//! file while it is mapped, touching a page past the new end raises SIGBUS.
//! [`MappedChunk::map`] refuses ranges past the end at mapping time; a
//! document root whose files are replaced by rename (the usual deployment)
//! never truncates a mapped inode. Callers that serve files edited in place
//! should check the file's generation (inode, size, mtime) before use, and
//! prefer sendfile for them.

use super::residency::{mincore_mapped, page_size, Residency};
use super::{bump, fstat, FdArg, SysKind};
use bytes::Bytes;
use std::io;
use std::ptr::NonNull;

/// The default chunk size for mapping large files (Flash used fixed chunks;
/// 256 KiB amortizes mmap/munmap while keeping address space per hot region
/// small).
pub const DEFAULT_CHUNK: usize = 256 * 1024;

/// One read-only shared mapping of a file range, unmapped when dropped.
pub struct MappedChunk {
    /// Start of the mapping (page-aligned).
    base: NonNull<u8>,
    /// Length of the mapping from `base`.
    map_len: usize,
    /// Where the requested range starts inside the mapping.
    skew: usize,
    /// Length of the requested range.
    len: usize,
    /// File offset of the requested range.
    offset: u64,
}

// SAFETY: the mapping is read-only (PROT_READ) and owned by this value alone;
// sharing or sending a pointer to immutable memory between threads is sound.
unsafe impl Send for MappedChunk {}
// SAFETY: as above: only shared reads ever happen through the pointer.
unsafe impl Sync for MappedChunk {}

impl MappedChunk {
    /// Map `[offset, offset + len)` of the file read-only. The range must be
    /// non-empty and lie within the file (checked with fstat, so a range past
    /// the end is an error here, not a SIGBUS later).
    pub fn map(fd: impl FdArg, offset: u64, len: usize) -> io::Result<MappedChunk> {
        let fd = fd.raw_for_call();
        let size = fstat(fd)?.size;
        if len == 0 || offset.checked_add(len as u64).is_none_or(|end| end > size) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let page = page_size() as u64;
        let aligned = offset - offset % page;
        let skew = (offset - aligned) as usize;
        let map_len = skew + len;
        bump(SysKind::Other);
        // SAFETY: a fresh PROT_READ, MAP_SHARED mapping chosen by the kernel
        // (addr null) aliases no Rust object; the result is checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                aligned as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(MappedChunk {
            base,
            map_len,
            skew,
            len,
            offset,
        })
    }

    /// The mapped bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: [base, base + map_len) is a live PROT_READ mapping owned by
        // self (unmapped only in Drop); skew + len == map_len.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(self.skew), self.len) }
    }

    /// Length of the range in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: empty ranges are refused by [`MappedChunk::map`].
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// File offset of the range.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// How many of the range's pages are in the page cache (mincore).
    pub fn residency(&self) -> io::Result<Residency> {
        mincore_mapped(self.base.as_ptr(), self.map_len)
    }

    /// Bytes of the mapping, from its page-aligned start, that mincore
    /// reports resident before the first page it does not; `known` bytes
    /// (page-aligned) are already known to be resident and are not tested.
    pub fn resident_prefix(&self, known: usize) -> io::Result<usize> {
        super::residency::mincore_prefix(self.base.as_ptr(), known, self.map_len)
    }

    /// madvise(WILLNEED): start reading the chunk's pages in the background.
    pub fn advise_willneed(&self) -> io::Result<()> {
        bump(SysKind::Other);
        // SAFETY: the region is our own live mapping; WILLNEED changes no contents.
        let rc = unsafe { libc::madvise(self.base.as_ptr().cast(), self.map_len, libc::MADV_WILLNEED) };
        super::cvt(rc).map(drop)
    }

    /// The chunk as a `Bytes` that owns the mapping (no copy): slices and
    /// clones share it, and the last one dropped unmaps it.
    pub fn into_bytes(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl std::ops::Deref for MappedChunk {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for MappedChunk {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for MappedChunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedChunk")
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
}

impl Drop for MappedChunk {
    fn drop(&mut self) {
        bump(SysKind::Other);
        // SAFETY: base/map_len are exactly what mmap returned and nothing
        // borrows the mapping any more (every slice borrowed self).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.map_len);
        }
    }
}

/// The chunks `(offset, len)` of size `chunk` that cover `[0, file_size)`
/// (the last one shorter).
pub fn chunks(file_size: u64, chunk: usize) -> impl Iterator<Item = (u64, usize)> {
    let chunk = chunk.max(1) as u64;
    (0..file_size.div_ceil(chunk)).map(move |i| {
        let off = i * chunk;
        (off, (file_size - off).min(chunk) as usize)
    })
}

/// The index of the chunk holding byte `offset`.
pub fn chunk_index(offset: u64, chunk: usize) -> u64 {
    offset / chunk.max(1) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn temp_file(data: &[u8]) -> (std::path::PathBuf, std::fs::File) {
        let path = crate::testutil::temp_path("mmap");
        std::fs::File::create(&path).unwrap().write_all(data).unwrap();
        (path.clone(), std::fs::File::open(&path).unwrap())
    }

    #[test]
    fn maps_unaligned_ranges_and_shares_as_bytes() {
        let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 256) as u8).collect();
        let (path, f) = temp_file(&data);
        let c = MappedChunk::map(&f, 4097, 9000).unwrap();
        assert_eq!(c.as_slice(), &data[4097..13097]);
        assert_eq!((c.offset(), c.len(), c.is_empty()), (4097, 9000, false));
        assert!(c.residency().unwrap().pages >= 3);
        c.advise_willneed().unwrap();
        let b = c.into_bytes();
        let part = b.slice(10..20);
        drop(b);
        // The slice keeps the mapping alive.
        assert_eq!(&part[..], &data[4107..4117]);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn refuses_empty_and_past_the_end() {
        let (path, f) = temp_file(b"hello");
        assert!(MappedChunk::map(&f, 0, 0).is_err());
        assert!(MappedChunk::map(&f, 3, 3).is_err());
        assert!(MappedChunk::map(&f, u64::MAX, 1).is_err());
        assert_eq!(&*MappedChunk::map(&f, 0, 5).unwrap(), b"hello");
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn chunking_covers_the_file() {
        let c: Vec<_> = chunks(10, 4).collect();
        assert_eq!(c, vec![(0, 4), (4, 4), (8, 2)]);
        assert_eq!(chunks(0, 4).count(), 0);
        assert_eq!(chunk_index(9, 4), 2);
    }

    #[test]
    fn mapping_is_send_and_sync() {
        fn check<T: Send + Sync + 'static>() {}
        check::<MappedChunk>();
    }
}
