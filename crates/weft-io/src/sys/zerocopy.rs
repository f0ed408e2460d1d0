//! Zero-copy send (`MSG_ZEROCOPY`): the kernel pins the pages of the buffer
//! instead of copying them into socket buffers, and reports on the socket's
//! error queue when it no longer needs them; until then the bytes must stay
//! unchanged, so the caller holds them (`weft-server`'s `stream.rs`).
//!
//! Each `send` with the flag gets the next 32-bit sequence number (from 0 per
//! socket); a completion covers a range `[lo, hi]` and says whether the kernel
//! copied after all (`copied`: always so on loopback, whose receiver gets a
//! copy anyway, and for sends too small to be worth pinning). Completions
//! make the socket report EPOLLERR until they are read ([`reap`]).

use super::{bump, cvt, FdArg, SysKind};
use std::io;

/// `SO_ZEROCOPY` (asm-generic).
const SO_ZEROCOPY: libc::c_int = 60;
/// `SO_EE_ORIGIN_ZEROCOPY`.
const ORIGIN_ZEROCOPY: u8 = 5;
/// `SO_EE_CODE_ZEROCOPY_COPIED`.
const CODE_COPIED: u8 = 1;

/// Completions `lo..=hi` of zero-copy sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// First sequence number completed.
    pub lo: u32,
    /// Last sequence number completed.
    pub hi: u32,
    /// The kernel copied the data after all.
    pub copied: bool,
}

/// Allow `MSG_ZEROCOPY` sends on `fd` (SO_ZEROCOPY).
pub fn enable(fd: impl FdArg) -> io::Result<()> {
    let one: libc::c_int = 1;
    bump(SysKind::Other);
    // SAFETY: the option value points to a live int of the size passed.
    cvt(unsafe {
        libc::setsockopt(
            fd.raw_for_call(),
            libc::SOL_SOCKET,
            SO_ZEROCOPY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Send `data` without copying (non-blocking, no SIGPIPE): bytes accepted.
pub fn send(fd: impl FdArg, data: &[u8]) -> io::Result<usize> {
    bump(SysKind::Write);
    let flags = libc::MSG_ZEROCOPY | libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
    // SAFETY: the pointer and length describe the live slice `data`.
    let n = unsafe { libc::send(fd.raw_for_call(), data.as_ptr().cast(), data.len(), flags) };
    super::cvt_size(n)
}

/// Read one notification from `fd`'s error queue (non-blocking): `None` when
/// it is empty or holds something other than a zero-copy completion.
pub fn reap(fd: impl FdArg) -> io::Result<Option<Completion>> {
    let mut control = [0u64; 16];
    // SAFETY: an all-zero msghdr is valid (no name, no iovecs).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    bump(SysKind::Other);
    // SAFETY: msg points to our control buffer of the length given; no data.
    let rc = unsafe { libc::recvmsg(fd.raw_for_call(), &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
    match super::cvt_size(rc) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
        Err(e) => return Err(e),
    }
    // SAFETY: CMSG_FIRSTHDR reads the msghdr the kernel filled in.
    let cm = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    if cm.is_null() {
        return Ok(None);
    }
    // SAFETY: `cm` is a header inside our control buffer, as the kernel wrote it.
    let (level, kind) = unsafe { ((*cm).cmsg_level, (*cm).cmsg_type) };
    let ip =
        (level == libc::SOL_IP && kind == libc::IP_RECVERR) || (level == libc::SOL_IPV6 && kind == libc::IPV6_RECVERR);
    if !ip {
        return Ok(None);
    }
    // SAFETY: an IP_RECVERR message carries a sock_extended_err; read it
    // unaligned from the control buffer.
    let ee: libc::sock_extended_err = unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cm).cast()) };
    if ee.ee_origin != ORIGIN_ZEROCOPY || ee.ee_errno != 0 {
        return Ok(None);
    }
    Ok(Some(Completion {
        lo: ee.ee_info,
        hi: ee.ee_data,
        copied: ee.ee_code & CODE_COPIED != 0,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn sends_and_reports_completion() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut b, _) = l.accept().unwrap();
        enable(&a).unwrap();
        let data = vec![9u8; 100_000];
        let mut sent = 0;
        while sent < data.len() {
            sent += send(&a, &data[sent..]).unwrap();
        }
        let mut got = vec![0u8; data.len()];
        b.read_exact(&mut got).unwrap();
        assert!(got == data);
        let mut done = None;
        for _ in 0..200 {
            if let Some(c) = reap(&a).unwrap() {
                done = Some(c);
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let c = done.expect("a completion");
        assert_eq!(c.lo, 0);
        // Loopback: the receiver gets a copy, so the kernel reports one.
        assert!(c.copied);
    }
}
