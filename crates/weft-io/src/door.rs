//! A worker's door: its listener with the accept pass ([`Acceptor`]) and the
//! shutdown waker, the two events every role (serve, proxy, origin) handles
//! the same way before its own tokens.
//!
//! - [`LISTENER`] ready, or a pass left due ([`Door::due`]): the handler runs
//!   [`Door::begin`] then [`Door::next`] until `None`, adopting each
//!   connection its own way. No pass while draining, paused (out of
//!   descriptors) or once the listener is closed.
//! - [`WAKER`] ready: [`Door::woken`] drains the eventfd, tells a `tracked`
//!   backend it is empty, and says whether shutdown was asked for; the handler
//!   then drains its own way and calls [`Door::close`] (the listener's
//!   queued, never accepted connections are reset by the kernel when the
//!   last listener closes), or [`Door::close_with_grace`] to let what is in
//!   flight finish until [`Door::grace_over`].

use crate::accept::Acceptor;
use crate::backend::{Interest, Poller, Readiness, Token};
use crate::event_loop::Ctx;
use crate::sys::{self, Fd};
use crate::workers::Shutdown;
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// The listener's token.
pub const LISTENER: Token = Token::new(u32::MAX, 0);
/// The shutdown waker's token.
pub const WAKER: Token = Token::new(u32::MAX - 1, 0);

/// A worker's listener, accept state and shutdown waker.
pub struct Door {
    listener: Option<Fd>,
    acceptor: Acceptor,
    waker: RawFd,
    shutdown: Shutdown,
    /// Closed with a grace period: when it ends.
    grace_until: Option<Instant>,
}

impl Door {
    /// `waker`: this worker's eventfd in `shutdown`; `accept_limit`: at most
    /// this many connections per pass (`None`: until EAGAIN).
    pub fn new(listener: Fd, waker: RawFd, shutdown: Shutdown, accept_limit: Option<usize>) -> Door {
        Door {
            listener: Some(listener),
            acceptor: Acceptor::new(accept_limit),
            waker,
            shutdown,
            grace_until: None,
        }
    }

    /// Register the listener ([`LISTENER`]) and the waker ([`WAKER`]).
    pub fn register<P: Poller>(&self, cx: &mut Ctx<P>) -> io::Result<()> {
        let reg = |e| io::Error::other(format!("{e}"));
        if let Some(l) = &self.listener {
            cx.register(l.raw(), LISTENER, Interest::READ).map_err(reg)?;
        }
        cx.register(self.waker, WAKER, Interest::READ).map_err(reg)
    }

    /// The waker fired: drain it and say whether shutdown was asked for.
    pub fn woken<P: Poller>(&self, cx: &mut Ctx<P>) -> bool {
        sys::eventfd_drain(self.waker);
        cx.learned(self.waker, Readiness::default());
        self.shutdown.requested()
    }

    /// Has shutdown been asked for?
    pub fn stop_requested(&self) -> bool {
        self.shutdown.requested()
    }

    /// Start an accept pass; `false` (no pass) while `draining`, while
    /// accepting is paused, or once the listener is closed.
    pub fn begin(&mut self, draining: bool) -> bool {
        if draining || !self.acceptor.active() || self.listener.is_none() {
            return false;
        }
        self.acceptor.begin();
        true
    }

    /// The next connection of the pass [`Door::begin`] started.
    pub fn next<P: Poller>(&mut self, cx: &mut Ctx<P>) -> Option<(Fd, Option<SocketAddr>)> {
        let lfd = self.listener.as_ref()?.raw();
        self.acceptor.next(cx, lfd, LISTENER)
    }

    /// After a batch: end a pause that is over and say whether a pass is due.
    pub fn due<P: Poller>(&mut self, cx: &mut Ctx<P>) -> bool {
        let lfd = self.listener.as_ref().map(|l| l.raw());
        self.acceptor.due(cx, lfd, LISTENER)
    }

    /// The longest the loop may sleep for the listener's sake, or until the
    /// grace period ends.
    pub fn max_wait(&self) -> Option<Duration> {
        let grace = self.grace_until.map(|d| d.saturating_duration_since(Instant::now()));
        match (self.acceptor.max_wait(), grace) {
            (Some(a), Some(g)) => Some(a.min(g)),
            (a, g) => a.or(g),
        }
    }

    /// Stop accepting: close the listener (once).
    pub fn close<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        if let Some(l) = self.listener.take() {
            // A reload's workers may hold the same listener: it leaves this
            // loop's interest set explicitly, since closing this descriptor
            // would not take a still-open file out of an epoll set.
            cx.close_shared_later(l);
        }
    }

    /// Stop accepting, and give what is in flight `grace` to finish.
    pub fn close_with_grace<P: Poller>(&mut self, cx: &mut Ctx<P>, grace: Duration) {
        self.grace_until = Some(cx.now + grace);
        self.close(cx);
    }

    /// The grace period of [`Door::close_with_grace`] is over.
    pub fn grace_over(&self, now: Instant) -> bool {
        self.grace_until.is_some_and(|d| now >= d)
    }

    /// The grace period is over with `open` connections left (none:
    /// false): logs that they are closed with `in_flight` (what they were
    /// still carrying) unfinished; the caller then closes them.
    pub fn grace_ended(&self, now: Instant, open: usize, in_flight: &str) -> bool {
        if open == 0 || !self.grace_over(now) {
            return false;
        }
        weft_core::warn!("grace period over: closing {open} connection(s) with {in_flight} in flight");
        true
    }

    /// The listener, for a loop that accepts by blocking instead (it is no
    /// longer this door's).
    pub fn take_listener(&mut self) -> Option<Fd> {
        self.listener.take()
    }

    /// This worker's shutdown eventfd, for a blocking thread to wait on
    /// beside its socket (`sys::StopNotice`). Signalled once at shutdown and
    /// never drained by a blocking thread, it stays readable from then on.
    pub fn waker(&self) -> RawFd {
        self.waker
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Epoll;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn accepts_then_stops_on_the_waker_with_a_grace_period() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        l.set_nonblocking(true).unwrap();
        let shutdown = Shutdown::new(1).unwrap();
        let mut cx: Ctx<Epoll> = Ctx::new().unwrap();
        let mut door = Door::new(Fd::from(l), shutdown.waker(0), shutdown.clone(), Some(1));
        door.register(&mut cx).unwrap();
        let _c = [TcpStream::connect(addr).unwrap(), TcpStream::connect(addr).unwrap()];
        // No pass while draining; one connection per pass (the limit).
        assert!(!door.begin(true));
        assert!(door.begin(false));
        assert!(door.next(&mut cx).is_some());
        assert!(door.next(&mut cx).is_none(), "the limit ends the pass");
        // The waker: nothing asked yet, then a stop.
        assert!(!door.woken(&mut cx));
        shutdown.trigger();
        assert!(door.woken(&mut cx) && door.stop_requested());
        door.close_with_grace(&mut cx, Duration::from_secs(5));
        assert!(!door.begin(false), "no pass once closed");
        assert!(!door.due(&mut cx));
        assert!(!door.grace_over(cx.now));
        assert!(door.grace_over(cx.now + Duration::from_secs(5)));
        assert!(door.max_wait().is_some_and(|d| d <= Duration::from_secs(5)));
        assert!(door.take_listener().is_none());
    }
}
