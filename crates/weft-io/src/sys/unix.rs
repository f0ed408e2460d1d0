//! Unix SOCK_SEQPACKET sockets and descriptor passing (SCM_RIGHTS): the
//! channel `weft front --mode handoff` hands client connections over to
//! `weft serve --handoff-socket` on the same host.
//!
//! SEQPACKET keeps message boundaries (one handoff = one message, never
//! split or merged) and is connection-oriented (a peer's death is an EOF on
//! the channel, which is how the front-end learns a back-end is gone).
//!
//! An address is a filesystem path, or `@name` for Linux's abstract
//! namespace (no file to clean up; gone with the last descriptor).
//!
//! Received descriptors are close-on-exec (MSG_CMSG_CLOEXEC). A message
//! carries at most one descriptor: extra ones are closed on receipt, and
//! descriptors the kernel could not fit in the control buffer (MSG_CTRUNC)
//! are never installed, so nothing leaks.

use super::{bump, cvt, cvt_size, Fd, FdArg, SysKind};
use std::io::{self, IoSlice};
use std::mem::size_of;

/// A `sockaddr_un` for `addr` (`@name`: abstract) and its length.
pub(super) fn sockaddr_un(addr: &str) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut sun: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let (abstract_ns, name) = match addr.strip_prefix('@') {
        Some(n) => (true, n.as_bytes()),
        None => (false, addr.as_bytes()),
    };
    // A path needs its NUL; an abstract name starts with one.
    if name.is_empty() || name.len() + 1 > sun.sun_path.len() || name.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid Unix socket address `{addr}` (1-107 bytes, no NUL)"),
        ));
    }
    let start = usize::from(abstract_ns);
    for (d, &s) in sun.sun_path[start..].iter_mut().zip(name) {
        *d = s as libc::c_char;
    }
    let base = size_of::<libc::sa_family_t>();
    let len = if abstract_ns {
        base + 1 + name.len()
    } else {
        base + name.len() + 1
    };
    Ok((sun, len as libc::socklen_t))
}

/// A non-blocking, close-on-exec AF_UNIX SOCK_SEQPACKET socket.
fn seqpacket_socket() -> io::Result<Fd> {
    bump(SysKind::Socket);
    // SAFETY: plain integer arguments.
    let fd = cvt(unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    Ok(Fd(fd))
}

/// A listening SEQPACKET socket at `addr` (path or `@name`). A path left
/// behind by a process that is gone (nothing accepts there) is replaced;
/// one a live process listens on is an error (EADDRINUSE).
pub fn seqpacket_listener(addr: &str, backlog: i32) -> io::Result<Fd> {
    let (sun, len) = sockaddr_un(addr)?;
    let fd = seqpacket_socket()?;
    let bind = |fd: &Fd| {
        bump(SysKind::Other);
        // SAFETY: sun is a valid sockaddr_un of `len` bytes.
        cvt(unsafe { libc::bind(fd.0, (&sun as *const libc::sockaddr_un).cast(), len) })
    };
    if let Err(e) = bind(&fd) {
        let stale = e.raw_os_error() == Some(libc::EADDRINUSE)
            && !addr.starts_with('@')
            && seqpacket_connect(addr).is_err_and(|c| c.raw_os_error() == Some(libc::ECONNREFUSED));
        if !stale {
            return Err(e);
        }
        std::fs::remove_file(addr)?;
        bind(&fd)?;
    }
    super::listen(&fd, backlog)?;
    Ok(fd)
}

/// Connect a non-blocking SEQPACKET socket to `addr` (path or `@name`).
/// A Unix connect completes at once or fails (EAGAIN: the listener's
/// backlog is full; ECONNREFUSED / ENOENT: nobody listens).
pub fn seqpacket_connect(addr: &str) -> io::Result<Fd> {
    let (sun, len) = sockaddr_un(addr)?;
    let fd = seqpacket_socket()?;
    bump(SysKind::Connect);
    // SAFETY: sun is a valid sockaddr_un of `len` bytes.
    cvt(unsafe { libc::connect(fd.0, (&sun as *const libc::sockaddr_un).cast(), len) })?;
    Ok(fd)
}

/// A connected pair of non-blocking SEQPACKET sockets (tests, and a
/// front-end and back-end in one process).
pub fn seqpacket_pair() -> io::Result<(Fd, Fd)> {
    bump(SysKind::Socket);
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds is a valid array of two ints.
    cvt(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    Ok((Fd(fds[0]), Fd(fds[1])))
}

/// Room for a few descriptors' control message (u64s for alignment): one
/// is expected, the rest are room to see and close extras.
const CONTROL_WORDS: usize = 8;
/// Descriptors that fit in the control buffer.
const CONTROL_FDS: usize = 4;

/// Send one message: `bytes` (gathered), with `fd` attached (SCM_RIGHTS).
/// The receiver gets its own descriptor for the same open socket; the
/// caller may close its copy once this returns. MSG_NOSIGNAL: a gone peer
/// is EPIPE. Returns the bytes sent (a SEQPACKET message goes whole or not
/// at all; EAGAIN when the peer's queue is full).
pub fn send_fd_with(sock: impl FdArg, fd: impl FdArg, bytes: &[IoSlice<'_>]) -> io::Result<usize> {
    let sock = sock.raw_for_call();
    let passed = fd.raw_for_call();
    bump(SysKind::Write);
    let mut control = [0u64; CONTROL_WORDS];
    // SAFETY: msghdr is zero-initialised; iov points at `bytes` (IoSlice is
    // ABI-compatible with iovec) and the control buffer at `control`, both
    // alive for the call; CMSG_SPACE(one int) fits in `control` (64 bytes),
    // and CMSG_FIRSTHDR/CMSG_DATA stay inside it.
    unsafe {
        let space = libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) as usize;
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = bytes.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = bytes.len().min(1024) as _;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let cm = libc::CMSG_FIRSTHDR(&msg);
        (*cm).cmsg_level = libc::SOL_SOCKET;
        (*cm).cmsg_type = libc::SCM_RIGHTS;
        (*cm).cmsg_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cm).cast::<libc::c_int>(), passed);
        cvt_size(libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL))
    }
}

/// Receive one message into `buf`: the descriptor it carried (if any) and
/// the bytes' length. `(None, 0)` is the end of the channel (the peer
/// closed). A message longer than `buf` is an error (InvalidData; the rest
/// of it is lost and its descriptor closed): size `buf` for the largest
/// message the protocol allows.
pub fn recv_fd_with(sock: impl FdArg, buf: &mut [u8]) -> io::Result<(Option<Fd>, usize)> {
    let sock = sock.raw_for_call();
    bump(SysKind::Read);
    let mut control = [0u64; CONTROL_WORDS];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is zero-initialised; iov points at `buf` and the
    // control buffer at `control`, both alive for the call.
    let (n, flags, fds) = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = (CONTROL_WORDS * 8) as _;
        let n = cvt_size(libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC))?;
        (n, msg.msg_flags, received_fds(&msg))
    };
    let mut fds = fds.into_iter().flatten();
    let first = fds.next();
    // Extras (a confused or hostile sender) are closed here.
    drop(fds);
    if flags & libc::MSG_TRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a handoff message longer than the receive buffer",
        ));
    }
    Ok((first, n))
}

/// The descriptors of a received message's SCM_RIGHTS headers, owned.
///
/// # Safety
///
/// `msg` was just filled by a successful recvmsg(2): its control headers
/// are the kernel's and each SCM_RIGHTS descriptor was installed for us.
unsafe fn received_fds(msg: &libc::msghdr) -> [Option<Fd>; CONTROL_FDS] {
    let mut out: [Option<Fd>; CONTROL_FDS] = Default::default();
    let mut k = 0;
    // SAFETY: the CMSG_* walk stays within msg_control/msg_controllen (the
    // caller's contract); each descriptor read is one the kernel installed.
    unsafe {
        let mut cm = libc::CMSG_FIRSTHDR(msg);
        while !cm.is_null() {
            if (*cm).cmsg_level == libc::SOL_SOCKET && (*cm).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cm).cast::<libc::c_int>();
                let header = libc::CMSG_LEN(0) as usize;
                let count = ((*cm).cmsg_len as usize).saturating_sub(header) / size_of::<libc::c_int>();
                for i in 0..count {
                    let fd = Fd(std::ptr::read_unaligned(data.add(i)));
                    if k < CONTROL_FDS {
                        out[k] = Some(fd);
                        k += 1;
                    }
                    // else: dropped here, closed.
                }
            }
            cm = libc::CMSG_NXTHDR(msg, cm);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys;

    fn recv(sock: &Fd) -> (Option<Fd>, Vec<u8>) {
        let mut buf = [0u8; 256];
        let (fd, n) = recv_fd_with(sock, &mut buf).unwrap();
        (fd, buf[..n].to_vec())
    }

    #[test]
    fn a_descriptor_travels_with_its_bytes() {
        let (a, b) = seqpacket_pair().unwrap();
        let (r, w) = sys::pipe().unwrap();
        let sent = send_fd_with(&a, &w, &[IoSlice::new(b"GET / "), IoSlice::new(b"HTTP/1.1\r\n")]).unwrap();
        assert_eq!(sent, 16);
        drop(w);
        let (got, bytes) = recv(&b);
        assert_eq!(bytes, b"GET / HTTP/1.1\r\n");
        let got = got.expect("a descriptor");
        sys::write(&got, b"via the passed copy").unwrap();
        drop(got);
        let mut buf = [0u8; 64];
        let n = sys::read(&r, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"via the passed copy");
        assert_eq!(
            sys::read(&r, &mut buf).unwrap(),
            0,
            "every copy of the write end is closed"
        );
    }

    #[test]
    fn messages_keep_their_boundaries_and_eof_is_seen() {
        let (a, b) = seqpacket_pair().unwrap();
        sys::send(&a, b"one", false).unwrap();
        sys::send(&a, b"two!", false).unwrap();
        assert_eq!(recv(&b).1, b"one");
        let (fd, bytes) = recv(&b);
        assert!(fd.is_none());
        assert_eq!(bytes, b"two!");
        assert!(sys::is(
            &recv_fd_with(&b, &mut [0u8; 8]).unwrap_err(),
            sys::Errno::WouldBlock
        ));
        drop(a);
        let (fd, n) = recv_fd_with(&b, &mut [0u8; 8]).unwrap();
        assert!(fd.is_none() && n == 0, "the peer closed");
    }

    #[test]
    fn a_message_longer_than_the_buffer_is_refused_and_its_descriptor_closed() {
        let (a, b) = seqpacket_pair().unwrap();
        let (r, w) = sys::pipe().unwrap();
        send_fd_with(&a, &w, &[IoSlice::new(&[7u8; 100])]).unwrap();
        drop(w);
        let e = recv_fd_with(&b, &mut [0u8; 10]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert_eq!(sys::read(&r, &mut [0u8; 4]).unwrap(), 0, "the passed copy was closed");
    }

    #[test]
    fn listeners_take_paths_and_abstract_names() {
        let name = format!("@weft-test-{}", std::process::id());
        let l = seqpacket_listener(&name, 4).unwrap();
        let c = seqpacket_connect(&name).unwrap();
        let (s, peer) = sys::accept(&l).unwrap();
        assert!(peer.is_none(), "a Unix peer has no IP address");
        sys::send(&c, b"hi", false).unwrap();
        assert_eq!(recv(&s).1, b"hi");
        let dir = std::env::temp_dir().join(format!("weft-unix-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("h.sock");
        let p = path.to_str().unwrap();
        let l = seqpacket_listener(p, 4).unwrap();
        assert!(seqpacket_listener(p, 4).is_err(), "a live listener keeps its path");
        drop(l);
        let _l = seqpacket_listener(p, 4).expect("a stale path is replaced");
        assert!(seqpacket_connect(p).is_ok());
        assert!(sockaddr_un(&"x".repeat(200)).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
