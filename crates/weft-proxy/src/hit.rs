//! Answering a request from a stored response: a fresh hit, an object the
//! origin has just validated (a 304 to the proxy's conditional request), or
//! a stale one standing in for the origin's error (`stale-if-error`).
//! The client's own conditionals, If-Range, Range and HEAD are applied; body
//! bytes go out as shared segments of the stored object, never copied.
//! A request with If-Match or If-Unmodified-Since never comes here: a cache
//! does not evaluate those (RFC 9111 §4.3.2), the request goes to the origin
//! (see `request.rs`).

use crate::cache_status;
use crate::client::set_notsent_lowat;
use crate::conn::{Follow, OpenEnd};
use crate::fill::{Read, Stream};
use crate::stats::ProxyStats;
use crate::store::Object;
use crate::worker::{pair, Flow, Worker};
use bytes::Bytes;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};
use weft_http::caching;
use weft_http::date::unix_secs;
use weft_http::encode;
use weft_http::represent::{self, Answer, Conditions, Representation, Role};
use weft_http::respond;
use weft_http::{Method, RequestHead, ResponseHead, Version};
use weft_io::{Ctx, OutChain, Poller, Token};

/// How a hit is answered, beyond the request and the object.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HitAnswer<'d> {
    /// Now, in Unix seconds (for `Age`).
    pub now: u64,
    /// Close the connection after this answer.
    pub close: bool,
    /// The origin has just validated the object for this request.
    pub validated: bool,
    /// Now as an HTTP date (the `Date` of an answer the proxy generates: a
    /// 412 or 416).
    pub date: &'d [u8],
    /// `--cache-status`: the cache's identifier and what to say of the hit.
    pub status: Option<(&'d [u8], cache_status::Hit)>,
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
            &sh.rules,
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
        if c.background.is_some() {
            // Refreshed; there is no client to answer.
            crate::accesslog::answered(sh, c, 304, "BACKGROUND", 0);
            self.release_upstream(cx, ut, reusable);
            self.close_client(cx, ct);
            return Flow::Closed;
        }
        answer_forwarded(sh, c, &serve, (now, close, true), "REVALIDATED");
        self.release_upstream(cx, ut, reusable);
        Flow::Again
    }
}

impl Worker<'_> {
    /// The stale stored response that may answer `ct`'s request instead of
    /// the origin's error (RFC 5861 `stale-if-error`, `caching::stale_usable`),
    /// if nothing of an answer has gone out yet.
    pub(crate) fn stale_stand_in(&mut self, ct: Token, now: u64) -> Option<Arc<Object>> {
        let configured = self.sh.cfg.stale_if_error;
        let c = crate::worker::client_of(&mut self.slab, ct)?;
        c.fd.as_ref()?;
        let txn = c.txn.as_mut()?;
        if txn.responded {
            return None;
        }
        let obj = txn.stale.as_ref()?;
        let why = caching::StaleUse::IfError;
        let usable = caching::stale_usable(why, (obj.lifetime, obj.age(now)), &obj.cc, &txn.req_cc, configured);
        if usable {
            txn.stale.take()
        } else {
            None
        }
    }

    /// Answer `ct`'s request from `obj`, a stale response standing in for
    /// the origin's error ([`Worker::stale_stand_in`]): the transaction ends
    /// and its upstream connection is closed (a failed one, or one with an
    /// error answer's body unread); the client goes on as after a hit.
    pub(crate) fn serve_stale<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token, obj: Arc<Object>) -> Flow {
        let Some(c) = crate::worker::client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        let Some((txn, ut)) = c.end_txn(&mut self.sh) else {
            return Flow::Again;
        };
        let close = !txn.client_keep_alive || self.sh.draining || !matches!(txn.body, crate::conn::ReqBody::None);
        c.spare = Some(txn);
        if let Some(ut) = ut {
            self.close_upstream(cx, ut);
        }
        let sh = &mut self.sh;
        let Some(c) = crate::worker::client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        sh.stats.stale_if_error += 1;
        answer_forwarded(sh, c, &obj, (unix_secs(cx.wall), close, false), "STALE");
        Flow::Again
    }
}

/// Answer a request that went upstream from a stored object after all (a
/// 304 refreshed it, or it stands in for the origin's error): the client's
/// own conditionals and range apply (its head is kept in `req_data`), and
/// the body comes from memory, so without the relay's unsent-bytes bound.
/// `(now, close, validated)` as in [`HitAnswer`]; `cache` for the access log.
fn answer_forwarded(
    sh: &mut crate::worker::Shared<'_>,
    c: &mut crate::conn::Client,
    obj: &Object,
    (now, close, validated): (u64, bool, bool),
    cache: &'static str,
) {
    if obj.body.len() > sh.cfg.notsent_lowat {
        set_notsent_lowat(&c.fd, &mut c.notsent_lowat, false, sh.cfg);
    }
    // (Not validated: a stale response standing in for an origin's error.)
    let detail = Some("stale-if-error").filter(|_| !validated);
    let hit = cache_status::Hit {
        detail,
        collapsed: false,
    };
    let answer = HitAnswer {
        now,
        close,
        validated,
        date: sh.date.get(),
        status: sh.cache_status.as_deref().map(|id| (id, hit)),
    };
    let conds = Conditions::from_head(&c.req, &c.req_data);
    let (status, bytes) = serve_hit(&mut c.out, &c.req, &conds, obj, answer, &mut sh.stats);
    crate::accesslog::answered(sh, c, status, cache, bytes);
    c.close_after |= close;
}

/// Answer a request (parsed as `req`, its conditional and range fields
/// `conds`) from a stored object: its conditionals, If-Range, Range and HEAD
/// applied by the shared answer function (`weft_http::represent`, as a
/// cache), the head written with `weft_http::encode` and
/// `weft_http::respond` (a 304 with only the fields RFC 9110 §15.4.5 lists;
/// a 412 or 416 as a generated answer: `Date`, `Server`, a short body, no
/// `Age`). Body bytes go out as shared segments of the object (no copy). A
/// stored response other than a 200 is sent as it is: the conditionals and
/// ranges do not apply to it (RFC 9110 §13.2.1).
/// `validated`: the origin has just validated the object for this request
/// (a 304 to our conditional request): the answer then has no `Age`, whose
/// presence says the opposite (RFC 9111 §5.1), so clients and measuring
/// tools can tell it from a hit.
pub(crate) fn serve_hit(
    out: &mut OutChain,
    req: &RequestHead,
    conds: &Conditions<'_>,
    obj: &Object,
    answer: HitAnswer<'_>,
    st: &mut ProxyStats,
) -> (u16, u64) {
    let a = serve_from(out, (req, conds), (obj, BodyFrom::Stored), answer, st);
    (a.status, a.bytes)
}

/// What an answer from a stored response announced.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Answered {
    pub status: u16,
    /// Where its body starts in the representation (a range's first byte).
    pub start: u64,
    /// Its body's length (0 when `open`).
    pub bytes: u64,
    /// A body that ends with its stream, of a length unknown yet.
    pub open: Option<OpenEnd>,
}

/// Where an answer's body comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodyFrom {
    /// The stored object's body, queued with the head.
    Stored,
    /// A fill's stream (`fill.rs`), queued by its follower as it arrives:
    /// a body of this length, or of a length known only at its end (None:
    /// the origin sent it chunked or up to a close).
    Stream(Option<u64>),
}

/// [`serve_hit`], or from a body that is still arriving (a fill's stream,
/// `fill.rs`): the head says its length (or the range of it answered), or
/// for a stream of unknown length `Transfer-Encoding: chunked` (HTTP/1.1;
/// an HTTP/1.0 client's answer ends with the connection, which `answer`
/// closes), and no body is queued (the follower queues it as it comes).
/// A Range does not apply to a stream of unknown length (`stream_serves`
/// keeps such requests off it).
fn serve_from(
    out: &mut OutChain,
    (req, conds): (&RequestHead, &Conditions<'_>),
    (obj, from): (&Object, BodyFrom),
    answer: HitAnswer<'_>,
    st: &mut ProxyStats,
) -> Answered {
    let HitAnswer {
        now,
        close,
        validated,
        date,
        status,
    } = answer;
    let method = req.method();
    let (len, open) = match from {
        BodyFrom::Stored => (obj.body.len() as u64, false),
        BodyFrom::Stream(len) => (len.unwrap_or(0), len.is_none()),
    };
    let streamed = from != BodyFrom::Stored;
    let unranged;
    let conds = if open {
        unranged = Conditions {
            range: None,
            if_range: None,
            ..*conds
        };
        &unranged
    } else {
        conds
    };
    let decision = if obj.status == 200 {
        let rep = Representation {
            etag: obj.etag.as_deref().filter(|e| !e.is_empty()),
            last_modified: obj
                .last_modified
                .as_ref()
                .map(|(_, t)| UNIX_EPOCH + Duration::from_secs(*t)),
            len,
        };
        represent::answer(method, conds, &rep, Role::Cache)
    } else {
        Answer::Full {
            len,
            body: method != Method::Head,
        }
    };
    let age = obj.age(now);
    let persist = encode::Persist::new(close, req.version() == Version::Http10);
    // Age (an answer from the stored response), the length, the
    // connection, the blank line.
    let tail = |v: &mut Vec<u8>, content_length: Option<u64>, chunked: bool| {
        if !validated {
            encode::field_u64(v, b"Age", age);
        }
        match status {
            // Revalidated for this request: forwarded, the 304 refreshed it.
            Some((id, _)) if validated => cache_status::write_forwarded(v, id, "stale", 304, true),
            Some((id, hit)) => cache_status::write_hit(v, id, obj.lifetime as i64 - age as i64, hit),
            None => {}
        }
        if let Some(l) = content_length {
            encode::content_length(v, l);
        }
        if chunked {
            encode::field(v, b"Transfer-Encoding", b"chunked");
        }
        encode::connection(v, persist);
        encode::end(v);
    };
    // The stored head without its blank line.
    let stored_fields = obj.head.len() - 2;
    // The status and body length queued, for the access log.
    match decision {
        Answer::NotModified => {
            let v = out.own_mut();
            // (not_modified keeps only the fields RFC 9110 lists: no Age.)
            let fields = &obj.head[obj.status_line_len.min(stored_fields)..stored_fields];
            respond::not_modified(v, date, fields);
            tail(v, None, false);
            Answered {
                status: 304,
                start: 0,
                bytes: 0,
                open: None,
            }
        }
        Answer::PreconditionFailed | Answer::RangeNotSatisfiable { .. } => {
            // Generated here, not stored: no Age, no validators.
            let range = decision.content_range();
            let extra = |v: &mut Vec<u8>| range.into_iter().for_each(|r| encode::content_range(v, r));
            let why = match decision {
                Answer::PreconditionFailed => "a precondition of the request does not hold",
                _ => "no requested range is in the stored response",
            };
            let head_only = method == Method::Head;
            respond::simple_with(out.own_mut(), decision.status(), date, extra, why, head_only, persist);
            Answered {
                status: decision.status(),
                start: 0,
                bytes: 0,
                open: None,
            }
        }
        Answer::Partial { start, end, .. } => {
            encode::status_line(out.own_mut(), 206);
            push_head(out, obj, obj.status_line_len);
            let v = out.own_mut();
            if let Some(cr) = decision.content_range() {
                encode::content_range(v, cr);
            }
            tail(v, decision.content_length(), false);
            if !streamed {
                out.push_range(&obj.body, start as usize, end as usize);
                st.bytes_cache += end - start;
            }
            Answered {
                status: 206,
                start,
                bytes: end - start,
                open: None,
            }
        }
        Answer::Full { body, .. } => {
            push_head(out, obj, 0);
            let cl = if obj.status == 204 || open { None } else { Some(len) };
            let open = (open && body).then_some(if req.version() == Version::Http10 {
                OpenEnd::Close
            } else {
                OpenEnd::Chunked
            });
            tail(out.own_mut(), cl, open == Some(OpenEnd::Chunked));
            if body && !streamed {
                out.push_aggregate(&obj.body);
                st.bytes_cache += len;
            }
            Answered {
                status: obj.status,
                start: 0,
                bytes: if body { len } else { 0 },
                open,
            }
        }
    }
}

/// Answer a request from the stream of a fill under way (collapsed
/// forwarding's read-while-write, `fill.rs`; `stream_serves` in
/// `request.rs` has checked that its object is fresh and its Vary matches,
/// and the request is a GET or HEAD): its conditionals and range decided
/// as a hit's against the stream's head and length, that head now, and the
/// body or the range's part of it as it arrives ([`Worker::follow_step`]).
/// The head at the front of the input is `n` bytes long.
pub(crate) fn answer_follow(
    sh: &mut crate::worker::Shared<'_>,
    c: &mut crate::conn::Client,
    txn: &crate::conn::Txn,
    stream: Arc<Stream>,
    (n, now): (usize, u64),
) -> Flow {
    let Some(obj) = stream.object(&sh.rules).cloned() else {
        // (`takes` found the object; it is built once and kept.)
        return Flow::Again;
    };
    let hit = cache_status::Hit {
        detail: None,
        collapsed: true,
    };
    let from = BodyFrom::Stream(stream.len);
    let sent = answer_stored(sh, c, txn, (&obj, from), (n, now), (hit, "HIT"));
    sh.stats.hits += 1;
    sh.stats.followed += 1;
    if sent.bytes > 0 || sent.open.is_some() {
        c.follow = Some(Box::new(Follow {
            stream,
            at: sent.start,
            end: if sent.open.is_some() {
                u64::MAX
            } else {
                sent.start + sent.bytes
            },
            open: sent.open,
            park: None,
        }));
    }
    Flow::Again
}

/// Answer the request at the front of `c`'s input (its head `n` bytes) from
/// `obj` as the cache (`hit`: what `--cache-status` says of it; `cache`:
/// the access log's field), or `from` a fill's stream, with the stream's
/// head ([`serve_from`]); the request is consumed. The body bytes the
/// answer announces, and where they start.
pub(crate) fn answer_stored(
    sh: &mut crate::worker::Shared<'_>,
    c: &mut crate::conn::Client,
    txn: &crate::conn::Txn,
    (obj, from): (&Object, BodyFrom),
    (n, now): (usize, u64),
    (hit, cache): (cache_status::Hit, &'static str),
) -> Answered {
    // An HTTP/1.0 client learns where a body of unknown length ends from
    // the close.
    let open_to_close = from == BodyFrom::Stream(None) && txn.http10 && txn.method == Method::Get;
    let close =
        !txn.client_keep_alive || sh.draining || !matches!(txn.body, crate::conn::ReqBody::None) || open_to_close;
    let len = match from {
        BodyFrom::Stored => obj.body.len() as u64,
        // Unknown yet: as a large body.
        BodyFrom::Stream(len) => len.unwrap_or(u64::MAX),
    };
    if len > sh.cfg.notsent_lowat as u64 {
        set_notsent_lowat(&c.fd, &mut c.notsent_lowat, false, sh.cfg);
    }
    let answer = HitAnswer {
        now,
        close,
        validated: false,
        date: sh.date.get(),
        status: sh.cache_status.as_deref().map(|id| (id, hit)),
    };
    let conds = Conditions::from_head(&c.req, &c.input.pending()[..n]);
    let sent = serve_from(&mut c.out, (&c.req, &conds), (obj, from), answer, &mut sh.stats);
    crate::accesslog::answered(sh, c, sent.status, cache, sent.bytes);
    c.input.consume(n);
    c.close_after |= close;
    sent
}

/// Body bytes a follower queues at a time (as much as a run of pipelined
/// hits may queue, `request.rs`).
const FOLLOW_QUEUE: u64 = 256 * 1024;

impl Worker<'_> {
    /// The fills' mailbox (`fill.rs`): requests whose fill ended are
    /// answered again (from the cache or, this time, from the origin), those
    /// woken by a fill's stream join it, followers take the next part, and a
    /// leader kicked by a waiting follower runs its relay.
    pub(crate) fn on_filled<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        let mut woken = std::mem::take(&mut self.filled);
        self.sh.cache.take_filled(&mut woken);
        for &(token, park) in &woken {
            let Some(c) = crate::worker::client_of(&mut self.slab, token) else {
                continue;
            };
            let streaming = park & crate::fill::STREAMING != 0;
            if park == crate::fill::KICK {
                // A follower of the fill this client leads waits: its relay
                // runs, and is not to be paced by its own client from now on
                // (`Relay::decouple`).
                let Some(relay) = c
                    .txn
                    .as_mut()
                    .filter(|t| t.feed.is_some())
                    .and_then(|t| t.relay.as_mut())
                else {
                    continue;
                };
                relay.decouple();
            } else if c.fill_wait == Some(park & !crate::fill::STREAMING) {
                c.fill_wait = None;
                c.fill_follow = streaming;
            } else if let Some(f) = c.follow.as_mut().filter(|f| f.park == Some(park)) {
                // A follower's stream has more, or ended.
                f.park = None;
            } else {
                continue; // that client is gone and its slot reused
            }
            self.drive(cx, token);
        }
        woken.clear();
        self.filled = woken;
    }

    /// The next step of a client following a fill (its output queue is
    /// empty): queue the body bytes that have arrived, or wait for the next
    /// ones. None: all of the body is queued and the client goes on as
    /// after a hit. A failed fill closes the client: the answer, whose
    /// length was sent, cannot be completed (its own client sees the same).
    pub(crate) fn follow_step(&mut self, ct: Token) -> Option<Flow> {
        let sh = &mut self.sh;
        let c = crate::worker::client_of(&mut self.slab, ct)?;
        let f = c.follow.as_mut()?;
        if f.park.is_some() {
            return Some(Flow::Wait);
        }
        let (read, park) = sh
            .cache
            .read_stream(&f.stream, f.at, FOLLOW_QUEUE.min(f.end - f.at), ct);
        let chunked = f.open == Some(OpenEnd::Chunked);
        match read {
            Read::Data(part) => {
                f.at += part.len() as u64;
                sh.stats.bytes_cache += part.len() as u64;
                if chunked {
                    weft_http::chunked::encode_chunk_head(part.len(), c.out.own_mut());
                }
                c.out.push_aggregate(&part);
                if chunked {
                    c.out.push_copy(b"\r\n");
                }
                if f.at >= f.end {
                    c.follow = None;
                }
                Some(Flow::Again)
            }
            Read::Done => {
                c.follow = None;
                if chunked {
                    c.out.push_copy(weft_http::chunked::LAST_CHUNK);
                }
                None
            }
            Read::Failed => {
                c.follow = None;
                c.close_after = true;
                c.linger_on_close = false;
                sh.stats.followers_cut += 1;
                Some(Flow::Again)
            }
            Read::Wait => {
                f.park = Some(park);
                Some(Flow::Wait)
            }
        }
    }
}

/// The stored head from `from` to its blank line, without the Age it was
/// stored with (the answer's own Age follows), as shared slices.
fn push_head(out: &mut OutChain, obj: &Object, from: usize) {
    for part in obj.head_parts(from) {
        if !part.is_empty() {
            out.push_shared(part);
        }
    }
}
