//! [`Fd`]: weft's owned descriptor, and its bridges to the standard library's
//! ownership types (`OwnedFd`, `BorrowedFd`, `File`, `TcpStream`, ...).
//!
//! An `Fd` is closed exactly once, when it drops (through the counted
//! close(2) below): no public function closes a bare descriptor number. Safe
//! code makes an `Fd` only from a system call of this module that returned a
//! fresh descriptor, or from a standard type that already owns one
//! (`Fd::from(file)`); turning a bare number into an `Fd` is `unsafe`
//! ([`Fd::from_raw`]), because two owners of one number would close it twice,
//! the second time perhaps closing somebody else's newer descriptor.

use super::{bump, SysKind};
use std::fs::File;
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixDatagram, UnixListener, UnixStream};

/// An owned descriptor, closed through a counted close(2) when dropped.
///
/// Invariant: the number is an open descriptor (never -1) that this value
/// alone owns.
#[derive(Debug)]
pub struct Fd(pub(super) RawFd);

impl Fd {
    /// Take ownership of `fd`.
    ///
    /// # Safety
    ///
    /// `fd` must be an open descriptor that nothing else owns or will close:
    /// the returned `Fd` closes it when dropped. Prefer `Fd::from` on an
    /// `OwnedFd`, `File` or socket, which carries that proof in its type.
    pub unsafe fn from_raw(fd: RawFd) -> Fd {
        Fd(fd)
    }

    /// The raw descriptor number (valid while `self` lives).
    #[inline]
    pub fn raw(&self) -> RawFd {
        self.0
    }

    /// Give up ownership without closing; the caller now owns the number.
    pub fn into_raw(self) -> RawFd {
        let fd = self.0;
        std::mem::forget(self);
        fd
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        close(self.0);
    }
}

/// close(2). Errors are ignored: after close the descriptor is gone either way
/// (Linux never leaves it open on EINTR, so it must not be retried), and there
/// is nothing useful to do. Private: only an owner's drop closes.
fn close(fd: RawFd) {
    bump(SysKind::Close);
    // SAFETY: closing a descriptor number has no memory-safety implications;
    // the callers own `fd` (Fd's Drop, or a descriptor just returned to sys).
    unsafe {
        libc::close(fd);
    }
}

impl AsRawFd for Fd {
    #[inline]
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

impl AsFd for Fd {
    #[inline]
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: `self.0` is open and owned by `self` (the type's invariant),
        // and the borrow cannot outlive `self`.
        unsafe { BorrowedFd::borrow_raw(self.0) }
    }
}

impl IntoRawFd for Fd {
    #[inline]
    fn into_raw_fd(self) -> RawFd {
        self.into_raw()
    }
}

impl FromRawFd for Fd {
    /// See [`Fd::from_raw`] for the contract.
    #[inline]
    unsafe fn from_raw_fd(fd: RawFd) -> Fd {
        Fd(fd)
    }
}

impl From<OwnedFd> for Fd {
    #[inline]
    fn from(fd: OwnedFd) -> Fd {
        Fd(fd.into_raw_fd())
    }
}

impl From<Fd> for OwnedFd {
    #[inline]
    fn from(fd: Fd) -> OwnedFd {
        // SAFETY: `fd` owned the open descriptor; into_raw hands that
        // ownership over without closing it.
        unsafe { OwnedFd::from_raw_fd(fd.into_raw()) }
    }
}

/// What a `sys` wrapper accepts as a descriptor argument: a borrow of an open
/// descriptor (`&Fd`, `BorrowedFd`, `&File`, `&TcpStream`, `&OwnedFd`, ... —
/// anything `AsFd`, by reference), so the borrow checker proves the descriptor
/// is open for the whole call.
///
/// A bare `RawFd` is accepted too, for now, so that callers written against
/// the old `fn(fd: RawFd)` signatures keep compiling while they move to
/// borrows; once none is left that impl goes and every wrapper is I/O-safe.
/// Sealed: only the impls here exist.
pub trait FdArg: sealed::Sealed {
    /// The descriptor number to pass to the kernel for the call.
    #[doc(hidden)]
    fn raw_for_call(&self) -> RawFd;
}

mod sealed {
    pub trait Sealed {}
}

impl<T: AsFd + ?Sized> sealed::Sealed for &T {}
impl<T: AsFd + ?Sized> FdArg for &T {
    #[inline(always)]
    fn raw_for_call(&self) -> RawFd {
        (**self).as_fd().as_raw_fd()
    }
}

impl sealed::Sealed for BorrowedFd<'_> {}
impl FdArg for BorrowedFd<'_> {
    #[inline(always)]
    fn raw_for_call(&self) -> RawFd {
        self.as_raw_fd()
    }
}

/// Transitional (see [`FdArg`]): the caller vouches that the number stays
/// open for the call.
impl sealed::Sealed for RawFd {}
impl FdArg for RawFd {
    #[inline(always)]
    fn raw_for_call(&self) -> RawFd {
        *self
    }
}

/// `Fd::from(std_value)` for the standard types that own a descriptor, and
/// the way back (`File::from(fd)`), both through `OwnedFd`.
macro_rules! std_owner {
    ($($t:ty),*) => {$(
        impl From<$t> for Fd {
            #[inline]
            fn from(v: $t) -> Fd {
                Fd::from(OwnedFd::from(v))
            }
        }
        impl From<Fd> for $t {
            #[inline]
            fn from(fd: Fd) -> $t {
                <$t>::from(OwnedFd::from(fd))
            }
        }
    )*};
}

std_owner!(File, TcpStream, TcpListener, UnixStream, UnixListener, UnixDatagram);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys;
    use std::io::{Read, Write};

    #[test]
    fn std_types_convert_both_ways_without_closing() {
        let (r, w) = sys::pipe().unwrap();
        let raw = w.raw();
        let owned = OwnedFd::from(w);
        assert_eq!(owned.as_raw_fd(), raw);
        let w = Fd::from(owned);
        assert_eq!(w.as_fd().as_raw_fd(), raw);
        let mut f = File::from(w);
        f.write_all(b"hi").unwrap();
        let mut r = File::from(r);
        let mut b = [0u8; 2];
        r.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"hi");
    }

    #[test]
    fn drop_closes_once_and_is_counted() {
        let (r, _w) = sys::pipe().unwrap();
        let before = sys::SysCounts::current();
        drop(r);
        let after = sys::SysCounts::current();
        assert_eq!(after.get(SysKind::Close) - before.get(SysKind::Close), 1);
    }

    #[test]
    fn wrappers_take_borrows_and_raw_numbers() {
        let (r, w) = sys::pipe().unwrap();
        sys::write(&w, b"ab").unwrap();
        sys::write(w.as_fd(), b"c").unwrap();
        sys::write(w.raw(), b"d").unwrap();
        let f = File::from(r);
        assert_eq!(sys::bytes_readable(&f).unwrap(), 4);
        let owned = OwnedFd::from(f);
        let mut b = [0u8; 4];
        assert_eq!(sys::read(&owned, &mut b).unwrap(), 4);
        assert_eq!(&b, b"abcd");
    }

    #[test]
    fn into_raw_keeps_the_descriptor_open() {
        let (r, _w) = sys::pipe().unwrap();
        let raw = r.into_raw();
        assert!(sys::fstat(raw).is_ok());
        // SAFETY: `raw` came from into_raw above and nothing else owns it.
        drop(unsafe { Fd::from_raw(raw) });
    }
}
