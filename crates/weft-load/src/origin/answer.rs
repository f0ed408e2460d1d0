//! Requests and emulated handshakes turned into responses on the
//! connection's output chain: heads as own bytes, bodies as cyclic runs of
//! the content pattern (see the parent module for what is answered).

use super::{Conn, Mode, Shared};
use crate::content;
use crate::dist::{Dist, Unit};
use crate::origin_stats::OriginStats;
use crate::ssl::{self, Handshake, Side};
use crate::urls::{self, CacheFlag};
use rand::Rng;
use std::time::{Duration, Instant};
use weft_http::encode::{self, Persist};
use weft_http::{BodyFraming, Method, Precondition, Version};
use weft_io::OutChain;

/// Largest request body read and discarded (POST); larger ones get 413.
const MAX_BODY: u64 = 16 << 20;
/// Stop answering pipelined requests beyond this much queued head bytes.
pub(super) const COALESCE_MAX: usize = 256 * 1024;

/// Content-Type by extension.
fn content_type(path: &[u8]) -> &'static [u8] {
    let path = &path[..memchr::memchr(b'?', path).unwrap_or(path.len())];
    let ext = path.rsplit(|&b| b == b'.').next().unwrap_or(b"");
    if ext.len() == path.len() {
        return b"application/octet-stream";
    }
    match ext {
        b"html" | b"htm" => b"text/html",
        b"gif" => b"image/gif",
        b"jpeg" | b"jpg" => b"image/jpeg",
        b"png" => b"image/png",
        b"css" => b"text/css",
        b"txt" => b"text/plain",
        _ => b"application/octet-stream",
    }
}

const HELP: &[u8] = b"weft origin: /size/N[/c|/cSECONDS|/nc]/ANY answers N deterministic bytes; \
.../dirNNNNN/classC_F answers a SPECweb99 file; headers X-Weft-Size, X-Weft-Cache, X-Weft-Think override.\n";

/// Queue a simple response with a short text body.
fn simple(out: &mut OutChain, date: &[u8], status: u16, reason_body: &[u8], head_only: bool, close: bool) {
    let out = out.own_mut();
    encode::status_line(out, status);
    encode::date(out, date);
    encode::field(out, b"Server", b"weft-origin");
    encode::field(out, b"Content-Type", b"text/plain");
    encode::content_length(out, reason_body.len() as u64);
    if close {
        encode::connection(out, Persist::Close);
    }
    encode::end(out);
    if !head_only {
        out.extend_from_slice(reason_body);
    }
}

/// Answer what the buffer holds (requests, handshake messages). True when
/// output was produced or input consumed.
pub(super) fn answer(c: &mut Conn, s: &mut Shared<'_>, now: Instant) -> bool {
    let mut progressed = false;
    c.out.lend_own(&mut s.own_pool);
    while !c.input.is_empty() && !c.close_after && c.hold_until.is_none() && c.out.own_len() < COALESCE_MAX {
        if c.discard > 0 {
            let n = c.discard.min(c.input.len() as u64);
            c.input.consume(n as usize);
            c.discard -= n;
            progressed = true;
            continue;
        }
        if c.at_stream_start {
            c.at_stream_start = false;
            if ssl::starts_handshake(c.input.pending()[0]) {
                c.mode = Mode::Ssl {
                    hs: Handshake::Full,
                    next: 0,
                    need: ssl::CLIENT_HELLO,
                };
            }
        }
        if matches!(c.mode, Mode::Ssl { .. }) {
            if !handshake_step(c, &mut s.stats) {
                break;
            }
            progressed = true;
            continue;
        }
        let n = match s.head.parse(c.input.pending(), &s.cfg.limits) {
            Ok(None) => break,
            Ok(Some(n)) => n,
            Err(e) => {
                s.stats.refused += 1;
                simple(&mut c.out, s.date.get(), e.status, e.reason.as_bytes(), false, true);
                c.close_after = true;
                c.input.clear();
                return true;
            }
        };
        progressed = true;
        if let Flow::Stop = request(c, s, n, now) {
            return true;
        }
    }
    progressed
}

/// One step of an emulated handshake: take the client's message (or what
/// is owed of it), then queue our flights until the client owes the next.
/// False: waiting for more bytes (or closing on a bad ClientHello).
fn handshake_step(c: &mut Conn, stats: &mut OriginStats) -> bool {
    let Mode::Ssl { hs, next, need } = &mut c.mode else {
        return true;
    };
    let avail = c.input.len();
    if *next == 0 {
        // The ClientHello says which handshake follows.
        if avail < ssl::CLIENT_HELLO {
            return false;
        }
        match Handshake::from_client_hello(&c.input.pending()[..ssl::CLIENT_HELLO]) {
            Some(h) => *hs = h,
            None => {
                c.close_after = true;
                return false;
            }
        }
        c.input.consume(ssl::CLIENT_HELLO);
        *next = 1;
        *need = 0;
    } else {
        let take = (*need).min(avail);
        c.input.consume(take);
        *need -= take;
        if *need > 0 {
            return false;
        }
    }
    let msgs = hs.messages();
    loop {
        let Some(&(side, _)) = msgs.get(*next) else {
            stats.handshakes += 1;
            c.mode = Mode::Http;
            return true;
        };
        let mut lens = [0usize; 6];
        let mut k = 0;
        while let Some(&(s, len)) = msgs.get(*next) {
            if s != side {
                break;
            }
            lens[k] = len;
            k += 1;
            *next += 1;
        }
        match side {
            Side::Server => hs.render_flight(&lens[..k], false, c.out.own_mut()),
            Side::Client => {
                *need = lens[..k].iter().sum();
                return true;
            }
        }
    }
}

/// After one request: go on with the next, or stop answering (closing).
enum Flow {
    Next,
    Stop,
}

/// Queue the answer to the request whose head is the first `n` input bytes,
/// and consume it.
fn request(c: &mut Conn, s: &mut Shared<'_>, n: usize, now: Instant) -> Flow {
    c.requests += 1;
    s.stats.requests += 1;
    let head = &s.head;
    let date = s.date.get();
    let req = &c.input.pending()[..n];
    let method = head.method();
    let head_only = method == Method::Head;
    let close = !head.keep_alive() || s.draining || c.requests >= c.max_requests;
    let refuse = |c: &mut Conn, stats: &mut OriginStats, status: u16, why: &[u8], close: bool| {
        stats.refused += 1;
        simple(&mut c.out, date, status, why, head_only, close);
        c.close_after |= close;
    };
    match head.framing() {
        BodyFraming::Length(len) if len <= MAX_BODY => c.discard = len,
        BodyFraming::None | BodyFraming::UntilClose => {}
        BodyFraming::Length(_) => {
            refuse(c, &mut s.stats, 413, b"request body too large\n", true);
            c.input.clear();
            return Flow::Stop;
        }
        BodyFraming::Chunked => {
            refuse(c, &mut s.stats, 411, b"send a Content-Length\n", true);
            c.input.clear();
            return Flow::Stop;
        }
    }
    // Think time: nothing of this response leaves before it passes.
    let think = match head.header(req, "x-weft-think") {
        Some(v) => match std::str::from_utf8(v)
            .ok()
            .and_then(|s| Dist::parse(s, Unit::Seconds).ok())
        {
            Some(d) => Some(d),
            None => {
                refuse(c, &mut s.stats, 400, b"invalid X-Weft-Think\n", close);
                c.input.consume(n);
                return Flow::Next;
            }
        },
        None => s.cfg.think,
    };
    if let Some(d) = think {
        let t = d.sample(&mut s.rng);
        if t > 0.0 {
            c.hold_until = Some(now + Duration::from_secs_f64(t.min(3600.0)));
        }
    }
    if method == Method::Connect {
        // Stand in for a tunnelling proxy: the tunnel leads to this origin.
        c.out.push_copy(b"HTTP/1.1 200 Connection established\r\n\r\n");
        c.input.consume(n);
        c.at_stream_start = true;
        return Flow::Next;
    }
    if !matches!(method, Method::Get | Method::Head | Method::Post) {
        refuse(c, &mut s.stats, 405, b"GET, HEAD or POST\n", close);
        c.input.consume(n);
        return Flow::Next;
    }
    let path = content::origin_form(head.target(req));
    let spec = urls::parse(path);
    let size = match head.header(req, "x-weft-size") {
        Some(v) => match weft_http::parse_decimal(v) {
            Some(s) => Some(s),
            None => {
                refuse(c, &mut s.stats, 400, b"invalid X-Weft-Size\n", close);
                c.input.consume(n);
                return Flow::Next;
            }
        },
        None => spec.map(|s| s.size),
    };
    let Some(size) = size else {
        let (status, body): (u16, &[u8]) = if path == b"/" {
            (200, HELP)
        } else {
            (404, b"unknown path\n")
        };
        simple(&mut c.out, date, status, body, head_only, close);
        c.input.consume(n);
        c.close_after |= close;
        return Flow::Next;
    };
    if size > s.cfg.max_size {
        refuse(c, &mut s.stats, 400, b"size above --max-size\n", close);
        c.input.consume(n);
        return Flow::Next;
    }
    object(c, s, n, spec, size, close);
    c.input.consume(n);
    if close {
        c.close_after = true;
    }
    Flow::Next
}

/// Queue the head and body of the object the request (the first `n` input
/// bytes) names: `size` bytes of its path's content, with its validators.
fn object(c: &mut Conn, s: &mut Shared<'_>, n: usize, spec: Option<urls::Spec>, size: u64, close: bool) {
    let head = &s.head;
    let req = &c.input.pending()[..n];
    let method = head.method();
    let head_only = method == Method::Head;
    let path = content::origin_form(head.target(req));
    let h = content::path_hash(path);
    let lm = content::last_modified(h);
    let mut etag = [0u8; 48];
    let etag_len = {
        let mut v = Vec::with_capacity(48);
        content::push_etag(&mut v, h, size);
        etag[..v.len()].copy_from_slice(&v);
        v.len()
    };
    let etag = &etag[..etag_len];
    let pre = weft_http::evaluate_preconditions(
        method,
        head.header(req, "if-match"),
        head.header(req, "if-unmodified-since"),
        head.header(req, "if-none-match"),
        head.header(req, "if-modified-since"),
        etag,
        lm,
    );
    let (status, body_len) = match pre {
        Precondition::Proceed => (200u16, size),
        Precondition::NotModified => {
            s.stats.not_modified += 1;
            (304, 0)
        }
        Precondition::Failed => {
            // A generated answer: a short body, no validators or caching fields.
            let why = b"a precondition of the request does not hold\n";
            simple(&mut c.out, s.date.get(), 412, why, head_only, close);
            return;
        }
    };
    let cache_value: &[u8] = match head.header(req, "x-weft-cache") {
        Some(v) if !v.is_empty() && v.iter().all(|&b| (b' '..0x7f).contains(&b)) => v,
        _ => match spec.map(|s| s.cache).unwrap_or(CacheFlag::Default) {
            CacheFlag::NoStore => b"no-store",
            _ => b"",
        },
    };
    let out = c.out.own_mut();
    encode::status_line(out, status);
    encode::date(out, s.date.get());
    encode::field(out, b"Server", b"weft-origin");
    // A 304 carries only what RFC 9110 §15.4.5 lists (ETag, Cache-Control):
    // no Content-Type, and no Last-Modified beside the ETag.
    if status != 304 {
        encode::field(out, b"Content-Type", content_type(path));
        encode::content_length(out, body_len);
        encode::last_modified(out, lm);
    }
    encode::etag(out, etag);
    if !cache_value.is_empty() {
        encode::field(out, b"Cache-Control", cache_value);
    } else if let Some(CacheFlag::MaxAge(secs)) = spec.map(|s| s.cache) {
        out.extend_from_slice(b"Cache-Control: max-age=");
        encode::push_u64(out, secs);
        out.extend_from_slice(b"\r\n");
    } else {
        encode::field(out, b"Cache-Control", s.cfg.cache_control.as_bytes());
    }
    encode::connection(out, Persist::new(close, head.version() == Version::Http10));
    encode::end(out);
    let mut left = body_len;
    if status == 200 && !head_only && body_len >= 2 && s.cfg.abort > 0.0 && s.rng.gen::<f64>() < s.cfg.abort {
        // Abort: half the body, then a reset (the client sees a truncated reply).
        s.stats.aborted += 1;
        left = body_len / 2;
        c.abort_after = true;
        c.close_after = true;
    }
    if !head_only {
        c.out.push_cyclic(content::doubled(), content::offset_of_hash(h), left);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types() {
        assert_eq!(content_type(b"/size/1/pm/3.gif"), b"image/gif");
        assert_eq!(content_type(b"/a.htm?x=1"), b"text/html");
        assert_eq!(content_type(b"/dir00000/class1_2"), b"application/octet-stream");
    }
}
