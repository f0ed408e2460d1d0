//! Bytes a socket holds in the kernel: its send queue (SIOCOUTQ: written and
//! not yet acknowledged) and its receive queue (SIOCINQ: arrived and not yet
//! read). Payload bytes; the kernel's buffers around them (sk_buff truesize)
//! are larger, about twice for small segments.

use super::{bump, cvt, FdArg, SysKind};
use std::io;

/// `(send queue, receive queue)` bytes of the TCP socket `fd`: two ioctls.
pub fn queued(fd: impl FdArg) -> io::Result<(u64, u64)> {
    let fd = fd.raw_for_call();
    let mut out: libc::c_int = 0;
    bump(SysKind::Other);
    // SAFETY: TIOCOUTQ (= SIOCOUTQ) writes one int through the pointer, which
    // points to a live local.
    cvt(unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut out) })?;
    // FIONREAD is SIOCINQ on a socket.
    Ok((out.max(0) as u64, super::bytes_readable(fd)? as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn counts_unread_bytes() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        a.write_all(&[7u8; 1000]).unwrap();
        let mut got = (0, 0);
        for _ in 0..100 {
            got = queued(&b).unwrap();
            if got.1 == 1000 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(got.1, 1000);
        assert_eq!(queued(&a).unwrap().1, 0);
    }
}
