//! Stale-while-revalidate (RFC 5861 §3): a request that finds its stored
//! response stale, within the window the response (or
//! `--stale-while-revalidate`) allows, is answered from it at once, and the
//! response is revalidated in the background — nginx's
//! `proxy_cache_background_update`, Varnish's grace. The client never waits
//! for the origin; the next request after the revalidation gets the
//! refreshed response.
//!
//! A background revalidation is a client slot without a socket
//! ([`Client::background`]) holding one request: the client's head without
//! its conditionals and Range (`headers::background_head`). It goes through
//! the same path as any request — routing, the cache lookup (which finds the
//! stale object and revalidates it with its validators), the upstream pool,
//! the response head — and then:
//! - a 304 refreshes the stored object (`hit.rs`);
//! - a storable response is read into the cache with nothing sent (the
//!   relay starts as an orphaned fill, on the copy path);
//! - anything else (an error, a response that may not be stored) ends it,
//!   its upstream connection closed; the stale object stays until its
//!   window ends, and the next request after this one may try again.
//!
//! Each stale object has one background revalidation at a time in the
//! process (the claim, `store::Revalidating`): requests that find it under
//! way are answered stale too, without starting another. A worker runs at
//! most [`BACKGROUND_MAX`]; past that, requests revalidate as before, in the
//! foreground. The access log shows each with `BACKGROUND` in its cache
//! field; `stale_while_revalidate` counts the stale answers,
//! `background_revalidations` the revalidations started.
//!
//! **Range fills** use the same slot. A Range request that misses is
//! forwarded with its Range, so the client gets its part at once (a seek
//! into a large file does not wait for the bytes before it). The origin's
//! 206 is not a complete response and is not stored (RFC 9111 §3.4), but
//! its Content-Range gives the representation's length. If the whole would
//! be storable as a 200 and fits, one background GET without the Range
//! fetches it ([`range_fill`]), and the next ranges of it are hits. A 206
//! that carries the whole representation (`bytes 0-(n-1)/n`, what a
//! browser's `Range: bytes=0-` gets) is stored as the 200 it is, without a
//! second request (`response.rs`). One range fill per key runs at a time
//! in the process ([`RangeFills`]); `--range-fill false` turns both off.
//! nginx and Varnish instead send the origin no Range at all and make the
//! client wait for the bytes before its range; Squid forwards the Range
//! and stores nothing (`range_offset_limit 0`).

use crate::conn::{Client, Entry, IdleClient, Txn};
use crate::store::{Object, Revalidating};
use crate::worker::{client_of, Flow, Shared, Worker};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use weft_http::caching;
use weft_http::{Method, RequestHead};
use weft_io::{Ctx, Interest, Poller, Token};

/// Background revalidations one worker runs at once at most: a burst of
/// stale objects (a cold restart from disk, a clock jump) does not open a
/// connection to the origin for each.
pub(crate) const BACKGROUND_MAX: usize = 64;

/// What a background request holds until its slot closes, so that no
/// other starts for the same response.
/// Each is only held: dropping it releases the claim.
pub(crate) enum Claim {
    /// The stale object it revalidates.
    Revalidation { _object: Revalidating },
    /// The key whose complete response it fetches after a Range miss.
    RangeFill { _key: RangeFill },
}

/// The keys with a range fill under way in the process. At most
/// [`BACKGROUND_MAX`] per worker: each is held by a background slot.
#[derive(Default)]
pub(crate) struct RangeFills(Mutex<HashSet<Box<[u8]>>>);

impl RangeFills {
    fn keys(&self) -> std::sync::MutexGuard<'_, HashSet<Box<[u8]>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Claim `key`: None when a range fill for it is under way.
    fn claim(self: &Arc<Self>, key: &[u8]) -> Option<RangeFill> {
        self.keys().insert(key.into()).then(|| RangeFill {
            fills: self.clone(),
            key: key.into(),
        })
    }
}

/// A claimed range fill; dropping it (the slot closed) releases the key.
pub(crate) struct RangeFill {
    fills: Arc<RangeFills>,
    key: Box<[u8]>,
}

impl Drop for RangeFill {
    fn drop(&mut self) {
        self.fills.keys().remove(&self.key);
    }
}

/// May the request (`txn`, its head `req`/`data`) that found `obj` stale
/// (`age` seconds old) be answered from it while it is revalidated in the
/// background? None: no, it revalidates in the foreground. Some: yes — with
/// the head and claim of the background revalidation to start, or with
/// none when one is under way already.
pub(crate) fn claim(
    sh: &Shared<'_>,
    c: &Client,
    txn: &Txn,
    obj: &Arc<Object>,
    age: u64,
    (req, data): (&RequestHead, &[u8]),
) -> Option<Option<(Vec<u8>, Claim)>> {
    // A plain GET from a real client (a HEAD's answer stores no body; a
    // background revalidation never starts another).
    let eligible = c.fd.is_some() && c.background.is_none() && txn.method == Method::Get && !txn.had_body;
    if !eligible {
        return None;
    }
    let configured = sh.cfg.stale_while_revalidate;
    let why = caching::StaleUse::WhileRevalidate;
    if !caching::stale_usable(why, (obj.lifetime, age), &obj.cc, &txn.req_cc, configured) {
        return None;
    }
    if obj.revalidating() {
        return Some(None);
    }
    if sh.draining || sh.backgrounds >= BACKGROUND_MAX {
        return None;
    }
    let Some(claim) = obj.claim_revalidation() else {
        // Another worker claimed it just now.
        return Some(None);
    };
    let mut head = Vec::with_capacity(data.len());
    crate::headers::background_head(req, data, &mut head);
    Some(Some((head, Claim::Revalidation { _object: claim })))
}

/// A Range GET for `key` (its head `req`/`data`; `txn` its transaction)
/// missed, and the origin answered 206 with a part of a representation of
/// `complete` bytes that the cache could store as a 200 (the caller
/// checked). The head and claim of the background GET that fetches all of
/// it, unless one is under way for the key, it would not fit, or the worker
/// runs its most background requests already. `client`: the request came
/// from a client (not from a background request itself).
pub(crate) fn range_fill(
    sh: &Shared<'_>,
    (client, txn): (bool, &Txn),
    key: &[u8],
    (req, data): (&RequestHead, &[u8]),
    complete: u64,
) -> Option<(Vec<u8>, Claim)> {
    let eligible = client && txn.method == Method::Get && !txn.had_body;
    if !eligible || complete > sh.cfg.max_object_size || sh.draining || sh.backgrounds >= BACKGROUND_MAX {
        return None;
    }
    let claim = sh.range_fills.as_ref()?.claim(key)?;
    let mut head = Vec::with_capacity(data.len());
    crate::headers::background_head(req, data, &mut head);
    Some((head, Claim::RangeFill { _key: claim }))
}

impl Worker<'_> {
    /// Start the background request (a revalidation or a range fill) a
    /// request asked for (`Shared::background_wanted`): a socketless client with the head in
    /// its input, driven like any other.
    pub(crate) fn start_background<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        let Some((head, claim)) = self.sh.background_wanted.take() else {
            return;
        };
        let mut c = self
            .sh
            .clients
            .lend(IdleClient::new(None, None, true, Interest::NONE, cx.now));
        let room = c.input.reserve(head.len(), head.len(), &mut self.sh.bufs);
        if room < head.len() {
            c.input.discard(&mut self.sh.bufs);
            return;
        }
        c.input.spare_mut()[..head.len()].copy_from_slice(&head);
        c.input.commit(head.len());
        // Nothing more comes: the one request is all it has.
        c.may_read = false;
        c.eof = true;
        match claim {
            Claim::Revalidation { .. } => self.sh.stats.background_revalidations += 1,
            Claim::RangeFill { .. } => self.sh.stats.range_fills += 1,
        }
        c.background = Some(claim);
        let token = self.slab.insert_with(|_| Entry::Client(c));
        self.sh.open_clients += 1;
        self.sh.backgrounds += 1;
        self.drive(cx, token);
    }

    /// A background revalidation between steps (no transaction): route its
    /// request once; when that has gone through (or been answered from the
    /// cache after all, or refused), the slot closes.
    pub(crate) fn step_background<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) -> Flow {
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        if c.disk_wait.is_some() || c.fill_wait.is_some() {
            return Flow::Wait;
        }
        if c.background.is_some() && !c.close_after && !c.input.is_empty() {
            c.out.lend_own(&mut self.sh.own_pool);
            if let Some(f) = self.answer_next(cx, ct) {
                return f;
            }
        }
        self.close_client(cx, ct);
        Flow::Closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_range_fill_per_key_until_its_claim_drops() {
        let fills = Arc::new(RangeFills::default());
        let a = fills.claim(b"http://h/a").expect("the first claim");
        assert!(fills.claim(b"http://h/a").is_none(), "under way");
        let b = fills.claim(b"http://h/b").expect("another key");
        drop(a);
        let again = fills.claim(b"http://h/a").expect("released with its slot");
        drop((again, b));
        assert!(fills.keys().is_empty(), "nothing left behind");
    }
}
