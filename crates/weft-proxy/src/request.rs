//! The request at the front of a client's input: parsed, checked, routed to
//! its upstream (forward or reverse), looked up in the cache and answered
//! from it, or turned into a transaction.

use crate::cache::Lookup;
use crate::client::reject;
use crate::config::{HostPort, ProxyConfig};
use crate::conn::{Client, Phase, ReqBody, Txn};
use crate::fill::{Join, Stream};
use crate::headers;
use crate::resolve;
use crate::worker::{client_of, Flow, Shared, Worker};
use std::time::Instant;
use weft_http::caching::{self, Usable};
use weft_http::date::unix_secs;
use weft_http::represent::Conditions;
use weft_http::respond::{self, Persist};
use weft_http::{BodyFraming, CacheControl, ChunkedDecoder, Method, RequestHead, Version};
use weft_io::{Ctx, Poller, Token};

/// Stop answering pipelined hits beyond this much queued output.
const COALESCE_MAX: u64 = 256 * 1024;

/// A request refused before it reaches an upstream: status and reason.
type Refusal = (u16, &'static str);

impl Worker<'_> {
    /// Parse and answer the request at the front of the buffer. None: the
    /// head is incomplete (read more).
    pub(crate) fn answer_next<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) -> Option<Flow> {
        let limits = self.sh.cfg.limits;
        let c = client_of(&mut self.slab, ct)?;
        if c.out.len() >= COALESCE_MAX {
            return None;
        }
        // Methods weft does not know are forwarded (unless configured not to).
        c.req.set_extension_methods(self.sh.cfg.extension_methods);
        let parsed = c.req.parse(c.input.pending(), &limits);
        let n = match parsed {
            Ok(None) => {
                if c.head_started.is_none() {
                    c.head_started = Some(cx.now);
                }
                return None;
            }
            Ok(Some(n)) => n,
            Err(e) => {
                self.sh.stats.requests += 1;
                self.sh.stats.bad_requests += 1;
                // The method of a request that does not parse is not known:
                // the body goes out (the connection closes after it).
                let line = c.input.pending().len().min(8192);
                crate::accesslog::keep_head(&self.sh, c, line);
                crate::accesslog::answered(&mut self.sh, c, e.status, "-", 0);
                reject(c, &self.sh.date, e.status, e.reason, false);
                return Some(Flow::Again);
            }
        };
        // (A background revalidation is not a client's request.)
        if !c.disk_checked && !c.fill_checked && c.background.is_none() {
            self.sh.stats.requests += 1;
            c.requests += 1;
        }
        c.head_started = None;
        crate::accesslog::keep_head(&self.sh, c, n);
        let head_only = c.req.method() == Method::Head;
        if !c.allowed {
            self.sh.stats.denied += 1;
            crate::accesslog::answered(&mut self.sh, c, 403, "-", 0);
            reject(
                c,
                &self.sh.date,
                403,
                "client address not allowed to use this proxy",
                head_only,
            );
            return Some(Flow::Again);
        }
        let routed = self.route(cx, ct, n);
        let c = client_of(&mut self.slab, ct)?;
        if c.disk_wait.is_none() {
            c.disk_checked = false;
            c.disk_loaded = None;
        }
        if c.fill_wait.is_none() {
            c.fill_checked = false;
        }
        c.fill_follow = false;
        match routed {
            Ok(f) => Some(f),
            Err((status, reason)) => {
                self.sh.stats.bad_requests += 1;
                crate::accesslog::answered(&mut self.sh, c, status, "-", 0);
                reject(c, &self.sh.date, status, reason, head_only);
                Some(Flow::Again)
            }
        }
    }

    /// Work out where a request goes, answer it from the cache, or start a
    /// transaction.
    /// The head is the first `n` bytes of the client's input.
    fn route<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token, n: usize) -> Result<Flow, Refusal> {
        let cfg = self.sh.cfg;
        let sh = &mut self.sh;
        let c = client_of(&mut self.slab, ct).ok_or((500, "connection gone"))?;
        let data = &c.input.pending()[..n];
        let req = &c.req;
        let method = req.method();
        if headers::via_lists(req, data, &sh.via_name) {
            return Err((508, "request loop detected (this proxy is already in Via)"));
        }
        let mut txn = c.spare.take().unwrap_or_else(|| Box::new(Txn::new()));
        txn.reset();
        txn.method = method;
        txn.http10 = req.version() == Version::Http10;
        txn.client_keep_alive = req.keep_alive();
        if let Err(e) = route_target(cfg, &mut txn, req, data, &mut c.key) {
            c.spare = Some(txn);
            return Err(e);
        }
        // The request body still to come.
        txn.body = match req.framing() {
            BodyFraming::Length(n) => ReqBody::Length(n),
            BodyFraming::Chunked => ReqBody::Chunked(ChunkedDecoder::new()),
            _ => ReqBody::None,
        };
        txn.had_body = !matches!(txn.body, ReqBody::None);
        txn.req_cc = CacheControl::parse(req.header_all(data, "cache-control"));
        if !txn.req_cc.present
            && req
                .header_all(data, "pragma")
                .any(|v| v.eq_ignore_ascii_case(b"no-cache"))
        {
            txn.req_cc.no_cache = true;
        }
        txn.upgrade = upgrade_forwarded(cfg, &txn, req, data);
        txn.cacheable =
            sh.cache.enabled() && matches!(method, Method::Get | Method::Head) && !txn.connect && !txn.upgrade;
        // The cache.
        if txn.cacheable {
            if let Some(done) = from_cache(sh, c, &mut txn, ct, n, (unix_secs(cx.wall), cx.now)) {
                c.spare = Some(txn);
                self.start_background(cx);
                return done;
            }
        }
        if txn.stored.is_some() {
            sh.stats.revalidations += 1;
        } else if !txn.connect {
            sh.stats.misses += 1;
        }
        // Keep the head: the input buffer moves on while the request is forwarded.
        c.req_data.clear();
        c.req_data.extend_from_slice(&c.input.pending()[..n]);
        c.input.consume(n);
        if c.req.expect_continue() && !matches!(txn.body, ReqBody::None) && !txn.http10 {
            c.out.push_copy(b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        txn.request_time = unix_secs(cx.wall);
        c.txn = Some(txn);
        match cfg.front.as_deref() {
            Some(front) => self.front_place(cx, ct, front),
            None => self.resolve(cx, ct),
        }
        Ok(Flow::Again)
    }

    /// Find the transaction's upstream addresses (or wait for the resolver).
    pub(crate) fn resolve<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) {
        let sh = &mut self.sh;
        let Some(c) = client_of(&mut self.slab, ct) else { return };
        let Some(txn) = c.txn.as_mut() else { return };
        if let Some(a) = resolve::literal(&txn.host, txn.port) {
            txn.addrs.push(a);
            txn.phase = Phase::Connect;
            return;
        }
        match sh.dns.lookup(&txn.host, txn.port, cx.now, ct, sh.resolver, sh.index) {
            resolve::Lookup::Ready(addrs) => {
                txn.addrs.extend_from_slice(addrs);
                txn.phase = Phase::Connect;
            }
            resolve::Lookup::Waiting => txn.phase = Phase::Resolve,
        }
    }
}

/// Fill in where the request goes (the transaction's upstream host and port,
/// origin-form path and Host value) and its primary cache key, from its
/// target, Host and the configured routes. The path is forwarded (and keyed)
/// with its dot-segments removed; one that climbs above the root, or holds
/// `%00` or a broken escape, is refused with 400.
fn route_target(
    cfg: &ProxyConfig,
    txn: &mut Txn,
    req: &RequestHead,
    data: &[u8],
    key: &mut Vec<u8>,
) -> Result<(), Refusal> {
    let method = txn.method;
    let target = req.target(data);
    // Target host, port and path.
    let mut key_host: &[u8] = b"";
    let mut key_port = 80u16;
    if method == Method::Connect {
        if cfg.is_reverse() {
            return Err((405, "CONNECT is only served in forward-proxy mode"));
        }
        let (h, p) = headers::split_authority(target, 443).ok_or((400, "invalid CONNECT target"))?;
        if !cfg.connect_ports.contains(p) {
            return Err((403, "CONNECT to this port is not allowed"));
        }
        txn.connect = true;
        push_lower(&mut txn.host, h);
        txn.port = p;
    } else if req.is_absolute_form() {
        let (scheme, authority, path) =
            weft_http::split_absolute(target).ok_or((400, "invalid absolute-form target"))?;
        if !scheme.eq_ignore_ascii_case(b"http") {
            return Err((400, "only http:// URLs are proxied (use CONNECT for https)"));
        }
        let (h, p) = headers::split_authority(authority, 80).ok_or((400, "invalid host in the request target"))?;
        key_host = h;
        key_port = p;
        weft_http::normalize_path(path, &mut txn.path).map_err(|e| (400, e))?;
        txn.host_value.extend_from_slice(authority);
        if !cfg.is_reverse() {
            if !cfg.forward_ports.contains(p) {
                return Err((403, "forwarding to this port is not allowed"));
            }
            push_lower(&mut txn.host, h);
            txn.port = p;
        }
    } else {
        if !cfg.is_reverse() {
            return Err((400, "a forward proxy needs an absolute-form target (http://host/path)"));
        }
        weft_http::normalize_path(target, &mut txn.path).map_err(|e| (400, e))?;
        if let Some(h) = req.host(data) {
            txn.host_value.extend_from_slice(h);
            if let Some((kh, kp)) = headers::split_authority(h, 80) {
                key_host = kh;
                key_port = kp;
            }
        }
    }
    if cfg.is_reverse() {
        let up = pick_route(cfg, &txn.host_value).ok_or((421, "no upstream is configured for this host"))?;
        txn.host.push_str(&up.host);
        txn.port = up.port;
        if txn.host_value.is_empty() {
            txn.host_value.extend_from_slice(up.to_string().as_bytes());
            key_host = b"";
        }
        if key_host.is_empty() {
            headers::cache_key(key, up.host.as_bytes(), up.port, &txn.path);
        }
    }
    if !txn.connect && !key_host.is_empty() {
        headers::cache_key(key, key_host, key_port, &txn.path);
    }
    Ok(())
}

/// Is the client's protocol upgrade (RFC 9110 §7.8: `Upgrade` named in
/// `Connection`, as WebSocket's handshake has it) forwarded? Only where the
/// upstream connection can become the client's alone: an HTTP/1.1 request
/// without a body (its end is where the new protocol begins), not CONNECT,
/// and not on the booster's shared, pipelined lanes. Otherwise Upgrade is
/// dropped as the hop-by-hop field it is, and the upstream answers in HTTP.
fn upgrade_forwarded(cfg: &ProxyConfig, txn: &Txn, req: &RequestHead, data: &[u8]) -> bool {
    cfg.upgrade
        && !txn.connect
        && !txn.http10
        && !txn.had_body
        && req.header(data, "upgrade").is_some()
        && req.connection_has_bytes(data, b"upgrade")
        && crate::booster::booster_of(cfg).is_none()
}

/// Look the request up in the cache (memory, then disk) and answer it when a
/// stored response may be used. Some: the request is dealt with (answered,
/// refused, or parked for a disk load); None: it goes upstream, as a
/// revalidation when `txn.stored` was set.
fn from_cache(
    sh: &mut Shared<'_>,
    c: &mut Client,
    txn: &mut Txn,
    ct: Token,
    n: usize,
    at: (u64, Instant),
) -> Option<Result<Flow, Refusal>> {
    from_cache_once(sh, c, txn, ct, n, at, true)
}

/// [`from_cache`]; `recheck`: a miss that leads its key's fill looks in
/// memory once more (and only once) before it goes upstream.
fn from_cache_once(
    sh: &mut Shared<'_>,
    c: &mut Client,
    txn: &mut Txn,
    ct: Token,
    n: usize,
    (now, mono): (u64, Instant),
    recheck: bool,
) -> Option<Result<Flow, Refusal>> {
    let data = &c.input.pending()[..n];
    let req = &c.req;
    let conds = Conditions::from_head(req, data);
    if !conds.cache_may_answer() {
        // If-Match / If-Unmodified-Since: not a cache's to evaluate (RFC
        // 9111 §4.3.2); the origin answers, and its response is stored as
        // usual. Unless the client forbids asking it.
        if txn.req_cc.only_if_cached {
            return Some(not_in_cache(sh, c, txn, n));
        }
        return None;
    }
    let vary_scratch = &mut sh.vary_scratch;
    let select = |o: &crate::store::Object| match &o.vary {
        None => true,
        Some(v) => {
            caching::vary_key([&v[..]], req, data, vary_scratch);
            vary_scratch[..] == o.vary_key[..]
        }
    };
    match sh
        .cache
        .lookup(&c.key, c.disk_loaded.as_ref(), !c.disk_checked, ct, select)
    {
        Lookup::Found(id, obj) => {
            let age = obj.age(now);
            let mut usable = caching::decide(obj.lifetime, age, &obj.cc, &txn.req_cc);
            let mut detail = Some("max-stale").filter(|_| usable == Usable::StaleAllowed);
            if usable == Usable::Revalidate {
                // stale-while-revalidate: answer now, refresh in the
                // background (`background.rs`; started by `route`). Also
                // for `only-if-cached`: the origin permits this stale answer
                // (RFC 9111 §4.2.4), so it is one the cache may give.
                if let Some(start) = crate::background::claim(sh, c, txn, &obj, age, (req, data)) {
                    sh.stats.stale_while_revalidate += 1;
                    sh.background_wanted = start;
                    usable = Usable::StaleAllowed;
                    detail = Some("stale-while-revalidate");
                }
            }
            match usable {
                u @ (Usable::Fresh | Usable::StaleAllowed) => {
                    if u == Usable::StaleAllowed {
                        sh.stats.stale_hits += 1;
                    }
                    sh.stats.hits += 1;
                    let hit = crate::cache_status::Hit {
                        detail,
                        collapsed: c.fill_checked,
                    };
                    let cache = if u == Usable::StaleAllowed { "STALE" } else { "HIT" };
                    crate::hit::answer_stored(sh, c, txn, (&obj, crate::hit::BodyFrom::Stored), (n, now), (hit, cache));
                    Some(Ok(Flow::Again))
                }
                Usable::Revalidate => {
                    if txn.req_cc.only_if_cached {
                        return Some(not_in_cache(sh, c, txn, n));
                    }
                    txn.stale = Some(obj.clone());
                    if obj.etag.is_some() || obj.last_modified.is_some() {
                        txn.stored = Some((id, obj));
                    }
                    None
                }
            }
        }
        // Not in memory, but on disk: parked until the disk store has put
        // the key's objects in memory, then answered again.
        Lookup::Parked(wait) => {
            sh.stats.disk_loads += 1;
            c.disk_wait = Some(wait);
            c.disk_checked = true;
            Some(Ok(Flow::Wait))
        }
        Lookup::Miss if txn.req_cc.only_if_cached => Some(not_in_cache(sh, c, txn, n)),
        // Woken because the fill it waited for ended, or waited too long:
        // the origin answers (no second wait).
        Lookup::Miss if c.fill_checked && !c.fill_follow => None,
        // With range fills, a range never waits for another's fill: it
        // follows one whose stream has reached its first byte, else the
        // origin answers its part at once, where waiting would cost the
        // whole transfer of a large file (`background.rs`).
        Lookup::Miss if sh.range_fills.is_some() && req.header(data, "range").is_some() => {
            let range = req.header(data, "range").unwrap_or_default();
            let (rules, scratch, req_cc) = (&sh.rules, &mut sh.vary_scratch, &txn.req_cc);
            let mut takes = |s: &Stream| {
                may_follow(txn) && stream_serves(s, rules, (req, data), scratch, req_cc, now) && range_arrived(range, s)
            };
            let stream = sh.cache.follow_fill(&c.key, &mut takes)?;
            Some(Ok(crate::hit::answer_follow(sh, c, txn, stream, (n, now))))
        }
        // Collapsed forwarding (fill.rs): lead the key's fill, follow its
        // stream, or wait for the one under way and be answered again when
        // it ends (or streams).
        Lookup::Miss => {
            let woken = std::mem::take(&mut c.fill_follow);
            let may_lead = !woken && may_lead_fill(txn, req, data);
            let (rules, scratch, req_cc) = (&sh.rules, &mut sh.vary_scratch, &txn.req_cc);
            let mut takes = |s: &Stream| stream_serves(s, rules, (req, data), scratch, req_cc, now);
            let follow = may_follow(txn).then_some(&mut takes as &mut dyn FnMut(&Stream) -> bool);
            match sh.cache.join_fill(&c.key, may_lead, follow, ct, mono) {
                // The lookup and the join take two locks: another worker
                // may have stored the key and ended its fill between them,
                // and this request would ask the origin again. Its own fill
                // ends as stored (anyone who joined it finds the object) and
                // the request is looked up again, once.
                (Join::Lead, _) if recheck && sh.cache.stored(&c.key) => {
                    sh.cache.finish_fill(&c.key, crate::fill::Outcome::Stored, mono);
                    from_cache_once(sh, c, txn, ct, n, (now, mono), false)
                }
                (Join::Lead, _) => {
                    txn.fill = true;
                    None
                }
                (Join::Wait, park) => {
                    if !woken {
                        sh.stats.collapsed += 1;
                    }
                    c.fill_wait = Some(park);
                    c.fill_checked = true;
                    // The wait's bound (`--collapse-timeout`, in `settle`) counts
                    // from now, not from the client's last read: a pipelined
                    // request parks only once those before it are answered.
                    c.last_activity = mono;
                    Some(Ok(Flow::Wait))
                }
                (Join::Pass, _) => None,
                (Join::Follow(stream), _) => Some(Ok(crate::hit::answer_follow(sh, c, txn, stream, (n, now)))),
            }
        }
    }
}

/// May this miss follow a fill's stream (`fill.rs`)? A GET or HEAD. Its
/// ranges and conditionals are answered as a hit's are, against the
/// stream's head (validators) and length, which are known before the body
/// has arrived: a 304 or 416 at once, a 206 with the part of the body it
/// names as it arrives.
fn may_follow(txn: &Txn) -> bool {
    matches!(txn.method, Method::Get | Method::Head)
}

/// May this miss lead a fill? A plain GET: a range or a conditional gets a
/// 206 or a 304 from the origin, which is never stored (and would make a
/// cacheable key pass).
fn may_lead_fill(txn: &Txn, req: &RequestHead, data: &[u8]) -> bool {
    const NOT_PLAIN: [&str; 4] = ["range", "if-range", "if-none-match", "if-modified-since"];
    txn.method == Method::Get && NOT_PLAIN.iter().all(|f| req.header(data, f).is_none())
}

/// Does the stream `s` of a fill under way serve the request `(req, data)`
/// as its stored object would: its Vary matches and it is fresh enough for
/// the request's `req_cc` at `now`? A Range request follows only a stream
/// of known length: a 206 names the length, or a 416 needs it.
fn stream_serves(
    s: &Stream,
    rules: &weft_http::caching::CacheRules,
    (req, data): (&RequestHead, &[u8]),
    scratch: &mut Vec<u8>,
    req_cc: &CacheControl,
    now: u64,
) -> bool {
    if s.len.is_none() && req.header(data, "range").is_some() {
        return false;
    }
    s.object(rules).is_some_and(|o| {
        let varies = o.vary.as_ref().is_some_and(|v| {
            caching::vary_key([&v[..]], req, data, scratch);
            scratch[..] != o.vary_key[..]
        });
        let usable = caching::decide(o.lifetime, o.age(now), &o.cc, req_cc);
        !varies && matches!(usable, Usable::Fresh | Usable::StaleAllowed)
    })
}

/// Has the fill streaming `s` reached the first byte the Range field
/// `range` asks for? A request for several ranges (answered whole) or for
/// none that is satisfiable (a 416) does not wait for a byte.
fn range_arrived(range: &[u8], s: &Stream) -> bool {
    let Some(len) = s.len else {
        return false;
    };
    match weft_http::evaluate_range(range, len) {
        weft_http::RangeOutcome::Partial { start, .. } => start < s.arrived(),
        _ => true,
    }
}

/// Answer an `only-if-cached` request the cache cannot: 504 (RFC 9111
/// §5.2.1.7). It is an answer, not a refusal: the request was whole and
/// well-formed, so the connection stays open for the next one, as after a
/// hit, unless a body the request carried is still unread.
fn not_in_cache(sh: &mut Shared<'_>, c: &mut Client, txn: &Txn, n: usize) -> Result<Flow, Refusal> {
    sh.stats.only_if_cached_misses += 1;
    let body_pending = !matches!(txn.body, ReqBody::None);
    let close = !txn.client_keep_alive || sh.draining || body_pending;
    let persist = if close { Persist::Close } else { Persist::Default };
    let reason = "not in cache (only-if-cached)";
    let head_only = txn.method == Method::Head;
    respond::simple(c.out.own_mut(), 504, sh.date.get(), b"", reason, head_only, persist);
    crate::accesslog::answered(sh, c, 504, "MISS", 0);
    c.input.consume(n);
    c.close_after |= close;
    c.linger_on_close |= body_pending;
    Ok(Flow::Again)
}

/// Append ASCII `b` lowercased (host names were checked to be ASCII).
fn push_lower(s: &mut String, b: &[u8]) {
    s.extend(b.iter().map(|&c| c.to_ascii_lowercase() as char));
}

/// The upstream for a reverse-proxied Host value: a route for the whole
/// value, then for the host without its port, then `--upstream`.
fn pick_route<'c>(cfg: &'c ProxyConfig, host_value: &[u8]) -> Option<&'c HostPort> {
    if !cfg.routes.is_empty() && !host_value.is_empty() {
        let bare = headers::split_authority(host_value, 80).map(|(h, _)| h).unwrap_or(b"");
        let found = cfg
            .routes
            .iter()
            .find(|r| r.host.as_bytes().eq_ignore_ascii_case(host_value));
        let found = found.or_else(|| cfg.routes.iter().find(|r| r.host.as_bytes().eq_ignore_ascii_case(bare)));
        if let Some(r) = found {
            return Some(&r.upstream);
        }
    }
    cfg.upstream.as_ref()
}
