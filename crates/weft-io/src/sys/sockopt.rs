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

/// What an option's value is on our side: `bool` for on/off options, `usize`
/// for byte counts (saturated at `i32::MAX`; a negative reading is 0).
trait OptValue: Copy {
    fn to_int(self) -> i32;
    fn from_int(v: i32) -> Self;
}

impl OptValue for bool {
    fn to_int(self) -> i32 {
        self as i32
    }
    fn from_int(v: i32) -> bool {
        v != 0
    }
}

impl OptValue for usize {
    fn to_int(self) -> i32 {
        int_bytes(self)
    }
    fn from_int(v: i32) -> usize {
        v.max(0) as usize
    }
}

/// A socket option as typed functions: a setter and, when one is named after
/// `get`, a getter.
macro_rules! sockopt {
    ($(#[$doc:meta])* $set:ident($arg:ident: $ty:ty) $(, get $(#[$gdoc:meta])* $get:ident)? = $level:ident, $opt:ident) => {
        $(#[$doc])*
        pub fn $set(fd: impl FdArg, $arg: $ty) -> io::Result<()> {
            setsockopt_int(fd.raw_for_call(), libc::$level, libc::$opt, OptValue::to_int($arg))
        }
        $(
            $(#[$gdoc])*
            pub fn $get(fd: impl FdArg) -> io::Result<$ty> {
                getsockopt_int(fd.raw_for_call(), libc::$level, libc::$opt).map(<$ty as OptValue>::from_int)
            }
        )?
    };
}

sockopt!(
    /// TCP_NODELAY: send small segments at once instead of waiting for the ACK
    /// of the previous one (Nagle). Accepted sockets inherit it from the listener.
    set_nodelay(on: bool), get
    /// Is TCP_NODELAY set?
    nodelay = IPPROTO_TCP, TCP_NODELAY
);

sockopt!(
    /// TCP_CORK: hold partial segments until uncorked (or 200 ms pass).
    set_cork(on: bool) = IPPROTO_TCP, TCP_CORK
);

sockopt!(
    /// TCP_NOTSENT_LOWAT: writable only while fewer than `bytes` unsent bytes
    /// are queued (saturated at `i32::MAX`); 0 restores the kernel's default
    /// (net.ipv4.tcp_notsent_lowat, unbounded unless the sysctl says otherwise).
    set_notsent_lowat(bytes: usize), get
    /// The TCP_NOTSENT_LOWAT in force (0: the kernel default).
    notsent_lowat = IPPROTO_TCP, TCP_NOTSENT_LOWAT
);

sockopt!(
    /// SO_RCVLOWAT: readable only once `bytes` are queued (saturated at
    /// `i32::MAX`; 1 is the kernel default: every arrival wakes the reader).
    set_rcvlowat(bytes: usize), get
    /// The SO_RCVLOWAT in force.
    rcvlowat = SOL_SOCKET, SO_RCVLOWAT
);

sockopt!(
    /// TCP_WINDOW_CLAMP: advertise at most `bytes` of receive window from
    /// now on (the kernel raises it to half SOCK_MIN_RCVBUF at least; a
    /// window already advertised is not taken back).
    set_window_clamp(bytes: usize), get
    /// The TCP_WINDOW_CLAMP in force (the largest window the socket may
    /// advertise; the kernel raises it as it autotunes the buffer).
    window_clamp = IPPROTO_TCP, TCP_WINDOW_CLAMP
);

sockopt!(
    /// SO_RCVBUF: the receive buffer size asked for (the kernel doubles it for
    /// its bookkeeping and caps it at net.core.rmem_max).
    set_rcvbuf(bytes: usize) = SOL_SOCKET, SO_RCVBUF
);

sockopt!(
    /// SO_SNDBUF: the send buffer size asked for (the kernel doubles it for its
    /// bookkeeping, caps it at net.core.wmem_max and stops autotuning it).
    /// Accepted sockets inherit it from the listener.
    set_sndbuf(bytes: usize), get
    /// The SO_SNDBUF in force (the doubled figure the kernel keeps).
    sndbuf = SOL_SOCKET, SO_SNDBUF
);

sockopt!(
    /// SO_REUSEADDR: bind may take a port whose earlier connection is in
    /// TIME_WAIT.
    set_reuseaddr(on: bool) = SOL_SOCKET, SO_REUSEADDR
);

sockopt!(
    /// SO_REUSEPORT: several sockets bind the same address; the kernel spreads
    /// incoming connections over the listeners.
    set_reuseport(on: bool) = SOL_SOCKET, SO_REUSEPORT
);

sockopt!(
    /// IP_BIND_ADDRESS_NO_PORT: a bind to an address with port 0 leaves the port
    /// choice to connect, where the whole 4-tuple is known (many connections
    /// from one source address).
    set_bind_address_no_port(on: bool) = IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT
);

sockopt!(
    /// TCP_QUICKACK: on, ACK every segment at once; off, let the delayed-ACK
    /// timer run. Not sticky: the kernel re-enters quick-ACK mode on its own
    /// (after idle, on out-of-order data), so callers set it again after reads.
    set_quickack(on: bool), get
    /// Is quick-ACK mode on?
    quickack = IPPROTO_TCP, TCP_QUICKACK
);

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
        set_sndbuf(fd, 65536).unwrap();
        assert_eq!(sndbuf(fd).unwrap(), 2 * 65536);
        set_reuseaddr(fd, true).unwrap();
        set_reuseport(fd, true).unwrap();
        set_bind_address_no_port(fd, true).unwrap();
    }
}
