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
//! (answered by the proxy itself: an error, a refusal). `request_time` runs from the request head's first byte
//! to the response head queued (time to first byte: a relayed body's length
//! may not be known yet), and the byte count is the body length the response
//! announces (`0` when it is chunked or close-delimited).

use crate::conn::Client;
use crate::worker::Shared;
use std::time::{Instant, SystemTime};
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
        took: c.began.map(|t| t.elapsed()),
        cache: Some(cache),
    };
    log.lines.log(head, data, &e);
}
