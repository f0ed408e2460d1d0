//! Error numbers by name, so that no crate outside weft-io needs `libc` to
//! tell one failure from another, and the one EINTR retry loop.
//!
//! [`Errno`] names the error numbers weft acts on; the predicates group them
//! the way callers decide (is the peer gone? are we out of descriptors?). A
//! group is a question a caller asks, not a property of the number: ETIMEDOUT
//! is "peer gone" to a relay and "timed out" to the load generator's report.

use std::io;

macro_rules! errnos {
    ($($(#[$doc:meta])* $variant:ident = $c:ident,)*) => {
        /// An error number weft acts on, named; any other is `Other(n)`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Errno {
            $($(#[$doc])* $variant,)*
            /// Any other number.
            Other(i32),
        }

        impl Errno {
            /// The name of a raw error number.
            pub const fn from_raw(n: i32) -> Errno {
                match n {
                    $(libc::$c => Errno::$variant,)*
                    n => Errno::Other(n),
                }
            }

            /// The raw error number.
            pub const fn raw(self) -> i32 {
                match self {
                    $(Errno::$variant => libc::$c,)*
                    Errno::Other(n) => n,
                }
            }
        }
    };
}

errnos! {
    /// EAGAIN (= EWOULDBLOCK): try again when ready.
    WouldBlock = EAGAIN,
    /// EINTR: a signal interrupted the call.
    Interrupted = EINTR,
    /// EINPROGRESS: a non-blocking connect has started.
    InProgress = EINPROGRESS,
    /// EPIPE: writing to a connection the peer (or we) shut down.
    BrokenPipe = EPIPE,
    /// ECONNRESET: the peer reset the connection.
    ConnReset = ECONNRESET,
    /// ECONNABORTED: the connection was aborted (e.g. before accept).
    ConnAborted = ECONNABORTED,
    /// ENOTCONN: the socket is not connected (any more).
    NotConnected = ENOTCONN,
    /// ETIMEDOUT: a connect or retransmission timed out.
    TimedOut = ETIMEDOUT,
    /// ECONNREFUSED: nothing listens at the address.
    ConnRefused = ECONNREFUSED,
    /// EHOSTUNREACH: no route to the host.
    HostUnreachable = EHOSTUNREACH,
    /// ENETUNREACH: no route to the network.
    NetUnreachable = ENETUNREACH,
    /// EADDRINUSE: the local address (port) is taken.
    AddrInUse = EADDRINUSE,
    /// EADDRNOTAVAIL: no local address (port) is free or it is not ours.
    AddrNotAvailable = EADDRNOTAVAIL,
    /// EMFILE: this process is at its descriptor limit.
    TooManyOpenFiles = EMFILE,
    /// ENFILE: the system's file table is full.
    FileTableFull = ENFILE,
    /// ENOENT: no such file.
    NotFound = ENOENT,
    /// ENOTDIR: a path component is not a directory.
    NotADirectory = ENOTDIR,
    /// ENAMETOOLONG: a path or name is too long.
    NameTooLong = ENAMETOOLONG,
    /// EINVAL: an invalid argument.
    InvalidInput = EINVAL,
    /// ENOSYS: the system call is not implemented (or blocked).
    NoSys = ENOSYS,
    /// ENOMEM: the kernel is out of memory for the call.
    NoMemory = ENOMEM,
    /// EOPNOTSUPP (= ENOTSUP): not supported on this descriptor.
    NotSupported = EOPNOTSUPP,
    /// EIO: an I/O error (weft also uses it for "the file shrank").
    Io = EIO,
    /// EBADF: not an open descriptor.
    BadFd = EBADF,
}

impl Errno {
    /// The error number of `e`, if it came from the system.
    #[inline]
    pub fn of(e: &io::Error) -> Option<Errno> {
        e.raw_os_error().map(Errno::from_raw)
    }

    /// The connection's peer is gone (closed, reset, unreachable or silent
    /// past the retransmission timeout): stop using the connection, without
    /// logging it as our failure.
    pub const fn is_peer_gone(self) -> bool {
        matches!(
            self,
            Errno::BrokenPipe
                | Errno::ConnReset
                | Errno::NotConnected
                | Errno::TimedOut
                | Errno::ConnAborted
                | Errno::HostUnreachable
        )
    }

    /// Out of descriptors, in this process (EMFILE) or the system (ENFILE).
    pub const fn is_fd_exhaustion(self) -> bool {
        matches!(self, Errno::TooManyOpenFiles | Errno::FileTableFull)
    }

    /// splice/tee cannot work on these descriptors or this kernel (EINVAL,
    /// ENOSYS, ENOMEM, EOPNOTSUPP): fall back to copying.
    pub const fn is_splice_unsupported(self) -> bool {
        matches!(
            self,
            Errno::InvalidInput | Errno::NoSys | Errno::NoMemory | Errno::NotSupported
        )
    }

    /// A path lookup found nothing there (ENOENT, ENOTDIR, ENAMETOOLONG), as
    /// opposed to finding something it may not open.
    pub const fn is_no_such_path(self) -> bool {
        matches!(self, Errno::NotFound | Errno::NotADirectory | Errno::NameTooLong)
    }

    /// The destination cannot be reached (ENETUNREACH, EHOSTUNREACH).
    pub const fn is_unreachable(self) -> bool {
        matches!(self, Errno::NetUnreachable | Errno::HostUnreachable)
    }
}

impl From<Errno> for io::Error {
    /// The `io::Error` the system would have returned with this number.
    #[inline]
    fn from(e: Errno) -> io::Error {
        io::Error::from_raw_os_error(e.raw())
    }
}

/// `Errno::of(e)` matches `want`.
#[inline]
pub fn is(e: &io::Error, want: Errno) -> bool {
    e.raw_os_error() == Some(want.raw())
}

/// See [`Errno::is_peer_gone`]; false for errors not from the system.
#[inline]
pub fn is_peer_gone(e: &io::Error) -> bool {
    Errno::of(e).is_some_and(Errno::is_peer_gone)
}

/// See [`Errno::is_fd_exhaustion`].
#[inline]
pub fn is_fd_exhaustion(e: &io::Error) -> bool {
    Errno::of(e).is_some_and(Errno::is_fd_exhaustion)
}

/// See [`Errno::is_splice_unsupported`].
#[inline]
pub fn is_splice_unsupported(e: &io::Error) -> bool {
    Errno::of(e).is_some_and(Errno::is_splice_unsupported)
}

/// Run `f` again while it fails with EINTR: the one retry loop of the
/// workspace. Not for close(2) (never retried on Linux), nor for a wait
/// whose timeout must shrink between attempts (the pollers report an EINTR
/// as "no events" instead).
#[inline]
pub fn retry<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_others_pass_through() {
        for n in 0..200 {
            assert_eq!(Errno::from_raw(n).raw(), n);
        }
        assert_eq!(Errno::from_raw(libc::EWOULDBLOCK), Errno::WouldBlock);
        assert_eq!(Errno::from_raw(libc::ENOTSUP), Errno::NotSupported);
        assert_eq!(Errno::from_raw(libc::EXDEV), Errno::Other(libc::EXDEV));
    }

    #[test]
    fn io_errors_convert_and_classify() {
        let e = io::Error::from(Errno::BrokenPipe);
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
        assert!(is_peer_gone(&e));
        assert!(is(&e, Errno::BrokenPipe));
        assert!(!is_peer_gone(&io::Error::from(Errno::ConnRefused)));
        assert!(!is_peer_gone(&io::Error::other("not from the system")));
        assert!(is_fd_exhaustion(&io::Error::from(Errno::FileTableFull)));
        assert!(is_splice_unsupported(&io::Error::from(Errno::NoSys)));
        assert!(Errno::NameTooLong.is_no_such_path());
        assert_eq!(io::Error::from(Errno::WouldBlock).kind(), io::ErrorKind::WouldBlock);
        assert_eq!(Errno::of(&io::Error::from(Errno::Io)), Some(Errno::Io));
    }

    #[test]
    fn retry_repeats_only_interrupted_calls() {
        let mut calls = 0;
        let r = retry(|| {
            calls += 1;
            if calls < 3 {
                Err(io::Error::from(Errno::Interrupted))
            } else {
                Ok(calls)
            }
        });
        assert_eq!(r.unwrap(), 3);
        let mut calls = 0;
        let r: io::Result<()> = retry(|| {
            calls += 1;
            Err(io::Error::from(Errno::WouldBlock))
        });
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::WouldBlock);
        assert_eq!(calls, 1);
    }
}
