//! Socket facts the sockmap forwarder (`weft proxy --splice sockmap`, crate
//! weft-sockmap) needs: a socket's cookie (the key its BPF program looks up),
//! and the byte counts that tell when every redirected byte has reached the
//! peer's send queue (so a half-close never overtakes data).

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

/// A TCP socket's stream byte counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpBytes {
    /// Bytes received in order (tcpi_bytes_received).
    pub received: u64,
    /// Bytes the peer acknowledged (tcpi_bytes_acked).
    pub acked: u64,
    /// Bytes written but not yet acknowledged (SIOCOUTQ).
    pub queued: u64,
    /// The peer's FIN has arrived (tcpi_state CLOSE_WAIT, LAST_ACK, CLOSING,
    /// TIME_WAIT or CLOSE): an end of stream seen without reading, which a
    /// socket in a sockmap may refuse once its own write side is shut.
    pub fin_received: bool,
}

impl TcpBytes {
    /// Every byte ever written to the socket: acknowledged or still queued.
    pub fn written(&self) -> u64 {
        self.acked + self.queued
    }
}

/// Offsets in `struct tcp_info` (include/uapi/linux/tcp.h, stable since 4.1/4.6).
const TCPI_BYTES_ACKED: usize = 120;
const TCPI_BYTES_RECEIVED: usize = 128;

/// getsockopt(TCP_INFO) and ioctl(SIOCOUTQ): received, acknowledged and
/// queued byte counts of a TCP socket.
pub fn tcp_bytes(fd: impl FdArg) -> io::Result<TcpBytes> {
    let fd = fd.raw_for_call();
    bump(SysKind::Other);
    let mut info = [0u8; 256];
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
    if (len as usize) < TCPI_BYTES_RECEIVED + 8 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "tcp_info without byte counts",
        ));
    }
    let at = |o: usize| u64::from_ne_bytes(info[o..o + 8].try_into().unwrap_or([0; 8]));
    let mut outq: libc::c_int = 0;
    bump(SysKind::Other);
    // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one int into `outq`, a valid local.
    cvt(unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut outq) })?;
    Ok(TcpBytes {
        received: at(TCPI_BYTES_RECEIVED),
        acked: at(TCPI_BYTES_ACKED),
        queued: outq.max(0) as u64,
        fin_received: matches!(info[0], 6..=9 | 11),
    })
}
