//! A response head from the upstream, and what follows from it: the cache
//! (a revalidation's 304, invalidation by unsafe methods, whether and how to
//! store), the head the client gets and how its body is framed, and which
//! path the body takes (copy, splice, or splice + tee into the cache).
//!
//! The two choices are plain functions of their inputs, tested here without
//! sockets: [`client_framing`] (Content-Length / chunked / until close, from
//! the upstream's framing, method, status and the client's version) and
//! [`choose_path`] (Copy / Splice / Tee, from the configuration, whether the
//! response is stored, and how much body is left).

use crate::cache::TwoTier;
use crate::client::set_notsent_lowat;
use crate::config::{ProxyConfig, SpliceMode};
use crate::conn::{Client, Phase, ReqBody, StorePlan, Txn, Upstream};
use crate::headers::{self, HeadFor};
use crate::relay::{Ends, Framing, Plan, Relay, Want};
use crate::stats::ProxyStats;
use crate::store::Object;
use crate::worker::{pair, Flow, Shared, Worker};
use bytes::Bytes;
use std::os::fd::AsFd;
use std::sync::Arc;
use weft_http::caching::{self, StoreQuery};
use weft_http::date::unix_secs;
use weft_http::encode;
use weft_http::{BodyFraming, ChunkedDecoder, Method, RequestHead, ResponseHead};
use weft_io::{Ctx, OutChain, Poller, Token};

/// How the client's copy of a response is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClientFraming {
    /// The Content-Length field to send, if any.
    pub length: Option<u64>,
    /// Send `Transfer-Encoding: chunked` (the upstream's chunks are forwarded).
    pub chunked: bool,
    /// The body can only end with the connection: close it afterwards.
    pub close: bool,
}

/// How the client's copy of a response with upstream `framing` is delimited,
/// for a request with `method` from an HTTP/1.0 client or not. A response
/// without a body says how long it would have been (HEAD: the upstream's
/// `content_length`) or that it is empty (Content-Length: 0), except 304,
/// 204 and interim ones, which carry no length. Chunked bodies are de-chunked
/// for HTTP/1.0 clients and end with the connection.
pub(crate) fn client_framing(
    framing: BodyFraming,
    method: Method,
    status: u16,
    content_length: Option<u64>,
    http10: bool,
) -> ClientFraming {
    let mut f = ClientFraming {
        length: None,
        chunked: false,
        close: false,
    };
    match framing {
        BodyFraming::Length(len) => f.length = Some(len),
        BodyFraming::Chunked => {
            f.chunked = !http10;
            f.close = http10;
        }
        BodyFraming::UntilClose => f.close = true,
        BodyFraming::None if method == Method::Head && status != 304 => f.length = content_length,
        BodyFraming::None if status != 304 && status != 204 && status >= 200 => f.length = Some(0),
        BodyFraming::None => {}
    }
    f
}

/// How the relay reads the body (None: there is none). `keep_framing`:
/// forward chunk framing (an HTTP/1.1 client).
pub(crate) fn relay_framing(framing: BodyFraming, keep_framing: bool) -> Option<Framing> {
    match framing {
        BodyFraming::None | BodyFraming::Length(0) => None,
        BodyFraming::Length(len) => Some(Framing::Length(len)),
        BodyFraming::Chunked => Some(Framing::Chunked {
            dec: ChunkedDecoder::new(),
            keep_framing,
        }),
        BodyFraming::UntilClose => Some(Framing::Close),
    }
}

/// Which path a body takes: bodies below the splice threshold (`auto`), or
/// all with `--splice off`, are copied; larger ones are spliced, and tee'd
/// into the cache when the response is `stored` and `--keep-copy` is on
/// (copied when it is off). `remaining`: body bytes not yet read (u64::MAX
/// when unknown). `kernel`: with `--splice sockmap`, the sockmap can carry
/// this body now (its length is known, the event backend reports the
/// marker, the forwarder carries bodies); a large one not stored then goes
/// there.
pub(crate) fn choose_path(cfg: &ProxyConfig, stored: bool, remaining: u64, kernel: bool) -> Want {
    let big = match cfg.splice {
        SpliceMode::Off => false,
        SpliceMode::On => remaining > 0,
        SpliceMode::Auto | SpliceMode::Sockmap => remaining >= cfg.splice_threshold,
    };
    match (stored, big) {
        (_, false) => Want::Copy,
        (true, true) if cfg.keep_copy => Want::Tee,
        (true, true) => Want::Copy,
        (false, true) if kernel && cfg.splice == SpliceMode::Sockmap => Want::Kernel,
        (false, true) => Want::Splice,
    }
}

/// The smallest run of body bytes (a chunk's data) worth the pipe.
pub(crate) fn pipe_min(cfg: &ProxyConfig) -> u64 {
    match cfg.splice {
        SpliceMode::Off => u64::MAX,
        SpliceMode::On => 1,
        SpliceMode::Auto | SpliceMode::Sockmap => cfg.splice_threshold,
    }
}

/// Queue the client's response head: the upstream's fields as relayed, the
/// framing fields, and the connection's persistence.
/// `status`: `--cache-status`'s `fwd` and whether the answer is stored.
fn write_client_head(
    out: &mut OutChain,
    (resp, rdata): (&ResponseHead, &[u8]),
    sh: &Shared<'_>,
    f: ClientFraming,
    persist: encode::Persist,
    (fwd, stored): (&str, bool),
) {
    let v = out.own_mut();
    headers::write_response_fields(v, resp, rdata, &sh.via, sh.date.get(), HeadFor::Client);
    if let Some(id) = &sh.cache_status {
        crate::cache_status::write_forwarded(v, id, fwd, resp.status(), stored);
    }
    if let Some(len) = f.length {
        encode::content_length(v, len);
    }
    if f.chunked {
        encode::field(v, b"Transfer-Encoding", b"chunked");
    }
    encode::connection(v, persist);
    encode::end(v);
}

/// Unsafe methods invalidate what is stored for the URI (RFC 9111 §4.4),
/// and for same-origin Location / Content-Location URIs.
fn invalidate(
    cache: &TwoTier<'_>,
    scratch: &mut Vec<u8>,
    stats: &mut ProxyStats,
    key: &[u8],
    resp: &ResponseHead,
    rdata: &[u8],
) {
    if !cache.enabled() {
        return;
    }
    let mut named: [Option<Vec<u8>>; 2] = [None, None];
    for (k, field) in named.iter_mut().zip(["location", "content-location"]) {
        *k = resp.header(rdata, field).and_then(|v| same_origin_key(key, v, scratch));
    }
    let keys = std::iter::once(key).chain(named.iter().flatten().map(|k| &k[..]));
    stats.invalidated += cache.invalidate(keys);
}

/// The cache key of a Location / Content-Location value when it names the same
/// origin as `key` (RFC 9111 §4.4: only same-origin URIs are invalidated).
fn same_origin_key(key: &[u8], value: &[u8], out: &mut Vec<u8>) -> Option<Vec<u8>> {
    let origin_end = key[7..]
        .iter()
        .position(|&b| b == b'/')
        .map(|i| i + 7)
        .unwrap_or(key.len());
    let origin = &key[..origin_end];
    out.clear();
    if value.starts_with(b"/") {
        out.extend_from_slice(origin);
        out.extend_from_slice(value);
    } else {
        headers::url_key(value, out)?;
        if !out.starts_with(origin) || out.get(origin.len()).is_some_and(|&b| b != b'/') {
            return None;
        }
    }
    Some(out.clone())
}

/// Whether the response to a cacheable request (`req`: its parsed head and
/// bytes) could be stored with `status` (its own, or 200 for a 206's whole
/// representation) and a body of `len` bytes (None: not known yet).
fn storable_as(
    sh: &Shared<'_>,
    txn: &Txn,
    (req, qdata): (&RequestHead, &[u8]),
    (resp, rdata): (&ResponseHead, &[u8]),
    status: u16,
    len: Option<u64>,
) -> bool {
    let (rcc, expires) = sh.rules.directives(resp, rdata);
    let q = StoreQuery {
        method: txn.method,
        status,
        request: &txn.req_cc,
        response: &rcc,
        authorization: req.header(qdata, "authorization").is_some(),
        expires: expires && resp.header(rdata, "expires").is_some(),
        vary_star: caching::vary_has_star(resp.header_all(rdata, "vary")),
    };
    caching::storable(&q).is_ok() && len.is_none_or(|len| len <= sh.cfg.max_object_size)
}

/// The response to a cacheable request: if it may be stored (and fits),
/// the head to store and the request's secondary (Vary) key. `whole`: a 206
/// that carries all of the representation, stored as its 200 (RFC 9111
/// §3.4; range fills, `background.rs`).
fn store_plan(
    sh: &Shared<'_>,
    txn: &Txn,
    (req, qdata): (&RequestHead, &[u8]),
    (resp, rdata): (&ResponseHead, &[u8]),
    (framing, whole): (BodyFraming, bool),
    now: u64,
) -> Option<StorePlan> {
    let len = match framing {
        BodyFraming::Length(len) => Some(len),
        _ => None,
    };
    let status = if whole { 200 } else { txn.status };
    if !storable_as(sh, txn, (req, qdata), (resp, rdata), status, len) {
        return None;
    }
    let mut head = Vec::with_capacity(rdata.len() + 64);
    let for_ = if whole { HeadFor::StoreWhole } else { HeadFor::Store };
    headers::write_response_fields(&mut head, resp, rdata, &sh.via, sh.date.get(), for_);
    head.extend_from_slice(b"\r\n");
    let mut vk = Vec::new();
    let vary: Vec<&[u8]> = resp.header_all(rdata, "vary").collect();
    if !vary.is_empty() {
        caching::vary_key(vary, req, qdata, &mut vk);
    }
    Some(StorePlan {
        head: Bytes::from(head),
        vary_key: vk,
        response_time: now,
    })
}

/// The requests waiting for the fill `c`'s transaction leads, and those
/// that come while the body arrives, follow it (`fill.rs`): an object that
/// will be stored (`plan`), of known length or, chunked or close-delimited,
/// of a length known at its end (its followers get it chunked). One small
/// allocation per fill; the object they are answered from is built only
/// when one of them looks.
fn publish_stream(sh: &Shared<'_>, (c, ct): (&mut Client, Token), plan: Option<&StorePlan>, framing: &Framing) {
    let len = match framing {
        Framing::Length(0) => return,
        Framing::Length(len) => Some(*len),
        Framing::Chunked { .. } | Framing::Close => None,
    };
    let (Some(p), Some(txn)) = (plan, c.txn.as_mut()) else {
        return;
    };
    if txn.fill {
        let seed = crate::fill::StreamSeed {
            head: p.head.clone(),
            vary_key: p.vary_key.as_slice().into(),
            times: (txn.request_time, p.response_time),
        };
        txn.feed = sh.cache.publish_stream(&c.key, seed, len, ct);
    }
}

/// Build the stored object from a complete body and put it in the cache.
pub(crate) fn store_object(
    sh: &mut Shared<'_>,
    key: &[u8],
    plan: StorePlan,
    body: weft_buf::Aggregate,
    request_time: u64,
) {
    if !sh.cache.enabled() {
        return;
    }
    if let Some(obj) = Object::build(
        plan.head,
        body,
        &plan.vary_key,
        request_time,
        plan.response_time,
        &sh.rules,
    ) {
        if sh.cache.insert(key, Arc::new(obj)) {
            sh.stats.stored += 1;
        }
    }
}

/// Start the body relay of a response with `framing` on its way from `u`
/// to `c`, filling the cache when there is a `plan`.
/// A relay's view of its two sockets. Takes the client's fields one by one
/// so a caller may hold the client's transaction (and its relay) meanwhile.
pub(crate) fn relay_ends<'a>(
    client: Option<&'a weft_io::Fd>,
    client_may_write: &'a mut bool,
    out: &'a mut OutChain,
    u: &'a mut Upstream,
    bufs: &'a mut weft_io::BufPool,
    kernel: &'a mut crate::sockmap::KernelFwd,
) -> Ends<'a> {
    Ends {
        client: client.map(|f| f.as_fd()),
        client_may_write,
        out,
        up: u.fd.as_fd(),
        up_may_read: &mut u.may_read,
        up_buf: &mut u.buf,
        bufs,
        kernel,
    }
}

/// `kernel`: with `--splice sockmap` under a backend that can carry a body,
/// whether the forwarder carries bodies (and its ring is polled); `token`:
/// the client's, which names the body to the worker when it is done.
fn start_relay(
    sh: &mut Shared<'_>,
    (c, token): (&mut Client, Token),
    u: &mut Upstream,
    (framing, kernel): (Framing, Option<bool>),
    plan: Option<StorePlan>,
) {
    let cfg = sh.cfg;
    let remaining = match framing {
        Framing::Length(len) => len.saturating_sub(u.buf.pending().len() as u64),
        _ => u64::MAX,
    };
    let wanted = kernel.is_some()
        && plan.is_none()
        && remaining >= cfg.splice_threshold
        && remaining <= crate::relay::KERNEL_BODY_MAX;
    let kernel = wanted && kernel == Some(true);
    if wanted && !kernel {
        sh.stats.sockmap_declined += 1;
    }
    // A background revalidation (no client) reads its body by copy into
    // the object.
    let kernel = kernel && c.fd.is_some();
    let want = if c.fd.is_some() {
        choose_path(cfg, plan.is_some(), remaining, kernel)
    } else {
        Want::Copy
    };
    let fill_max = plan.as_ref().map(|_| cfg.max_object_size);
    let spare = if fill_max.is_none() { sh.relay_bufs.pop() } else { None };
    let how = Plan {
        want,
        fill_max,
        pipe_min: pipe_min(cfg),
        framing_read: cfg.first_read,
        rcv_lowat: cfg.rcv_lowat,
        linked: cfg.uring_linked,
        linked_head: cfg.uring_linked_head,
        token: token.0,
    };
    if kernel {
        // Unbounded for the psock worker that will send the body (see
        // `set_notsent_lowat`); the head set the bound before the path was
        // known.
        set_notsent_lowat(&c.fd, &mut c.notsent_lowat, false, cfg);
    }
    let mut relay = Relay::new(framing, how, spare, &mut sh.pipes, &mut sh.stats);
    {
        let mut ends = relay_ends(
            c.fd.as_ref(),
            &mut c.may_write,
            &mut c.out,
            u,
            &mut sh.bufs,
            &mut sh.sockmap,
        );
        relay.start(&mut ends, &mut sh.stats);
    }
    if c.fd.is_none() {
        // Nothing goes out: the relay only fills the cache, as after a
        // client abort.
        relay.without_client(&mut c.out);
    }
    let txn = c.txn.as_mut().expect("a relay has a txn");
    txn.plan = plan;
    txn.relay = Some(relay);
    txn.phase = Phase::Body;
}

impl Worker<'_> {
    /// The response head is parsed (`self.sh.resp`, `n` bytes at the front
    /// of the upstream buffer): decide caching, queue the client's head and
    /// start the body relay.
    pub(crate) fn on_response_head<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token, ut: Token, n: usize) -> Flow {
        // The origin answered with an error where a stale stored response
        // may stand in (`stale-if-error`): that answers, and the error's body
        // is never read (its connection closes).
        if matches!(self.sh.resp.status(), 500 | 502 | 503 | 504) {
            if let Some(obj) = self.stale_stand_in(ct, unix_secs(cx.wall)) {
                return self.serve_stale(cx, ct, obj);
            }
        }
        let cfg = self.sh.cfg;
        let sh = &mut self.sh;
        let Some((c, u)) = pair(&mut self.slab, ct, ut) else {
            return Flow::Closed;
        };
        set_notsent_lowat(&c.fd, &mut c.notsent_lowat, true, cfg);
        let txn = c.txn.as_mut().expect("head has a txn");
        let now = unix_secs(cx.wall);
        let resp = &sh.resp;
        let status = resp.status();
        txn.status = status;
        let method = txn.method;
        let framing = resp.framing(method);
        txn.up_keep_alive = resp.keep_alive(method) && matches!(txn.body, ReqBody::None);
        // The access log's cache field (a stored response not confirmed: replaced).
        let cache = match (txn.stored.is_some(), txn.cacheable) {
            (true, _) => "EXPIRED",
            (false, true) => "MISS",
            (false, false) => "BYPASS",
        };
        // A revalidation answered 304: refresh the stored object and serve it.
        if let Some(stored) = txn.stored.take() {
            if status == 304 {
                return self.serve_revalidated(cx, ct, ut, n, stored);
            }
        }
        let rdata = &u.buf.pending()[..n];
        if caching::invalidates(method, status) {
            invalidate(&sh.cache, &mut sh.scratch, &mut sh.stats, &c.key, resp, rdata);
        }
        // A 206's part, when Range misses fill the cache (`background.rs`).
        let part = (status == 206 && txn.cacheable && method == Method::Get && sh.range_fills.is_some())
            .then(|| {
                resp.header(rdata, "content-range")
                    .and_then(encode::ContentRange::parse)
            })
            .flatten();
        // Storable? A 206 with all of the representation is, as its 200,
        // when its length says so too.
        let plan = if txn.cacheable {
            let whole = part.is_some_and(|p| {
                let complete = match p {
                    encode::ContentRange::Bytes { complete, .. } => complete,
                    encode::ContentRange::Unsatisfied { .. } => 0,
                };
                p.is_whole() && framing == BodyFraming::Length(complete)
            });
            store_plan(sh, txn, (&c.req, &c.req_data), (resp, rdata), (framing, whole), now)
        } else {
            None
        };
        // A part of a response the cache could store whole: one background
        // GET fetches all of it. (A "whole" part that was not stored had
        // another length than it said: nothing to fetch from such an origin.)
        if let (None, Some(p @ encode::ContentRange::Bytes { complete, .. })) = (&plan, part) {
            let req = (&c.req, &c.req_data[..]);
            if !p.is_whole() && storable_as(sh, txn, req, (resp, rdata), 200, Some(complete)) {
                let client = c.fd.is_some() && c.background.is_none();
                if let Some(start) = crate::background::range_fill(sh, (client, txn), &c.key, req, complete) {
                    sh.background_wanted = Some(start);
                }
            }
        }
        if plan.is_none() {
            sh.stats.uncacheable += 1;
            // The requests waiting for this fill go to the origin now, and
            // the key's next misses do not wait (`fill.rs`).
            crate::client::end_fill(sh, &c.key, txn, crate::fill::Outcome::Uncacheable);
            if c.background.is_some() {
                // A background revalidation keeps only what it can store:
                // the body is not read, the upstream closes with the slot.
                txn.status = status;
                crate::accesslog::answered(sh, c, status, "BACKGROUND", 0);
                self.close_client(cx, ct);
                return Flow::Closed;
            }
        }
        // The client's head.
        let f = client_framing(framing, method, status, resp.content_length(), txn.http10);
        // A response that overtakes its request's body (an early 413, or an
        // upstream that answers on the head): no more of the body goes
        // upstream (that connection is not reused, above), and the client
        // keeps its connection if the rest is small enough to read and drop
        // (`Client::discard`, as `weft serve` does); a larger rest, or a
        // chunked one of unknown size, closes it after the response.
        let rest = match txn.body {
            ReqBody::None => Some(0),
            ReqBody::Length(left) if left <= weft_http::MAX_BODY_DISCARD => Some(left),
            ReqBody::Length(_) | ReqBody::Chunked(_) => None,
        };
        let client_close = f.close || !txn.client_keep_alive || sh.draining || rest.is_none();
        txn.client_close = client_close;
        if let (false, Some(left @ 1..)) = (client_close, rest) {
            c.discard = left;
            sh.stats.bodies_discarded += 1;
            txn.body = ReqBody::None;
            // What a spliced body's pipe holds came from the client: it goes too.
            txn.req_pipe = None;
        }
        let persist = encode::Persist::new(client_close, txn.http10);
        let announced = if method == Method::Head {
            0
        } else {
            f.length.unwrap_or(0)
        };
        let fwd = match cache {
            "EXPIRED" => "stale",
            "MISS" => "miss",
            _ => "bypass",
        };
        write_client_head(&mut c.out, (resp, rdata), sh, f, persist, (fwd, plan.is_some()));
        crate::front::count_bytes(cfg, txn, n as u64 + resp.content_length().unwrap_or(0));
        txn.responded = true;
        u.buf.consume(n);
        let (http10, request_time) = (txn.http10, txn.request_time);
        crate::accesslog::relayed(sh, c, status, cache, announced);
        let Some(relay_framing) = relay_framing(framing, !http10) else {
            // No body: done now.
            if let Some(p) = plan {
                store_object(sh, &c.key, p, weft_buf::Aggregate::new(), request_time);
            }
            return self.finish_txn(cx, ct);
        };
        // The sockmap's end-of-body marker is an error on the client, which
        // select and the user-level trackers do not report.
        let kernel = cfg.splice == crate::config::SpliceMode::Sockmap
            && crate::sockmap::KernelFwd::backend_fits(P::CAPS.name, P::CAPS.tracks_readiness);
        let kernel = kernel.then(|| sh.sockmap.bodies().is_some() && sh.sockmap_ring(cx));
        publish_stream(sh, (c, ct), plan.as_ref(), &relay_framing);
        start_relay(sh, (c, ct), u, (relay_framing, kernel), plan);
        self.start_background(cx);
        Flow::Again
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_follows_the_upstream_and_the_client() {
        use BodyFraming as B;
        let f = |framing, method, status, cl, http10| client_framing(framing, method, status, cl, http10);
        let field = |length| ClientFraming {
            length,
            chunked: false,
            close: false,
        };
        assert_eq!(f(B::Length(10), Method::Get, 200, Some(10), false), field(Some(10)));
        assert_eq!(
            f(B::Chunked, Method::Get, 200, None, false),
            ClientFraming {
                length: None,
                chunked: true,
                close: false
            }
        );
        // HTTP/1.0 clients get the body de-chunked, ended by the close.
        assert_eq!(
            f(B::Chunked, Method::Get, 200, None, true),
            ClientFraming {
                length: None,
                chunked: false,
                close: true
            }
        );
        assert_eq!(
            f(B::UntilClose, Method::Get, 200, None, false),
            ClientFraming {
                length: None,
                chunked: false,
                close: true
            }
        );
        // HEAD says how long the body would be; no length known, none sent.
        assert_eq!(f(B::None, Method::Head, 200, Some(42), false), field(Some(42)));
        assert_eq!(f(B::None, Method::Head, 200, None, false), field(None));
        assert_eq!(f(B::None, Method::Head, 304, Some(42), false), field(None));
        // No body: an explicit empty one, except where none is allowed.
        assert_eq!(f(B::None, Method::Get, 200, None, false), field(Some(0)));
        assert_eq!(f(B::None, Method::Get, 304, None, false), field(None));
        assert_eq!(f(B::None, Method::Get, 204, None, false), field(None));
        assert_eq!(f(B::None, Method::Get, 101, None, false), field(None));
    }

    #[test]
    fn relay_framing_has_no_relay_for_an_empty_body() {
        assert!(relay_framing(BodyFraming::None, true).is_none());
        assert!(relay_framing(BodyFraming::Length(0), true).is_none());
        assert!(matches!(
            relay_framing(BodyFraming::Length(5), true),
            Some(Framing::Length(5))
        ));
        assert!(matches!(
            relay_framing(BodyFraming::Chunked, false),
            Some(Framing::Chunked {
                keep_framing: false,
                ..
            })
        ));
        assert!(matches!(
            relay_framing(BodyFraming::UntilClose, true),
            Some(Framing::Close)
        ));
    }

    #[test]
    fn path_follows_mode_threshold_and_storage() {
        let cfg = |splice, keep_copy| ProxyConfig {
            splice,
            keep_copy,
            ..ProxyConfig::default()
        };
        let auto = cfg(SpliceMode::Auto, true);
        let t = auto.splice_threshold;
        let path = |c, stored, remaining| choose_path(c, stored, remaining, false);
        assert_eq!(path(&auto, false, t - 1), Want::Copy, "small: copied");
        assert_eq!(path(&auto, false, t), Want::Splice);
        assert_eq!(path(&auto, true, t), Want::Tee, "stored: tee'd into the cache");
        assert_eq!(path(&auto, false, u64::MAX), Want::Splice, "unknown length");
        assert_eq!(
            choose_path(&auto, false, t, true),
            Want::Splice,
            "sockmap not asked for"
        );
        let no_keep = cfg(SpliceMode::Auto, false);
        assert_eq!(path(&no_keep, true, t), Want::Copy);
        assert_eq!(path(&no_keep, false, t), Want::Splice);
        let on = cfg(SpliceMode::On, true);
        assert_eq!(path(&on, false, 1), Want::Splice);
        assert_eq!(path(&on, false, 0), Want::Copy, "nothing left");
        let off = cfg(SpliceMode::Off, true);
        assert_eq!(path(&off, false, u64::MAX), Want::Copy);
        assert_eq!(path(&off, true, u64::MAX), Want::Copy);
        let sockmap = cfg(SpliceMode::Sockmap, true);
        assert_eq!(
            choose_path(&sockmap, false, t, true),
            Want::Kernel,
            "large, not stored: in the kernel"
        );
        assert_eq!(
            choose_path(&sockmap, false, t, false),
            Want::Splice,
            "sockmap cannot carry it"
        );
        assert_eq!(choose_path(&sockmap, false, t - 1, true), Want::Copy, "small: copied");
        assert_eq!(
            choose_path(&sockmap, true, t, true),
            Want::Tee,
            "stored: tee'd into the cache"
        );
        assert_eq!(pipe_min(&off), u64::MAX);
        assert_eq!(pipe_min(&on), 1);
        assert_eq!(pipe_min(&auto), t);
    }

    #[test]
    fn only_same_origin_locations_are_invalidated() {
        let key = b"http://a.example:80/x";
        let mut out = Vec::new();
        assert!(same_origin_key(key, b"/y", &mut out).is_some_and(|k| k.ends_with(b"/y")));
        assert!(same_origin_key(key, b"https://a.example/y", &mut out).is_none());
        assert!(same_origin_key(key, b"http://b.example/y", &mut out).is_none());
    }
}
