//! The connection cycle: what [`drive_conn`] does each time a connection is
//! driven (send what is queued, answer every complete request already
//! buffered, read more only when the socket may have some), the same for
//! the event loop (`Worker::drive`) and for the blocking architectures
//! (`blocking.rs`), and how a request is answered and counted.

use super::{amped, handoff, Next, Shared, COALESCE_MAX, LINGER, MAX_DISCARD, REQUESTS_PER_PASS};
use crate::conn::Conn;
use crate::respond::{self, Persist};
use std::time::{Instant, SystemTime};
use weft_http::{BodyFraming, Method, Version};
use weft_io::sys;
use weft_io::{BufPool, Fill};

/// Read and discard after shutting down our side, until EOF, a cap or the deadline.
pub(super) fn linger_read(c: &mut Conn, pool: &mut BufPool) -> Next {
    match c.input.linger(&c.fd, pool) {
        weft_io::Linger::Wait => {
            c.may_read = false;
            Next::Read
        }
        weft_io::Linger::Close => Next::Close,
    }
}

/// The connection cycle (see the module doc).
pub(super) fn drive_conn(
    c: &mut Conn,
    s: &mut Shared<'_>,
    ho: Option<&handoff::Handoff>,
    now: Instant,
    wall: SystemTime,
) -> Next {
    // A connection its front-end wants back answers one request, then goes
    // back (`Worker::drive`) with whatever else it read, unanswered.
    let gives_back = c.handed.is_some_and(|h| h.gives_back());
    let mut budget = if gives_back { 1 } else { REQUESTS_PER_PASS };
    loop {
        if c.feeding() || c.zc_held() {
            // stream: a large body's next chunk (and zero-copy completions).
            match crate::stream::feed(c, s, now) {
                crate::stream::Fed::Park => return Next::Read,
                crate::stream::Fed::Abort => return Next::Close,
                crate::stream::Fed::Queued if !c.has_output() => continue, // all sent zero-copy
                crate::stream::Fed::Idle | crate::stream::Fed::Queued => {}
            }
        }
        if c.has_output() {
            // A blocked file body resumes only if its file did not change.
            if !amped::before_flush(c, s) {
                return Next::Close;
            }
            match c.out.flush(&c.fd, &[], &mut s.scratch) {
                Ok(f) => {
                    s.stats.bytes_sendfile += f.sendfile;
                    s.stats.bytes_copy += f.copied;
                    // Bytes moved, not a wake-up: epoll-once reports a
                    // half-closed client at every wait, and a flush that
                    // sends nothing must not hold off the send timeout.
                    if f.total() > 0 {
                        c.last_activity = now;
                    }
                    amped::after_flush(c, s, f.blocked);
                    if f.blocked {
                        if crate::cgi::busy(s, c) {
                            // cgi: the client is behind, but the reply still
                            // moves from the application into the pipe (up to
                            // cgi's QUEUED_MAX), so the application is free
                            // once its reply is whole; where it cannot move,
                            // the exchange stops hearing from the
                            // application. Left undriven, the application's
                            // readable event was never answered, and a
                            // level-triggered loop spun on it: a core's worth
                            // of CPU for a client that did not read.
                            let _ = crate::cgi::drive(c, s, now);
                        }
                        return Next::Write;
                    }
                    if c.feeding() {
                        continue;
                    }
                }
                Err(_) => {
                    s.in_flight = None;
                    return Next::Close;
                }
            }
        }
        if c.close_after {
            if c.linger_on_close || weft_io::must_linger(&c.fd, c.eof, c.may_send_more()) {
                // Let the client read the last response: half-close, then
                // drain what it still sends (nginx's lingering close). A
                // close with unread bytes would reset the connection and cut
                // the response the client is reading.
                if sys::shutdown_write(&c.fd).is_err() {
                    return Next::Close;
                }
                c.lingering = true;
                c.deadline = now + LINGER;
                return linger_read(c, &mut s.pool);
            }
            return Next::Close;
        }
        if gives_back && c.requests > 0 && c.discard == 0 {
            // handback: back, answered here as its target's owner, or wait for its line.
            match handoff::next_step(ho, c) {
                handoff::Step::Back => return Next::Read,
                handoff::Step::Answer => budget = budget.max(1),
                handoff::Step::Wait => {}
            }
        }
        if budget == 0 && (!c.input.is_empty() || c.may_read) {
            // Everything answered so far is sent; the rest waits its turn.
            return Next::Resume;
        }
        if crate::cgi::busy(s, c) {
            // cgi: a request in flight is driven by crate::cgi.
            if let crate::cgi::Drove::Progress = crate::cgi::drive(c, s, now) {
                continue;
            }
        } else if !c.input.is_empty() && answer_buffered(c, s, now, wall, &mut budget) {
            continue;
        }
        if s.wait.is_some() {
            return Next::Read; // parked (AMPED): the worker submits the wait
        }
        if c.eof {
            return Next::Close;
        }
        if !c.may_read {
            return Next::Read;
        }
        let max = s.cfg.limits.max_head + 1024;
        match c.input.fill(&c.fd, max, &mut s.pool) {
            // The parser would already have answered 431 for an oversized
            // head; a full buffer here means a request we chose not to parse yet.
            Fill::Full => return Next::Close,
            Fill::Eof => {
                c.eof = true;
                c.may_read = false;
                // A partial request can never complete; close after any output.
                if !c.has_output() {
                    return Next::Close;
                }
            }
            Fill::Data(_) => {
                c.last_activity = now;
                if c.head_started.is_none() && c.discard == 0 {
                    c.head_started = Some(now);
                }
                c.may_read = c.input.may_hold_more(c.read_closed);
            }
            Fill::WouldBlock => {
                c.may_read = false;
                return Next::Read;
            }
            Fill::Reset(_) => return Next::Close,
        }
    }
}

/// Answer every complete request in the buffer (stopping at a file body, a
/// close, or when enough output is queued). True when output was produced.
fn answer_buffered(c: &mut Conn, s: &mut Shared<'_>, now: Instant, wall: SystemTime, budget: &mut u32) -> bool {
    let mut produced = false;
    c.out.lend_own(&mut s.own_pool);
    while *budget > 0 && c.out.is_memory_only() && !c.close_after && !c.feeding() && c.out.memory_len() < COALESCE_MAX {
        if c.discard > 0 {
            let n = c.discard.min(c.input.len() as u64);
            c.input.consume(n as usize);
            c.discard -= n;
            if c.discard > 0 {
                break;
            }
            c.head_started = None;
        }
        if c.input.is_empty() {
            break;
        }
        let parsed = s.head.parse(c.input.pending(), &s.cfg.limits);
        match parsed {
            Ok(None) => {
                if c.head_started.is_none() {
                    c.head_started = Some(now);
                }
                break;
            }
            Ok(Some(head_len)) => {
                // A chunked body is checked as far as it has arrived before the
                // request is answered, so a malformed one gets its 400; one that
                // arrived whole is skipped and the connection stays usable.
                let mut next = head_len;
                let mut chunked_pending = false;
                if s.head.framing() == BodyFraming::Chunked {
                    let mut dec = weft_http::ChunkedDecoder::new();
                    let avail = &c.input.pending()[head_len..];
                    match dec.decode_all(&avail[..avail.len().min(MAX_DISCARD as usize)], |_| {}) {
                        Ok(k) if dec.is_done() => next = head_len + k,
                        Ok(_) => chunked_pending = true,
                        Err(e) => {
                            reject(c, s, 400, e.0, wall);
                            produced = true;
                            continue;
                        }
                    }
                }
                if crate::cgi::begin(c, s, head_len, now) {
                    // cgi: under a CGI prefix; crate::cgi answers it, body and all.
                    c.head_started = None;
                    c.requests += 1;
                    *budget -= 1;
                    s.stats.requests += 1;
                    produced = true;
                    break;
                }
                let before = (c.discard, c.close_after, c.linger_on_close);
                answer(c, s, head_len, wall, chunked_pending);
                if s.wait.is_some() {
                    // Parked: answered again, from the start, when the
                    // helper is done.
                    (c.discard, c.close_after, c.linger_on_close) = before;
                    break;
                }
                c.input.consume(next);
                // Head start (the read that brought its first byte, or now
                // for a pipelined one) to response queued. One vDSO clock
                // read per response, no system call: `now` is the batch's
                // start, so it would time a request answered in the batch
                // that read it as zero.
                let began = c.head_started.take().unwrap_or(now);
                s.latency.record(Instant::now().saturating_duration_since(began));
                c.requests += 1;
                *budget -= 1;
                s.stats.requests += 1;
                produced = true;
            }
            Err(e) => {
                reject(c, s, e.status, e.reason, wall);
                produced = true;
            }
        }
    }
    produced
}

/// Refuse the request at the front of the input with `status` and close
/// (lingering, so the client can read why).
fn reject(c: &mut Conn, s: &mut Shared<'_>, status: u16, reason: &str, wall: SystemTime) {
    s.stats.bad_requests += 1;
    s.stats.requests += 1;
    let date = s.date.get();
    let bytes = respond::simple(c.out.own_mut(), status, date, b"", reason, false, Persist::Close);
    let all = c.input.pending().len();
    count_and_log(c, s, all, (status, bytes, false), wall);
    c.close_after = true;
    c.linger_on_close = true;
    c.input.clear();
}

/// status: count the response's status class and write its access-log line
/// (the request head is the first `head_len` input bytes).
fn count_and_log(c: &Conn, s: &mut Shared<'_>, head_len: usize, response: (u16, u64, bool), wall: SystemTime) {
    let (status, bytes, head_only) = response;
    s.stats.status.count(status);
    let cache = s.cache_status.take();
    match cache {
        Some("HIT") => s.stats.cache_hits += 1,
        Some(_) => s.stats.cache_misses += 1,
        None => {}
    }
    if let Some(log) = &mut s.log {
        let took = c.head_started.map(|t| t.elapsed());
        let e = crate::accesslog::Entry {
            peer: c.peer,
            status,
            bytes,
            wall,
            head_only,
            took,
            cache,
        };
        log.log(&s.head, &c.input.pending()[..head_len], &e);
    }
}

/// Answer one parsed request whose head is the first `head_len` input bytes.
/// `chunked_pending`: its chunked body has not fully arrived (it is not read:
/// the connection closes after the response).
fn answer(c: &mut Conn, s: &mut Shared<'_>, head_len: usize, wall: SystemTime, chunked_pending: bool) {
    let head = &s.head;
    let method = head.method();
    let max = s.cfg.max_requests;
    let mut close = !head.keep_alive() || s.draining || (max > 0 && c.requests + 1 >= max) || handoff::closes(c);
    match head.framing() {
        BodyFraming::None | BodyFraming::UntilClose => {}
        BodyFraming::Chunked if !chunked_pending => {}
        BodyFraming::Length(n) if n <= MAX_DISCARD => c.discard = n,
        // A large body, or a chunked one still arriving, that we will not
        // read: answer, then close.
        BodyFraming::Length(_) | BodyFraming::Chunked => {
            close = true;
            c.linger_on_close = true;
        }
    }
    let persist = if close {
        Persist::Close
    } else if head.version() == Version::Http10 {
        Persist::KeepAlive10
    } else {
        Persist::Default
    };
    if close {
        c.close_after = true;
    }
    let head_only = method == Method::Head;
    let allow: &[u8] = b"Allow: GET, HEAD, OPTIONS\r\n";
    let (status, bytes) = match method {
        Method::Get | Method::Head => crate::answer::serve_target(c, s, head_len, persist, head_only),
        Method::Options => {
            let n = respond::simple(c.out.own_mut(), 204, s.date.get(), allow, "", true, persist);
            (204, n)
        }
        _ => {
            let reason = "this server only serves files";
            let n = respond::simple(c.out.own_mut(), 405, s.date.get(), allow, reason, head_only, persist);
            (405, n)
        }
    };
    if s.wait.is_some() {
        return;
    }
    count_and_log(c, s, head_len, (status, bytes, head_only), wall);
}
