//! A table of 64-bit words shared between processes: a memfd mapped
//! `MAP_SHARED`, written by its creator and read (mapped read-only) by the
//! processes its descriptor is passed to (`weft front --handoff-next owner`
//! publishes its target map to its back-ends this way: `crate::handoff`).
//! Every access is a whole-word atomic, so a reader never sees a torn word.

use super::{bump, cvt, fstat, Fd, SysKind};
use std::io;
use std::sync::atomic::AtomicU64;

/// A mapped table of `AtomicU64`s.
#[derive(Debug)]
pub struct SharedWords {
    ptr: *mut AtomicU64,
    len: usize,
    fd: Fd,
}

// SAFETY: the mapping is only reached through `&[AtomicU64]` (atomic words),
// so sharing it between threads is as safe as sharing a slice of atomics.
unsafe impl Send for SharedWords {}
// SAFETY: as above.
unsafe impl Sync for SharedWords {}

impl SharedWords {
    /// A new zeroed table of `len` words (memfd_create + ftruncate + mmap,
    /// read-write).
    pub fn create(name: &std::ffi::CStr, len: usize) -> io::Result<SharedWords> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        bump(SysKind::Other);
        // SAFETY: name is NUL-terminated; the result is checked.
        let raw = cvt(unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) })?;
        let fd = Fd(raw);
        bump(SysKind::Other);
        // SAFETY: a plain system call on a descriptor we own.
        cvt(unsafe { libc::ftruncate(fd.0, (len * 8) as libc::off_t) })?;
        Self::map(fd, len, libc::PROT_READ | libc::PROT_WRITE)
    }

    /// Map a table received from its creator, read-only (its length is the
    /// file's).
    pub fn open(fd: Fd) -> io::Result<SharedWords> {
        let size = fstat(&fd)?.size as usize;
        if size == 0 || !size.is_multiple_of(8) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        Self::map(fd, size / 8, libc::PROT_READ)
    }

    fn map(fd: Fd, len: usize, prot: libc::c_int) -> io::Result<SharedWords> {
        bump(SysKind::Other);
        // SAFETY: a fresh MAP_SHARED mapping chosen by the kernel (addr null)
        // aliases no Rust object; the result is checked below. The file is
        // exactly len * 8 bytes (created so, or checked with fstat).
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len * 8, prot, libc::MAP_SHARED, fd.0, 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedWords { ptr: p.cast(), len, fd })
    }

    /// The words. A read-only mapping may only be loaded from: its owner
    /// (`open`) never stores (a store would fault).
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: ptr is a live mapping of len 8-byte, page-aligned words for
        // as long as self lives; AtomicU64 has u64's layout.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The memfd (to pass to another process).
    pub fn fd(&self) -> &Fd {
        &self.fd
    }
}

impl Drop for SharedWords {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping; no reference into it outlives self.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len * 8);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn a_second_mapping_sees_the_creators_stores() {
        let t = SharedWords::create(c"weft-test", 512).unwrap();
        t.words()[7].store(42, Ordering::Relaxed);
        let dup = Fd::from(std::os::fd::AsFd::as_fd(t.fd()).try_clone_to_owned().unwrap());
        let r = SharedWords::open(dup).unwrap();
        assert_eq!(r.words().len(), 512);
        assert_eq!(r.words()[7].load(Ordering::Relaxed), 42);
        t.words()[8].store(7, Ordering::Relaxed);
        assert_eq!(r.words()[8].load(Ordering::Relaxed), 7);
    }
}
