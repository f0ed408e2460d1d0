//! Waiting on one descriptor (the blocking architectures of `weft serve`:
//! a thread per connection keeps its socket non-blocking, so a send never
//! runs longer than the socket buffer allows, and blocks here instead), on a
//! descriptor and a [`StopNotice`], or on a shared listener ([`AcceptWait`]).

use super::{epoll_create, epoll_ctl, epoll_wait, poll, Fd, FdArg};
use crate::backend::timeout_ms;
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// What ends a blocking thread's wait besides its own descriptor, so that it
/// sleeps without a timeout of its own: the worker's stop notice (an
/// eventfd that stays readable once signalled, since a blocking thread
/// never drains it) and, for an MP process, its end of the pipe to its
/// server (its stdout, whose write end reports an error once the server,
/// the only reader, is gone: killed or exited).
#[derive(Clone, Copy, Debug)]
pub struct StopNotice {
    /// The eventfd the worker group signals at shutdown.
    pub stop: RawFd,
    /// The write end of a pipe whose only reader is the parent.
    pub parent: Option<RawFd>,
}

/// How a wait on a descriptor and a [`StopNotice`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woken {
    /// The descriptor is ready (or has an error or hang-up pending).
    Ready,
    /// The stop notice fired, or a signal came: look at the stop switch.
    Notice,
    /// The parent's end of the pipe is closed: the server is gone.
    ParentGone,
    /// The timeout passed.
    Timeout,
}

/// Block until `fd` is readable (`write == false`) or writable, `notice`
/// (when given) fires, or `timeout` (None: no limit) passes.
pub fn wait_ready_or(
    fd: RawFd,
    write: bool,
    notice: Option<StopNotice>,
    timeout: Option<Duration>,
) -> io::Result<Woken> {
    let entry = |fd: RawFd, events: libc::c_short| libc::pollfd { fd, events, revents: 0 };
    let mut fds = [
        entry(fd, if write { libc::POLLOUT } else { libc::POLLIN }),
        // A negative descriptor is skipped by poll(2).
        entry(notice.map_or(-1, |n| n.stop), libc::POLLIN),
        // No events asked: a pipe's write end reports POLLERR by itself.
        entry(notice.and_then(|n| n.parent).unwrap_or(-1), 0),
    ];
    match poll(&mut fds, timeout_ms(timeout)) {
        Ok(0) => Ok(Woken::Timeout),
        Ok(_) if fds[0].revents != 0 => Ok(Woken::Ready),
        Ok(_) if fds[2].revents != 0 => Ok(Woken::ParentGone),
        Ok(_) => Ok(Woken::Notice),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(Woken::Notice),
        Err(e) => Err(e),
    }
}

/// Block until one of `fds` is readable (or has an error or hang-up
/// pending), or `timeout` (None: no limit) passes; true when one is.
pub fn wait_any(fds: &[RawFd], timeout: Option<Duration>) -> io::Result<bool> {
    let mut set: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    match poll(&mut set, timeout_ms(timeout)) {
        Ok(n) => Ok(n > 0),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) => Err(e),
    }
}

/// A blocking thread's wait for a connection to accept, beside the others
/// that accept from the same listener (MT's threads, MP's processes): an
/// epoll instance of its own with the listener registered exclusively
/// (EPOLLEXCLUSIVE), so a new connection wakes one waiter, not all of them
/// as a poll(2) on a shared listener would, and the [`StopNotice`] beside
/// it, so the thread sleeps with no timeout of its own. The listener must
/// be non-blocking: a woken waiter can still find the queue emptied by
/// another.
pub struct AcceptWait {
    epfd: Fd,
}

const ACCEPT_LISTENER: u64 = 0;
const ACCEPT_STOP: u64 = 1;
const ACCEPT_PARENT: u64 = 2;

impl AcceptWait {
    /// Watch `listener` (exclusively) and `notice`.
    pub fn new(listener: RawFd, notice: StopNotice) -> io::Result<AcceptWait> {
        let epfd = epoll_create()?;
        let exclusive = (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32;
        epoll_ctl(&epfd, libc::EPOLL_CTL_ADD, listener, exclusive, ACCEPT_LISTENER)?;
        epoll_ctl(
            &epfd,
            libc::EPOLL_CTL_ADD,
            notice.stop,
            libc::EPOLLIN as u32,
            ACCEPT_STOP,
        )?;
        if let Some(p) = notice.parent {
            // No events asked: EPOLLERR (the reader is gone) comes by itself.
            epoll_ctl(&epfd, libc::EPOLL_CTL_ADD, p, 0, ACCEPT_PARENT)?;
        }
        Ok(AcceptWait { epfd })
    }

    /// Wait until a connection may be waiting ([`Woken::Ready`]), the notice
    /// fires, or `timeout` (None: no limit) passes.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<Woken> {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 3];
        match epoll_wait(&self.epfd, &mut evs, timeout_ms(timeout)) {
            Ok(0) => Ok(Woken::Timeout),
            Ok(n) if evs[..n].iter().any(|e| e.u64 == ACCEPT_PARENT) => Ok(Woken::ParentGone),
            Ok(n) if evs[..n].iter().any(|e| e.u64 == ACCEPT_STOP) => Ok(Woken::Notice),
            Ok(_) => Ok(Woken::Ready),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(Woken::Notice),
            Err(e) => Err(e),
        }
    }
}

/// Block until `fd` is readable (`write == false`) or writable, an error or
/// hang-up is pending, or `timeout` passes. True when ready.
pub fn wait_ready(fd: impl FdArg, write: bool, timeout: Duration) -> io::Result<bool> {
    wait_ready_or(fd.raw_for_call(), write, None, Some(timeout)).map(|w| w == Woken::Ready)
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
    match poll(&mut fds[..n], timeout_ms(Some(timeout))) {
        Ok(k) => Ok(k > 0),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn readable_after_a_write_writable_at_once() {
        let (mut a, b) = UnixStream::pair().unwrap();
        assert!(!wait_ready(&b, false, Duration::from_millis(10)).unwrap());
        a.write_all(b"x").unwrap();
        assert!(wait_ready(&b, false, Duration::from_secs(5)).unwrap());
        assert!(wait_ready(&b, true, Duration::from_secs(5)).unwrap());
    }

    #[test]
    fn a_wait_ends_on_its_socket_its_stop_notice_or_its_parent_gone() {
        use crate::sys::{eventfd, eventfd_signal, pipe};
        let (mut a, b) = UnixStream::pair().unwrap();
        let stop = eventfd().unwrap();
        let (reader, writer) = pipe().unwrap();
        let notice = StopNotice {
            stop: stop.raw(),
            parent: Some(writer.raw()),
        };
        let short = Some(Duration::from_millis(10));
        let wait = || wait_ready_or(b.as_raw_fd(), false, Some(notice), short).unwrap();
        assert_eq!(wait(), Woken::Timeout);
        a.write_all(b"x").unwrap();
        assert_eq!(wait(), Woken::Ready);
        // Without the notice, the same wait sees the socket only.
        let (_c, d) = UnixStream::pair().unwrap();
        assert_eq!(
            wait_ready_or(d.as_raw_fd(), false, None, short).unwrap(),
            Woken::Timeout
        );
        let quiet = || wait_ready_or(d.as_raw_fd(), false, Some(notice), short).unwrap();
        // The parent's end closed: its pipe reports an error.
        drop(reader);
        assert_eq!(quiet(), Woken::ParentGone);
        // The stop notice stays readable once signalled.
        let notice = StopNotice { parent: None, ..notice };
        assert_eq!(
            wait_ready_or(d.as_raw_fd(), false, Some(notice), short).unwrap(),
            Woken::Timeout
        );
        eventfd_signal(&stop).unwrap();
        for _ in 0..2 {
            assert_eq!(
                wait_ready_or(d.as_raw_fd(), false, Some(notice), short).unwrap(),
                Woken::Notice
            );
        }
    }

    #[test]
    fn an_accept_wait_wakes_for_a_connection_or_the_stop_notice() {
        use crate::sys::{eventfd, eventfd_signal};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let stop = eventfd().unwrap();
        let notice = StopNotice {
            stop: stop.raw(),
            parent: None,
        };
        let w = AcceptWait::new(l.as_raw_fd(), notice).unwrap();
        let short = Some(Duration::from_millis(10));
        assert_eq!(w.wait(short).unwrap(), Woken::Timeout);
        let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        assert_eq!(w.wait(Some(Duration::from_secs(5))).unwrap(), Woken::Ready);
        let _ = l.accept().unwrap();
        assert_eq!(w.wait(short).unwrap(), Woken::Timeout);
        eventfd_signal(&stop).unwrap();
        assert_eq!(w.wait(None).unwrap(), Woken::Notice);
    }
}
