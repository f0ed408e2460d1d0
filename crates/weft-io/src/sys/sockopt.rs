//! Typed socket options: one function per option weft sets or reads, so that
//! callers name what they want (`set_nodelay(fd, true)`) instead of passing
//! libc levels and numbers, and sizes are clamped to what the kernel takes.
//!
//! Each setter is one setsockopt(2) (counted as `Setsockopt`), each getter
//! one getsockopt(2): the same system calls as before, no more.

use super::{getsockopt_int, setsockopt_int, FdArg};
use std::io;

/// A byte count as the kernel's `int` option value (saturating).
#[inline]
fn int_bytes(n: usize) -> i32 {
    n.min(i32::MAX as usize) as i32
}

/// TCP_NODELAY: send small segments at once instead of waiting for the ACK
/// of the previous one (Nagle). Accepted sockets inherit it from the listener.
pub fn set_nodelay(fd: impl FdArg, on: bool) -> io::Result<()> {
    let fd = fd.raw_for_call();
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, on as i32)
}

/// Is TCP_NODELAY set?
pub fn nodelay(fd: impl FdArg) -> io::Result<bool> {
    let fd = fd.raw_for_call();
    getsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY).map(|v| v != 0)
}

/// TCP_CORK: hold partial segments until uncorked (or 200 ms pass).
pub fn set_cork(fd: impl FdArg, on: bool) -> io::Result<()> {
    let fd = fd.raw_for_call();
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_CORK, on as i32)
}

/// TCP_NOTSENT_LOWAT: writable only while fewer than `bytes` unsent bytes
/// are queued (saturated at `i32::MAX`); 0 restores the kernel's default
/// (net.ipv4.tcp_notsent_lowat, unbounded unless the sysctl says otherwise).
pub fn set_notsent_lowat(fd: impl FdArg, bytes: usize) -> io::Result<()> {
    let fd = fd.raw_for_call();
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, int_bytes(bytes))
}

/// The TCP_NOTSENT_LOWAT in force (0: the kernel default).
pub fn notsent_lowat(fd: impl FdArg) -> io::Result<usize> {
    let fd = fd.raw_for_call();
    getsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT).map(|v| v.max(0) as usize)
}

/// SO_RCVLOWAT: readable only once `bytes` are queued (saturated at
/// `i32::MAX`; 1 is the kernel default: every arrival wakes the reader).
pub fn set_rcvlowat(fd: impl FdArg, bytes: usize) -> io::Result<()> {
    let fd = fd.raw_for_call();
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, int_bytes(bytes))
}

/// The SO_RCVLOWAT in force.
pub fn rcvlowat(fd: impl FdArg) -> io::Result<usize> {
    let fd = fd.raw_for_call();
    getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT).map(|v| v.max(0) as usize)
}

/// SO_RCVBUF: the receive buffer size asked for (the kernel doubles it for
/// its bookkeeping and caps it at net.core.rmem_max).
pub fn set_rcvbuf(fd: impl FdArg, bytes: usize) -> io::Result<()> {
    let fd = fd.raw_for_call();
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, int_bytes(bytes))
}

/// SO_REUSEADDR: bind may take a port whose earlier connection is in
/// TIME_WAIT.
pub fn set_reuseaddr(fd: impl FdArg, on: bool) -> io::Result<()> {
    let fd = fd.raw_for_call();
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, on as i32)
}

/// SO_REUSEPORT: several sockets bind the same address; the kernel spreads
/// incoming connections over the listeners.
pub fn set_reuseport(fd: impl FdArg, on: bool) -> io::Result<()> {
    let fd = fd.raw_for_call();
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, on as i32)
}

/// IP_BIND_ADDRESS_NO_PORT: a bind to an address with port 0 leaves the port
/// choice to connect, where the whole 4-tuple is known (many connections
/// from one source address).
pub fn set_bind_address_no_port(fd: impl FdArg, on: bool) -> io::Result<()> {
    let fd = fd.raw_for_call();
    setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_BIND_ADDRESS_NO_PORT, on as i32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys;
    use std::net::SocketAddr;

    #[test]
    fn options_read_back_what_was_set() {
        let s = sys::tcp_socket(&SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        let fd = &s;
        set_nodelay(fd, true).unwrap();
        assert!(nodelay(fd).unwrap());
        set_nodelay(fd, false).unwrap();
        assert!(!nodelay(fd).unwrap());
        set_notsent_lowat(fd, 16384).unwrap();
        assert_eq!(notsent_lowat(fd).unwrap(), 16384);
        set_notsent_lowat(fd, 0).unwrap();
        assert_eq!(notsent_lowat(fd).unwrap(), 0);
        set_rcvlowat(fd, 4096).unwrap();
        assert_eq!(rcvlowat(fd).unwrap(), 4096);
        set_rcvlowat(fd, 1).unwrap();
        assert_eq!(rcvlowat(fd).unwrap(), 1);
        set_cork(fd, true).unwrap();
        set_rcvbuf(fd, 65536).unwrap();
        set_reuseaddr(fd, true).unwrap();
        set_reuseport(fd, true).unwrap();
        set_bind_address_no_port(fd, true).unwrap();
    }
}
