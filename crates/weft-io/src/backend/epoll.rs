//! epoll, as one type [`EpollOf`] parameterised by its [`Mode`]: level-triggered
//! with interest following the connection ([`Epoll`]), edge-triggered
//! ([`EpollEt`]), level-triggered registered once ([`EpollOnce`], the µserver
//! study's epoll2), and level-triggered with interest changes batched before
//! each wait ([`EpollBatched`], the study's epoll_ctlv).
//!
//! The modes differ only in constants (the capability bits, among them
//! whether EPOLLET is set, and whether changes are queued), so each
//! `EpollOf<M>` compiles to the code its mode needs and nothing else: the
//! branches on `M::BATCHED` and `M::CAPS.edge_triggered` fold away.
//!
//! The token travels in `epoll_event.u64`, so the kernel hands back slot index and
//! generation with each event and nothing is looked up by descriptor.

use super::{timeout_ms, Caps, Event, Interest, Poller, Token};
use crate::sys::{self, Fd};
use std::io;
use std::marker::PhantomData;
use std::os::fd::RawFd;
use std::time::Duration;

const MAX_EVENTS: usize = 512;

/// How an [`EpollOf`] registers descriptors: one marker type per `--event`
/// name. Whether it sets EPOLLET is its `CAPS.edge_triggered`.
pub trait Mode {
    /// The backend's capabilities (and its `--event` name).
    const CAPS: Caps;
    /// Queue interest changes during an iteration and apply them together
    /// just before waiting.
    const BATCHED: bool = false;
}

/// Level-triggered epoll: interest follows the connection's needs (write
/// interest only while output is pending), at the cost of epoll_ctl calls.
pub struct Level;

impl Mode for Level {
    const CAPS: Caps = Caps {
        name: "epoll",
        edge_triggered: false,
        fixed_interest: false,
        max_fd: None,
        close_deregisters: true,
        tracks_readiness: false,
    };
}

/// Edge-triggered epoll: each descriptor is registered once for both directions
/// and never modified; handlers drain reads and writes until EAGAIN.
pub struct Edge;

impl Mode for Edge {
    const CAPS: Caps = Caps {
        name: "epoll-et",
        edge_triggered: true,
        fixed_interest: true,
        ..Level::CAPS
    };
}

/// epoll2 of the µserver study: level-triggered, each connection registered
/// once for reading and writing and removed only by close. No epoll_ctl per
/// state change, but epoll_wait keeps reporting writable sockets the server has
/// nothing to write to — the cost the study measured, worst with many idle
/// connections.
pub struct Once;

impl Mode for Once {
    const CAPS: Caps = Caps {
        name: "epoll-once",
        fixed_interest: true,
        ..Level::CAPS
    };
}

/// Level-triggered epoll whose interest changes are queued during a loop
/// iteration and applied together just before waiting: the study's
/// epoll_ctlv, built from io_uring's EPOLL_CTL operation so a whole batch costs
/// one io_uring_enter. Without io_uring the batch is applied with one
/// epoll_ctl per change (still deferred, so changes that cancel out within an
/// iteration are merged).
pub struct Batched;

impl Mode for Batched {
    const CAPS: Caps = Caps {
        name: "epoll-batched",
        ..Level::CAPS
    };
    const BATCHED: bool = true;
}

/// Level-triggered epoll (`--event epoll`).
pub type Epoll = EpollOf<Level>;
/// Edge-triggered epoll (`--event epoll-et`).
pub type EpollEt = EpollOf<Edge>;
/// Level-triggered epoll, registered once (`--event epoll-once`).
pub type EpollOnce = EpollOf<Once>;
/// Level-triggered epoll with batched interest changes (`--event epoll-batched`).
pub type EpollBatched = EpollOf<Batched>;

/// One epoll instance, registering as its mode `M` says.
pub struct EpollOf<M: Mode> {
    epfd: Fd,
    buf: Vec<libc::epoll_event>,
    /// Batched mode: changes not yet given to the kernel (op, fd, events,
    /// data), the ring that applies them in one enter (when io_uring works),
    /// and its per-change results. Empty, and never allocated, otherwise.
    pending: Vec<(i32, RawFd, u32, u64)>,
    ring: Option<sys::uring::Ring>,
    results: Vec<i32>,
    mode: PhantomData<M>,
}

impl<M: Mode> EpollOf<M> {
    fn bits(interest: Interest) -> u32 {
        let mut b = 0;
        // RDHUP only with read interest: level-triggered, a half-closed socket
        // reports it at every wait, so a socket kept for writing only (a tunnel
        // whose other direction is still open, a response going to a client
        // that sent its FIN) would wake the loop without end.
        if interest.read {
            b |= (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
        } else if interest.hangup {
            // No EPOLLIN: a data-ready wake-up (key EPOLLIN) is then not
            // delivered to this epoll at all (ep_poll_callback checks the
            // key), while a FIN's state change (no key) and errors still are.
            b |= libc::EPOLLRDHUP as u32;
        }
        if interest.write {
            b |= libc::EPOLLOUT as u32;
        }
        if M::CAPS.edge_triggered {
            b |= libc::EPOLLET as u32;
        }
        b
    }

    /// An ADD or MOD: now, or queued in batched mode.
    fn ctl(&mut self, op: i32, fd: RawFd, token: Token, interest: Interest) -> io::Result<()> {
        let events = Self::bits(interest);
        if !M::BATCHED {
            return sys::epoll_ctl(self.epfd.raw(), op, fd, events, token.0);
        }
        // A later MOD of a descriptor with a queued ADD/MOD replaces its events.
        if op == libc::EPOLL_CTL_MOD {
            if let Some(p) = self.pending.iter_mut().rev().find(|p| p.1 == fd) {
                p.2 = events;
                p.3 = token.0;
                return Ok(());
            }
        }
        self.pending.push((op, fd, events, token.0));
        Ok(())
    }

    /// Batched mode: give the queued changes to the kernel.
    fn flush(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let epfd = self.epfd.raw();
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

impl<M: Mode> Poller for EpollOf<M> {
    const CAPS: Caps = M::CAPS;

    fn new() -> io::Result<Self> {
        Ok(EpollOf {
            epfd: sys::epoll_create()?,
            buf: vec![libc::epoll_event { events: 0, u64: 0 }; MAX_EVENTS],
            pending: Vec::new(),
            ring: if M::BATCHED {
                sys::uring::Ring::new(64).ok()
            } else {
                None
            },
            results: Vec::new(),
            mode: PhantomData,
        })
    }

    fn add(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, interest)
    }

    fn modify(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, interest)
    }

    fn delete(&mut self, fd: RawFd) -> io::Result<()> {
        self.forget(fd);
        sys::epoll_ctl(self.epfd.raw(), libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    fn wait(&mut self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()> {
        if M::BATCHED {
            self.flush()?;
        }
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

    fn forget(&mut self, fd: RawFd) {
        if M::BATCHED {
            self.pending.retain(|p| p.1 != fd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_keep_their_names_and_bits() {
        let names = [
            Epoll::CAPS.name,
            EpollEt::CAPS.name,
            EpollOnce::CAPS.name,
            EpollBatched::CAPS.name,
        ];
        assert_eq!(names, ["epoll", "epoll-et", "epoll-once", "epoll-batched"]);
        let edge = [
            Epoll::CAPS.edge_triggered,
            EpollEt::CAPS.edge_triggered,
            EpollOnce::CAPS.edge_triggered,
        ];
        assert_eq!(edge, [false, true, false]);
        let fixed = [
            Epoll::CAPS.fixed_interest,
            EpollEt::CAPS.fixed_interest,
            EpollOnce::CAPS.fixed_interest,
            EpollBatched::CAPS.fixed_interest,
        ];
        assert_eq!(fixed, [false, true, true, false]);
        assert_eq!(
            EpollEt::bits(Interest::READ) & libc::EPOLLET as u32,
            libc::EPOLLET as u32
        );
        assert_eq!(Epoll::bits(Interest::BOTH) & libc::EPOLLET as u32, 0);
        assert_eq!(Epoll::bits(Interest::WRITE) & libc::EPOLLRDHUP as u32, 0);
    }

    #[test]
    fn hangup_interest_reports_the_end_of_stream_not_bytes() {
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut peer = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&s);
        let mut ep = Epoll::new().unwrap();
        ep.add(fd, Token(7), Interest::HANGUP).unwrap();
        peer.write_all(b"bytes").unwrap();
        let mut events = Vec::new();
        // Readable, but not asked for: nothing to report.
        assert!(sys::wait_ready(&s, false, Duration::from_secs(5)).unwrap());
        ep.wait(&mut events, Some(Duration::ZERO)).unwrap();
        assert!(events.is_empty(), "{events:?}");
        peer.shutdown(std::net::Shutdown::Write).unwrap();
        ep.wait(&mut events, Some(Duration::from_secs(5))).unwrap();
        assert_eq!(events.len(), 1, "{events:?}");
        assert!(events[0].read_closed && events[0].readable, "{events:?}");
    }

    #[test]
    fn only_the_batched_mode_queues() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&a);
        let mut level = Epoll::new().unwrap();
        level.add(fd, Token(1), Interest::READ).unwrap();
        assert!(level.pending.is_empty() && level.ring.is_none());
        let mut batched = EpollBatched::new().unwrap();
        batched.add(fd, Token(1), Interest::READ).unwrap();
        batched.modify(fd, Token(2), Interest::BOTH).unwrap();
        assert_eq!(batched.pending.len(), 1, "a MOD folds into the queued ADD");
        assert_eq!(batched.pending[0].3, 2);
        batched.forget(fd);
        assert!(batched.pending.is_empty());
    }
}
