//! The event loop: wait, dispatch, expire timers, close deferred descriptors.
//!
//! [`run`] is generic over the backend and the handler, so each combination is
//! compiled into its own loop without dynamic dispatch. One iteration:
//!
//! 1. wait for readiness (up to the nearest timer, or the handler's bound);
//! 2. refresh the cached clock once for the whole batch;
//! 3. hand each event to the handler (stale tokens are the handler's to drop:
//!    its [`Slab`](crate::Slab) lookup fails);
//! 4. fire due timers;
//! 5. let the handler do deferred work (and publish its counters: the
//!    handler's [`PublishClock`](weft_core::metrics::PublishClock) is odd
//!    from step 2 until this step is done), drop superseded timer entries once
//!    the heap has doubled since the last sweep, then close the descriptors it queued
//!    with [`Ctx::close_later`] — after every event of the batch was seen, so a
//!    descriptor number is never reused while an event for it is still queued.

use crate::backend::{BackendOptions, Event, Interest, Poller, Readiness, Token};
use crate::sys::Fd;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant, SystemTime};

/// State the loop shares with its handler.
pub struct Ctx<P: Poller> {
    /// The backend.
    pub poller: P,
    /// Monotonic time, refreshed once per iteration (cheap and consistent within a batch).
    pub now: Instant,
    /// Wall-clock time, refreshed with `now` (Date headers, logs).
    pub wall: SystemTime,
    timers: BinaryHeap<Reverse<(Instant, Token)>>,
    /// Heap length past which superseded entries are swept out ([`run`]).
    timers_sweep_at: usize,
    closing: Vec<Fd>,
    /// Child processes may hold this process's descriptors (see
    /// [`Ctx::set_children_share`]).
    children_share: bool,
}

/// The timer heap is swept of superseded entries no sooner than at this
/// length (24 bytes an entry), and then at twice what the sweep left.
const TIMERS_SWEEP_MIN: usize = 1024;

/// Why a descriptor could not be registered.
#[derive(Debug)]
pub enum RegisterError {
    /// The backend cannot represent it (select's FD_SETSIZE).
    OutOfRange(RawFd, RawFd),
    /// The kernel refused.
    Io(io::Error),
}

impl std::fmt::Display for RegisterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegisterError::OutOfRange(fd, max) => {
                write!(f, "descriptor {fd} is at or above the backend's limit {max}")
            }
            RegisterError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl<P: Poller> Ctx<P> {
    /// A context around a new backend with default options.
    pub fn new() -> io::Result<Ctx<P>> {
        Self::with_options(&BackendOptions::default())
    }

    /// A context around a new backend configured with `opts`.
    pub fn with_options(opts: &BackendOptions) -> io::Result<Ctx<P>> {
        let mut poller = P::new()?;
        poller.configure(opts);
        Ok(Ctx {
            poller,
            now: Instant::now(),
            wall: SystemTime::now(),
            timers: BinaryHeap::new(),
            timers_sweep_at: TIMERS_SWEEP_MIN,
            closing: Vec::new(),
            children_share: false,
        })
    }

    /// This process starts child processes (CGI): a child holds a
    /// reference to every descriptor from its vfork until its exec has
    /// closed them, and the exec lets the parent run on before it does, so
    /// a descriptor closed in that window stays open, and in an epoll set,
    /// until the child gets the CPU; a level-triggered loop is then woken
    /// by its hang-up at every wait. With this set, [`Ctx::close_later`]
    /// takes registered descriptors out of the set before closing them
    /// under every backend (one `epoll_ctl` per close).
    pub fn set_children_share(&mut self, on: bool) {
        self.children_share = on;
    }

    /// Register `fd`, refusing descriptors the backend cannot hold.
    pub fn register(&mut self, fd: RawFd, token: Token, interest: Interest) -> Result<(), RegisterError> {
        if let Some(max) = P::CAPS.max_fd {
            if fd >= max {
                return Err(RegisterError::OutOfRange(fd, max));
            }
        }
        self.poller.add(fd, token, interest).map_err(RegisterError::Io)
    }

    /// Change interest (level-triggered backends only need this).
    #[inline]
    pub fn reregister(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()> {
        self.poller.modify(fd, token, interest)
    }

    /// Tell the backend what the handler's I/O on `fd` showed: after a read
    /// that returned EAGAIN or short, `readable: false`; after a short write,
    /// `writable: false`; `true` for a direction the handler left unfinished
    /// on purpose. A handler that may run under `tracked` must report every
    /// EAGAIN and short transfer, since that backend hands a token out again
    /// until told it is used up. For every other backend this is a constant
    /// `false` branch and compiles to nothing.
    #[inline(always)]
    pub fn learned(&mut self, fd: RawFd, ready: Readiness) {
        if P::CAPS.tracks_readiness {
            self.poller.learned(fd, ready);
        }
    }

    /// After the handler drove `fd`: `before` is its own view of the socket's
    /// readiness when the drive began (after the event that started it was
    /// applied), `after` the view at its end. A direction that went from
    /// ready to not ready was used up by an EAGAIN or a short transfer
    /// during the drive, which is newer than anything the backend holds, so
    /// a readiness-tracking backend clears it; a direction whose view did not
    /// change is left as the backend knows it (an edge it took in while the
    /// handler was not listening for that direction is kept). This is the
    /// one EAGAIN report of the roles that keep per-socket views (proxy,
    /// front, origin, load): every read and write site already clears its
    /// view, so none of them needs a report of its own. Compiles to nothing
    /// for backends that do not track readiness.
    #[inline(always)]
    pub fn settled(&mut self, fd: RawFd, before: Readiness, after: Readiness) {
        if P::CAPS.tracks_readiness {
            let gone = Readiness {
                readable: before.readable && !after.readable,
                writable: before.writable && !after.writable,
            };
            if gone.readable || gone.writable {
                self.poller.used_up(fd, gone);
            }
        }
    }

    /// `settled` for a connection whose cycle keeps a read view and learns
    /// a blocked write from what is left to send (origin, load): the read
    /// view before and after the drive, and whether a flush of this drive
    /// left bytes unsent.
    #[inline(always)]
    pub fn settled_cycle(&mut self, fd: RawFd, read_before: bool, read_after: bool, blocked: bool) {
        let before = Readiness {
            readable: read_before,
            writable: true,
        };
        let after = Readiness {
            readable: read_after,
            writable: !blocked,
        };
        self.settled(fd, before, after);
    }

    /// Stop polling `fd` while it stays open (a tunnel socket with nothing
    /// left to do, which a level-triggered backend would report as hung up
    /// at every wait). Its later `close_later` deletes it again, harmlessly.
    pub fn deregister(&mut self, fd: RawFd) {
        let _ = self.poller.delete(fd);
        self.poller.forget(fd);
    }

    /// Close `fd` at the end of this iteration. Backends whose interest set lives
    /// in user space forget it now, so it is never polled again.
    pub fn close_later(&mut self, fd: Fd, registered: bool) {
        if registered && (!P::CAPS.close_deregisters || self.children_share) {
            let _ = self.poller.delete(fd.raw());
        }
        self.poller.forget(fd.raw());
        self.closing.push(fd);
    }

    /// Close a registered descriptor whose file may stay open elsewhere (a
    /// listener handed over to a reload's workers): closing it would not take
    /// it out of an epoll set, so it is deleted from every backend first.
    pub fn close_shared_later(&mut self, fd: Fd) {
        let _ = self.poller.delete(fd.raw());
        self.poller.forget(fd.raw());
        self.closing.push(fd);
    }

    /// Ask for `Handler::on_timer(token)` at `deadline`. Handlers keep at most one
    /// armed timer per connection and store their real deadline beside it, so
    /// moving a deadline later costs nothing: the timer fires, sees the new
    /// deadline, and re-arms.
    #[inline]
    pub fn arm_timer(&mut self, token: Token, deadline: Instant) {
        self.timers.push(Reverse((deadline, token)));
    }

    /// Number of armed timers (tests and stats).
    pub fn timers_armed(&self) -> usize {
        self.timers.len()
    }

    /// The heap has no "cancel": a connection that closed, or whose deadline
    /// moved earlier, leaves its entry until it comes due, up to a timeout
    /// later. Under connection churn that is (closes per second × timeout)
    /// entries: at 2,000 closes a second and a 60 s idle timeout, 120,000
    /// (2.8 MiB, in a server whose idle connection costs 0.4 KiB). Past
    /// `timers_sweep_at` the entries the handler no longer counts are dropped
    /// in one pass and the heap's memory given back; the next sweep waits
    /// for the heap to double, so a sweep costs O(1) per armed entry.
    fn sweep_timers<H: Handler<P>>(&mut self, handler: &H) {
        if self.timers.len() <= self.timers_sweep_at {
            return;
        }
        self.timers
            .retain(|Reverse((due, token))| handler.timer_armed(*token, *due));
        self.timers_sweep_at = (self.timers.len() * 2).max(TIMERS_SWEEP_MIN);
        self.timers.shrink_to(self.timers_sweep_at);
    }

    fn next_timeout(&self, bound: Option<Duration>) -> Option<Duration> {
        let t = self
            .timers
            .peek()
            .map(|Reverse((d, _))| d.saturating_duration_since(Instant::now()));
        match (t, bound) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn refresh_clock(&mut self) {
        self.now = Instant::now();
        self.wall = SystemTime::now();
    }
}

/// What the loop calls back.
pub trait Handler<P: Poller> {
    /// A readiness event.
    fn on_event(&mut self, cx: &mut Ctx<P>, event: Event);
    /// A timer armed for `token` at `due` came due. Return `Some(later)`, with
    /// `later > cx.now`, to re-arm it (the owner's deadline moved); `None` when
    /// handled or stale.
    fn on_timer(&mut self, cx: &mut Ctx<P>, token: Token, due: Instant) -> Option<Instant>;
    /// Is the entry armed for `token` at `due` still the one that counts?
    /// False lets the loop drop it before it comes due (a closed connection's,
    /// or one an earlier deadline superseded). The default keeps every entry.
    fn timer_armed(&self, _token: Token, _due: Instant) -> bool {
        true
    }
    /// Work after each batch of events and timers (e.g. connections the handler
    /// knows to be ready without asking the kernel).
    fn after_batch(&mut self, _cx: &mut Ctx<P>) {}
    /// Longest the loop may sleep (e.g. to refresh the Date once a second).
    fn max_wait(&self) -> Option<Duration> {
        None
    }
    /// False ends the loop.
    fn keep_running(&self) -> bool;
    /// The clock the loop advances around each batch (odd from the wait's
    /// return until `after_batch`, in which the handler publishes its
    /// counters, has run), so that the admin endpoint can tell a worker's
    /// published counters are current ([`weft_core::metrics::settle`]).
    /// None: nothing published.
    fn publish_clock(&self) -> Option<&weft_core::metrics::PublishClock> {
        None
    }
}

/// Run until the handler says stop.
pub fn run<P: Poller, H: Handler<P>>(cx: &mut Ctx<P>, handler: &mut H) -> io::Result<()> {
    let mut events: Vec<Event> = Vec::with_capacity(512);
    while handler.keep_running() {
        let timeout = cx.next_timeout(handler.max_wait());
        events.clear();
        cx.poller.wait(&mut events, timeout)?;
        if let Some(c) = handler.publish_clock() {
            c.batch_begins();
        }
        cx.refresh_clock();
        for ev in events.iter() {
            handler.on_event(cx, *ev);
        }
        while let Some(&Reverse((deadline, token))) = cx.timers.peek() {
            if deadline > cx.now {
                break;
            }
            cx.timers.pop();
            if let Some(later) = handler.on_timer(cx, token, deadline) {
                debug_assert!(later > cx.now, "a re-armed timer must move forward");
                cx.timers.push(Reverse((later, token)));
            }
        }
        handler.after_batch(cx);
        if let Some(c) = handler.publish_clock() {
            c.published();
        }
        cx.sweep_timers(handler);
        cx.closing.clear();
    }
    cx.closing.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Epoll;
    use crate::sys;

    /// Arms one entry per "connection" and forgets most of them at once, as
    /// closes leave theirs behind.
    struct Churn {
        live: std::collections::HashMap<Token, Instant>,
        rounds: usize,
        peak: usize,
    }

    impl Handler<Epoll> for Churn {
        fn on_event(&mut self, _: &mut Ctx<Epoll>, _: Event) {}
        fn on_timer(&mut self, _: &mut Ctx<Epoll>, _: Token, _: Instant) -> Option<Instant> {
            None
        }
        fn timer_armed(&self, token: Token, due: Instant) -> bool {
            self.live.get(&token) == Some(&due)
        }
        fn after_batch(&mut self, cx: &mut Ctx<Epoll>) {
            // 1,000 connections open, each arming a timer an hour out; all
            // but 10 of them close again.
            for i in 0..1000 {
                let token = Token((self.rounds * 1000 + i) as u64);
                let due = cx.now + Duration::from_secs(3600);
                cx.arm_timer(token, due);
                if i < 10 {
                    self.live.insert(token, due);
                }
            }
            self.rounds += 1;
            self.peak = self.peak.max(cx.timers_armed());
        }
        fn max_wait(&self) -> Option<Duration> {
            Some(Duration::ZERO)
        }
        fn keep_running(&self) -> bool {
            self.rounds < 50
        }
    }

    #[test]
    fn superseded_timer_entries_are_swept_out() {
        let mut cx = Ctx::<Epoll>::new().unwrap();
        let mut h = Churn {
            live: Default::default(),
            rounds: 0,
            peak: 0,
        };
        run(&mut cx, &mut h).unwrap();
        // 50,000 entries armed, 500 still counting: the heap holds those and
        // at most the churn since the last sweep, never the whole history.
        assert_eq!(h.live.len(), 500);
        assert!(cx.timers_armed() < 3000, "{} entries kept", cx.timers_armed());
        assert!(h.peak < 4000, "peak {}", h.peak);
        assert!(cx.timers.iter().filter(|Reverse((d, t))| h.timer_armed(*t, *d)).count() == 500);
    }

    /// A descriptor another process also holds (a CGI child between its
    /// vfork and its exec) stays in the epoll set when it is only closed:
    /// the set drops it with the open file's last reference. With children
    /// sharing, the close takes it out first, so its hang-up wakes no one.
    #[test]
    fn a_shared_descriptor_leaves_the_set_before_its_close() {
        use std::os::fd::AsFd;
        for children_share in [false, true] {
            let mut cx = Ctx::<Epoll>::new().unwrap();
            cx.set_children_share(children_share);
            let (r, w) = sys::pipe().unwrap();
            cx.register(r.raw(), Token(7), Interest::READ).unwrap();
            // The child's reference to the same open pipe.
            let child = r.as_fd().try_clone_to_owned().unwrap();
            drop(w); // the writer goes: the read end reports a hang-up
            cx.close_later(r, true);
            cx.closing.clear(); // the end of the iteration closes it
            let mut events = Vec::new();
            cx.poller.wait(&mut events, Some(Duration::ZERO)).unwrap();
            let woken = events.iter().any(|e| e.token == Token(7));
            assert_eq!(woken, !children_share, "children_share {children_share}: {events:?}");
            drop(child);
        }
    }

    /// Sees the clock from inside the batches it runs.
    struct Publisher {
        clock: weft_core::metrics::PublishClock,
        events: usize,
        batches: usize,
    }

    impl Handler<Epoll> for Publisher {
        fn on_event(&mut self, cx: &mut Ctx<Epoll>, ev: Event) {
            assert_eq!(self.clock.read() & 1, 1, "an event handled outside a batch");
            sys::eventfd_drain(ev.token.0 as RawFd);
            cx.learned(ev.token.0 as RawFd, Readiness::default());
            self.events += 1;
        }
        fn on_timer(&mut self, _: &mut Ctx<Epoll>, _: Token, _: Instant) -> Option<Instant> {
            assert_eq!(self.clock.read() & 1, 1, "a timer fired outside a batch");
            None
        }
        fn after_batch(&mut self, _: &mut Ctx<Epoll>) {
            // Where a role publishes its counters: still inside the batch.
            assert_eq!(self.clock.read() & 1, 1);
            self.batches += 1;
        }
        fn max_wait(&self) -> Option<Duration> {
            Some(Duration::from_millis(1))
        }
        fn keep_running(&self) -> bool {
            // Between batches the clock is even: everything is published.
            assert_eq!(self.clock.read() & 1, 0);
            self.batches < 5
        }
        fn publish_clock(&self) -> Option<&weft_core::metrics::PublishClock> {
            Some(&self.clock)
        }
    }

    #[test]
    fn the_publish_clock_is_odd_inside_each_batch_and_even_between() {
        let mut cx = Ctx::<Epoll>::new().unwrap();
        let efd = sys::eventfd().unwrap();
        cx.register(efd.raw(), Token(efd.raw() as u64), Interest::READ).unwrap();
        sys::eventfd_signal(efd.raw()).unwrap();
        cx.arm_timer(Token(u64::MAX), Instant::now());
        let mut h = Publisher {
            clock: Default::default(),
            events: 0,
            batches: 0,
        };
        run(&mut cx, &mut h).unwrap();
        assert_eq!((h.events, h.batches), (1, 5));
        assert_eq!(h.clock.read(), 10, "two steps a batch");
    }
}
