//! The proxy's access log (`--access-log FILE`, `--access-log-format
//! clf|combined|json`, reopened on SIGUSR1) and its status-class counters.
//!
//! The lines are weft serve's ([`weft_server::accesslog`]: the same formats,
//! the same escaping, the same per-worker buffer over one O_APPEND file); the
//! cache field says what the cache did: `HIT`, `STALE` (served stale: as the
//! client's max-stale allowed, in place of an origin's error, or while a
//! background revalidation runs), `REVALIDATED` (a stored response refreshed
//! by a 304), `EXPIRED` (a stored response replaced), `MISS`, `BYPASS` (not
//! cacheable or the cache is off), `BACKGROUND` (a background revalidation's
//! own line, with the origin's status and no client address) or `-`
//! (answered by the proxy itself: an error, a refusal).
//!
//! A response relayed from the upstream is logged when its transaction ends
//! (the body relayed, or the transaction abandoned), as nginx logs: the byte
//! count is the body bytes the client was given meanwhile (chunk framing
//! included, whatever the body's framing; fewer than announced when the
//! transfer was cut), and `request_time` runs from the request head's first
//! byte to that end. Every other line (hits, refusals, errors) is written
//! when its response is queued, whole, with the body length it announces.

use crate::conn::{Client, Txn};
use crate::worker::Shared;
use std::time::{Duration, Instant, SystemTime};
use weft_http::RequestHead;
pub use weft_server::accesslog::{AccessLog, Format};

/// One worker's log and the head it parses a logged request into.
pub struct Log {
    lines: AccessLog,
    head: RequestHead,
}

impl Log {
    pub fn new(lines: AccessLog) -> Log {
        Log {
            lines,
            head: RequestHead::new(),
        }
    }

    pub(crate) fn flush_if_due(&mut self, now: Instant) {
        self.lines.flush_if_due(now);
    }

    pub(crate) fn flush(&mut self, now: Instant) {
        self.lines.flush(now);
    }

    pub(crate) fn max_wait(&self) -> Option<std::time::Duration> {
        self.lines.max_wait()
    }
}

/// Keep a copy of the request head (the first `n` input bytes) for the log
/// line (only when there is a log).
pub(crate) fn keep_head(sh: &Shared<'_>, c: &mut Client, n: usize) {
    if sh.log.is_some() {
        c.log_head.clear();
        c.log_head.extend_from_slice(&c.input.pending()[..n]);
    }
}

/// A response head for the client's current request is queued: count its
/// status class and log it.
pub(crate) fn answered(sh: &mut Shared<'_>, c: &Client, status: u16, cache: &'static str, bytes: u64) {
    // A background revalidation answers no client: its line says what the
    // origin answered, and the status counts stay the clients'.
    let cache = if c.background.is_some() {
        "BACKGROUND"
    } else {
        sh.stats.status.count(status);
        cache
    };
    write_line(sh, c, (status, cache, bytes), c.began.map(|t| t.elapsed()));
}

/// What a relayed response's line needs at the end of its transaction.
#[derive(Debug)]
pub struct RelayedLine {
    status: u16,
    cache: &'static str,
    /// When its request head began.
    began: Option<Instant>,
    /// The client's [`weft_io::OutChain::handed`] after the head was queued.
    from: u64,
}

/// The head of a response relayed from the upstream is queued (`c`'s output
/// holds it), its body to follow: count its status class now, and keep its
/// line for [`relay_ended`].
pub(crate) fn relayed(sh: &mut Shared<'_>, c: &mut Client, status: u16, cache: &'static str, announced: u64) {
    if c.background.is_some() {
        return answered(sh, c, status, cache, announced);
    }
    sh.stats.status.count(status);
    if sh.log.is_none() {
        return;
    }
    let line = RelayedLine {
        status,
        cache,
        began: c.began,
        from: c.out.handed(),
    };
    if let Some(txn) = c.txn.as_mut() {
        txn.log_line = Some(line);
    }
}

/// `txn` (taken from `c`) ends: write its relayed response's line, with the
/// body bytes `c` was given since the head. Called where every transaction
/// ends, whole or abandoned.
pub(crate) fn relay_ended(sh: &mut Shared<'_>, c: &Client, txn: &mut Txn) {
    if let Some(l) = txn.log_line.take() {
        let bytes = c.out.handed().saturating_sub(l.from);
        write_line(sh, c, (l.status, l.cache, bytes), l.began.map(|t| t.elapsed()));
    }
}

fn write_line(
    sh: &mut Shared<'_>,
    c: &Client,
    (status, cache, bytes): (u16, &'static str, u64),
    took: Option<Duration>,
) {
    let Some(log) = sh.log.as_mut() else {
        return;
    };
    let data = &c.log_head[..];
    let parsed = matches!(log.head.parse(data, &sh.cfg.limits), Ok(Some(_)));
    let head = if parsed { &log.head } else { &sh.blank_head };
    let head_only = parsed && head.method() == weft_http::Method::Head;
    let e = weft_server::accesslog::Entry {
        peer: c.peer,
        status,
        bytes,
        wall: SystemTime::now(),
        head_only,
        took,
        cache: Some(cache),
    };
    log.lines.log(head, data, &e);
}
