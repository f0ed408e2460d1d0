//! Whether a worker's published counters are current.
//!
//! A worker publishes its counters at the end of each event-loop batch
//! ([`Slot::publish`](super::Slot::publish) from the role's `after_batch`).
//! Between the write that completes a response and that publication there is
//! a window: a client that has read the response and then asks the admin
//! endpoint for `/stats` can be faster than the end of the batch, most of all
//! on a loaded machine where the worker is preempted right after its write.
//! The document would then lack the request the client just saw answered.
//!
//! [`PublishClock`] closes that window without waking the worker or adding
//! anything to its system calls: the event loop counts each batch twice, at
//! its start (odd: counters not yet published) and after `after_batch` (even:
//! published). A reader that finds a clock even knows that every batch which
//! ran before it looked has been published, because a worker waiting for
//! events has nothing unpublished; one that finds it odd waits until the
//! clock moves, which is at most the rest of one batch. [`settle`] does that
//! for every worker of a role, bounded in time, before the admin endpoint
//! renders a document.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A worker's batch count: odd while a batch runs, even once its counters
/// are published (see the module doc). Written only by its worker, twice per
/// batch (plain stores, no read-modify-write); on a cache line of its own so
/// that two workers' clocks never share one.
#[derive(Default, Debug)]
#[repr(align(64))]
pub struct PublishClock(AtomicU64);

impl PublishClock {
    /// A batch begins: what it does is not published yet.
    #[inline]
    pub fn batch_begins(&self) {
        let v = self.0.load(Ordering::Relaxed);
        debug_assert!(v & 1 == 0, "a batch began inside another");
        self.0.store(v | 1, Ordering::Release);
    }

    /// The batch's counters are published.
    #[inline]
    pub fn published(&self) {
        let v = self.0.load(Ordering::Relaxed);
        self.0.store((v | 1) + 1, Ordering::Release);
    }

    /// The count now (tests).
    pub fn read(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// How long [`settle`] waits at most for every worker together. A batch
/// lasts micro- to milliseconds; a worker stuck longer (a blocking read under
/// `--arch sped`) is rendered as it last published.
pub const SETTLE_LIMIT: Duration = Duration::from_millis(200);

/// Wait until no clock of `clocks` is inside the batch it was in when this
/// was called (each either even, or moved on), or until `limit` has passed.
/// Returns false if the limit cut the wait short.
pub fn settle<'a>(clocks: impl IntoIterator<Item = &'a PublishClock>, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    for c in clocks {
        let v = c.0.load(Ordering::Acquire);
        if v & 1 == 0 {
            continue;
        }
        // A cold path (one admin request): sleeping lets a preempted worker
        // have the CPU it needs to finish its batch.
        while c.0.load(Ordering::Acquire) == v {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn even_is_current_odd_waits_for_the_batch_to_end() {
        let clock = Arc::new(PublishClock::default());
        assert!(settle([&*clock], Duration::ZERO), "no batch yet");
        clock.batch_begins();
        assert_eq!(clock.read(), 1);
        assert!(
            !settle([&*clock], Duration::from_millis(5)),
            "inside a batch: the limit ends the wait"
        );
        let published = Arc::new(AtomicBool::new(false));
        let (c, p) = (clock.clone(), published.clone());
        let worker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            p.store(true, Ordering::Relaxed);
            c.published();
        });
        assert!(settle([&*clock], Duration::from_secs(10)));
        assert!(
            published.load(Ordering::Relaxed),
            "settle returned before the batch's counters were out"
        );
        worker.join().unwrap();
        assert_eq!(clock.read(), 2);
        // A clock that moved on into its next batch has published the one
        // that was running.
        clock.batch_begins();
        let c = clock.clone();
        let worker = std::thread::spawn(move || {
            c.published();
            c.batch_begins();
        });
        worker.join().unwrap();
        assert_eq!(clock.read(), 5);
        assert!(!settle([&*clock], Duration::ZERO), "odd now: this batch is running");
    }

    #[test]
    fn clocks_keep_to_their_own_cache_lines() {
        assert_eq!(std::mem::align_of::<PublishClock>(), 64);
        let two = [PublishClock::default(), PublishClock::default()];
        let a = &two[0] as *const PublishClock as usize;
        let b = &two[1] as *const PublishClock as usize;
        assert_eq!(b - a, 64);
    }
}
