//! `tracked`: user-level readiness tracking (uselect, paper 000 §2) over a
//! kernel backend.
//!
//! uselect kept each socket's readiness in bitmaps the kernel updated in shared
//! memory, and entered the kernel only when no tracked socket was known to be
//! ready (or every `MaxPass` passes, so other descriptors were not starved).
//! Without a kernel module, weft keeps the same table in user space and feeds
//! it from two sources:
//!
//! - the inner backend's events set readiness bits (an event says "ready now");
//! - the handler's own I/O clears them ([`Poller::learned`], reached through
//!   `Ctx::learned`): a read that returned EAGAIN or short means the receive
//!   queue was empty, a short write means the send buffer is full. A handler
//!   that stops before EAGAIN (fairness, a full buffer) simply says nothing, or
//!   says "still ready", and the token is served again from the table.
//!
//! [`Tracked::wait`] hands out every registration whose known readiness meets
//! its interest without any system call; the inner backend is asked only when
//! nothing is known ready, or after `max_pass` consecutive passes served from
//! the table (then with a zero timeout). Interest lives in the table too: over
//! edge-triggered epoll a descriptor is registered once for both directions
//! and its edges are remembered until the interest wants them, so a change of
//! interest costs nothing; over io_uring (where a change rides in the
//! submission ring with the next enter) and over the level-triggered backends,
//! interest is mirrored to the kernel ([`TrackedInner::MIRROR_INTEREST`]).
//!
//! To the handler the result is level-triggered: a token stays ready until the
//! handler reports otherwise. A handler run under `tracked` must therefore
//! report every EAGAIN or short transfer (`Ctx::learned`), or its token is
//! handed out again at each pass, as level-triggered epoll would do.
//!
//! Inner registrations are tagged with the descriptor and a per-descriptor
//! generation, so the table is indexed by descriptor (like uselect's bitmaps)
//! and an event for an earlier registration of a reused descriptor is dropped.

use super::{
    BackendOptions, Caps, Epoll, EpollEt, Event, Interest, Poll, Poller, Readiness, Select, Token, TrackerStats, Uring,
};
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

const READ: u8 = 1;
const WRITE: u8 = 2;
const ERROR: u8 = 4;
/// The peer's FIN was seen (sticky: it cannot be taken back). Never a reason
/// to hand a descriptor out by itself; carried on the read events it rides with.
const READ_CLOSED: u8 = 8;

/// Default number of consecutive passes served from the table before the
/// kernel is asked anyway (uselect's `MaxPass`).
pub const DEFAULT_MAX_PASS: u32 = 8;

/// Backends `tracked` can wrap, with the `--event` name of the combination.
pub trait TrackedInner: Poller {
    /// `--event` name of `Tracked<Self>`.
    const TRACKED_NAME: &'static str;
    /// Pass interest changes on to this backend (true), or register once for
    /// both directions and keep interest in the table only (false). Level-
    /// triggered backends need the mirror, or they would report a writable
    /// socket at every call. Edge-triggered epoll does not: a change would
    /// cost an epoll_ctl, and remembering its edges costs nothing.
    const MIRROR_INTEREST: bool;
}

/// The wrappable backends: `inner => "--event name", mirror interest?`.
macro_rules! tracked_inner {
    ($($inner:ident => $name:literal, $mirror:literal;)+) => {
        $(
            impl TrackedInner for $inner {
                const TRACKED_NAME: &'static str = $name;
                const MIRROR_INTEREST: bool = $mirror;
            }
        )+
    };
}

// io_uring queues a poll change in the submission ring, where it rides with
// the next io_uring_enter: no system call of its own. Mirroring keeps the
// multishot polls to what is wanted, so the socket's write-space wake-ups
// (each ACK) do not post completions the loop would take only to discard
// (docs/events.md has the measured effect on enters).
tracked_inner! {
    Uring => "tracked", true;
    EpollEt => "tracked:epoll-et", false;
    Epoll => "tracked:epoll", true;
    Poll => "tracked:poll", true;
    Select => "tracked:select", true;
}

#[derive(Clone, Copy)]
struct Slot {
    /// The handler's token for the current registration.
    token: Token,
    /// Bumped at each registration of this descriptor; tags inner events.
    generation: u32,
    interest: u8,
    ready: u8,
    registered: bool,
    /// In the candidate list (possibly stale; checked when emitting).
    queued: bool,
}

const EMPTY: Slot = Slot {
    token: Token(0),
    generation: 0,
    interest: 0,
    ready: 0,
    registered: false,
    queued: false,
};

/// What the table tracks (and mirrors to the kernel): hangup as read.
fn tracked(i: Interest) -> Interest {
    Interest {
        read: i.read || i.hangup,
        write: i.write,
        hangup: false,
    }
}

fn interest_bits(i: Interest) -> u8 {
    let i = tracked(i);
    (if i.read { READ } else { 0 }) | (if i.write { WRITE } else { 0 })
}

/// User-level readiness tracking over the kernel backend `P`.
pub struct Tracked<P: TrackedInner> {
    inner: P,
    /// Indexed by descriptor.
    slots: Vec<Slot>,
    /// Descriptors that may be ready for what they want (a superset: entries
    /// are checked and dropped lazily when emitting).
    candidates: Vec<RawFd>,
    /// Events from the inner backend, before they are merged into the table.
    scratch: Vec<Event>,
    /// Consecutive passes served from the table.
    passes: u32,
    max_pass: u32,
    stats: TrackerStats,
}

impl<P: TrackedInner> Tracked<P> {
    /// The wrapped backend.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    fn slot(&mut self, fd: RawFd) -> Option<&mut Slot> {
        let s = self.slots.get_mut(usize::try_from(fd).ok()?)?;
        s.registered.then_some(s)
    }

    fn enqueue(candidates: &mut Vec<RawFd>, fd: RawFd, s: &mut Slot) {
        if !s.queued && s.ready & (s.interest | ERROR) != 0 {
            s.queued = true;
            candidates.push(fd);
        }
    }

    /// Merge one inner event into the table.
    fn absorb(&mut self, ev: Event) {
        let fd = ev.token.index() as RawFd;
        let Some(s) = self.slots.get_mut(fd as usize) else {
            return;
        };
        if !s.registered || s.generation != ev.token.generation() {
            return; // an earlier registration of this descriptor
        }
        s.ready |= (if ev.readable { READ } else { 0 })
            | (if ev.writable { WRITE } else { 0 })
            | (if ev.error { ERROR } else { 0 })
            | (if ev.read_closed { READ_CLOSED } else { 0 });
        Self::enqueue(&mut self.candidates, fd, s);
    }

    /// Hand out every candidate whose readiness meets its interest; drop the
    /// others from the list.
    fn emit(&mut self, events: &mut Vec<Event>) {
        let slots = &mut self.slots;
        self.candidates.retain(|&fd| {
            let s = &mut slots[fd as usize];
            let hit = if s.registered {
                s.ready & (s.interest | ERROR)
            } else {
                0
            };
            if hit == 0 {
                s.queued = false;
                return false;
            }
            let error = hit & ERROR != 0;
            events.push(Event {
                token: s.token,
                readable: error || hit & READ != 0,
                writable: error || hit & WRITE != 0,
                error,
                read_closed: s.ready & READ_CLOSED != 0,
            });
            true
        });
    }
}

impl<P: TrackedInner> Poller for Tracked<P> {
    const CAPS: Caps = Caps {
        name: P::TRACKED_NAME,
        // Readiness is held here until the handler reports it used up.
        edge_triggered: false,
        // Interest lives in the table; the kernel hears of it only when the
        // inner backend is level-triggered.
        fixed_interest: false,
        max_fd: P::CAPS.max_fd,
        close_deregisters: P::CAPS.close_deregisters,
        tracks_readiness: true,
    };

    fn new() -> io::Result<Self> {
        Ok(Tracked {
            inner: P::new()?,
            slots: Vec::new(),
            candidates: Vec::new(),
            scratch: Vec::with_capacity(512),
            passes: 0,
            max_pass: DEFAULT_MAX_PASS,
            stats: TrackerStats::default(),
        })
    }

    fn configure(&mut self, opts: &BackendOptions) {
        self.max_pass = opts.max_pass;
        self.inner.configure(opts);
    }

    fn add(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()> {
        let i = usize::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
        if self.slots.len() <= i {
            self.slots.resize(i + 1, EMPTY);
        }
        let prev = self.slots[i];
        if prev.registered {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        let generation = prev.generation.wrapping_add(1);
        let inner_interest = if P::MIRROR_INTEREST {
            tracked(interest)
        } else {
            Interest::BOTH
        };
        self.inner.add(fd, Token::new(fd as u32, generation), inner_interest)?;
        // `queued` is kept: the descriptor may still sit in the candidate list
        // from its previous registration, and must not be listed twice.
        self.slots[i] = Slot {
            token,
            generation,
            interest: interest_bits(interest),
            ready: 0,
            registered: true,
            queued: prev.queued,
        };
        Ok(())
    }

    fn modify(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()> {
        let Some(s) = self.slot(fd) else {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        };
        let bits = interest_bits(interest);
        let changed = s.interest != bits;
        let generation = s.generation;
        s.token = token;
        s.interest = bits;
        if changed && P::MIRROR_INTEREST {
            self.inner
                .modify(fd, Token::new(fd as u32, generation), tracked(interest))?;
        }
        let s = &mut self.slots[fd as usize];
        Self::enqueue(&mut self.candidates, fd, s);
        Ok(())
    }

    fn delete(&mut self, fd: RawFd) -> io::Result<()> {
        let Some(s) = self.slot(fd) else {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        };
        s.registered = false;
        s.ready = 0;
        self.inner.delete(fd)
    }

    fn forget(&mut self, fd: RawFd) {
        if let Some(s) = self.slot(fd) {
            s.registered = false;
            s.ready = 0;
        }
        self.inner.forget(fd);
    }

    fn learned(&mut self, fd: RawFd, ready: Readiness) {
        if let Some(s) = self.slot(fd) {
            // The handler's I/O is the freshest word on both directions (an
            // error would have been its result, so it clears the error bit).
            s.ready = (if ready.readable { READ } else { 0 })
                | (if ready.writable { WRITE } else { 0 })
                | (s.ready & READ_CLOSED);
            let s = &mut self.slots[fd as usize];
            Self::enqueue(&mut self.candidates, fd, s);
        }
    }

    fn used_up(&mut self, fd: RawFd, gone: Readiness) {
        if let Some(s) = self.slot(fd) {
            let clear = (if gone.readable { READ } else { 0 }) | (if gone.writable { WRITE } else { 0 });
            if clear != 0 {
                // As in `learned`, the I/O's result is the word on errors too.
                s.ready &= !(clear | ERROR);
            }
        }
    }

    fn wait(&mut self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()> {
        if !self.candidates.is_empty() && self.passes < self.max_pass {
            let before = events.len();
            self.emit(events);
            if events.len() > before {
                self.passes += 1;
                self.stats.user_passes += 1;
                self.stats.user_events += (events.len() - before) as u64;
                return Ok(());
            }
            // Every candidate had been used up: ask the kernel.
        }
        let forced = !self.candidates.is_empty();
        if forced {
            self.stats.forced_polls += 1;
        }
        self.passes = 0;
        self.stats.kernel_polls += 1;
        // Known-ready descriptors are waiting: only look, never sleep.
        let timeout = if forced { Some(Duration::ZERO) } else { timeout };
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let r = self.inner.wait(&mut scratch, timeout);
        for ev in scratch.iter() {
            self.absorb(*ev);
        }
        self.scratch = scratch;
        r?;
        self.emit(events);
        Ok(())
    }

    fn tracker_stats(&self) -> Option<TrackerStats> {
        Some(self.stats)
    }
}
