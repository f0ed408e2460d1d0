//! The memory store: cached responses under a byte budget, evicted by a
//! `weft-policy` replacement policy (LRU or Greedy-Dual-Size).
//!
//! An [`Object`] is immutable once stored: its head is one `Bytes`, its body a
//! weft-buf [`Aggregate`] of `Bytes` segments, so a hit hands out reference
//! counts and the worker sends them with writev — the bytes are never copied
//! again after the fill (IO-Lite's single copy). A 304 that refreshes an
//! object replaces it with a new `Object` sharing the same body segments.
//!
//! The store is shared by the workers behind one mutex held only for an index
//! lookup or update (no I/O, no copy under the lock). Each primary key (the
//! request URI) maps to its variants (`Vary`); variants are chosen by the
//! caller, which knows the request.

use bytes::Bytes;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use weft_buf::Aggregate;
use weft_http::caching::{self, CacheRules, LifetimeQuery, Targeted};
use weft_http::date::{parse_http_date, unix_secs};
use weft_http::{CacheControl, Limits, ResponseHead};
use weft_policy::{Gds, Lru, Replacement};

use crate::config::{CachePolicy, ProxyConfig};

/// The cache rules of a proxy: the default heuristic, and in a surrogate
/// (reverse proxy, `weft front`) the targeted fields of RFC 9213 —
/// `--targeted-cache-control`, then CDN-Cache-Control. A forward proxy uses
/// Cache-Control only. Err: a bad `targeted-cache-control` name.
pub fn cache_rules(cfg: &ProxyConfig) -> Result<CacheRules, String> {
    let targeted = Targeted::surrogate(cfg.targeted_cache_control.as_deref())?;
    let surrogate = cfg.is_reverse() || cfg.front.is_some();
    Ok(CacheRules {
        targeted: if surrogate { targeted } else { Targeted::default() },
        ..CacheRules::default()
    })
}

/// Fixed per-object bookkeeping counted against the budget besides head and body.
const OVERHEAD: u64 = 256;

/// A stored response.
#[derive(Debug)]
pub struct Object {
    /// Status line and fields, ending with the blank line; no Content-Length,
    /// no hop-by-hop fields, no fields a `no-cache="..."` names. The Age
    /// received, if any, is kept (it is part of the object's age); a hit
    /// sends the head without it ([`Object::head_parts`]).
    pub head: Bytes,
    /// Where the stored Age line (with its CRLF) lies in `head` (empty: none).
    pub age_line: std::ops::Range<usize>,
    /// Length of the status line including its CRLF.
    pub status_line_len: usize,
    /// The body.
    pub body: Aggregate,
    /// Status code.
    pub status: u16,
    /// Response Cache-Control.
    pub cc: CacheControl,
    /// The Vary field values joined by `, ` (None without Vary).
    pub vary: Option<Box<[u8]>>,
    /// The request's secondary key for `vary` when stored.
    pub vary_key: Box<[u8]>,
    /// ETag value (a slice of `head`).
    pub etag: Option<Bytes>,
    /// Last-Modified value (a slice of `head`) and its time in seconds.
    pub last_modified: Option<(Bytes, u64)>,
    /// Date in seconds (the response time when absent).
    pub date: u64,
    /// The Age field received.
    pub age_value: u64,
    /// When the request that fetched it was sent.
    pub request_time: u64,
    /// When the response arrived.
    pub response_time: u64,
    /// Freshness lifetime in seconds.
    pub lifetime: u64,
    /// A background revalidation of this object is under way
    /// (`stale-while-revalidate`, [`Object::claim_revalidation`]).
    revalidating: AtomicBool,
}

/// The claim on an object's one background revalidation
/// (`stale-while-revalidate`, `background.rs`): while it is held, other
/// requests for the stale object are answered from it without starting
/// another; dropping it (the revalidation ended, whichever way) lets the
/// next one start. Process-wide: the flag lives on the shared object.
#[derive(Debug)]
pub struct Revalidating(Arc<Object>);

impl Drop for Revalidating {
    fn drop(&mut self) {
        self.0.revalidating.store(false, Ordering::Release);
    }
}

impl Object {
    /// Build an object from a stored head (as described on [`Object::head`]),
    /// its body, the request's secondary key, and the exchange's times; its
    /// directives come from the field `rules` select (Cache-Control, or a
    /// targeted field in a surrogate).
    pub fn build(
        head: Bytes,
        body: Aggregate,
        vary_key: &[u8],
        request_time: u64,
        response_time: u64,
        rules: &CacheRules,
    ) -> Option<Object> {
        let mut h = ResponseHead::new();
        let limits = Limits {
            max_head: head.len() + 1,
            max_headers: weft_http::MAX_HEADERS_CAP,
            ..Limits::default()
        };
        let n = h.parse(&head, &limits).ok()??;
        if n != head.len() {
            return None;
        }
        let data: &[u8] = &head;
        let (cc, expires_counts) = rules.directives(&h, data);
        let vary = {
            let mut v: Vec<u8> = Vec::new();
            for val in h.header_all(data, "vary") {
                if !v.is_empty() {
                    v.extend_from_slice(b", ");
                }
                v.extend_from_slice(val);
            }
            (!v.is_empty()).then(|| v.into_boxed_slice())
        };
        let slice_of = |v: &[u8]| {
            let start = v.as_ptr() as usize - data.as_ptr() as usize;
            head.slice(start..start + v.len())
        };
        let etag = h.header(data, "etag").map(slice_of);
        let last_modified = h
            .header(data, "last-modified")
            .and_then(|v| parse_http_date(v).map(|t| (slice_of(v), unix_secs(t))));
        let date = h
            .header(data, "date")
            .and_then(parse_http_date)
            .map(unix_secs)
            .unwrap_or(response_time);
        let age_value = caching::parse_age(h.header(data, "age"));
        let age_line = h
            .fields()
            .iter()
            .find(|f| f.name(data).eq_ignore_ascii_case(b"age"))
            .map_or(0..0, |f| {
                let line = f.line(data);
                let start = line.as_ptr() as usize - data.as_ptr() as usize;
                start..(start + line.len() + 2).min(data.len())
            });
        let lifetime = caching::freshness_lifetime(
            &LifetimeQuery {
                response: &cc,
                expires: h.header(data, "expires").filter(|_| expires_counts),
                date: Some(date),
                last_modified: last_modified.as_ref().map(|(_, t)| *t),
                status: h.status(),
                response_time,
            },
            &rules.heuristic,
        );
        let status_line_len = memchr::memmem::find(data, b"\r\n").map(|i| i + 2).unwrap_or(0);
        Some(Object {
            status: h.status(),
            status_line_len,
            cc,
            vary,
            vary_key: vary_key.into(),
            etag,
            last_modified,
            date,
            age_value,
            age_line,
            request_time,
            response_time,
            lifetime,
            head,
            body,
            revalidating: AtomicBool::new(false),
        })
    }

    /// Is a background revalidation of this object under way?
    pub fn revalidating(&self) -> bool {
        self.revalidating.load(Ordering::Acquire)
    }

    /// Claim this object's background revalidation: Some for the one
    /// request that starts it, None while another runs.
    pub fn claim_revalidation(self: &Arc<Self>) -> Option<Revalidating> {
        self.revalidating
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .ok()
            .map(|_| Revalidating(self.clone()))
    }

    /// The stored head from `from` up to its blank line, without the Age
    /// line: one slice, or two around the Age line (shared, not copied).
    pub fn head_parts(&self, from: usize) -> [Bytes; 2] {
        let end = self.head.len() - 2;
        let from = from.min(end);
        let a = &self.age_line;
        if a.is_empty() || a.start < from || a.end > end {
            return [self.head.slice(from..end), Bytes::new()];
        }
        [self.head.slice(from..a.start), self.head.slice(a.end..end)]
    }

    /// Current age in seconds at `now` (seconds since the epoch).
    pub fn age(&self, now: u64) -> u64 {
        caching::current_age(self.date, self.age_value, self.request_time, self.response_time, now)
    }

    /// Bytes counted against the budget.
    pub fn size(&self) -> u64 {
        self.head.len() as u64 + self.body.len() as u64 + OVERHEAD
    }
}

enum Policy {
    Lru(Lru<u64>),
    Gds(Gds<u64>),
}

impl Policy {
    fn inner(&mut self) -> &mut dyn Replacement<u64> {
        match self {
            Policy::Lru(p) => p,
            Policy::Gds(p) => p,
        }
    }
}

struct Slot {
    key: Box<[u8]>,
    obj: Arc<Object>,
    size: u64,
}

/// Counters of the store.
#[derive(Clone, Copy, Debug, Default)]
pub struct StoreStats {
    /// Objects held.
    pub objects: u64,
    /// Bytes held (with bookkeeping).
    pub bytes: u64,
    /// Objects stored.
    pub inserted: u64,
    /// Objects evicted by the policy.
    pub evicted: u64,
    /// Objects removed by invalidation.
    pub invalidated: u64,
    /// Objects refused (larger than the budget or the object limit).
    pub rejected: u64,
}

/// The store.
pub struct Store {
    budget: u64,
    max_object: u64,
    index: HashMap<Box<[u8]>, Vec<u64>>,
    slots: HashMap<u64, Slot>,
    policy: Policy,
    next_id: u64,
    stats: StoreStats,
}

impl Store {
    /// A store of `budget` bytes holding objects up to `max_object` bytes.
    pub fn new(budget: u64, max_object: u64, policy: CachePolicy) -> Store {
        Store {
            budget,
            max_object,
            index: HashMap::new(),
            slots: HashMap::new(),
            policy: match policy {
                CachePolicy::Lru => Policy::Lru(Lru::new()),
                CachePolicy::Gds => Policy::Gds(Gds::new()),
            },
            next_id: 1,
            stats: StoreStats::default(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> StoreStats {
        let mut s = self.stats;
        s.objects = self.slots.len() as u64;
        s
    }

    /// The first variant of `key` that `select` accepts; a hit for the policy.
    /// Is anything stored under `key` (any variant)? Touches nothing.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.index.get(key).is_some_and(|ids| !ids.is_empty())
    }

    pub fn lookup(&mut self, key: &[u8], mut select: impl FnMut(&Object) -> bool) -> Option<(u64, Arc<Object>)> {
        let ids = self.index.get(key)?;
        let id = *ids
            .iter()
            .find(|id| self.slots.get(id).is_some_and(|s| select(&s.obj)))?;
        self.policy.inner().touch(&id);
        Some((id, self.slots[&id].obj.clone()))
    }

    /// Store `obj` under `key`, replacing the variant with the same Vary and
    /// secondary key; evicts until it fits. False if it can never fit.
    pub fn insert(&mut self, key: &[u8], obj: Object) -> bool {
        self.insert_shared(key, Arc::new(obj)).is_some()
    }

    /// [`Store::insert`] of an object the caller keeps a handle on; the
    /// object's id (for [`Store::replace`]), None if it can never fit.
    pub fn insert_shared(&mut self, key: &[u8], obj: Arc<Object>) -> Option<u64> {
        let size = obj.size();
        if size > self.budget || obj.body.len() as u64 > self.max_object {
            self.stats.rejected += 1;
            return None;
        }
        let same: Vec<u64> = self
            .index
            .get(key)
            .map(|ids| {
                ids.iter()
                    .copied()
                    .filter(|id| {
                        self.slots
                            .get(id)
                            .is_some_and(|s| s.obj.vary == obj.vary && s.obj.vary_key == obj.vary_key)
                    })
                    .collect()
            })
            .unwrap_or_default();
        for id in same {
            self.remove_id(id);
        }
        while self.stats.bytes + size > self.budget {
            let Some(victim) = self.policy.inner().evict() else {
                break;
            };
            self.remove_slot(victim);
            self.stats.evicted += 1;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.policy.inner().insert(id, size, 1.0);
        self.index.entry(key.into()).or_default().push(id);
        self.slots.insert(
            id,
            Slot {
                key: key.into(),
                obj,
                size,
            },
        );
        self.stats.bytes += size;
        self.stats.inserted += 1;
        Some(id)
    }

    /// Replace object `id` (a 304 refreshed it). False if it is gone.
    pub fn replace(&mut self, id: u64, obj: Arc<Object>) -> bool {
        let Some(slot) = self.slots.get_mut(&id) else {
            return false;
        };
        let size = obj.size();
        self.stats.bytes = self.stats.bytes - slot.size + size;
        slot.size = size;
        slot.obj = obj;
        self.policy.inner().touch(&id);
        true
    }

    /// Remove every variant of `key`; returns how many.
    /// The keys stored that start with `prefix` (a purge by prefix).
    pub fn keys_with_prefix(&self, prefix: &[u8]) -> Vec<Box<[u8]>> {
        self.index.keys().filter(|k| k.starts_with(prefix)).cloned().collect()
    }

    pub fn invalidate(&mut self, key: &[u8]) -> usize {
        let Some(ids) = self.index.remove(key) else {
            return 0;
        };
        for &id in &ids {
            self.policy.inner().remove(&id);
            if let Some(s) = self.slots.remove(&id) {
                self.stats.bytes -= s.size;
            }
        }
        self.stats.invalidated += ids.len() as u64;
        ids.len()
    }

    fn remove_id(&mut self, id: u64) {
        self.policy.inner().remove(&id);
        self.remove_slot(id);
    }

    fn remove_slot(&mut self, id: u64) {
        if let Some(s) = self.slots.remove(&id) {
            self.stats.bytes -= s.size;
            if let Some(ids) = self.index.get_mut(&s.key) {
                ids.retain(|&i| i != id);
                if ids.is_empty() {
                    self.index.remove(&s.key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_background_revalidation_at_a_time() {
        let o = Arc::new(obj("HTTP/1.1 200 OK\r\nCache-Control: max-age=1\r\n\r\n", b"x", b""));
        let first = o.claim_revalidation().expect("the first request claims it");
        assert!(o.claim_revalidation().is_none(), "a second one waits for it");
        assert!(o.revalidating());
        drop(first);
        assert!(o.claim_revalidation().is_some(), "ended: the next may start");
    }

    fn obj(head: &str, body: &'static [u8], vary_key: &[u8]) -> Object {
        let mut b = Aggregate::new();
        b.push(Bytes::from_static(body));
        Object::build(
            Bytes::copy_from_slice(head.as_bytes()),
            b,
            vary_key,
            1000,
            1000,
            &CacheRules::default(),
        )
        .unwrap()
    }

    #[test]
    fn object_metadata() {
        let o = obj(
            "HTTP/1.1 200 OK\r\nDate: Thu, 01 Jan 1970 00:16:40 GMT\r\nETag: \"x\"\r\nLast-Modified: Thu, 01 Jan 1970 00:00:00 GMT\r\nCache-Control: max-age=60\r\nAge: 5\r\nVary: Accept\r\n\r\n",
            b"hello",
            b"accept:\n",
        );
        assert_eq!(o.status, 200);
        assert_eq!(o.date, 1000);
        assert_eq!(o.age_value, 5);
        assert_eq!(o.lifetime, 60);
        assert_eq!(o.etag.as_deref(), Some(&b"\"x\""[..]));
        assert_eq!(o.last_modified.as_ref().map(|l| l.1), Some(0));
        assert_eq!(o.vary.as_deref(), Some(&b"Accept"[..]));
        assert_eq!(o.age(1010), 15);
        assert_eq!(o.status_line_len, 17);
        // A hit sends the head without the stored Age.
        let [a, b] = o.head_parts(0);
        let sent = [&a[..], &b[..]].concat();
        assert!(!String::from_utf8_lossy(&sent).contains("Age:"));
        assert_eq!(sent.len(), o.head.len() - 2 - "Age: 5\r\n".len());
        assert!(sent.ends_with(b"Vary: Accept\r\n"));
        let [a, b] = o.head_parts(o.status_line_len);
        assert!(a.starts_with(b"Date:") && b.starts_with(b"Vary:"));
    }

    #[test]
    fn an_upstream_age_makes_an_object_stale_on_arrival() {
        let o = obj(
            "HTTP/1.1 200 OK\r\nCache-Control: max-age=3600\r\nAge: 7200\r\n\r\n",
            b"x",
            b"",
        );
        assert!(o.age(1000) >= 7200 && o.lifetime == 3600);
        let [a, b] = o.head_parts(0);
        assert!(b.is_empty() && !a.ends_with(b"\r\n\r\n"));
    }

    #[test]
    fn variants_budget_and_eviction() {
        let head = "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n\r\n";
        let mut s = Store::new(3 * (OVERHEAD + 100), 1 << 20, CachePolicy::Lru);
        assert!(s.insert(b"a", obj(head, b"A", b"")));
        assert!(s.insert(b"b", obj(head, b"B", b"")));
        assert!(s.lookup(b"a", |_| true).is_some(), "a touched");
        assert!(s.insert(b"c", obj(head, b"C", b"")));
        // Budget of three objects: inserting a fourth evicts the LRU one (b).
        assert!(s.insert(b"d", obj(head, b"D", b"")));
        assert!(s.lookup(b"b", |_| true).is_none());
        assert!(s.lookup(b"a", |_| true).is_some());
        assert_eq!(s.stats().evicted, 1);
        // Same key and secondary key: replaced, not duplicated.
        assert!(s.insert(b"a", obj(head, b"A2", b"")));
        assert_eq!(s.lookup(b"a", |_| true).unwrap().1.body.to_vec(), b"A2");
        assert_eq!(s.stats().objects, 3);
        // Variants coexist and the selector picks one.
        let vhead = "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nVary: X\r\n\r\n";
        let mut s = Store::new(1 << 20, 1 << 20, CachePolicy::Gds);
        assert!(s.insert(b"k", obj(vhead, b"one", b"x:1\n")));
        assert!(s.insert(b"k", obj(vhead, b"two", b"x:2\n")));
        let got = s.lookup(b"k", |o| &*o.vary_key == b"x:2\n").unwrap();
        assert_eq!(got.1.body.to_vec(), b"two");
        assert_eq!(s.invalidate(b"k"), 2);
        assert!(s.lookup(b"k", |_| true).is_none());
        assert_eq!(s.stats().bytes, 0);
    }

    #[test]
    fn oversized_objects_are_rejected_and_replace_keeps_accounting() {
        let head = "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n\r\n";
        let mut s = Store::new(1 << 20, 3, CachePolicy::Lru);
        assert!(!s.insert(b"big", obj(head, b"toolong", b"")));
        assert_eq!(s.stats().rejected, 1);
        assert!(s.insert(b"k", obj(head, b"ok", b"")));
        let (id, _) = s.lookup(b"k", |_| true).unwrap();
        let before = s.stats().bytes;
        let new_head = "HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nX: y\r\n\r\n";
        assert!(s.replace(id, Arc::new(obj(new_head, b"ok", b""))));
        assert_eq!(s.stats().bytes, before + (new_head.len() - head.len()) as u64);
        assert_eq!(s.lookup(b"k", |_| true).unwrap().1.lifetime, 600);
    }
}
