//! Socket facts the sockmap forwarder (`weft proxy --splice sockmap`, crate
//! weft-sockmap) needs: a socket's cookie (the key its BPF program looks up)
//! and whether its peer's FIN has arrived.

use super::{bump, cvt, FdArg, SysKind};
use std::io;
use std::mem::size_of;

/// getsockopt(SO_COOKIE): the kernel's 64-bit identity of a socket, the same
/// value `bpf_get_socket_cookie` returns inside a BPF program.
pub fn socket_cookie(fd: impl FdArg) -> io::Result<u64> {
    let fd = fd.raw_for_call();
    bump(SysKind::Other);
    let mut value: u64 = 0;
    let mut len = size_of::<u64>() as libc::socklen_t;
    // SAFETY: value and len are valid locals of the sizes passed.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_COOKIE,
            (&mut value as *mut u64).cast(),
            &mut len,
        )
    })?;
    Ok(value)
}

/// getsockopt(TCP_INFO): whether the peer's FIN has arrived (tcpi_state
/// CLOSE_WAIT, LAST_ACK, CLOSING, TIME_WAIT or CLOSE), seen without reading,
/// which a socket in a sockmap does not do. Taking the socket's lock, it
/// also waits out a softirq still processing the segments before the FIN.
pub fn fin_received(fd: impl FdArg) -> io::Result<bool> {
    let fd = fd.raw_for_call();
    bump(SysKind::Other);
    let mut info = [0u8; 8];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: info is a writable local buffer of the length passed.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    Ok(matches!(info[0], 6..=9 | 11))
}
