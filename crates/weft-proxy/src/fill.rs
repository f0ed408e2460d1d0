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
//! - A waiter waits `--collapse-timeout` ([`WAIT_MAX`] by default) at
//!   most, then asks the origin itself.
//! - The fill ends when its object is stored (waiters get hits), when the
//!   response turns out not storable (at its head: the waiters go upstream
//!   at once, and the key **passes** for [`PASS_FOR`]: its misses go straight
//!   upstream without waiting, Varnish's hit-for-pass, so uncacheable URLs
//!   are never serialized behind each other), or when the transaction fails.
//!
//! - **Streaming** (read-while-write, as Varnish, Squid and Traffic Server
//!   do; nginx's `proxy_cache_lock` makes its waiters wait for the whole
//!   object): once the leader's response head shows an object that will be
//!   stored, the fill publishes a [`Stream`] (of a length known only at its
//!   end when the origin sent it chunked: its followers get it chunked, and
//!   Range requests do not follow it). Waiting
//!   GETs and HEADs are woken and *follow* it: they are answered as a hit
//!   is (their ranges and conditionals against the stream's head and
//!   length: a 304 or 416 at once, a 206 or 200 head), and get the body, or
//!   the part of it a range names, as it arrives, in shared segments of the
//!   object being filled (no copy), instead of waiting for its last byte. A large
//!   or slowly sent object then no longer holds its waiters until the
//!   wait's bound, after which they would all have asked the origin.
//!
//!   A followed fill runs at the origin's pace, not its own client's: a
//!   follower that waits for the next part wakes the leader ([`KICK`]),
//!   whose relay goes on by copying when its client holds the tee back
//!   (`Relay::decouple`).
//!
//! Only a plain GET leads (no Range, no conditional: their answers, a 206
//! or a 304, are never stored, and would mark a cacheable URL as passing).
//! With range fills on (`background.rs`), a Range request does not wait
//! either: it follows a fill whose stream has reached the range's first
//! byte ([`Stream::arrived`]; [`Fills::follow`] never registers a waiter),
//! and is forwarded otherwise, so a seek into a large file never waits for
//! the bytes before it.
//! The registry is one mutex-held map for the process; each worker is woken
//! through its own mailbox.

use crate::store::Object;
use bytes::Bytes;
use std::collections::HashMap;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use weft_buf::Aggregate;
use weft_http::caching::CacheRules;
use weft_io::mailbox::Mailboxes;
use weft_io::Token;

/// How long a request waits for another's fill at most before it asks the
/// origin itself, by default (`--collapse-timeout`; nginx's
/// `proxy_cache_lock_timeout` default): a fill whose head is slow to come
/// does not hold its waiters for ever.
pub const WAIT_MAX: Duration = Duration::from_secs(5);
/// How long a key whose response was not storable goes straight upstream.
pub const PASS_FOR: Duration = Duration::from_secs(60);
/// Keys remembered as passing at most (the oldest are dropped beyond it).
const PASS_MAX: usize = 4096;
/// Requests one fill holds back at most; more go upstream themselves.
const WAITERS_MAX: usize = 4096;

/// What a miss does about its key's fill.
#[derive(Clone, Debug)]
pub enum Join {
    /// No fill under way: this request leads one (and must end it).
    Lead,
    /// A fill is under way: the request waits for the wake-up.
    Wait,
    /// Go upstream without a fill: the key passes, the request may not lead,
    /// or too many wait already.
    Pass,
    /// The fill under way streams its object and the request may take it:
    /// answer from the stream ([`Stream`]).
    Follow(Arc<Stream>),
}

impl PartialEq for Join {
    fn eq(&self, other: &Join) -> bool {
        match (self, other) {
            (Join::Follow(a), Join::Follow(b)) => Arc::ptr_eq(a, b),
            (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
        }
    }
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

/// A request woken because the fill it waited for ended or can be
/// followed now, or a follower because its stream has more: its
/// worker-local token and the number of its park (with [`STREAMING`] set
/// when a waiter may follow the fill).
pub type Woken = (Token, u64);

/// Set in a waiter's park number when it is woken to follow the fill's
/// stream rather than because the fill ended (park numbers count from 0
/// and never reach it).
pub const STREAMING: u64 = 1 << 63;

/// The park number of a wake-up for a fill's leader: a follower waits for
/// the next part ([`Stream::read`]), so the leader's relay is to run (its
/// own client may have stopped it: `Relay::decouple`). Never a real park.
pub const KICK: u64 = STREAMING - 1;

/// A waiting request: its worker, its token there and its park number.
pub type Waiter = (usize, Token, u64);

/// A fill under way: the requests waiting for it and, once its head showed
/// an object it can stream, the stream.
#[derive(Default)]
struct Filling {
    /// The waiters and whether each may follow a stream.
    waiters: Vec<(Waiter, bool)>,
    stream: Option<Arc<Stream>>,
}

#[derive(Default)]
struct State {
    /// Keys being filled → their waiters and stream.
    filling: HashMap<Box<[u8]>, Filling>,
    /// Keys whose last fill was not storable → until when they pass.
    pass: HashMap<Box<[u8]>, Instant>,
}

/// The process's fills under way and its workers' wake-up mailboxes.
pub struct Fills {
    state: Mutex<State>,
    mail: Arc<Mailboxes<Woken>>,
}

impl Fills {
    /// A registry for `workers` workers.
    pub fn new(workers: usize) -> io::Result<Fills> {
        Ok(Fills {
            state: Mutex::new(State::default()),
            mail: Arc::new(Mailboxes::new(workers)?),
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

    /// A miss for `key` by `waiter` (worker, token, park number): lead its
    /// fill, follow its stream, wait for the one under way, or pass.
    /// `may_lead`: a plain GET, whose answer can fill the cache. `follow`:
    /// the request may take a stream's object as it is and says whether it
    /// takes this one (its Vary match, its freshness); None: it may not.
    pub fn join(
        &self,
        key: &[u8],
        may_lead: bool,
        follow: Option<&mut dyn FnMut(&Stream) -> bool>,
        waiter: Waiter,
        now: Instant,
    ) -> Join {
        let mut s = self.lock();
        if let Some(&until) = s.pass.get(key) {
            if until > now {
                return Join::Pass;
            }
            s.pass.remove(key);
        }
        let may_follow = follow.is_some();
        match s.filling.get_mut(key) {
            Some(f) => {
                if let (Some(stream), Some(takes)) = (&f.stream, follow) {
                    // A failed stream is never followed (its fill's end is
                    // on its way): the request waits for that end instead.
                    if !stream.failed() && takes(stream) {
                        stream.followers.fetch_add(1, Ordering::Relaxed);
                        return Join::Follow(stream.clone());
                    }
                }
                if f.waiters.len() < WAITERS_MAX {
                    // A waiter that could not take the stream waits for the end.
                    f.waiters.push((waiter, may_follow && f.stream.is_none()));
                    Join::Wait
                } else {
                    Join::Pass
                }
            }
            None if may_lead => {
                // One copy of the key per fill (a miss that leads), not per
                // request; the pass check above allocates nothing.
                s.filling.insert(key.into(), Filling::default());
                Join::Lead
            }
            None => Join::Pass,
        }
    }

    /// Follow the stream of `key`'s fill if there is one and `takes` it;
    /// never waits, leads or registers anything otherwise (a Range request
    /// that would rather ask the origin than wait: `request.rs`).
    pub fn follow(&self, key: &[u8], takes: &mut dyn FnMut(&Stream) -> bool) -> Option<Arc<Stream>> {
        let s = self.lock();
        let stream = s.filling.get(key)?.stream.as_ref()?;
        if stream.failed() || !takes(stream) {
            return None;
        }
        stream.followers.fetch_add(1, Ordering::Relaxed);
        Some(stream.clone())
    }

    /// The fill of `key` has a head to stream: waiters that may follow are
    /// woken (they join again and follow it); the others wait for the end.
    /// Later misses may follow it too. Nothing happens when the fill has
    /// ended already.
    pub fn publish(&self, key: &[u8], stream: &Arc<Stream>) {
        let woken: Vec<Waiter> = {
            let mut s = self.lock();
            let Some(f) = s.filling.get_mut(key) else {
                return;
            };
            f.stream = Some(stream.clone());
            let mut woken = Vec::new();
            f.waiters.retain(|&(w, may_follow)| {
                if may_follow {
                    woken.push(w);
                }
                !may_follow
            });
            woken
        };
        for (worker, token, park) in woken {
            self.mail.post(worker, (token, park | STREAMING));
        }
    }

    /// A stream for a fill of a body of `len` bytes (None: chunked or
    /// close-delimited, its length known at its end) by `leader` (its worker
    /// and token), waking its readers through these mailboxes; the object is
    /// built from `seed` when a waiter first looks at it.
    pub fn stream(&self, seed: StreamSeed, len: Option<u64>, leader: (usize, Token)) -> Arc<Stream> {
        Arc::new(Stream {
            seed,
            leader,
            object: OnceLock::new(),
            len,
            followers: AtomicUsize::new(0),
            hungry: AtomicBool::new(false),
            unfed: AtomicU64::new(0),
            progress: Mutex::new(Progress::default()),
            mail: self.mail.clone(),
        })
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
        for ((worker, token, park), _) in waiters.into_iter().flat_map(|f| f.waiters) {
            self.mail.post(worker, (token, park));
        }
    }

    /// Fills under way and keys passing (for tests and the admin page).
    pub fn counts(&self) -> (usize, usize) {
        let s = self.lock();
        (s.filling.len(), s.pass.len())
    }
}

/// What a stream's object is built from: the stored head, the request's
/// secondary (Vary) key and the exchange's times.
pub struct StreamSeed {
    /// The head as it will be stored.
    pub head: Bytes,
    /// The leading request's secondary key.
    pub vary_key: Box<[u8]>,
    /// When the leading request was sent, and when its response came.
    pub times: (u64, u64),
}

/// The object of a fill under way, shared with the requests that follow it
/// (read-while-write): the head as it will be stored, and the body so far
/// as segments of the object being filled. The leader's relay hands over
/// what it has read ([`Feed::append`]) while anyone follows; a follower
/// that has sent all there is registers to be woken by the next part.
pub struct Stream {
    seed: StreamSeed,
    /// The leading request's worker and token (woken by [`KICK`]).
    leader: (usize, Token),
    /// Built by the first request that looks (a fill nobody follows pays
    /// nothing for it); None: the head does not make an object.
    object: OnceLock<Option<Arc<Object>>>,
    /// The body's length (its Content-Length); None for a chunked or
    /// close-delimited body, whose followers get it chunked (HTTP/1.1) or
    /// up to a close (HTTP/1.0), and which a Range request does not follow.
    pub len: Option<u64>,
    /// Requests that have followed this stream.
    followers: AtomicUsize,
    /// A follower waits for the next part: hand over what there is.
    hungry: AtomicBool,
    /// Body bytes the leader has read and not handed over yet (it hands
    /// them over only while someone follows): with what was handed over,
    /// how far the fill has come ([`Stream::arrived`]).
    unfed: AtomicU64,
    progress: Mutex<Progress>,
    mail: Arc<Mailboxes<Woken>>,
}

#[derive(Default)]
struct Progress {
    /// The body handed over so far.
    body: Aggregate,
    /// Some(true): the whole body is here; Some(false): the fill failed.
    end: Option<bool>,
    /// Followers to wake at the next part or the end.
    readers: Vec<Waiter>,
}

/// What a follower's read found.
pub enum Read {
    /// The next bytes.
    Data(Aggregate),
    /// The body is complete and all of it was read.
    Done,
    /// The fill failed: the answer cannot be completed.
    Failed,
    /// Nothing new yet: the reader is woken (by its park number) when there is.
    Wait,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").field("len", &self.len).finish_non_exhaustive()
    }
}

impl Stream {
    /// The object as it will be stored, with no body, under the proxy's
    /// cache `rules` (every worker has the same).
    pub fn object(&self, rules: &CacheRules) -> Option<&Arc<Object>> {
        self.object
            .get_or_init(|| {
                let s = &self.seed;
                let (request_time, response_time) = s.times;
                Object::build(
                    s.head.clone(),
                    Aggregate::new(),
                    &s.vary_key,
                    request_time,
                    response_time,
                    rules,
                )
                .map(Arc::new)
            })
            .as_ref()
    }

    fn lock(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Body bytes the fill has read so far (handed over or not): a Range
    /// request follows only a fill that has reached its first byte.
    pub fn arrived(&self) -> u64 {
        let handed = self.lock().body.len() as u64;
        handed + self.unfed.load(Ordering::Relaxed)
    }

    /// Has the fill failed (its leader's [`Feed`] dropped before complete)?
    pub fn failed(&self) -> bool {
        self.lock().end == Some(false)
    }

    /// Up to `max` body bytes from offset `at`; when there are none yet,
    /// `reader` is registered to be woken by the next part or the end.
    pub fn read(&self, at: u64, max: u64, reader: Waiter) -> Read {
        let mut p = self.lock();
        if p.end == Some(false) {
            return Read::Failed;
        }
        let have = p.body.len() as u64;
        if have > at {
            let end = have.min(at.saturating_add(max));
            return Read::Data(p.body.slice(at as usize, end as usize));
        }
        if p.end == Some(true) {
            return Read::Done;
        }
        p.readers.push(reader);
        drop(p);
        if !self.hungry.swap(true, Ordering::Relaxed) {
            // The first reader to wait since the last part: the leader's
            // relay runs, in case its own client is what stopped it.
            let (worker, token) = self.leader;
            self.mail.post(worker, (token, KICK));
        }
        Read::Wait
    }

    fn wake(&self, readers: Vec<Waiter>) {
        for (worker, token, park) in readers {
            self.mail.post(worker, (token, park));
        }
    }
}

/// The leader's end of a stream. Dropped before [`Feed::complete`] (the
/// transaction failed or was abandoned), it ends the stream as failed, so no
/// follower waits for bytes that will not come.
pub struct Feed(Arc<Stream>);

/// Hand over body bytes this many at least, unless a follower waits: a
/// stored object is then a few large segments, not one per read.
pub const FEED_MIN: usize = 64 * 1024;

impl Feed {
    /// The leader's end of `stream`.
    pub fn new(stream: Arc<Stream>) -> Feed {
        Feed(stream)
    }

    /// Should `unfed` bytes read since the last hand-over go out now? Only
    /// while someone follows: a fill nobody follows stays one segment.
    /// Notes the count either way ([`Stream::arrived`]).
    pub fn wants(&self, unfed: usize) -> bool {
        self.0.unfed.store(unfed as u64, Ordering::Relaxed);
        unfed > 0
            && self.0.followers.load(Ordering::Relaxed) > 0
            && (unfed >= FEED_MIN || self.0.hungry.load(Ordering::Relaxed))
    }

    /// The next body bytes, in order.
    pub fn append(&self, parts: impl IntoIterator<Item = Bytes>) {
        let readers = {
            let mut p = self.0.lock();
            for part in parts {
                p.body.push(part);
            }
            self.0.unfed.store(0, Ordering::Relaxed);
            self.0.hungry.store(false, Ordering::Relaxed);
            std::mem::take(&mut p.readers)
        };
        self.0.wake(readers);
    }

    /// The fill is complete with `body` (its first bytes the ones appended
    /// so far, as the same segments).
    pub fn complete(self, body: &Aggregate) {
        self.end(Some(body));
    }

    fn end(&self, body: Option<&Aggregate>) {
        let readers = {
            let mut p = self.0.lock();
            if p.end.is_some() {
                return;
            }
            let ok = body.is_some_and(|b| self.0.len.is_none_or(|len| b.len() as u64 == len));
            if let (true, Some(b)) = (ok, body) {
                p.body = b.clone();
            }
            p.end = Some(ok);
            std::mem::take(&mut p.readers)
        };
        self.0.wake(readers);
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.end(None);
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
        assert_eq!(f.join(b"k", true, None, seat(0, 1, 0), now), Join::Lead);
        assert_eq!(f.join(b"k", true, None, seat(1, 2, 5), now), Join::Wait);
        assert_eq!(
            f.join(b"k", false, None, seat(0, 3, 6), now),
            Join::Wait,
            "a HEAD may wait"
        );
        assert_eq!(
            f.join(b"other", false, None, seat(0, 4, 7), now),
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
        assert_eq!(f.join(b"k", true, None, seat(0, 1, 1), now), Join::Lead);
    }

    #[test]
    fn an_uncacheable_key_passes_for_a_while() {
        let f = Fills::new(1).unwrap();
        let now = Instant::now();
        assert_eq!(f.join(b"k", true, None, seat(0, 1, 0), now), Join::Lead);
        assert_eq!(f.join(b"k", true, None, seat(0, 2, 1), now), Join::Wait);
        f.finish(b"k", Outcome::Uncacheable, now);
        let mut w = Vec::new();
        f.take(0, &mut w);
        assert_eq!(w.len(), 1, "the waiter goes upstream now");
        assert_eq!(f.join(b"k", true, None, seat(0, 3, 2), now), Join::Pass);
        assert_eq!(
            f.join(b"k", true, None, seat(0, 3, 2), now + PASS_FOR),
            Join::Lead,
            "passing ends"
        );
        // A failed fill does not make a key pass.
        f.finish(b"k", Outcome::Failed, now);
        assert_eq!(f.join(b"k", true, None, seat(0, 4, 3), now), Join::Lead);
    }

    fn seed() -> StreamSeed {
        StreamSeed {
            head: Bytes::from_static(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n\r\n"),
            vary_key: Box::new([]),
            times: (100, 100),
        }
    }

    #[test]
    fn waiters_that_may_follow_are_woken_by_the_stream_and_follow_it() {
        let f = Fills::new(2).unwrap();
        let now = Instant::now();
        let rules = CacheRules::default();
        assert_eq!(f.join(b"k", true, None, seat(0, 1, 0), now), Join::Lead);
        let mut yes = |s: &Stream| s.object(&rules).is_some();
        assert_eq!(f.join(b"k", false, Some(&mut yes), seat(1, 2, 5), now), Join::Wait);
        assert_eq!(
            f.join(b"k", false, None, seat(1, 3, 6), now),
            Join::Wait,
            "a range waits"
        );
        let stream = f.stream(seed(), Some(10), (0, Token::new(9, 0)));
        f.publish(b"k", &stream);
        let mut w = Vec::new();
        f.take(1, &mut w);
        assert_eq!(
            w,
            vec![(Token::new(2, 0), 5 | STREAMING)],
            "only the one that may follow"
        );
        // Joining again (or anew), it follows; one that does not take it waits.
        match f.join(b"k", false, Some(&mut yes), seat(1, 2, 7), now) {
            Join::Follow(s) => assert!(Arc::ptr_eq(&s, &stream)),
            j => panic!("{j:?}"),
        }
        let mut no = |_: &Stream| false;
        assert_eq!(f.join(b"k", false, Some(&mut no), seat(0, 4, 8), now), Join::Wait);
        f.finish(b"k", Outcome::Stored, now);
        f.take(1, &mut w);
        assert_eq!(w.last(), Some(&(Token::new(3, 0), 6)), "the range is woken at the end");
    }

    #[test]
    fn a_range_follows_a_stream_or_nothing_and_never_waits() {
        let f = Fills::new(1).unwrap();
        let now = Instant::now();
        let mut yes = |_: &Stream| true;
        assert!(f.follow(b"k", &mut yes).is_none(), "no fill");
        assert_eq!(f.join(b"k", true, None, seat(0, 1, 0), now), Join::Lead);
        assert!(f.follow(b"k", &mut yes).is_none(), "a fill without a stream yet");
        let stream = f.stream(seed(), Some(100), (0, Token::new(9, 0)));
        f.publish(b"k", &stream);
        // How far the fill has come: what the leader holds, then what it
        // handed over besides.
        let feed = Feed::new(stream.clone());
        assert!(!feed.wants(30), "nobody follows");
        assert_eq!(stream.arrived(), 30);
        let mut past_40 = |s: &Stream| s.arrived() > 40;
        assert!(f.follow(b"k", &mut past_40).is_none(), "not taken");
        let followed = f.follow(b"k", &mut yes).expect("followed");
        assert!(Arc::ptr_eq(&followed, &stream));
        assert!(feed.wants(FEED_MIN), "a follower now");
        feed.append([Bytes::from(vec![b'x'; 50])]);
        assert_eq!(stream.arrived(), 50);
        feed.wants(20);
        assert_eq!(stream.arrived(), 70);
        assert!(f.follow(b"k", &mut past_40).is_some());
        // Nothing was registered: the end wakes no one.
        f.finish(b"k", Outcome::Stored, now);
        let mut w = Vec::new();
        f.take(0, &mut w);
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn a_stream_hands_over_parts_in_order_and_wakes_its_readers() {
        let f = Fills::new(1).unwrap();
        let stream = f.stream(seed(), Some(10), (0, Token::new(9, 0)));
        let feed = Feed::new(stream.clone());
        assert!(!feed.wants(5), "nobody follows: no hand-over");
        stream.followers.fetch_add(1, Ordering::Relaxed);
        assert!(!feed.wants(5), "a follower, not waiting: wait for more");
        assert!(feed.wants(FEED_MIN));
        assert!(matches!(stream.read(0, 100, seat(0, 1, 1)), Read::Wait));
        assert!(feed.wants(5), "a follower waits: hand over what there is");
        feed.append([Bytes::from_static(b"01234")]);
        let mut w = Vec::new();
        f.take(0, &mut w);
        let leader = (Token::new(9, 0), KICK);
        assert_eq!(
            w,
            vec![leader, (Token::new(1, 0), 1)],
            "the leader is kicked, the reader woken"
        );
        match stream.read(0, 3, seat(0, 1, 2)) {
            Read::Data(d) => assert_eq!(d.segments().concat(), b"012"),
            _ => panic!("data"),
        }
        assert!(matches!(stream.read(5, 100, seat(0, 1, 3)), Read::Wait));
        assert!(matches!(stream.read(5, 100, seat(0, 2, 4)), Read::Wait));
        let mut body = Aggregate::new();
        body.push(Bytes::from_static(b"01234"));
        body.push(Bytes::from_static(b"56789"));
        feed.complete(&body);
        w.clear();
        f.take(0, &mut w);
        let readers = vec![(Token::new(1, 0), 3), (Token::new(2, 0), 4)];
        assert_eq!(
            w,
            [vec![leader], readers].concat(),
            "one kick for two readers; the end wakes both"
        );
        match stream.read(5, 100, seat(0, 1, 4)) {
            Read::Data(d) => assert_eq!(d.segments().concat(), b"56789"),
            _ => panic!("data"),
        }
        assert!(matches!(stream.read(10, 100, seat(0, 1, 5)), Read::Done));
        assert!(stream.object(&CacheRules::default()).is_some_and(|o| o.status == 200));
    }

    #[test]
    fn a_feed_dropped_or_completed_short_fails_its_stream() {
        let f = Fills::new(1).unwrap();
        let stream = f.stream(seed(), Some(10), (0, Token::new(9, 0)));
        let feed = Feed::new(stream.clone());
        feed.append([Bytes::from_static(b"0123")]);
        assert!(matches!(stream.read(4, 100, seat(0, 1, 1)), Read::Wait));
        drop(feed);
        let mut w = Vec::new();
        f.take(0, &mut w);
        assert_eq!(w, vec![(Token::new(9, 0), KICK), (Token::new(1, 0), 1)]);
        assert!(matches!(stream.read(0, 100, seat(0, 1, 2)), Read::Failed));
        let stream = f.stream(seed(), Some(10), (0, Token::new(9, 0)));
        let mut short = Aggregate::new();
        short.push(Bytes::from_static(b"0123"));
        Feed::new(stream.clone()).complete(&short);
        assert!(
            matches!(stream.read(0, 100, seat(0, 1, 3)), Read::Failed),
            "length differs"
        );
    }

    #[test]
    fn a_failed_stream_is_not_followed_while_its_fill_ends() {
        let f = Fills::new(1).unwrap();
        let now = Instant::now();
        assert_eq!(f.join(b"k", true, None, seat(0, 9, 0), now), Join::Lead);
        let stream = f.stream(seed(), None, (0, Token::new(9, 0)));
        f.publish(b"k", &stream);
        let mut takes = |_: &Stream| true;
        assert!(matches!(
            f.join(b"k", true, Some(&mut takes), seat(0, 1, 1), now),
            Join::Follow(_)
        ));
        // The leader's stream fails before its fill's end is recorded (a
        // transaction dropped without `end_fill`, or a request between the
        // two): a request for the key waits for that end, and neither
        // follows the failed stream nor takes it for a Range.
        drop(Feed::new(stream.clone()));
        assert_eq!(f.join(b"k", true, Some(&mut takes), seat(0, 2, 2), now), Join::Wait);
        assert!(f.follow(b"k", &mut takes).is_none());
        f.finish(b"k", Outcome::Uncacheable, now);
        let mut w = Vec::new();
        f.take(0, &mut w);
        assert!(w.contains(&(Token::new(2, 0), 2)), "the waiter is woken: {w:?}");
        assert_eq!(f.join(b"k", true, Some(&mut takes), seat(0, 2, 3), now), Join::Pass);
    }

    #[test]
    fn a_stream_of_unknown_length_ends_with_whatever_completes_it() {
        let f = Fills::new(1).unwrap();
        let stream = f.stream(seed(), None, (0, Token::new(9, 0)));
        let feed = Feed::new(stream.clone());
        feed.append([Bytes::from_static(b"0123")]);
        assert!(matches!(stream.read(4, 100, seat(0, 1, 1)), Read::Wait));
        let mut whole = Aggregate::new();
        whole.push(Bytes::from_static(b"0123"));
        whole.push(Bytes::from_static(b"456"));
        feed.complete(&whole);
        match stream.read(4, 100, seat(0, 1, 2)) {
            Read::Data(d) => assert_eq!(d.segments().concat(), b"456"),
            _ => panic!("data"),
        }
        assert!(matches!(stream.read(7, 100, seat(0, 1, 3)), Read::Done));
        // Dropped before its end, it fails as a sized one does.
        let stream = f.stream(seed(), None, (0, Token::new(9, 0)));
        drop(Feed::new(stream.clone()));
        assert!(matches!(stream.read(0, 100, seat(0, 1, 4)), Read::Failed));
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
