//! Is a file range in the page cache, and how to get it there without blocking
//! the event loop (Flash's AMPED, thesis 004 §4.3–4.4).
//!
//! An event-driven server must never wait on the disk. Flash tested residency
//! with `mincore` over its mapped chunks and handed misses to helper
//! processes; Linux offers a cheaper test that is also the read itself:
//!
//! - [`pread_nowait`]: `preadv2(RWF_NOWAIT)` copies what is cached and returns
//!   EAGAIN instead of starting I/O. A partly cached range gives a short read.
//!   Kernels or file systems without it say so ([`Nowait::Unsupported`]) and the
//!   caller falls back to a residency test or to a helper.
//! - [`cached_pages`]: `cachestat(2)` (Linux 6.5): how many pages of the range
//!   the page cache holds, with no copy, no mapping and no I/O started. The
//!   RWF_NOWAIT probe above, by contrast, starts read-ahead of a missing range
//!   from the calling thread (it does not wait for it, but the loop then
//!   issues disk reads itself).
//! - [`resident`]: `mincore(2)` over a temporary read-only mapping of the range
//!   (mincore needs a mapping; [`super::mmap::MappedChunk::residency`] tests an
//!   existing one). It counts a page once its read has completed (the kernel
//!   tests the page's up-to-date flag; cachestat counts pages still under
//!   I/O), but reports every page of a file the process neither owns nor may
//!   write as resident: a hint, not a guarantee, unless the caller checks that.
//! - [`advise_willneed`] (`posix_fadvise(WILLNEED)`, asynchronous) and
//!   [`readahead`] (`readahead(2)`, may block on metadata): ask the kernel to
//!   start reading; a helper thread calls [`load`] to wait until the range is
//!   resident, after which the loop's [`pread_nowait`] succeeds. [`load`]
//!   waits without reading ([`LoadMethod::Readahead`]) so the helper does not
//!   count as a use of the pages.

use super::{bump, cvt, cvt_size, FdArg, SysKind};
use std::io;

/// What [`pread_nowait`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nowait {
    /// `n` bytes were copied (0: end of file; fewer than asked: the rest is not
    /// resident, or end of file).
    Read(usize),
    /// Nothing at `offset` is resident: reading would block on the disk.
    WouldBlock,
    /// This kernel or file system has no RWF_NOWAIT for this descriptor: use
    /// [`resident`] or a helper instead.
    Unsupported,
}

/// cachestat(2)'s number on x86_64 and aarch64 (the generic table), absent
/// from the libc crate for this target.
const SYS_CACHESTAT: libc::c_long = 451;

#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// Pages of `[offset, offset + len)` in the page cache (`cachestat(2)`); None
/// when this kernel has no cachestat (ENOSYS) or the descriptor does not
/// support it. Pages still being read count as cached (as with mincore).
pub fn cached_pages(fd: impl FdArg, offset: u64, len: u64) -> io::Result<Option<u64>> {
    let fd = fd.raw_for_call();
    if len == 0 {
        return Ok(Some(0));
    }
    let range = CachestatRange { off: offset, len };
    let mut st = Cachestat::default();
    bump(SysKind::Other);
    // SAFETY: both structs are repr(C) as the kernel's and live for the call;
    // the kernel writes only `st`.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd as libc::c_uint,
            &range as *const CachestatRange,
            &mut st as *mut Cachestat,
            0 as libc::c_uint,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP) => Ok(None),
            _ => Err(e),
        };
    }
    Ok(Some(st.nr_cache))
}

/// Read at `offset` only what is already in the page cache
/// (`preadv2(RWF_NOWAIT)`). EINTR is returned as an error for the caller's
/// [`super::retry`].
pub fn pread_nowait(fd: impl FdArg, buf: &mut [u8], offset: u64) -> io::Result<Nowait> {
    let fd = fd.raw_for_call();
    if offset > i64::MAX as u64 {
        // Would reach the kernel as a negative offset: EINVAL, which below
        // means "no RWF_NOWAIT here".
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    bump(SysKind::Pread);
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: iov describes buf, valid for writes of buf.len() bytes for the call.
    let rc = unsafe { libc::preadv2(fd, &iov, 1, offset as libc::off_t, libc::RWF_NOWAIT) };
    match cvt_size(rc) {
        Ok(n) => Ok(Nowait::Read(n)),
        Err(e) => match e.raw_os_error() {
            Some(libc::EAGAIN) => Ok(Nowait::WouldBlock),
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => Ok(Nowait::Unsupported),
            // EINVAL: a kernel that does not know the flag (before 4.14).
            Some(libc::EINVAL) if !buf.is_empty() => Ok(Nowait::Unsupported),
            _ => Err(e),
        },
    }
}

/// How much of a range is in the page cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Residency {
    /// Pages of the range found resident.
    pub resident: usize,
    /// Pages the range spans.
    pub pages: usize,
}

impl Residency {
    /// Every page is resident (an empty range is).
    pub fn all(&self) -> bool {
        self.resident == self.pages
    }
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

/// Pages tested per mincore call: the vector lives on the stack.
const MINCORE_BATCH: usize = 512;

/// mincore(2) over the mapped region `[addr, addr + len)`; `addr` page-aligned.
pub(super) fn mincore_mapped(addr: *const u8, len: usize) -> io::Result<Residency> {
    let page = page_size();
    let pages = len.div_ceil(page);
    let mut vec = [0u8; MINCORE_BATCH];
    let mut resident = 0;
    let mut done = 0;
    while done < pages {
        let n = (pages - done).min(MINCORE_BATCH);
        let start = done * page;
        let bytes = (len - start).min(n * page);
        bump(SysKind::Other);
        // SAFETY: the caller guarantees [addr, addr+len) is one live mapping, so
        // this page-aligned sub-range is mapped; vec holds at least n entries,
        // one per page of the sub-range.
        cvt(unsafe { libc::mincore(addr.add(start) as *mut libc::c_void, bytes, vec.as_mut_ptr()) })?;
        resident += vec[..n].iter().filter(|&&b| b & 1 != 0).count();
        done += n;
    }
    Ok(Residency { resident, pages })
}

/// Test with mincore how much of `[offset, offset + len)` of a file is in the
/// page cache, through a temporary read-only mapping (nothing is read). The
/// range must lie within the file.
pub fn resident(fd: impl FdArg, offset: u64, len: usize) -> io::Result<Residency> {
    if len == 0 {
        return Ok(Residency::default());
    }
    let map = super::mmap::MappedChunk::map(fd, offset, len)?;
    map.residency()
}

/// posix_fadvise(WILLNEED): start reading the range in the background.
pub fn advise_willneed(fd: impl FdArg, offset: u64, len: u64) -> io::Result<()> {
    fadvise(fd, offset, len, libc::POSIX_FADV_WILLNEED)
}

/// posix_fadvise(DONTNEED): drop the range's clean pages from the page cache
/// (tests use it to make a file cold; it is a request, not a guarantee).
pub fn advise_dontneed(fd: impl FdArg, offset: u64, len: u64) -> io::Result<()> {
    fadvise(fd, offset, len, libc::POSIX_FADV_DONTNEED)
}

/// One posix_fadvise(2) call; it returns the error number rather than
/// setting errno.
fn fadvise(fd: impl FdArg, offset: u64, len: u64, advice: libc::c_int) -> io::Result<()> {
    let fd = fd.raw_for_call();
    bump(SysKind::Other);
    // SAFETY: posix_fadvise takes plain integers.
    let rc = unsafe { libc::posix_fadvise(fd, offset as libc::off_t, len as libc::off_t, advice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// readahead(2): read the range into the page cache (may block; helpers only).
pub fn readahead(fd: impl FdArg, offset: u64, len: usize) -> io::Result<()> {
    let fd = fd.raw_for_call();
    bump(SysKind::Other);
    // SAFETY: readahead takes plain integers.
    cvt(unsafe { libc::readahead(fd, offset as libc::off64_t, len) } as libc::c_int).map(drop)
}

/// How a helper brings a range into the page cache ([`load`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LoadMethod {
    /// Start read-ahead and wait, polling mincore, until every page is in,
    /// reading none of them: the send that follows is the page's only use.
    /// Falls back to [`LoadMethod::Read`] where read-ahead makes no progress
    /// (a file system without it, or pages evicted as fast as they arrive).
    #[default]
    Readahead,
    /// Read the range through a scratch buffer. Each page is then used twice
    /// (this read, then the loop's send), which the kernel's LRU takes for
    /// reuse: the page is activated and protected over pages that are read
    /// again, so the page cache holds fewer bytes that are asked for again
    /// (docs/results.md, "the helpers' double touch").
    Read,
}

/// The read buffer [`load`] gives an empty scratch vector when it must read.
pub const LOAD_SCRATCH: usize = 64 * 1024;

/// Bring `[offset, offset + len)` into the page cache and return when it is
/// there (a helper's job: this blocks on the disk). `scratch` is the buffer
/// [`LoadMethod::Read`] (and its fallback) reads through; an empty one is
/// sized [`LOAD_SCRATCH`] only when a read is needed, so a helper that never
/// reads holds no buffer. Returns the bytes loaded (short at end of file).
pub fn load(fd: impl FdArg, offset: u64, len: u64, scratch: &mut Vec<u8>, method: LoadMethod) -> io::Result<u64> {
    let raw = fd.raw_for_call();
    if method == LoadMethod::Readahead {
        if let Some(n) = load_untouched(raw, offset, len)? {
            return Ok(n);
        }
    }
    if scratch.is_empty() {
        scratch.resize(LOAD_SCRATCH, 0);
    }
    let _ = readahead(raw, offset, len.min(usize::MAX as u64) as usize);
    let mut done = 0u64;
    while done < len && !scratch.is_empty() {
        let want = (len - done).min(scratch.len() as u64) as usize;
        match super::retry(|| super::pread(raw, &mut scratch[..want], offset + done)) {
            Ok(0) => break,
            Ok(n) => done += n as u64,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Bytes one readahead(2) call is asked for: the kernel reads at most one
/// read-ahead window per call (`force_page_cache_ra`: 128 KiB by default,
/// also on FUSE), so a long range is asked for window by window.
const RA_WINDOW: u64 = 128 * 1024;
/// Windows kept in flight past the first missing page, as a sequential
/// reader's own read-ahead keeps several.
const RA_AHEAD: u64 = 4 * RA_WINDOW;
/// Poll interval bounds: short first (a page-cache miss on a fast device
/// takes about 100 µs), doubling while nothing arrives.
const POLL_MIN: std::time::Duration = std::time::Duration::from_micros(100);
const POLL_MAX: std::time::Duration = std::time::Duration::from_millis(2);
/// No page arrived for this long: ask for the missing window again (its
/// pages may have been evicted before they were counted).
const REASK: std::time::Duration = std::time::Duration::from_millis(20);
/// No page arrived for this long: read-ahead is not working here; read.
const STALL: std::time::Duration = std::time::Duration::from_secs(1);

/// [`LoadMethod::Readahead`]: readahead(2) window by window from the first
/// missing page, polling mincore over one mapping of the range until every
/// page is up to date. mincore counts a page only once its read completed
/// (unlike cachestat, which counts pages still under I/O), and neither call
/// marks a page accessed. None: no progress for [`STALL`], or no read-ahead
/// on this descriptor; the caller reads instead.
fn load_untouched(raw: std::os::fd::RawFd, offset: u64, len: u64) -> io::Result<Option<u64>> {
    use std::time::Instant;
    let st = super::fstat(raw)?;
    if !st.is_file || !mincore_tells(raw, &st) {
        return Ok(None); // only reading brings it in, or tells when it is in
    }
    let end = offset.saturating_add(len).min(st.size);
    if end <= offset {
        return Ok(Some(0));
    }
    let page = page_size() as u64;
    let start = offset / page * page;
    let Ok(map) = super::mmap::MappedChunk::map(raw, start, (end - start) as usize) else {
        return Ok(None); // not mappable (not a regular file): read
    };
    let (mut at, mut asked) = (start, start);
    let mut pause = POLL_MIN;
    let mut progress_at = Instant::now();
    let mut asked_at = progress_at;
    loop {
        let prefix = map.resident_prefix((at - start) as usize)?;
        let now = Instant::now();
        if start + prefix as u64 > at {
            at = start + prefix as u64;
            progress_at = now;
            pause = POLL_MIN;
        }
        if at >= end {
            return Ok(Some(end - offset));
        }
        if now.duration_since(progress_at) > STALL {
            return Ok(None);
        }
        if now.duration_since(progress_at) > REASK && now.duration_since(asked_at) > REASK {
            asked = at;
        }
        asked = asked.max(at);
        while asked < end && asked < at + RA_AHEAD {
            if readahead(raw, asked, (end - asked).min(RA_WINDOW) as usize).is_err() {
                return Ok(None); // EINVAL: no read-ahead for this descriptor
            }
            asked += RA_WINDOW;
            asked_at = now;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(POLL_MAX);
    }
}

/// Does mincore report this file's page cache? Since Linux 5.0 it reports
/// every page of a file the caller neither owns nor may write as resident
/// (`can_do_mincore`, against page-cache side channels), which would end a
/// wait before any read completed. Root, the owner and a writer get the truth.
fn mincore_tells(raw: std::os::fd::RawFd, st: &super::FileStat) -> bool {
    let (_, euid) = super::privilege::current_uid();
    if euid == 0 || euid == st.uid {
        return true;
    }
    bump(SysKind::Other);
    // SAFETY: an empty C string with AT_EMPTY_PATH asks about `raw` itself;
    // faccessat2 only reads the path and writes nothing.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_faccessat2,
            raw,
            c"".as_ptr(),
            libc::W_OK,
            libc::AT_EMPTY_PATH | libc::AT_EACCESS,
        )
    };
    rc == 0
}

/// The resident prefix in bytes of the mapping at `addr` of `len` bytes
/// (page-aligned start), given that `[0, from)` is resident: the offset of
/// the first page from `from` on that mincore does not report, or `len`.
pub(super) fn mincore_prefix(addr: *const u8, from: usize, len: usize) -> io::Result<usize> {
    let page = page_size();
    let mut vec = [0u8; MINCORE_BATCH];
    let mut at = from;
    while at < len {
        let bytes = (len - at).min(MINCORE_BATCH * page);
        let n = bytes.div_ceil(page);
        bump(SysKind::Other);
        // SAFETY: the caller's mapping covers [addr, addr+len) and `at` is a
        // page-aligned offset below len, so [addr+at, addr+at+bytes) is mapped;
        // vec holds at least n entries, one per page of that sub-range.
        cvt(unsafe { libc::mincore(addr.add(at) as *mut libc::c_void, bytes, vec.as_mut_ptr()) })?;
        match vec[..n].iter().position(|&b| b & 1 == 0) {
            Some(i) => return Ok(at + i * page),
            None => at += bytes,
        }
    }
    Ok(len)
}

/// True when RWF_NOWAIT reads work on `fd` (probes one byte at offset 0).
pub fn nowait_supported(fd: impl FdArg) -> bool {
    let mut b = [0u8; 1];
    !matches!(pread_nowait(fd, &mut b, 0), Ok(Nowait::Unsupported))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn temp_file(len: usize) -> (std::path::PathBuf, std::fs::File) {
        let path = crate::testutil::temp_path("residency");
        let mut f = std::fs::File::create(&path).unwrap();
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
        (path.clone(), std::fs::File::open(&path).unwrap())
    }

    #[test]
    fn nowait_reads_a_cached_file_or_says_why_not() {
        let (path, f) = temp_file(10_000);
        // The file was just written: its pages are in the page cache.
        let mut buf = vec![0u8; 4096];
        match pread_nowait(&f, &mut buf, 100).unwrap() {
            Nowait::Read(n) => {
                assert!(n > 0);
                assert_eq!(buf[0], 100);
            }
            Nowait::Unsupported => {}
            Nowait::WouldBlock => panic!("a freshly written file should be cached"),
        }
        // Past the end: a read of 0, never WouldBlock.
        assert!(matches!(
            pread_nowait(&f, &mut buf, 20_000).unwrap(),
            Nowait::Read(0) | Nowait::Unsupported
        ));
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn mincore_counts_pages_and_load_makes_resident() {
        let page = page_size();
        let (path, f) = temp_file(3 * page + 10);
        let r = resident(&f, 0, 3 * page + 10).unwrap();
        assert_eq!(r.pages, 4);
        assert!(r.resident <= r.pages);
        // Ask the kernel to drop the pages (it may refuse), then load them.
        advise_dontneed(&f, 0, 0).unwrap();
        advise_willneed(&f, 0, 0).unwrap();
        let mut scratch = vec![0u8; 8192];
        for method in [LoadMethod::Readahead, LoadMethod::Read] {
            advise_dontneed(&f, 0, 0).unwrap();
            assert_eq!(
                load(&f, 0, 1 << 20, &mut scratch, method).unwrap(),
                (3 * page + 10) as u64
            );
            assert!(resident(&f, 0, 3 * page + 10).unwrap().all(), "{method:?}");
            // From an unaligned offset inside the file, and past its end.
            assert_eq!(load(&f, page as u64 + 7, 100, &mut scratch, method).unwrap(), 100);
            assert_eq!(load(&f, 1 << 20, 100, &mut scratch, method).unwrap(), 0);
        }
        assert_eq!(resident(&f, 5, 0).unwrap(), Residency::default());
        // An unaligned offset tests the pages the range touches.
        assert_eq!(resident(&f, page as u64 + 1, page).unwrap().pages, 2);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn load_allocates_its_read_buffer_only_to_read() {
        let (path, f) = temp_file(20_000);
        let mut scratch = Vec::new();
        advise_dontneed(&f, 0, 0).unwrap();
        assert_eq!(
            load(&f, 0, 20_000, &mut scratch, LoadMethod::Readahead).unwrap(),
            20_000
        );
        assert_eq!(scratch.capacity(), 0, "read-ahead needs no buffer");
        assert_eq!(load(&f, 0, 20_000, &mut scratch, LoadMethod::Read).unwrap(), 20_000);
        assert_eq!(scratch.len(), LOAD_SCRATCH);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn cachestat_counts_cached_pages_without_reading() {
        let page = page_size();
        let (path, f) = temp_file(3 * page + 10);
        let Some(all) = cached_pages(&f, 0, (3 * page + 10) as u64).unwrap() else {
            return std::fs::remove_file(path).unwrap(); // no cachestat on this kernel
        };
        assert_eq!(all, 4, "a freshly written file is cached");
        advise_dontneed(&f, 0, 0).unwrap();
        let after = cached_pages(&f, 0, (3 * page + 10) as u64).unwrap().unwrap();
        // Asking read nothing in again (the kernel may keep pages it would not drop).
        assert!(after <= all);
        assert_eq!(cached_pages(&f, 0, (3 * page + 10) as u64).unwrap(), Some(after));
        assert!(cached_pages(-1, 0, 10).is_err());
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn errors_are_errors() {
        let mut buf = [0u8; 8];
        assert!(pread_nowait(-1, &mut buf, 0).is_err());
        assert!(
            pread_nowait(0, &mut buf, u64::MAX).is_err(),
            "an offset past i64 is not 'unsupported'"
        );
        assert!(advise_willneed(-1, 0, 0).is_err());
        assert!(resident(-1, 0, 10).is_err());
    }
}
