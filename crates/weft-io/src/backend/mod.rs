//! Event backends: one small type per kernel mechanism, all behind [`Poller`].
//!
//! A backend is a table of operations plus capability bits, in the manner of
//! nginx's event modules: the connection code asks [`Caps`] (edge- or
//! level-triggered, whether interest must be updated, the descriptor limit), never
//! the backend's name. The event loop is generic over `P: Poller`, so each backend
//! gets its own monomorphized loop with no dynamic dispatch per event.
//!
//! [`Tracked`] wraps another backend with a user-level readiness table
//! (uselect): the one backend that listens to [`Poller::learned`], the
//! handler's report of what its reads and writes showed.

pub mod epoll;
mod poll;
mod select;
mod tracked;
mod uring;

pub use epoll::{Epoll, EpollBatched, EpollEt, EpollOf, EpollOnce};
pub use poll::Poll;
pub use select::Select;
pub use tracked::{Tracked, TrackedInner, DEFAULT_MAX_PASS};
pub use uring::Uring;

use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::str::FromStr;
use std::time::Duration;

/// Identifies a registration: a slot index and the slot's generation, so an event
/// for a descriptor that was closed and reused is recognised as stale and dropped
/// (nginx's "instance" bit, widened).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Token(pub u64);

impl Token {
    /// Build from slot index and generation.
    #[inline]
    pub const fn new(index: u32, generation: u32) -> Token {
        Token(((generation as u64) << 32) | index as u64)
    }
    /// Slot index.
    #[inline]
    pub const fn index(self) -> u32 {
        self.0 as u32
    }
    /// Generation of the slot when the token was issued.
    #[inline]
    pub const fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

/// Which readiness a registration asks for.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Interest {
    /// Wake when readable.
    pub read: bool,
    /// Wake when writable.
    pub write: bool,
    /// Without `read`: wake when the peer ends its sending side (RDHUP), not
    /// for bytes. For a socket whose bytes the kernel moves without weft (a
    /// tunnel joined to the sockmap): the psock calls the socket's own
    /// data-ready for every batch it redirects away, and a read interest
    /// would wake the loop for each to find nothing. Backends that cannot
    /// ask for RDHUP alone (select, the user-level trackers) treat it as
    /// `read`. Errors are reported whatever the interest.
    pub hangup: bool,
}

impl Interest {
    /// Readable only.
    pub const READ: Interest = Interest {
        read: true,
        write: false,
        hangup: false,
    };
    /// Writable only.
    pub const WRITE: Interest = Interest {
        read: false,
        write: true,
        hangup: false,
    };
    /// Both.
    pub const BOTH: Interest = Interest {
        read: true,
        write: true,
        hangup: false,
    };
    /// Neither (registered but silent; level-triggered backends use it while a
    /// connection waits on something else, such as a helper).
    pub const NONE: Interest = Interest {
        read: false,
        write: false,
        hangup: false,
    };
    /// The peer's end of stream only (see [`Interest::hangup`]).
    pub const HANGUP: Interest = Interest {
        read: false,
        write: false,
        hangup: true,
    };
}

/// One readiness notification.
#[derive(Clone, Copy, Debug)]
pub struct Event {
    /// The registration's token.
    pub token: Token,
    /// Data (or a FIN, or an error) can be read.
    pub readable: bool,
    /// Buffer space is available.
    pub writable: bool,
    /// Error or hang-up reported by the kernel.
    pub error: bool,
    /// The peer has closed its sending side (RDHUP or HUP): once the bytes
    /// already queued are read, a read returns end-of-file. Edge-triggered
    /// backends report a FIN that arrives with the last data only once, so a
    /// handler that stops reading at a short read must keep this in mind and
    /// read once more. Backends that cannot tell (select) leave it false;
    /// they are level-triggered, so the end-of-file is reported again anyway.
    pub read_closed: bool,
}

impl Event {
    /// A read may bring something now: data, the end of file or an error.
    #[inline]
    pub fn may_read(&self) -> bool {
        self.readable || self.error
    }

    /// A write may make progress now (or report the error).
    #[inline]
    pub fn may_write(&self) -> bool {
        self.writable || self.error
    }

    /// Fold this event into a connection's own view of its socket's input
    /// (user-level readiness tracking, see [`InputBuf::may_hold_more`]): a
    /// readable or error event sets `may_read`, only the connection's own
    /// reads clear it; a FIN once reported stays known in `read_closed`.
    ///
    /// [`InputBuf::may_hold_more`]: crate::InputBuf::may_hold_more
    #[inline]
    pub fn merge_read(&self, may_read: &mut bool, read_closed: &mut bool) {
        *may_read |= self.may_read();
        *read_closed |= self.read_closed;
    }
}

/// What a handler's own I/O taught it about a descriptor's readiness: a read
/// that returned EAGAIN or fewer bytes than asked means not readable, a short
/// write means not writable. Only backends with
/// [`Caps::tracks_readiness`] listen (see `Ctx::learned`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Readiness {
    /// More input may be waiting.
    pub readable: bool,
    /// The send buffer may have room.
    pub writable: bool,
}

/// Settings a backend may take after creation (`tracked` and `uring`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendOptions {
    /// `tracked`: passes served from its readiness table before the kernel is
    /// asked anyway, so descriptors it does not know to be ready are not starved.
    pub max_pass: u32,
    /// `uring` (and `tracked` over it): wake-up batching. Under load, a
    /// sleeping wait asks for the completions expected within this interval
    /// at the recent rate, and the kernel holds the first one back until they
    /// are there (io_uring's min-wait, Linux 6.12, bounded at ten intervals;
    /// ignored where the kernel lacks it). Fewer io_uring_enter calls for
    /// up to about one interval of added latency. Zero: wake at the first
    /// completion.
    pub wake_interval: Duration,
}

impl Default for BackendOptions {
    fn default() -> Self {
        BackendOptions {
            max_pass: tracked::DEFAULT_MAX_PASS,
            wake_interval: Duration::ZERO,
        }
    }
}

/// What the `tracked` backend did (zeros elsewhere).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrackerStats {
    /// Passes answered from the readiness table, without the kernel.
    pub user_passes: u64,
    /// Events handed out by those passes.
    pub user_events: u64,
    /// Times the inner backend was asked.
    pub kernel_polls: u64,
    /// Of those, asked only because `max_pass` was reached while descriptors
    /// were known ready (with a zero timeout).
    pub forced_polls: u64,
}

impl TrackerStats {
    /// Add another worker's counters.
    pub fn add(&mut self, o: &TrackerStats) {
        self.user_passes += o.user_passes;
        self.user_events += o.user_events;
        self.kernel_polls += o.kernel_polls;
        self.forced_polls += o.forced_polls;
    }
}

/// What a backend can do; the connection code follows these bits.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    /// Name as given to `--event`.
    pub name: &'static str,
    /// Edge-triggered: an event is reported once per change, so a handler must
    /// read and write until EAGAIN (or a short read/write) before it may wait
    /// again, and must remember readiness it has not used up.
    pub edge_triggered: bool,
    /// Connections are registered once for both directions and their interest
    /// is never modified (epoll-et, epoll-once); events a connection does not
    /// need are ignored. uring is edge-triggered but not fixed: a
    /// multishot poll per direction is armed and disarmed as the interest changes.
    pub fixed_interest: bool,
    /// Descriptors at or above this cannot be registered (select's FD_SETSIZE).
    pub max_fd: Option<RawFd>,
    /// Closing a descriptor removes it from the kernel's interest set by itself
    /// (epoll); otherwise the loop must `delete` it first (select, poll keep
    /// their sets in user space).
    pub close_deregisters: bool,
    /// Keeps readiness in user space and wants to hear what the handler's I/O
    /// learned (`Ctx::learned`); handlers may skip computing it otherwise (the
    /// bit is a constant, so the call compiles away for every other backend).
    pub tracks_readiness: bool,
}

impl Caps {
    /// The interest a new socket is registered with: both directions on
    /// fixed-interest backends (registered once, never modified), otherwise
    /// `first`, what the socket's first step waits for (a request:
    /// [`Interest::READ`]; a connect: [`Interest::WRITE`]). Serve and
    /// origin register by this rule and change interest later only where
    /// `fixed_interest` is false; the proxy by [`Caps::first_interest_kept`].
    pub const fn first_interest(&self, first: Interest) -> Interest {
        if self.fixed_interest {
            Interest::BOTH
        } else {
            first
        }
    }

    /// Like [`Caps::first_interest`], for a handler that keeps both
    /// directions registered on every edge-triggered backend too (`uring`:
    /// the proxy, whose sockets remember every edge they are told of, and
    /// whose sockets with a body or tunnel in the kernel need their read
    /// poll armed to hear the sockmap marker, an error). Its interest then
    /// changes only where [`Caps::keeps_both`] is false.
    pub const fn first_interest_kept(&self, first: Interest) -> Interest {
        if self.keeps_both() {
            Interest::BOTH
        } else {
            first
        }
    }

    /// Whether a handler registering by [`Caps::first_interest_kept`] never
    /// changes a socket's interest: fixed-interest or edge-triggered.
    pub const fn keeps_both(&self) -> bool {
        self.fixed_interest || self.edge_triggered
    }

    /// For a handler registering by [`Caps::first_interest_kept`]: the
    /// interest to re-register a socket with now, or `None` to leave its
    /// registration (`registered`) as it is.
    ///
    /// - Where interest changes (level-triggered, not fixed): `want`.
    /// - Edge-triggered: both directions, except while the kernel writes into
    ///   the socket without weft (`kernel_writes`: a sockmap redirect into
    ///   it): then the end of stream alone, since each batch's write-space
    ///   wake-up would reach the loop to find nothing to do, and the
    ///   redirect's end marker, an error, is reported whatever the interest.
    ///   A socket deregistered (registered as [`Interest::NONE`], which these
    ///   backends never register) stays so.
    /// - Fixed and level-triggered (epoll-once): never changed.
    pub fn reregistration(&self, registered: Interest, want: Interest, kernel_writes: bool) -> Option<Interest> {
        let target = if !self.keeps_both() {
            want
        } else if !self.edge_triggered || registered == Interest::NONE {
            return None;
        } else if kernel_writes {
            Interest::HANGUP
        } else {
            Interest::BOTH
        };
        (target != registered).then_some(target)
    }
}

/// An event notification mechanism.
pub trait Poller: Sized {
    /// What this backend can do.
    const CAPS: Caps;
    /// Create the backend.
    fn new() -> io::Result<Self>;
    /// Start watching `fd`.
    fn add(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()>;
    /// Change what `fd` is watched for.
    fn modify(&mut self, fd: RawFd, token: Token, interest: Interest) -> io::Result<()>;
    /// Stop watching `fd`.
    fn delete(&mut self, fd: RawFd) -> io::Result<()>;
    /// Wait up to `timeout` (None = forever) and append ready events to `events`.
    fn wait(&mut self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()>;
    /// `fd` is about to be closed: forget anything queued for it (batched
    /// backends) so a later registration of the same number is not confused.
    fn forget(&mut self, _fd: RawFd) {}
    /// Apply settings (default: none apply).
    fn configure(&mut self, _opts: &BackendOptions) {}
    /// What the handler's I/O on `fd` taught it (backends with
    /// `CAPS.tracks_readiness`; the others ignore it).
    #[inline(always)]
    fn learned(&mut self, _fd: RawFd, _ready: Readiness) {}
    /// The handler's I/O on `fd` used up the directions set in `gone` (an
    /// EAGAIN or short transfer); the other directions stay as the backend
    /// knows them (backends with `CAPS.tracks_readiness`; see `Ctx::settled`).
    #[inline(always)]
    fn used_up(&mut self, _fd: RawFd, _gone: Readiness) {}
    /// The tracker's counters, for backends that track readiness.
    fn tracker_stats(&self) -> Option<TrackerStats> {
        None
    }
}

/// Milliseconds for poll-style timeouts, rounding up so a timer is never woken early.
pub(crate) fn timeout_ms(timeout: Option<Duration>) -> i32 {
    match timeout {
        None => -1,
        Some(d) => {
            let ms = d.as_nanos().div_ceil(1_000_000);
            ms.min(i32::MAX as u128) as i32
        }
    }
}

/// The backends selectable with `--event`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BackendKind {
    /// select(2) with a refusal above FD_SETSIZE.
    Select,
    /// poll(2).
    Poll,
    /// epoll, level-triggered, interest updated as a connection's needs change.
    #[default]
    Epoll,
    /// epoll, edge-triggered, registered once for both directions.
    EpollEt,
    /// epoll level-triggered, registered once for both directions and removed
    /// only at close (the µserver study's epoll2).
    EpollOnce,
    /// epoll level-triggered with interest changes queued and applied together
    /// before each wait, in one io_uring_enter when io_uring works (epoll_ctlv).
    EpollBatched,
    /// io_uring multishot polls; completions read from the shared ring without
    /// a system call whenever it is not empty.
    Uring,
    /// User-level readiness tracking (uselect) over `uring`.
    Tracked,
    /// User-level readiness tracking over edge-triggered epoll.
    TrackedEpollEt,
    /// User-level readiness tracking over level-triggered epoll.
    TrackedEpoll,
    /// User-level readiness tracking over poll(2).
    TrackedPoll,
    /// User-level readiness tracking over select(2) (the paper's uselect).
    TrackedSelect,
}

impl BackendKind {
    /// A user-level readiness tracker: only for handlers that report every
    /// EAGAIN and short transfer (`Ctx::learned`); any other handler would be
    /// handed its descriptors again at every pass.
    pub fn is_tracked(self) -> bool {
        matches!(
            self,
            BackendKind::Tracked
                | BackendKind::TrackedEpollEt
                | BackendKind::TrackedEpoll
                | BackendKind::TrackedPoll
                | BackendKind::TrackedSelect
        )
    }

    /// Every backend, in the order `weft backends` lists them.
    pub const ALL: &'static [BackendKind] = &[
        BackendKind::Select,
        BackendKind::Poll,
        BackendKind::Epoll,
        BackendKind::EpollEt,
        BackendKind::EpollOnce,
        BackendKind::EpollBatched,
        BackendKind::Uring,
        BackendKind::Tracked,
        BackendKind::TrackedEpollEt,
        BackendKind::TrackedEpoll,
        BackendKind::TrackedPoll,
        BackendKind::TrackedSelect,
    ];

    /// The `--event` name.
    pub fn name(self) -> &'static str {
        crate::with_backend!(self, P => P::CAPS.name)
    }

    /// Can this backend be created here?
    pub fn probe(self) -> io::Result<()> {
        crate::with_backend!(self, P => P::new().map(drop))
    }

    /// The accepted names, for error messages.
    pub fn names() -> String {
        Self::ALL.iter().map(|b| b.name()).collect::<Vec<_>>().join("|")
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "tracked:uring" {
            return Ok(BackendKind::Tracked);
        }
        Self::ALL
            .iter()
            .copied()
            .find(|b| b.name() == s)
            .ok_or_else(|| format!("unknown event backend `{s}` (expected {})", Self::names()))
    }
}

/// Call `$body` with the type alias `$P` bound to the backend chosen at run time:
/// the one place where a run-time choice becomes a compile-time type, so each
/// backend gets a monomorphized event loop.
#[macro_export]
macro_rules! with_backend {
    ($kind:expr, $P:ident => $body:expr) => {
        $crate::with_backend!(@each $kind, $P => $body;
            Select => $crate::backend::Select,
            Poll => $crate::backend::Poll,
            Epoll => $crate::backend::Epoll,
            EpollEt => $crate::backend::EpollEt,
            EpollOnce => $crate::backend::EpollOnce,
            EpollBatched => $crate::backend::EpollBatched,
            Uring => $crate::backend::Uring,
            Tracked => $crate::backend::Tracked<$crate::backend::Uring>,
            TrackedEpollEt => $crate::backend::Tracked<$crate::backend::EpollEt>,
            TrackedEpoll => $crate::backend::Tracked<$crate::backend::Epoll>,
            TrackedPoll => $crate::backend::Tracked<$crate::backend::Poll>,
            TrackedSelect => $crate::backend::Tracked<$crate::backend::Select>,
        )
    };
    (@each $kind:expr, $P:ident => $body:expr; $($variant:ident => $ty:ty,)+) => {
        match $kind {
            $($crate::BackendKind::$variant => {
                type $P = $ty;
                $body
            })+
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The re-registration rule of the handlers that keep both directions,
    /// backend by backend (the proxy's `settle` follows it).
    #[test]
    fn reregistration_by_backend() {
        let (b, h, n, r) = (Interest::BOTH, Interest::HANGUP, Interest::NONE, Interest::READ);
        fn caps<P: Poller>() -> Caps {
            P::CAPS
        }
        // Level-triggered with changing interest: whatever is wanted, kernel or not.
        for c in [
            caps::<Epoll>(),
            caps::<Poll>(),
            caps::<Select>(),
            caps::<Tracked<Uring>>(),
        ] {
            assert_eq!(c.reregistration(b, r, false), Some(r), "{}", c.name);
            assert_eq!(c.reregistration(b, h, true), Some(h), "{}", c.name);
            assert_eq!(c.reregistration(r, r, true), None, "{}", c.name);
        }
        // Edge-triggered: both directions, the end of stream alone while the
        // kernel writes into the socket, a deregistered socket left alone.
        for c in [caps::<EpollEt>(), caps::<Uring>()] {
            assert_eq!(c.reregistration(b, r, false), None, "{}", c.name);
            assert_eq!(c.reregistration(b, r, true), Some(h), "{}", c.name);
            assert_eq!(c.reregistration(h, n, true), None, "{}", c.name);
            assert_eq!(c.reregistration(h, r, false), Some(b), "{}", c.name);
            assert_eq!(c.reregistration(n, r, true), None, "{}", c.name);
        }
        // Fixed and level-triggered: never.
        let once = caps::<EpollOnce>();
        assert_eq!(once.reregistration(b, h, true), None);
        assert_eq!(once.reregistration(b, r, false), None);
    }
}
