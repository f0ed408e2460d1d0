//! epoll, level-triggered ([`Epoll`]) and edge-triggered ([`EpollEt`]).
//!
//! The token travels in `epoll_event.u64`, so the kernel hands back slot index and
//! generation with each event and nothing is looked up by descriptor.

use super::{timeout_ms, Caps, Event, Interest, Poller, Token};
use crate::sys::{self, Fd};
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

const MAX_EVENTS: usize = 512;

fn bits(interest: Interest, edge: bool) -> u32 {
    let mut b = 0;
    // RDHUP only with read interest: level-triggered, a half-closed socket
    // reports it at every wait, so a socket kept for writing only (a tunnel
    // whose other direction is still open, a response going to a client
    // that sent its FIN) would wake the loop without end.
    if interest.read {
        b |= (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
    }
    if interest.write {
        b |= libc::EPOLLOUT as u32;
    }
    if edge {
        b |= libc::EPOLLET as u32;
    }
    b
}

struct Inner {
    epfd: Fd,
    buf: Vec<libc::epoll_event>,
}

impl Inner {
    fn new() -> io::Result<Inner> {
        Ok(Inner {
            epfd: sys::epoll_create()?,
            buf: vec![libc::epoll_event { events: 0, u64: 0 }; MAX_EVENTS],
        })
    }

    fn wait(&mut self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()> {
        let n = match sys::epoll_wait(self.epfd.raw(), &mut self.buf, timeout_ms(timeout)) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
            Err(e) => return Err(e),
        };
        for ev in &self.buf[..n] {
            let e = ev.events;
            events.push(Event {
                token: Token(ev.u64),
                readable: e & (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP) as u32 != 0,
                writable: e & libc::EPOLLOUT as u32 != 0,
                error: e & (libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0,
                read_closed: e & (libc::EPOLLRDHUP | libc::EPOLLHUP) as u32 != 0,
            });
        }
        Ok(())
    }
}

/// Level-triggered epoll: interest follows the connection's needs (write
/// interest only while output is pending), at the cost of epoll_ctl calls.
pub struct Epoll(Inner);

impl Poller for Epoll {
    const CAPS: Caps = Caps {
        name: "epoll",
        edge_triggered: false,
        fixed_interest: false,
        max_fd: None,
        close_deregisters: true,
        tracks_readiness: false,
    };
    fn new() -> io::Result<Self> {
        Inner::new().map(Epoll)
    }
    fn add(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()> {
        sys::epoll_ctl(
            self.0.epfd.raw(),
            libc::EPOLL_CTL_ADD,
            fd,
            bits(interest, false),
            token.0,
        )
    }
    fn modify(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()> {
        sys::epoll_ctl(
            self.0.epfd.raw(),
            libc::EPOLL_CTL_MOD,
            fd,
            bits(interest, false),
            token.0,
        )
    }
    fn delete(&mut self, fd: RawFd) -> io::Result<()> {
        sys::epoll_ctl(self.0.epfd.raw(), libc::EPOLL_CTL_DEL, fd, 0, 0)
    }
    fn wait(&mut self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()> {
        self.0.wait(events, timeout)
    }
}

/// Edge-triggered epoll: each descriptor is registered once for both directions
/// and never modified; handlers drain reads and writes until EAGAIN.
pub struct EpollEt(Inner);

impl Poller for EpollEt {
    const CAPS: Caps = Caps {
        name: "epoll-et",
        edge_triggered: true,
        fixed_interest: true,
        max_fd: None,
        close_deregisters: true,
        tracks_readiness: false,
    };
    fn new() -> io::Result<Self> {
        Inner::new().map(EpollEt)
    }
    fn add(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()> {
        sys::epoll_ctl(
            self.0.epfd.raw(),
            libc::EPOLL_CTL_ADD,
            fd,
            bits(interest, true),
            token.0,
        )
    }
    fn modify(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()> {
        sys::epoll_ctl(
            self.0.epfd.raw(),
            libc::EPOLL_CTL_MOD,
            fd,
            bits(interest, true),
            token.0,
        )
    }
    fn delete(&mut self, fd: RawFd) -> io::Result<()> {
        sys::epoll_ctl(self.0.epfd.raw(), libc::EPOLL_CTL_DEL, fd, 0, 0)
    }
    fn wait(&mut self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()> {
        self.0.wait(events, timeout)
    }
}

/// epoll2 of the µserver study: level-triggered, each connection registered
/// once for reading and writing and removed only by close. No epoll_ctl per
/// state change, but epoll_wait keeps reporting writable sockets the server has
/// nothing to write to — the cost the study measured, worst with many idle
/// connections.
pub struct EpollOnce(Inner);

impl Poller for EpollOnce {
    const CAPS: Caps = Caps {
        name: "epoll-once",
        edge_triggered: false,
        fixed_interest: true,
        max_fd: None,
        close_deregisters: true,
        tracks_readiness: false,
    };
    fn new() -> io::Result<Self> {
        Inner::new().map(EpollOnce)
    }
    fn add(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()> {
        sys::epoll_ctl(
            self.0.epfd.raw(),
            libc::EPOLL_CTL_ADD,
            fd,
            bits(interest, false),
            token.0,
        )
    }
    fn modify(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()> {
        sys::epoll_ctl(
            self.0.epfd.raw(),
            libc::EPOLL_CTL_MOD,
            fd,
            bits(interest, false),
            token.0,
        )
    }
    fn delete(&mut self, fd: RawFd) -> io::Result<()> {
        sys::epoll_ctl(self.0.epfd.raw(), libc::EPOLL_CTL_DEL, fd, 0, 0)
    }
    fn wait(&mut self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()> {
        self.0.wait(events, timeout)
    }
}

/// Level-triggered epoll whose interest changes are queued during a loop
/// iteration and applied together just before waiting: the study's
/// epoll_ctlv, built from io_uring's EPOLL_CTL operation so a whole batch costs
/// one io_uring_enter. Without io_uring the batch is applied with one
/// epoll_ctl per change (still deferred, so changes that cancel out within an
/// iteration are merged).
pub struct EpollBatched {
    inner: Inner,
    ring: Option<sys::uring::Ring>,
    pending: Vec<(i32, RawFd, u32, u64)>,
    results: Vec<i32>,
}

impl EpollBatched {
    fn queue(&mut self, op: i32, fd: RawFd, events: u32, data: u64) {
        // A later MOD of a descriptor with a queued ADD/MOD replaces its events.
        if op == libc::EPOLL_CTL_MOD {
            if let Some(p) = self.pending.iter_mut().rev().find(|p| p.1 == fd) {
                p.2 = events;
                p.3 = data;
                return;
            }
        }
        self.pending.push((op, fd, events, data));
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let epfd = self.inner.epfd.raw();
        match self.ring.as_mut() {
            Some(ring) => {
                ring.epoll_ctl_batch(epfd, &self.pending, &mut self.results)?;
            }
            None => {
                for &(op, fd, ev, data) in &self.pending {
                    let _ = sys::epoll_ctl(epfd, op, fd, ev, data);
                }
            }
        }
        // Failures here (a descriptor closed before the batch ran) concern
        // connections that are already gone; their tokens are stale.
        self.pending.clear();
        Ok(())
    }
}

impl Poller for EpollBatched {
    const CAPS: Caps = Caps {
        name: "epoll-batched",
        edge_triggered: false,
        fixed_interest: false,
        max_fd: None,
        close_deregisters: true,
        tracks_readiness: false,
    };
    fn new() -> io::Result<Self> {
        Ok(EpollBatched {
            inner: Inner::new()?,
            ring: sys::uring::Ring::new(64).ok(),
            pending: Vec::new(),
            results: Vec::new(),
        })
    }
    fn add(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()> {
        self.queue(libc::EPOLL_CTL_ADD, fd, bits(interest, false), token.0);
        Ok(())
    }
    fn modify(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()> {
        self.queue(libc::EPOLL_CTL_MOD, fd, bits(interest, false), token.0);
        Ok(())
    }
    fn delete(&mut self, fd: RawFd) -> io::Result<()> {
        self.forget(fd);
        sys::epoll_ctl(self.inner.epfd.raw(), libc::EPOLL_CTL_DEL, fd, 0, 0)
    }
    fn wait(&mut self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()> {
        self.flush()?;
        self.inner.wait(events, timeout)
    }
    fn forget(&mut self, fd: RawFd) {
        self.pending.retain(|p| p.1 != fd);
    }
}
