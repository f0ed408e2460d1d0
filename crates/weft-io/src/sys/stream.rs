//! What `weft serve`'s CGI and FastCGI support needs besides the splice
//! wrappers: a non-blocking Unix *stream* connect (FastCGI applications
//! listen on stream sockets), a peek (the CGI head is found in a record's
//! payload before the rest of it is spliced), and O_NONBLOCK on a
//! descriptor weft did not create (a CGI/1.1 program's output pipe).

use super::{bump, cvt, cvt_size, unix::sockaddr_un, Fd, FdArg, SysKind};
use std::io;

/// Connect a non-blocking, close-on-exec Unix stream socket to `addr` (a
/// path, or `@name`). A Unix connect completes at once or fails (EAGAIN:
/// the listener's backlog is full; ECONNREFUSED / ENOENT: nobody listens).
pub fn unix_stream_connect(addr: &str) -> io::Result<Fd> {
    let (sun, len) = sockaddr_un(addr)?;
    bump(SysKind::Socket);
    // SAFETY: plain integer arguments.
    let fd = Fd(cvt(unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?);
    bump(SysKind::Connect);
    // SAFETY: sun is a valid sockaddr_un of `len` bytes.
    cvt(unsafe { libc::connect(fd.0, (&sun as *const libc::sockaddr_un).cast(), len) })?;
    Ok(fd)
}

/// recv(MSG_PEEK | MSG_DONTWAIT): the bytes at the front of the socket's
/// queue, left there.
pub fn peek(fd: impl FdArg, buf: &mut [u8]) -> io::Result<usize> {
    let fd = fd.raw_for_call();
    bump(SysKind::Read);
    // SAFETY: buf is valid for writes of buf.len() bytes.
    cvt_size(unsafe {
        libc::recv(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    })
}

/// Nothing waits to be read on the socket and its peer has not closed (a
/// one-byte peek would block): a readable event for it is stale, posted for
/// bytes read since. One recv call.
pub fn empty_now(fd: impl FdArg) -> bool {
    let mut b = [0u8; 1];
    matches!(peek(fd, &mut b), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}

/// recv(MSG_DONTWAIT): read from a socket without waiting.
pub fn recv_now(fd: impl FdArg, buf: &mut [u8]) -> io::Result<usize> {
    let fd = fd.raw_for_call();
    bump(SysKind::Read);
    // SAFETY: buf is valid for writes of buf.len() bytes.
    cvt_size(unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) })
}

/// Set O_NONBLOCK on `fd`.
pub fn set_nonblocking(fd: impl FdArg) -> io::Result<()> {
    let fd = fd.raw_for_call();
    bump(SysKind::Other);
    // SAFETY: F_GETFL/F_SETFL take and return plain integers.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) }).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_connect_and_peek() {
        let dir = std::env::temp_dir().join(format!("weft-stream-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("s.sock");
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let c = unix_stream_connect(path.to_str().unwrap()).unwrap();
        let (mut a, _) = l.accept().unwrap();
        std::io::Write::write_all(&mut a, b"hello").unwrap();
        let mut b = [0u8; 8];
        assert_eq!(peek(&c, &mut b).unwrap(), 5);
        assert_eq!(recv_now(&c, &mut b[..2]).unwrap(), 2);
        assert_eq!(&b[..2], b"he");
        assert!(recv_now(&c, &mut b).is_ok());
        assert!(recv_now(&c, &mut b).is_err());
        set_nonblocking(&c).unwrap();
        assert!(unix_stream_connect(dir.join("none.sock").to_str().unwrap()).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
