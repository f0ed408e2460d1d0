//! Waiting on one descriptor (the blocking architectures of `weft serve`:
//! a thread per connection keeps its socket non-blocking, so a send never
//! runs longer than the socket buffer allows, and blocks here instead).

use super::{poll, FdArg};
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// Block until `fd` is readable (`write == false`) or writable, an error or
/// hang-up is pending, or `timeout` passes. True when ready.
pub fn wait_ready(fd: impl FdArg, write: bool, timeout: Duration) -> io::Result<bool> {
    let events = if write { libc::POLLOUT } else { libc::POLLIN };
    let mut fds = [libc::pollfd {
        fd: fd.raw_for_call(),
        events,
        revents: 0,
    }];
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    match poll(&mut fds, ms) {
        Ok(n) => Ok(n > 0),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) => Err(e),
    }
}

/// [`wait_ready`] on two descriptors at once (`b` absent: `a` alone): a
/// blocking thread that waits for its client and for the application
/// serving that client's request (MT/MP with CGI). True when either is ready.
pub fn wait_ready2(a: RawFd, a_write: bool, b: Option<(RawFd, bool)>, timeout: Duration) -> io::Result<bool> {
    let entry = |fd: RawFd, write: bool| libc::pollfd {
        fd,
        events: if write { libc::POLLOUT } else { libc::POLLIN },
        revents: 0,
    };
    let mut fds = [entry(a, a_write), entry(-1, false)];
    let n = match b {
        Some((fd, write)) => {
            fds[1] = entry(fd, write);
            2
        }
        None => 1,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    match poll(&mut fds[..n], ms) {
        Ok(k) => Ok(k > 0),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    #[test]
    fn readable_after_a_write_writable_at_once() {
        let (mut a, b) = UnixStream::pair().unwrap();
        assert!(!wait_ready(&b, false, Duration::from_millis(10)).unwrap());
        a.write_all(b"x").unwrap();
        assert!(wait_ready(&b, false, Duration::from_secs(5)).unwrap());
        assert!(wait_ready(&b, true, Duration::from_secs(5)).unwrap());
    }
}
