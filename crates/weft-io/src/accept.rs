//! Accepting connections: the pass every listener handler (serve, proxy,
//! origin) runs when its listener is ready, in one place.
//!
//! - At most `limit` connections per pass (`--accept-limit`; `None`: until
//!   EAGAIN). Past a server's knee an unbounded pass fills the loop with new
//!   connections whose requests then wait behind it (paper 002's accept-limit
//!   study, measured again in docs/results.md).
//! - A pass stopped by the limit leaves the listener *due*: a level-triggered
//!   backend would report it again, an edge-triggered one would not, so the
//!   handler's `after_batch` runs another pass without waiting.
//! - Out of descriptors (EMFILE, ENFILE, ENOBUFS, ENOMEM): the listener is
//!   unwatched for 100 ms instead of spinning on it (nginx does the same),
//!   then watched again.
//!
//! The handler owns its connections, so the pass is an iterator-like loop
//! (`begin`, then `next` until `None`) rather than a callback borrowing it.

use crate::backend::{Interest, Poller, Readiness, Token};
use crate::event_loop::Ctx;
use crate::sys::{self, Fd};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// How long accepting pauses when the process is out of descriptors.
const PAUSE: Duration = Duration::from_millis(100);

/// `--max-connections` (per worker; 0: no limit): true when the `open`
/// connections already fill it, so a newly accepted one is to be refused.
pub fn at_max(max: usize, open: usize) -> bool {
    max > 0 && open >= max
}

/// Close a connection that will not be served (past `--max-connections`, or
/// never registered) with a reset (linger 0), so its client learns now
/// rather than at a timeout.
pub fn refuse(fd: Fd) {
    let _ = sys::set_linger_zero(&fd);
}

/// One listener's accept state.
#[derive(Debug)]
pub struct Acceptor {
    limit: usize,
    taken: usize,
    due: bool,
    paused_until: Option<Instant>,
}

impl Acceptor {
    /// At most `limit` connections per pass (`None`: until EAGAIN).
    pub fn new(limit: Option<usize>) -> Acceptor {
        Acceptor {
            limit: limit.unwrap_or(usize::MAX).max(1),
            taken: 0,
            due: false,
            paused_until: None,
        }
    }

    /// Accepting is not paused (a readiness event may start a pass).
    pub fn active(&self) -> bool {
        self.paused_until.is_none()
    }

    /// Start a pass.
    pub fn begin(&mut self) {
        self.taken = 0;
        self.due = false;
    }

    /// The next connection of this pass, or `None` when the pass is over
    /// (queue empty, limit reached, or an error, which is logged).
    pub fn next<P: Poller>(&mut self, cx: &mut Ctx<P>, lfd: RawFd, token: Token) -> Option<(Fd, Option<SocketAddr>)> {
        if self.taken >= self.limit {
            self.due = P::CAPS.edge_triggered;
            return None;
        }
        loop {
            match sys::accept(lfd) {
                Ok(conn) => {
                    self.taken += 1;
                    return Some(conn);
                }
                Err(e) => match e.raw_os_error() {
                    Some(libc::EAGAIN) => {
                        // The queue is empty: `tracked` learns it too.
                        cx.learned(lfd, Readiness::default());
                        return None;
                    }
                    Some(libc::EINTR) | Some(libc::ECONNABORTED) => continue,
                    Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOBUFS) | Some(libc::ENOMEM) => {
                        weft_core::warn!("accept: {e}; pausing accepts for 100 ms");
                        let _ = cx.reregister(lfd, token, Interest::NONE);
                        self.paused_until = Some(cx.now + PAUSE);
                        return None;
                    }
                    _ => {
                        weft_core::warn!("accept: {e}");
                        return None;
                    }
                },
            }
        }
    }

    /// After a batch of events: end a pause that is over (watching the
    /// listener again) and say whether a pass is due now. `lfd` is `None`
    /// once the listener is closed (draining): nothing is due any more, so
    /// the loop does not spin on a pass it cannot run.
    pub fn due<P: Poller>(&mut self, cx: &mut Ctx<P>, lfd: Option<RawFd>, token: Token) -> bool {
        let Some(fd) = lfd else {
            self.due = false;
            self.paused_until = None;
            return false;
        };
        if let Some(until) = self.paused_until {
            if cx.now < until {
                return false;
            }
            self.paused_until = None;
            let _ = cx.reregister(fd, token, Interest::READ);
            self.due = true;
        }
        self.due
    }

    /// The longest the loop may sleep for this listener's sake: not at all
    /// with a pass due, the pause's length while paused.
    pub fn max_wait(&self) -> Option<Duration> {
        if self.due {
            Some(Duration::ZERO)
        } else if self.paused_until.is_some() {
            Some(PAUSE)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Epoll, EpollEt, Poll as PollBackend};
    use crate::event_loop::{run, Handler};
    use crate::Event;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    const L: Token = Token::new(u32::MAX, 0);

    /// Counts the connections of each pass, one pass per event-loop batch.
    struct Counter<'a> {
        lfd: RawFd,
        acc: Acceptor,
        passes: Vec<usize>,
        conns: Vec<Fd>,
        want: usize,
        deadline: Instant,
        _l: &'a TcpListener,
    }

    impl Counter<'_> {
        fn pass<P: Poller>(&mut self, cx: &mut Ctx<P>) {
            self.acc.begin();
            let mut n = 0;
            while let Some((fd, _)) = self.acc.next(cx, self.lfd, L) {
                self.conns.push(fd);
                n += 1;
            }
            self.passes.push(n);
        }
    }

    impl<P: Poller> Handler<P> for Counter<'_> {
        fn on_event(&mut self, cx: &mut Ctx<P>, ev: Event) {
            if ev.token == L && self.acc.active() {
                self.pass(cx);
            }
        }
        fn on_timer(&mut self, _: &mut Ctx<P>, _: Token, _: Instant) -> Option<Instant> {
            None
        }
        fn after_batch(&mut self, cx: &mut Ctx<P>) {
            if self.acc.due(cx, Some(self.lfd), L) {
                self.pass(cx);
            }
        }
        fn max_wait(&self) -> Option<Duration> {
            self.acc.max_wait().or(Some(Duration::from_millis(50)))
        }
        fn keep_running(&self) -> bool {
            self.conns.len() < self.want && Instant::now() < self.deadline
        }
    }

    fn accept_all<P: Poller>(limit: Option<usize>) -> Vec<usize> {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let clients: Vec<TcpStream> = (0..7)
            .map(|_| TcpStream::connect(l.local_addr().unwrap()).unwrap())
            .collect();
        let mut cx = Ctx::<P>::new().unwrap();
        cx.register(l.as_raw_fd(), L, Interest::READ)
            .map_err(|e| e.to_string())
            .unwrap();
        let mut h = Counter {
            lfd: l.as_raw_fd(),
            acc: Acceptor::new(limit),
            passes: Vec::new(),
            conns: Vec::new(),
            want: clients.len(),
            deadline: Instant::now() + Duration::from_secs(2),
            _l: &l,
        };
        run(&mut cx, &mut h).unwrap();
        h.passes
    }

    #[test]
    fn a_limited_pass_leaves_the_listener_due() {
        // Level- and edge-triggered: the edge-triggered backend reports the
        // listener once, so the passes after the first come from `due`.
        for passes in [
            accept_all::<Epoll>(Some(3)),
            accept_all::<EpollEt>(Some(3)),
            accept_all::<PollBackend>(Some(3)),
        ] {
            assert!(passes.iter().all(|&n| n <= 3), "{passes:?}");
            assert_eq!(passes.iter().sum::<usize>(), 7, "{passes:?}");
        }
        let passes = accept_all::<Epoll>(None);
        assert_eq!(passes.iter().sum::<usize>(), 7);
        assert!(passes.contains(&7), "unbounded: one pass takes the queue: {passes:?}");
    }
}
