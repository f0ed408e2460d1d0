//! Collapsed forwarding: concurrent misses for one cache key wait for the
//! first one's fill instead of each asking the origin (Varnish's request
//! coalescing, nginx's `proxy_cache_lock`, Squid's `collapsed_forwarding`).
//! An object that becomes popular while it is not cached (a cold start, a
//! purge, an expiry under load) costs the origin one request, not one per
//! waiting client.
//!
//! - A cacheable GET that misses **leads** the key's fill when no fill is
//!   under way: it goes upstream as before, holding the key.
//! - A GET that misses while a fill for its key is under way **waits**: it
//!   parks (as a request waiting for a disk load does) until the fill ends,
//!   then is answered again, once, from the cache or, if the fill left
//!   nothing it can use (another Vary variant, a failed fill), from the
//!   origin without waiting again.
//! - A waiter waits [`WAIT_MAX`] at most, then asks the origin itself.
//! - The fill ends when its object is stored (waiters get hits), when the
//!   response turns out not storable (at its head: the waiters go upstream
//!   at once, and the key **passes** for [`PASS_FOR`]: its misses go straight
//!   upstream without waiting, Varnish's hit-for-pass, so uncacheable URLs
//!   are never serialized behind each other), or when the transaction fails.
//!
//! Only a plain GET leads (no Range, no conditional: their answers, a 206
//! or a 304, are never stored, and would mark a cacheable URL as passing).
//! With range fills on (`background.rs`), a Range request does not wait
//! either: it is forwarded, so a seek into a large file never waits for the
//! whole of it.
//! The registry is one mutex-held map for the process; each worker is woken
//! through its own mailbox.

use std::collections::HashMap;
use std::io;
use std::os::fd::RawFd;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use weft_io::mailbox::Mailboxes;
use weft_io::Token;

/// How long a request waits for another's fill at most before it asks the
/// origin itself (nginx's `proxy_cache_lock_timeout` default): a slow or
/// large fill does not hold its waiters for its whole transfer.
pub const WAIT_MAX: Duration = Duration::from_secs(5);
/// How long a key whose response was not storable goes straight upstream.
pub const PASS_FOR: Duration = Duration::from_secs(60);
/// Keys remembered as passing at most (the oldest are dropped beyond it).
const PASS_MAX: usize = 4096;
/// Requests one fill holds back at most; more go upstream themselves.
const WAITERS_MAX: usize = 4096;

/// What a miss does about its key's fill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Join {
    /// No fill under way: this request leads one (and must end it).
    Lead,
    /// A fill is under way: the request waits for the wake-up.
    Wait,
    /// Go upstream without a fill: the key passes, the request may not lead,
    /// or too many wait already.
    Pass,
}

/// How a fill ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The object was handed to the cache.
    Stored,
    /// The response may not be stored: the key passes for a while.
    Uncacheable,
    /// The transaction failed or was abandoned.
    Failed,
}

/// A request woken because the fill it waited for ended: its worker-local
/// token and the number of its park.
pub type Woken = (Token, u64);

/// A waiting request: its worker, its token there and its park number.
type Waiter = (usize, Token, u64);

#[derive(Default)]
struct State {
    /// Keys being filled → the requests waiting: (worker, token, park).
    filling: HashMap<Box<[u8]>, Vec<Waiter>>,
    /// Keys whose last fill was not storable → until when they pass.
    pass: HashMap<Box<[u8]>, Instant>,
}

/// The process's fills under way and its workers' wake-up mailboxes.
pub struct Fills {
    state: Mutex<State>,
    mail: Mailboxes<Woken>,
}

impl Fills {
    /// A registry for `workers` workers.
    pub fn new(workers: usize) -> io::Result<Fills> {
        Ok(Fills {
            state: Mutex::new(State::default()),
            mail: Mailboxes::new(workers)?,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The eventfd `worker` watches for wake-ups.
    pub fn waker(&self, worker: usize) -> RawFd {
        self.mail.waker(worker)
    }

    /// Requests of `worker` whose fill ended, appended to `out`.
    pub fn take(&self, worker: usize, out: &mut Vec<Woken>) {
        self.mail.take(worker, out);
    }

    /// A miss for `key` by `(worker, token)`, park number `park`: lead its
    /// fill, wait for the one under way, or pass. `may_lead`: a plain GET,
    /// whose answer can fill the cache.
    pub fn join(&self, key: &[u8], may_lead: bool, (worker, token, park): Waiter, now: Instant) -> Join {
        let mut s = self.lock();
        if let Some(&until) = s.pass.get(key) {
            if until > now {
                return Join::Pass;
            }
            s.pass.remove(key);
        }
        match s.filling.get_mut(key) {
            Some(w) if w.len() < WAITERS_MAX => {
                w.push((worker, token, park));
                Join::Wait
            }
            Some(_) => Join::Pass,
            None if may_lead => {
                // One copy of the key per fill (a miss that leads), not per
                // request; the pass check above allocates nothing.
                s.filling.insert(key.into(), Vec::new());
                Join::Lead
            }
            None => Join::Pass,
        }
    }

    /// The fill of `key` ended with `outcome`: every waiter is woken (by its
    /// worker's mailbox), and an uncacheable key passes from now on.
    pub fn finish(&self, key: &[u8], outcome: Outcome, now: Instant) {
        let waiters = {
            let mut s = self.lock();
            if outcome == Outcome::Uncacheable {
                if s.pass.len() >= PASS_MAX {
                    s.pass.retain(|_, until| *until > now);
                    if s.pass.len() >= PASS_MAX {
                        // All still passing: forget them (they only cost a
                        // wait for the next fill of each).
                        s.pass.clear();
                    }
                }
                s.pass.insert(key.into(), now + PASS_FOR);
            }
            s.filling.remove(key)
        };
        for (worker, token, park) in waiters.into_iter().flatten() {
            self.mail.post(worker, (token, park));
        }
    }

    /// Fills under way and keys passing (for tests and the admin page).
    pub fn counts(&self) -> (usize, usize) {
        let s = self.lock();
        (s.filling.len(), s.pass.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seat(worker: usize, t: u32, park: u64) -> Waiter {
        (worker, Token::new(t, 0), park)
    }

    #[test]
    fn the_first_miss_leads_the_others_wait_and_are_woken() {
        let f = Fills::new(2).unwrap();
        let now = Instant::now();
        assert_eq!(f.join(b"k", true, seat(0, 1, 0), now), Join::Lead);
        assert_eq!(f.join(b"k", true, seat(1, 2, 5), now), Join::Wait);
        assert_eq!(f.join(b"k", false, seat(0, 3, 6), now), Join::Wait, "a HEAD may wait");
        assert_eq!(
            f.join(b"other", false, seat(0, 4, 7), now),
            Join::Pass,
            "only a plain GET leads"
        );
        f.finish(b"k", Outcome::Stored, now);
        let (mut w0, mut w1) = (Vec::new(), Vec::new());
        f.take(0, &mut w0);
        f.take(1, &mut w1);
        assert_eq!(w0, vec![(Token::new(3, 0), 6)]);
        assert_eq!(w1, vec![(Token::new(2, 0), 5)]);
        assert_eq!(f.counts(), (0, 0));
        // The next miss leads a new fill.
        assert_eq!(f.join(b"k", true, seat(0, 1, 1), now), Join::Lead);
    }

    #[test]
    fn an_uncacheable_key_passes_for_a_while() {
        let f = Fills::new(1).unwrap();
        let now = Instant::now();
        assert_eq!(f.join(b"k", true, seat(0, 1, 0), now), Join::Lead);
        assert_eq!(f.join(b"k", true, seat(0, 2, 1), now), Join::Wait);
        f.finish(b"k", Outcome::Uncacheable, now);
        let mut w = Vec::new();
        f.take(0, &mut w);
        assert_eq!(w.len(), 1, "the waiter goes upstream now");
        assert_eq!(f.join(b"k", true, seat(0, 3, 2), now), Join::Pass);
        assert_eq!(
            f.join(b"k", true, seat(0, 3, 2), now + PASS_FOR),
            Join::Lead,
            "passing ends"
        );
        // A failed fill does not make a key pass.
        f.finish(b"k", Outcome::Failed, now);
        assert_eq!(f.join(b"k", true, seat(0, 4, 3), now), Join::Lead);
    }

    #[test]
    fn the_pass_list_is_bounded() {
        let f = Fills::new(1).unwrap();
        let now = Instant::now();
        for i in 0..(PASS_MAX + 10) {
            f.finish(format!("k{i}").as_bytes(), Outcome::Uncacheable, now);
        }
        assert!(f.counts().1 <= PASS_MAX);
    }
}
