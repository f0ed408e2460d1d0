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
            cx.close_later(l, true);
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

    /// The listener, for a loop that accepts by blocking instead (it is no
    /// longer this door's).
    pub fn take_listener(&mut self) -> Option<Fd> {
        self.listener.take()
    }
}
