//! System calls of the proxy's data path beyond plain splice/tee (which live in
//! `sys/mod.rs`): reading straight into a growing `BytesMut` (the cache fill
//! of KeepCopy and of the copy path: no zeroing pass, no second buffer) and
//! asking a pipe how many bytes it holds.

use super::{bump, cvt, cvt_size, FdArg, SysKind};
use bytes::BytesMut;
use std::io;

/// read(2) up to `max` bytes into the spare capacity of `buf` (reserving it
/// first), extending `buf` by what was read.
#[inline]
pub fn read_to_bytes(fd: impl FdArg, buf: &mut BytesMut, max: usize) -> io::Result<usize> {
    let fd = fd.raw_for_call();
    bump(SysKind::Read);
    if buf.capacity() - buf.len() < max {
        buf.reserve(max);
    }
    let spare = buf.spare_capacity_mut();
    let want = spare.len().min(max);
    // SAFETY: `spare` is valid for writes of `want` bytes (MaybeUninit<u8> has
    // u8's layout; the kernel writes at most `want` bytes into it).
    let n = cvt_size(unsafe { libc::read(fd, spare.as_mut_ptr().cast(), want) })?;
    // SAFETY: the kernel initialised the first `n <= want` bytes of the spare
    // capacity, so they may become part of the buffer.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// ioctl(FIONREAD): bytes waiting in a pipe (or a socket's receive queue).
pub fn bytes_readable(fd: impl FdArg) -> io::Result<usize> {
    let fd = fd.raw_for_call();
    bump(SysKind::Other);
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int into `n`, a valid local.
    cvt(unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) })?;
    Ok(n.max(0) as usize)
}

/// fcntl(F_GETPIPE_SZ): a pipe's capacity in bytes.
pub fn pipe_capacity(fd: impl FdArg) -> io::Result<usize> {
    let fd = fd.raw_for_call();
    bump(SysKind::Other);
    // SAFETY: F_GETPIPE_SZ takes no argument and passes no memory.
    cvt(unsafe { libc::fcntl(fd, libc::F_GETPIPE_SZ) }).map(|n| n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys;

    #[test]
    fn read_into_bytes_and_pipe_length() {
        let (r, w) = sys::pipe().unwrap();
        sys::write(&w, b"hello world").unwrap();
        assert_eq!(bytes_readable(&r).unwrap(), 11);
        let mut b = BytesMut::new();
        assert_eq!(read_to_bytes(&r, &mut b, 5).unwrap(), 5);
        assert_eq!(&b[..], b"hello");
        assert_eq!(read_to_bytes(&r, &mut b, 100).unwrap(), 6);
        assert_eq!(&b[..], b"hello world");
        assert_eq!(bytes_readable(&r).unwrap(), 0);
        let e = read_to_bytes(&r, &mut b, 100).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert!(pipe_capacity(&r).unwrap() >= 4096);
    }
}
