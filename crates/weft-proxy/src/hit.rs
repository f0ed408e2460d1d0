//! Answering a request from a stored response: a fresh hit, or an object
//! the origin has just validated (a 304 to the proxy's conditional request).
//! The client's own conditionals, If-Range, Range and HEAD are applied; body
//! bytes go out as shared segments of the stored object, never copied.

use crate::client::set_notsent_lowat;
use crate::headers;
use crate::stats::ProxyStats;
use crate::store::Object;
use crate::worker::{pair, Flow, Worker};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use weft_http::caching;
use weft_http::date::unix_secs;
use weft_http::{Method, Precondition, RangeOutcome, RequestHead, ResponseHead, Version};
use weft_io::{Ctx, OutChain, Poller, Token};

/// How a hit is answered, beyond the request and the object.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HitAnswer {
    /// Now, in Unix seconds (for `Age`).
    pub now: u64,
    /// Close the connection after this answer.
    pub close: bool,
    /// The origin has just validated the object for this request.
    pub validated: bool,
}

impl Worker<'_> {
    /// A revalidation came back 304 (the head is the first `n` bytes of the
    /// upstream's input): merge it into the stored object, store the result
    /// in both tiers, and answer the client's request from it.
    pub(crate) fn serve_revalidated<P: Poller>(
        &mut self,
        cx: &mut Ctx<P>,
        ct: Token,
        ut: Token,
        n: usize,
        (id, obj): (u64, Arc<Object>),
    ) -> Flow {
        let cfg = self.sh.cfg;
        let sh = &mut self.sh;
        let Some((c, u)) = pair(&mut self.slab, ct, ut) else {
            return Flow::Closed;
        };
        let Some(txn) = c.txn.as_mut() else {
            return Flow::Again;
        };
        let now = unix_secs(cx.wall);
        let resp = &sh.resp;
        let rdata = &u.buf.pending()[..n];
        let mut stored_head = ResponseHead::new();
        let lim = weft_http::Limits {
            max_head: obj.head.len() + 1,
            max_headers: weft_http::MAX_HEADERS_CAP,
            ..weft_http::Limits::default()
        };
        let mut merged = Vec::with_capacity(obj.head.len() + 128);
        if stored_head.parse(&obj.head, &lim).ok().flatten().is_some() {
            caching::merge_304(&obj.head, &stored_head, rdata, resp, &mut merged);
        }
        let refreshed = Object::build(
            Bytes::from(merged),
            obj.body.clone(),
            &obj.vary_key,
            txn.request_time,
            now,
            &sh.heuristic,
        );
        u.buf.consume(n);
        let reusable = txn.up_keep_alive;
        sh.stats.revalidated += 1;
        let serve = match refreshed {
            Some(o) => {
                let o = Arc::new(o);
                sh.cache.replace(&c.key, id, &o);
                o
            }
            None => obj,
        };
        let close = !txn.client_keep_alive || sh.draining;
        txn.up = None;
        let spare = c.txn.take();
        c.spare = spare;
        // Serve the refreshed object, with the client's own
        // conditionals and range (its head is kept in req_data):
        // from memory, so without the relay's unsent-bytes bound.
        if serve.body.len() > cfg.notsent_lowat {
            set_notsent_lowat(&c.fd, &mut c.notsent_lowat, false, cfg);
        }
        let answer = HitAnswer {
            now,
            close,
            validated: true,
        };
        serve_hit(&mut c.out, &c.req, &c.req_data, &serve, answer, &mut sh.stats);
        c.close_after |= close;
        self.release_upstream(cx, ut, reusable);
        Flow::Again
    }
}

/// Answer a request (head `data`, parsed as `req`) from a stored object: its
/// conditionals, Range and HEAD applied. Body bytes go out as shared segments
/// of the object (no copy).
/// `validated`: the origin has just validated the object for this request
/// (a 304 to our conditional request): the answer then has no `Age`, whose
/// presence says the opposite (RFC 9111 §5.1), so clients and measuring
/// tools can tell it from a hit.
pub(crate) fn serve_hit(
    out: &mut OutChain,
    req: &RequestHead,
    data: &[u8],
    obj: &Object,
    answer: HitAnswer,
    st: &mut ProxyStats,
) {
    let HitAnswer { now, close, validated } = answer;
    let method = req.method();
    let head_only = method == Method::Head;
    let len = obj.body.len() as u64;
    let mtime = obj
        .last_modified
        .as_ref()
        .map(|(_, t)| std::time::UNIX_EPOCH + Duration::from_secs(*t));
    let etag: &[u8] = obj.etag.as_deref().unwrap_or(b"");
    let pre = if obj.status == 200 {
        weft_http::evaluate_preconditions(
            method,
            req.header(data, "if-match"),
            mtime.and(req.header(data, "if-unmodified-since")),
            if etag.is_empty() {
                None
            } else {
                req.header(data, "if-none-match")
            },
            mtime.and(req.header(data, "if-modified-since")),
            etag,
            mtime.unwrap_or(std::time::UNIX_EPOCH),
        )
    } else {
        Precondition::Proceed
    };
    let age = obj.age(now);
    let tail = |v: &mut Vec<u8>, content_length: Option<u64>| {
        if !validated {
            v.extend_from_slice(b"Age: ");
            weft_http::push_decimal(v, age);
            v.extend_from_slice(b"\r\n");
        }
        if let Some(l) = content_length {
            v.extend_from_slice(b"Content-Length: ");
            weft_http::push_decimal(v, l);
            v.extend_from_slice(b"\r\n");
        }
        if close {
            v.extend_from_slice(b"Connection: close\r\n");
        } else if req.version() == Version::Http10 {
            v.extend_from_slice(b"Connection: keep-alive\r\n");
        }
        v.extend_from_slice(b"\r\n");
    };
    let stored_fields = obj.head.len() - 2;
    match pre {
        Precondition::NotModified => {
            let v = out.own_mut();
            headers::write_304_fields(v, &obj.head[..stored_fields], obj.status_line_len);
            tail(v, None);
        }
        Precondition::Failed => {
            let v = out.own_mut();
            v.extend_from_slice(b"HTTP/1.1 412 Precondition Failed\r\n");
            tail(v, Some(0));
        }
        Precondition::Proceed => {
            let mut range = RangeOutcome::Full;
            if method == Method::Get && obj.status == 200 {
                if let Some(r) = req.header(data, "range") {
                    let allowed = match req.header(data, "if-range") {
                        Some(ir) => {
                            (mtime.is_some() || !etag.is_empty())
                                && weft_http::if_range_allows(ir, etag, mtime.unwrap_or(std::time::UNIX_EPOCH))
                        }
                        None => true,
                    };
                    if allowed {
                        range = weft_http::evaluate_range(r, len);
                    }
                }
            }
            match range {
                RangeOutcome::Partial { start, end_inclusive } => {
                    let n = end_inclusive + 1 - start;
                    {
                        let v = out.own_mut();
                        v.extend_from_slice(b"HTTP/1.1 206 Partial Content\r\n");
                    }
                    out.push_shared(obj.head.slice(obj.status_line_len..stored_fields));
                    {
                        let v = out.own_mut();
                        v.extend_from_slice(b"Content-Range: bytes ");
                        weft_http::push_decimal(v, start);
                        v.push(b'-');
                        weft_http::push_decimal(v, end_inclusive);
                        v.push(b'/');
                        weft_http::push_decimal(v, len);
                        v.extend_from_slice(b"\r\n");
                        tail(v, Some(n));
                    }
                    for seg in obj.body.slice(start as usize, (end_inclusive + 1) as usize).segments() {
                        out.push_shared(seg.clone());
                    }
                    st.bytes_cache += n;
                }
                RangeOutcome::Unsatisfiable => {
                    let v = out.own_mut();
                    v.extend_from_slice(b"HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */");
                    weft_http::push_decimal(v, len);
                    v.extend_from_slice(b"\r\n");
                    tail(v, Some(0));
                }
                RangeOutcome::Full | RangeOutcome::Multiple => {
                    out.push_shared(obj.head.slice(..stored_fields));
                    let cl = if obj.status == 204 { None } else { Some(len) };
                    tail(out.own_mut(), cl);
                    if !head_only {
                        for seg in obj.body.segments() {
                            out.push_shared(seg.clone());
                        }
                        st.bytes_cache += len;
                    }
                }
            }
        }
    }
}
