//! A worker's sockmap forwarder (`--splice sockmap`, crate weft-sockmap),
//! shared by the two things it forwards in the kernel: CONNECT tunnels
//! (`tunnel/kernel.rs`) and non-cacheable response bodies of known length
//! (`relay/kernel.rs`).
//!
//! Loaded at a worker's first sockmap tunnel or body (not at start: a
//! `--user` switch may not have happened yet); where BPF is not permitted
//! weft says so once and both splice instead. Bodies also need the kernel to
//! carry a body as the body path assumes (checked at load by weft-sockmap's
//! self-test); where it does not, weft says so once and bodies splice while
//! tunnels still use the sockmap.

use std::cell::RefCell;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weft_sockmap::{Body, Forwarder};

/// The count [`KernelFwd::check`] compares with the bytes the program
/// redirected.
#[derive(Clone, Copy, Debug)]
pub enum Seen {
    /// Bytes the source socket received after the join.
    Received,
    /// Bytes the destination socket was written after the join.
    Written,
    /// Bytes weft read from a source whose direction it took over (what
    /// the program passed up, and no more).
    Taken,
}

/// A worker's sockmap forwarder: not tried yet, loaded, or unavailable.
#[derive(Default)]
pub enum KernelFwd {
    /// Not needed yet (loaded at the worker's start, or at the first
    /// `--splice sockmap` tunnel).
    #[default]
    Untried,
    /// Loaded and attached.
    Ready(Box<Forwarder>),
    /// BPF is not permitted (or not built): tunnels and bodies splice.
    Unavailable,
}

/// Said once per process when sockmap forwarding is unavailable.
static SAID: AtomicBool = AtomicBool::new(false);

/// Said once per process when the event backend cannot carry sockmap.
static SAID_BACKEND: AtomicBool = AtomicBool::new(false);

/// Said once per process when bodies cannot be carried (tunnels can).
static SAID_BODIES: AtomicBool = AtomicBool::new(false);

/// Said once per process when a tunnel's passed bytes could not be placed.
static SAID_UNPLACED: AtomicBool = AtomicBool::new(false);

/// Set (and said) once forwarded streams' socket counts have disagreed with
/// the bytes the program redirected ([`KernelFwd::check`]) more often than
/// [`distrusted`] tolerates: from then on every worker's new tunnels and
/// bodies splice (those in the kernel finish there, each checked the same
/// way).
static DISTRUSTED: AtomicBool = AtomicBool::new(false);

/// Said once per process at the first mismatch.
static SAID_MISMATCH: AtomicBool = AtomicBool::new(false);

/// Streams (tunnels and bodies) joined in this process, and the
/// mismatches caught among them (each ends its stream: one per stream).
static JOINED: AtomicU64 = AtomicU64::new(0);
static MISMATCHED: AtomicU64 = AtomicU64::new(0);

/// A kernel caught more than once per this many streams is not used again.
const TOLERATED_ONE_IN: u64 = 1000;

/// Whether `mismatched` faults among `joined` streams are more than a rare
/// kernel fault: from the second on, more than one per [`TOLERATED_ONE_IN`]
/// streams. One fault, as Linux 6.18 showed about once in 20,000–40,000
/// tunnels, costs that stream a reset, caught; turning sockmap off for the
/// process's life at the first would lose the forwarding for everyone
/// after it. A kernel that forwards wrong often (a regression, a broken
/// backport) is switched off as soon as its faults pass that rate.
fn distrusted(mismatched: u64, joined: u64) -> bool {
    mismatched >= 2 && mismatched.saturating_mul(TOLERATED_ONE_IN) > joined
}

thread_local! {
    /// Bodies dropped while still in the maps (a transaction closed by a
    /// timeout or an error path that had no forwarder at hand): their
    /// entries are taken out at the worker's next body join or ring event.
    static ORPHANS: RefCell<Vec<Body>> = const { RefCell::new(Vec::new()) };
}

/// Hand a body still in the maps to the worker's next [`KernelFwd::reap`].
pub(crate) fn orphan(body: Body) {
    ORPHANS.with(|o| o.borrow_mut().push(body));
}

/// The `sockmap_stamp_records` gauge: the `stamps` map counted at most once
/// a second (a map walk is a system call per record; none are there
/// normally), and once more at exit.
#[derive(Debug, Default)]
pub struct StampGauge {
    counted_at: Option<Instant>,
    records: u64,
}

/// Records a count walks at most (a system call each, once a second): a
/// gauge at this value means at least this many. Stalled takeovers hold
/// about 45 each (docs/proxy.md), so it is reached at about 90 of them.
const STAMP_COUNT_MAX: usize = 4096;

impl StampGauge {
    /// The last count.
    pub fn last(&self) -> u64 {
        self.records
    }

    /// Count again if a second has passed since the last count (or `now`
    /// is None: at exit).
    pub fn refresh(&mut self, fwd: &KernelFwd, now: Option<Instant>) {
        let KernelFwd::Ready(f) = fwd else { return };
        let due = match (now, self.counted_at) {
            (Some(now), Some(at)) => now.duration_since(at) >= Duration::from_secs(1),
            _ => true,
        };
        if due {
            self.records = f.stamp_records(STAMP_COUNT_MAX) as u64;
            self.counted_at = now;
        }
    }
}

impl KernelFwd {
    /// Whether sockmap may be used under event backend `name`: the marker
    /// is an error on a socket registered with no interest, which epoll,
    /// poll and uring report and select and the user-level trackers do not.
    /// Says so once when not.
    pub fn backend_fits(name: &str, tracks_readiness: bool) -> bool {
        let fits = name != "select" && !tracks_readiness;
        if !fits && !SAID_BACKEND.swap(true, Ordering::Relaxed) {
            weft_core::stderr_line!(
                "weft proxy: --splice sockmap needs --event epoll, poll or uring (not {name}); tunnels and bodies splice instead"
            );
        }
        fits
    }

    /// Check one direction of a tunnel or body forwarded in the kernel:
    /// its source received (`Seen::Received`) or its destination was
    /// written (`Seen::Written`) `seen` bytes since the join, and the
    /// program redirected `redirected`. Equal is the norm. Otherwise (or
    /// when the count could not be read) the caller resets the connections,
    /// since the bytes cannot be taken back; if such faults come more often
    /// than [`distrusted`] tolerates, new tunnels and bodies splice from
    /// now on. Seen on Linux 6.18: the first bytes of an skb handed to the
    /// program twice (docs/proxy.md, "A kernel that forwards a byte
    /// twice").
    pub fn check(seen: Seen, count: Option<u64>, redirected: u64, st: &mut crate::stats::ProxyStats) -> bool {
        if count == Some(redirected) {
            return true;
        }
        st.sockmap_mismatches += 1;
        let mismatched = MISMATCHED.fetch_add(1, Ordering::Relaxed) + 1;
        let joined = JOINED.load(Ordering::Relaxed);
        if !SAID_MISMATCH.swap(true, Ordering::Relaxed) {
            let count = count.map_or_else(|| "an unknown number of".to_string(), |n| n.to_string());
            let (what, did) = match seen {
                Seen::Received => ("received", "redirected"),
                Seen::Written => ("was written", "redirected"),
                Seen::Taken => ("gave weft", "passed up"),
            };
            weft_core::stderr_line!(
                "weft proxy: --splice sockmap: a socket {what} {count} bytes where the program {did} \
                 {redirected}; that connection was reset (sockmap_mismatches counts them; more than \
                 one in {TOLERATED_ONE_IN} streams turns sockmap off)"
            );
        }
        if distrusted(mismatched, joined) && !DISTRUSTED.swap(true, Ordering::Relaxed) {
            weft_core::stderr_line!(
                "weft proxy: --splice sockmap: {mismatched} of {joined} streams forwarded in the kernel \
                 were caught wrong; new tunnels and bodies splice from now on"
            );
        }
        false
    }

    /// A tunnel or body joined the maps: one more stream the faults are
    /// weighed against ([`distrusted`]).
    pub fn note_joined() {
        JOINED.fetch_add(1, Ordering::Relaxed);
    }

    /// A taken-over tunnel's passed bytes could not be put in order by
    /// their stamps (`e` says why): counted, said once; the caller resets
    /// that tunnel. Not a reason to distrust the kernel: the usual cause is
    /// a resource (a full `stamps` map) or a short skb's partial stamp.
    pub fn unplaced(e: weft_sockmap::Unplaced, st: &mut crate::stats::ProxyStats) {
        st.sockmap_unplaced += 1;
        if !SAID_UNPLACED.swap(true, Ordering::Relaxed) {
            weft_core::stderr_line!("weft proxy: --splice sockmap: {e}; that tunnel was reset");
        }
    }

    /// The forwarder for a new tunnel or body, loaded at the first call;
    /// None where BPF is unavailable (said once) or the kernel was caught
    /// forwarding other bytes than it was given ([`KernelFwd::check`]).
    pub fn get(&mut self) -> Option<&mut Forwarder> {
        if DISTRUSTED.load(Ordering::Relaxed) {
            return None;
        }
        if matches!(self, KernelFwd::Untried) {
            *self = match Forwarder::load() {
                Ok(f) => KernelFwd::Ready(Box::new(f)),
                Err(e) => {
                    if !SAID.swap(true, Ordering::Relaxed) {
                        weft_core::stderr_line!(
                            "weft proxy: --splice sockmap unavailable ({e}); tunnels and bodies splice instead"
                        );
                    }
                    KernelFwd::Unavailable
                }
            };
        }
        match self {
            KernelFwd::Ready(f) => Some(f),
            _ => None,
        }
    }

    /// The forwarder if it carries response bodies (said once when it
    /// cannot, with the self-test's reason).
    pub fn bodies(&mut self) -> Option<&mut Forwarder> {
        let f = self.get()?;
        if let Err(why) = f.bodies() {
            if !SAID_BODIES.swap(true, Ordering::Relaxed) {
                weft_core::stderr_line!("weft proxy: --splice sockmap cannot carry response bodies here ({why}); they splice, tunnels use the sockmap");
            }
            return None;
        }
        Some(f)
    }

    /// The loaded forwarder, without loading it.
    pub fn ready(&mut self) -> Option<&mut Forwarder> {
        match self {
            KernelFwd::Ready(f) => Some(f),
            _ => None,
        }
    }

    /// The ring the verdicts post finished bodies and tunnels past their
    /// budget to (the worker polls it).
    pub fn ring_fd(&mut self) -> Option<RawFd> {
        self.get().map(|f| f.ring_fd())
    }

    /// Take orphaned bodies out of the maps.
    pub fn reap(&mut self) {
        let Some(f) = self.ready() else { return };
        ORPHANS.with(|o| {
            for body in o.borrow_mut().drain(..) {
                f.leave_body(body);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::ProxyStats;

    #[test]
    fn a_mismatch_is_counted_and_new_sessions_splice() {
        let mut st = ProxyStats::default();
        assert!(KernelFwd::check(Seen::Written, Some(7), 7, &mut st));
        assert_eq!(st.sockmap_mismatches, 0);
        assert!(!KernelFwd::check(Seen::Received, Some(7), 60, &mut st));
        assert!(
            !KernelFwd::check(Seen::Received, None, 60, &mut st),
            "a count that could not be read fails too"
        );
        assert_eq!(st.sockmap_mismatches, 2);
        // No stream joined here: two faults in no streams is past any rate.
        let mut fwd = KernelFwd::Untried;
        assert!(fwd.get().is_none(), "new tunnels and bodies splice");
        assert!(matches!(fwd, KernelFwd::Untried), "nothing is loaded for them");
    }

    #[test]
    fn one_fault_is_tolerated_a_second_within_a_thousand_streams_is_not() {
        assert!(!distrusted(0, 0));
        assert!(!distrusted(1, 0), "the first fault alone never switches sockmap off");
        assert!(!distrusted(1, 5));
        assert!(distrusted(2, 5));
        assert!(distrusted(2, 1999));
        assert!(!distrusted(2, 2000), "two in 2,000 streams: one in a thousand");
        assert!(!distrusted(30, 40_000));
        assert!(distrusted(41, 40_000));
        assert!(distrusted(u64::MAX, u64::MAX - 1));
    }
}
