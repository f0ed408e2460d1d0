//! Admission to the page cache by reuse distance (`--page-cache-admit
//! reuse`, AMPED only).
//!
//! weft's file bytes live in the kernel's page cache, not in a cache of its
//! own (thesis 004 §2.1: one copy), so the kernel's replacement decides what
//! stays. Its two lists keep a page used twice over one used once, but every
//! large file fetched from the disk still passes through the inactive list
//! and pushes out pages that would have been used again. Under a
//! Zipf-like load (SPECweb99) most of the bytes read from the disk belong to
//! large files of unpopular directories, requested once in the time the
//! cache takes to turn over: caching them buys nothing.
//!
//! This module gives the kernel weft's knowledge of reuse. The clock is the
//! bytes the helpers were asked to bring in (the cache's inflow as weft sees
//! it). Each file of at least [`ADMIT_MIN`] bytes remembers the clock at its
//! last request. When a request finds that more than the horizon (the
//! `--file-cache` budget, the page cache weft counts on) flowed in since the
//! file's previous request (or it has none), the file is not expected to be
//! found again either: once its response is sent, `posix_fadvise(DONTNEED)`
//! drops its pages. A file requested again within the horizon is kept: the
//! second hit admits it, as in 2Q.
//!
//! The drop waits until no response and no helper holds the file (the
//! cache's entry is the only reference), then [`DROP_AFTER`] more so the
//! kernel has sent the last bytes (pages still in a socket's queue, or still
//! mapped by a chunk a response holds, are not dropped: the advice is best
//! effort and the counters count advice given). A send in progress never
//! finds its pages gone and the loop never reads from the disk; the file's
//! residency is forgotten, so its next request asks a helper again.

use crate::files::{CachedFile, FileCache};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Files smaller than this are always kept: their pages cost little, and a
/// drop is a system call.
pub const ADMIT_MIN: u64 = 64 * 1024;
/// How long after its response is queued a file's drop is first tried (a
/// response to a nearby client has left by then).
const DROP_AFTER: Duration = Duration::from_millis(20);
/// How often a drop whose file is still in use is tried again before it is
/// given up (about a second in all).
const DROP_TRIES: u8 = 50;
/// Drops waiting at most; past it new candidates are not queued (a server
/// this busy with one-timers drops what it can).
const PENDING_MAX: usize = 4096;

/// A file whose pages are to be dropped.
struct PendingDrop {
    /// When to look at it next.
    at: Instant,
    /// Its path key in the file cache.
    key: Box<[u8]>,
    /// Looks left while a response or helper holds it.
    tries: u8,
    /// Nothing held it at the last look: its last bytes were written to
    /// the socket; drop at the next look, once the kernel has sent them.
    free: bool,
}

/// Which files' pages stay in the page cache after their response.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PageCacheAdmit {
    /// Every page the kernel chooses to keep (no advice).
    #[default]
    All,
    /// Large files requested again within the horizon; the others' pages are
    /// dropped after their response.
    Reuse,
}

weft_core::enum_names!(PageCacheAdmit, error = "invalid page cache admission `{s}` (all or reuse)", {
    All => "all",
    Reuse => "reuse",
});

/// One worker's admission state.
pub(crate) struct Admission {
    /// Bytes the helpers were asked to load since the worker started.
    clock: u64,
    /// Reuse distance (bytes of inflow) beyond which a file is dropped.
    horizon: u64,
    /// Files to drop once nothing holds them.
    pending: VecDeque<PendingDrop>,
    /// Files whose pages were dropped, and their bytes.
    pub(crate) dropped_files: u64,
    pub(crate) dropped_bytes: u64,
}

impl Admission {
    /// Admission with a reuse horizon of `horizon` bytes of inflow.
    pub(crate) fn new(horizon: u64) -> Admission {
        Admission {
            clock: 0,
            horizon: horizon.max(1),
            pending: VecDeque::new(),
            dropped_files: 0,
            dropped_bytes: 0,
        }
    }

    /// A helper was asked to bring `len` bytes into the page cache.
    pub(crate) fn loaded(&mut self, len: u64) {
        self.clock += len;
    }

    /// A response body from `f` (path key `rel`) was queued at `now`: decide
    /// whether its pages stay, and queue the drop if not.
    pub(crate) fn sent(&mut self, f: &CachedFile, rel: &[u8], now: Instant) {
        if f.stat.size < ADMIT_MIN {
            return;
        }
        let previous = f.reuse_at.replace(Some(self.clock));
        if !self.beyond_horizon(previous) {
            // A drop already queued is called off by a request within the horizon.
            f.condemned.set(false);
            return;
        }
        if f.condemned.get() || self.pending.len() >= PENDING_MAX {
            return; // queued already, or too many queued
        }
        f.condemned.set(true);
        // The key is the one allocation here, once per large one-timer:
        // against a send of 64 KiB or more it does not show.
        self.pending.push_back(PendingDrop {
            at: now + DROP_AFTER,
            key: rel.into(),
            tries: DROP_TRIES,
            free: false,
        });
    }

    /// Is a file last requested at `previous` (the clock then) too far back
    /// to be found in the cache next time?
    fn beyond_horizon(&self, previous: Option<u64>) -> bool {
        previous.is_none_or(|at| self.clock - at > self.horizon)
    }

    /// When [`Admission::run`] has work next.
    pub(crate) fn due(&self) -> Option<Instant> {
        self.pending.front().map(|d| d.at)
    }

    /// Drop the pages of the files whose time has come and that nothing
    /// holds now; try the held ones again later.
    pub(crate) fn run(&mut self, now: Instant, files: &mut FileCache) {
        let mut again = Vec::new();
        while self.pending.front().is_some_and(|d| d.at <= now) {
            let Some(mut d) = self.pending.pop_front() else { break };
            // Gone from the cache (evicted or replaced): its descriptor is
            // closed or another entry's; leave its pages to the kernel.
            let Some(f) = files.peek(&d.key).map(Rc::clone) else {
                continue;
            };
            if !f.condemned.get() {
                // Requested again within the horizon since: kept.
                continue;
            }
            if held_elsewhere(&f) {
                // A response is still being written, or a helper loads it.
                d.free = false;
                d.tries = d.tries.saturating_sub(1);
            } else if !d.free {
                // Written to the socket; the kernel holds the last pages
                // until they are sent (and acknowledged): one more wait.
                d.free = true;
            } else {
                // Mapped pages are not dropped: a streamed body's chunks go first.
                files.unmap_chunks(&f);
                if weft_io::sys::residency::advise_dontneed(&*f.fd, 0, f.stat.size).is_ok() {
                    self.dropped_files += 1;
                    self.dropped_bytes += f.stat.size;
                }
                f.resident_at.set(None);
                f.condemned.set(false);
                continue;
            }
            if d.tries > 0 {
                d.at = now + DROP_AFTER;
                again.push(d);
            } else {
                f.condemned.set(false);
            }
        }
        // Later than everything still queued: the queue stays in time order.
        self.pending.extend(again);
    }
}

/// Does anything but the cache and the caller's one clone hold `f` (a
/// response's output chain or feed, a blocked send's snapshot, a helper's
/// job)?
fn held_elsewhere(f: &Rc<CachedFile>) -> bool {
    Rc::strong_count(f) > 2 || Arc::strong_count(&f.fd) > 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_kept_only_when_requested_again_within_the_horizon() {
        let mut a = Admission::new(100);
        assert!(a.beyond_horizon(None), "first sight: dropped");
        a.loaded(40);
        assert!(!a.beyond_horizon(Some(0)), "40 bytes of inflow since: kept");
        a.loaded(61);
        assert!(a.beyond_horizon(Some(0)), "101 bytes since: dropped");
        assert!(!a.beyond_horizon(Some(1)), "exactly the horizon: kept");
    }

    #[test]
    fn parses_its_flag_values() {
        assert_eq!("reuse".parse(), Ok(PageCacheAdmit::Reuse));
        assert_eq!("all".parse(), Ok(PageCacheAdmit::All));
        assert!("lru".parse::<PageCacheAdmit>().is_err());
    }
}
