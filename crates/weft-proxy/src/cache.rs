//! The two-tier cache as a worker sees it: the memory store first, the disk
//! store (`--cache-dir`) under it, behind one facade.
//!
//! The facade owns the order of the tiers and their locking, so no caller
//! sequences them:
//!
//! - **lookup**: memory, then what a disk load handed this request (the
//!   memory store may have evicted it again since), else — once per
//!   request — a park for a disk load when the disk index has the key. The
//!   load's result comes back through the disk store's mailbox as a
//!   [`Loaded`] and the request is answered again.
//! - **insert** and **replace** write through: memory first (under its
//!   lock), then a disk write is queued (after the lock is released).
//! - **invalidate** removes from the disk first and from memory second, and
//!   never holds the memory store's lock while it talks to the disk.
//!
//! - **fills** (collapsed forwarding, `fill.rs`): after a miss in both
//!   tiers, the request leads its key's fill, waits for the one under way
//!   (woken through the fills' mailbox), or passes.
//!
//! Lock order across the process (docs/proxy.md, disk.rs, store.rs): the
//! disk writer's queue → the disk index → the memory store. A disk load
//! holds the index's lock while it inserts in memory, so once the index has
//! forgotten a key nothing brings it back; taking the memory lock first here
//! would invert that order.

use crate::disk::{DiskStore, Loaded, LoadedObjects};
use crate::fill::{Feed, Fills, Join, Outcome, Read, Stream, StreamSeed, Woken};
use crate::store::{Object, Store};
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use weft_io::Token;

/// What a lookup found.
pub enum Lookup {
    /// A stored object (its id in the memory store, for a later `replace`).
    Found(u64, Arc<Object>),
    /// Not in memory but on disk: a load was queued; the request waits for
    /// the `Loaded` carrying this park number.
    Parked(u64),
    /// In neither tier.
    Miss,
}

/// One worker's handle on the memory and disk stores.
pub struct TwoTier<'a> {
    store: Option<&'a Mutex<Store>>,
    disk: Option<&'a DiskStore>,
    fills: Option<&'a Fills>,
    /// The worker's index (its disk and fill mailboxes).
    worker: usize,
    /// Number of the next park (for a disk load or a fill).
    next_wait: u64,
}

fn lock(store: &Mutex<Store>) -> MutexGuard<'_, Store> {
    store.lock().unwrap_or_else(|e| e.into_inner())
}

impl<'a> TwoTier<'a> {
    /// The tiers a worker was given (no memory store: caching is off).
    pub fn new(
        store: Option<&'a Mutex<Store>>,
        disk: Option<&'a DiskStore>,
        fills: Option<&'a Fills>,
        worker: usize,
    ) -> TwoTier<'a> {
        TwoTier {
            store,
            disk,
            fills,
            worker,
            next_wait: 0,
        }
    }

    /// Caching is on.
    pub fn enabled(&self) -> bool {
        self.store.is_some()
    }

    /// The disk store's mailbox descriptor for this worker, if there is a disk tier.
    pub fn disk_waker(&self) -> Option<RawFd> {
        self.disk.map(|d| d.waker(self.worker))
    }

    /// Find a stored response for `key` that `select` accepts (its Vary
    /// match): memory first, then `loaded` (what a finished disk load read
    /// for this request). When both miss and `may_load` (the request has not
    /// been through the disk already) and the disk index has the key, a load
    /// is queued for `token` and the request parks.
    pub fn lookup(
        &mut self,
        key: &[u8],
        loaded: Option<&LoadedObjects>,
        may_load: bool,
        token: Token,
        mut select: impl FnMut(&Object) -> bool,
    ) -> Lookup {
        let Some(store) = self.store else {
            return Lookup::Miss;
        };
        let found = lock(store).lookup(key, &mut select).or_else(|| {
            let loaded = loaded?;
            loaded.iter().find(|(_, o)| select(o)).cloned()
        });
        if let Some((id, obj)) = found {
            return Lookup::Found(id, obj);
        }
        match self.disk {
            Some(d) if may_load && d.contains(key) => {
                let wait = self.next_wait;
                self.next_wait += 1;
                d.load(key, self.worker, token, wait);
                Lookup::Parked(wait)
            }
            _ => Lookup::Miss,
        }
    }

    /// Is `key` in the memory store now (any variant)? A miss that has just
    /// become its key's fill leader asks, because the lookup and the join
    /// take two locks: another worker may have stored the key and ended its
    /// fill between them (`request.rs`, `from_cache`).
    pub fn stored(&self, key: &[u8]) -> bool {
        self.store.is_some_and(|s| lock(s).contains(key))
    }

    /// The fills' mailbox descriptor for this worker (collapsed forwarding on).
    pub fn fill_waker(&self) -> Option<RawFd> {
        self.fills.map(|f| f.waker(self.worker))
    }

    /// A miss for `key` by `token` (after [`TwoTier::lookup`] found nothing
    /// and parked nothing): lead its fill, wait for the one under way (the
    /// park's number comes back with the wake-up, [`TwoTier::take_filled`]),
    /// follow its stream (`follow`: as in [`Fills::join`]), or pass.
    /// Collapsing off: always pass.
    pub fn join_fill(
        &mut self,
        key: &[u8],
        may_lead: bool,
        follow: Option<&mut dyn FnMut(&Stream) -> bool>,
        token: Token,
        now: Instant,
    ) -> (Join, u64) {
        let Some(f) = self.fills else {
            return (Join::Pass, 0);
        };
        let park = self.next_park();
        (f.join(key, may_lead, follow, (self.worker, token, park), now), park)
    }

    /// Follow the stream of `key`'s fill under way when `takes` it, without
    /// waiting for it otherwise ([`Fills::follow`]). None: collapsing is off,
    /// no fill streams, or `takes` refused.
    pub fn follow_fill(&self, key: &[u8], takes: &mut dyn FnMut(&Stream) -> bool) -> Option<Arc<Stream>> {
        self.fills?.follow(key, takes)
    }

    fn next_park(&mut self) -> u64 {
        let park = self.next_wait;
        self.next_wait += 1;
        park
    }

    /// The fill this worker leads for `key` (by its client `leader`) will
    /// store a body of `len` bytes: a stream of it for the requests that
    /// wait or come meanwhile (`fill.rs`, read-while-write). None:
    /// collapsing is off.
    pub fn publish_stream(&self, key: &[u8], seed: StreamSeed, len: Option<u64>, leader: Token) -> Option<Feed> {
        let f = self.fills?;
        let stream = f.stream(seed, len, (self.worker, leader));
        f.publish(key, &stream);
        Some(Feed::new(stream))
    }

    /// Up to `max` bytes of `stream` from `at` for `token`; with nothing new
    /// yet, the park number its wake-up will carry.
    pub fn read_stream(&mut self, stream: &Stream, at: u64, max: u64, token: Token) -> (Read, u64) {
        let park = self.next_park();
        (stream.read(at, max, (self.worker, token, park)), park)
    }

    /// The fill this worker led for `key` ended.
    pub fn finish_fill(&self, key: &[u8], outcome: Outcome, now: Instant) {
        if let Some(f) = self.fills {
            f.finish(key, outcome, now);
        }
    }

    /// Requests of this worker whose fill ended, appended to `out`.
    pub fn take_filled(&self, out: &mut Vec<Woken>) {
        if let Some(f) = self.fills {
            f.take(self.worker, out);
        }
    }

    /// Finished disk loads for this worker, appended to `out`.
    pub fn take_loaded(&self, out: &mut Vec<Loaded>) {
        if let Some(d) = self.disk {
            d.take_loaded(self.worker, out);
        }
    }

    /// Store a new response under `key`, in memory and (queued) on disk.
    /// False: the memory store refused it (too large, or caching off).
    pub fn insert(&self, key: &[u8], obj: Arc<Object>) -> bool {
        let Some(store) = self.store else { return false };
        // The memory lock is released before the disk write is queued.
        let stored = lock(store).insert_shared(key, obj.clone()).is_some();
        if let (true, Some(d)) = (stored, self.disk) {
            d.write(key, &obj);
        }
        stored
    }

    /// Put a refreshed response (a 304 merged into the stored head) in the
    /// place of object `id`, in memory and (queued) on disk. Nothing happens
    /// when memory has let `id` go meanwhile.
    pub fn replace(&self, key: &[u8], id: u64, obj: &Arc<Object>) {
        let Some(store) = self.store else { return };
        let kept = lock(store).replace(id, obj.clone());
        if let (true, Some(d)) = (kept, self.disk) {
            d.write(key, obj);
        }
    }

    /// Forget every stored response under each of `keys` (RFC 9111 §4.4),
    /// disk first, then memory. Returns how many memory objects went.
    pub fn invalidate<'k>(&self, keys: impl Iterator<Item = &'k [u8]> + Clone) -> u64 {
        let Some(store) = self.store else { return 0 };
        purge(store, self.disk, keys)
    }
}

/// Remove every variant of each of `keys` from both tiers; returns the
/// objects removed from memory. Disk first, and not under the memory
/// store's lock: a load holds the disk index's lock while it inserts in
/// memory, so once the index has forgotten a key nothing brings it back.
/// (Invalidation by unsafe methods, and the admin endpoint's purge.)
pub fn purge<'k>(store: &Mutex<Store>, disk: Option<&DiskStore>, keys: impl Iterator<Item = &'k [u8]> + Clone) -> u64 {
    if let Some(d) = disk {
        keys.clone().for_each(|k| d.remove(k));
    }
    let mut st = lock(store);
    keys.map(|k| st.invalidate(k) as u64).sum()
}

/// The keys under `prefix` in either tier, and whether the disk store's
/// start-up scan is still indexing.
pub fn keys_with_prefix(store: &Mutex<Store>, disk: Option<&DiskStore>, prefix: &[u8]) -> (Vec<Box<[u8]>>, bool) {
    let (mut keys, scanning) = disk.map(|d| d.keys_with_prefix(prefix)).unwrap_or_default();
    keys.extend(lock(store).keys_with_prefix(prefix));
    keys.sort_unstable();
    keys.dedup();
    (keys, scanning)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::CachePolicy;
    use bytes::Bytes;
    use weft_http::caching::CacheRules;

    fn object(body: &'static [u8]) -> Arc<Object> {
        let head = Bytes::from_static(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n\r\n");
        let mut agg = weft_buf::Aggregate::new();
        agg.push(Bytes::from_static(body));
        Arc::new(Object::build(head, agg, b"", 100, 100, &CacheRules::default()).expect("storable"))
    }

    #[test]
    fn memory_only_lookup_insert_replace_invalidate() {
        let store = Mutex::new(Store::new(1 << 20, 1 << 20, CachePolicy::Lru));
        let mut tiers = TwoTier::new(Some(&store), None, None, 0);
        let token = Token::new(1, 0);
        assert!(tiers.enabled());
        assert!(matches!(tiers.lookup(b"k", None, true, token, |_| true), Lookup::Miss));
        assert!(tiers.insert(b"k", object(b"one")));
        let Lookup::Found(id, o) = tiers.lookup(b"k", None, true, token, |_| true) else {
            panic!("stored object not found");
        };
        assert_eq!(o.body.len(), 3);
        tiers.replace(b"k", id, &object(b"three"));
        let Lookup::Found(_, o) = tiers.lookup(b"k", None, true, token, |_| true) else {
            panic!("replaced object not found");
        };
        assert_eq!(o.body.len(), 5);
        // A selector that rejects (a Vary mismatch) is a miss.
        assert!(matches!(tiers.lookup(b"k", None, true, token, |_| false), Lookup::Miss));
        let keys: [&[u8]; 2] = [b"k", b"other"];
        assert_eq!(tiers.invalidate(keys.iter().copied()), 1);
        assert!(matches!(tiers.lookup(b"k", None, true, token, |_| true), Lookup::Miss));
    }

    /// Worker 1 misses in memory; before it joins the key's fills, worker 0
    /// stores the key and ends its fill. The join then makes worker 1 a
    /// leader: `stored` is how it learns the origin need not be asked
    /// (`request.rs` ends that fill as stored and looks again).
    #[test]
    fn a_leader_sees_a_key_stored_between_its_lookup_and_its_join() {
        let store = Mutex::new(Store::new(1 << 20, 1 << 20, CachePolicy::Lru));
        let fills = Fills::new(2).unwrap();
        let now = Instant::now();
        let mut a = TwoTier::new(Some(&store), None, Some(&fills), 0);
        let mut b = TwoTier::new(Some(&store), None, Some(&fills), 1);
        let (ta, tb) = (Token::new(1, 0), Token::new(2, 0));
        assert!(matches!(a.lookup(b"k", None, true, ta, |_| true), Lookup::Miss));
        assert_eq!(a.join_fill(b"k", true, None, ta, now).0, Join::Lead);
        assert!(!a.stored(b"k"));
        assert!(matches!(b.lookup(b"k", None, true, tb, |_| true), Lookup::Miss));
        assert!(a.insert(b"k", object(b"one")));
        a.finish_fill(b"k", Outcome::Stored, now);
        assert_eq!(b.join_fill(b"k", true, None, tb, now).0, Join::Lead);
        assert!(b.stored(b"k"), "the stored key is seen after the join");
        b.finish_fill(b"k", Outcome::Stored, now);
        assert!(matches!(b.lookup(b"k", None, true, tb, |_| true), Lookup::Found(..)));
        assert_eq!(fills.counts(), (0, 0), "no fill left behind");
    }

    #[test]
    fn a_disk_load_result_answers_when_memory_has_let_it_go() {
        let store = Mutex::new(Store::new(1 << 20, 1 << 20, CachePolicy::Lru));
        let mut tiers = TwoTier::new(Some(&store), None, None, 0);
        let loaded: LoadedObjects = Arc::from(vec![(7u64, object(b"disk"))]);
        let Lookup::Found(id, _) = tiers.lookup(b"k", Some(&loaded), false, Token::new(1, 0), |_| true) else {
            panic!("the loaded object is not used");
        };
        assert_eq!(id, 7);
    }

    #[test]
    fn no_memory_store_is_caching_off() {
        let mut tiers = TwoTier::new(None, None, None, 0);
        assert!(!tiers.enabled());
        assert!(!tiers.insert(b"k", object(b"x")));
        assert!(matches!(
            tiers.lookup(b"k", None, true, Token::new(1, 0), |_| true),
            Lookup::Miss
        ));
        assert_eq!(tiers.invalidate(std::iter::once(&b"k"[..])), 0);
    }
}
