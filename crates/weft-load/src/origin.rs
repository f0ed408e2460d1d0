//! `weft origin`: the workload server, in the spirit of Polygraph's server and
//! the server emulator of paper 001.
//!
//! What it answers (see [`crate::urls`]):
//! - `/size/N[/FLAG]/...`: N bytes; `X-Weft-Size: N` overrides any URL;
//! - SPECweb99 paths `.../dirNNNNN/classC_F` with the file's size;
//! - cacheability from the URL flag (`c`, `cSECONDS`, `nc`), the request
//!   header `X-Weft-Cache: <Cache-Control value>`, or `--cache-control`;
//!   every body has `Last-Modified` and a strong `ETag` derived from its path,
//!   and conditional requests get 304 (or 412) by RFC 9110's rules;
//! - a think time before each response from `--think DIST` or the request
//!   header `X-Weft-Think: DIST` (e.g. `norm(2.5s,1s)`, truncated at 0);
//! - persistent connections closed after `--conn-requests DIST` requests
//!   (e.g. PolyMix's `zipf(16)`), or after `--idle-timeout` of silence;
//! - `CONNECT` (answered 200, the connection then continues with the origin
//!   itself, so the origin can stand in for a tunnelling proxy) and the
//!   emulated SSL handshakes of [`crate::ssl`], recognised by their first byte.
//!
//! Bodies are slices of the shared content pattern sent with `writev`, up to
//! 64 segments per call: there is no per-byte work and no copy per response,
//! so the origin stays cheaper than whatever it is measuring. Each worker
//! thread owns a SO_REUSEPORT listener and an event loop.

use crate::content;
use crate::dist::{Dist, Unit};
pub use crate::origin_stats::OriginStats;
use crate::ssl::{self, Handshake, Side};
use crate::urls::{self, CacheFlag};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use weft_http::{BodyFraming, Limits, Method, Precondition, RequestHead, Version};
use weft_io::sys::{self, Fd};
use weft_io::{Acceptor, BackendKind, Ctx, Event, Handler, Interest, Poller, Shutdown, Slab, Token};

const LISTENER: Token = Token::new(u32::MAX, 0);
const WAKER: Token = Token::new(u32::MAX - 1, 0);
/// Largest request body read and discarded (POST); larger ones get 413.
const MAX_BODY: u64 = 16 << 20;
/// Stop answering pipelined requests beyond this much queued output.
const COALESCE_MAX: usize = 256 * 1024;
/// Most output segments per writev.
const MAX_IOV: usize = 64;

/// Settings of `weft origin`.
#[derive(Clone, Debug)]
pub struct OriginConfig {
    /// Listen address (port 0 = any).
    pub listen: SocketAddr,
    /// Worker threads.
    pub workers: usize,
    /// Event backend.
    pub event: BackendKind,
    /// Think time before each response.
    pub think: Option<Dist>,
    /// Requests per persistent connection.
    pub conn_requests: Option<Dist>,
    /// Share of 200 responses aborted halfway (PolyMix-4's server aborts).
    pub abort: f64,
    /// Close connections idle this long.
    pub idle_timeout: Duration,
    /// Cache-Control of URLs without a flag.
    pub cache_control: String,
    /// Largest body served.
    pub max_size: u64,
    /// Request limits.
    pub limits: Limits,
    /// Seed of the think-time and connection-limit draws.
    pub seed: u64,
    /// Listen backlog.
    pub backlog: i32,
}

impl Default for OriginConfig {
    fn default() -> Self {
        OriginConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9090)),
            workers: 1,
            event: BackendKind::Epoll,
            think: None,
            conn_requests: None,
            abort: 0.0,
            idle_timeout: Duration::from_secs(15),
            cache_control: "max-age=3600".into(),
            max_size: 1 << 30,
            limits: Limits::default(),
            seed: 1,
            backlog: 4096,
        }
    }
}

/// A running origin.
pub struct Origin {
    addr: SocketAddr,
    shutdown: Shutdown,
    handles: Vec<JoinHandle<io::Result<OriginStats>>>,
}

impl Origin {
    /// Bind and start the workers.
    pub fn start(cfg: OriginConfig) -> io::Result<Origin> {
        cfg.event
            .probe()
            .map_err(|e| io::Error::other(format!("--event {}: {e}", cfg.event)))?;
        let _ = sys::raise_nofile_limit();
        let workers = cfg.workers.max(1);
        let (listeners, addr) = weft_io::bind_reuseport(cfg.listen, workers, cfg.backlog)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {}: {e}", cfg.listen)))?;
        let shutdown = Shutdown::new(workers)?;
        let cfg = Arc::new(cfg);
        let mut handles = Vec::new();
        for (i, l) in listeners.into_iter().enumerate() {
            let cfg = cfg.clone();
            let sd = shutdown.clone();
            let h = std::thread::Builder::new()
                .name(format!("weft-origin-{i}"))
                .spawn(move || {
                    weft_io::with_backend!(cfg.event, P => {
                        let mut cx: Ctx<P> = Ctx::new()?;
                        let mut w = Worker::new(&cfg, l, sd.clone(), sd.waker(i), i);
                        w.register(&mut cx)?;
                        weft_io::run(&mut cx, &mut w)?;
                        Ok(w.stats)
                    })
                })?;
            handles.push(h);
        }
        Ok(Origin {
            addr,
            shutdown,
            handles,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop handle (signals).
    pub fn shutdown_handle(&self) -> Shutdown {
        self.shutdown.clone()
    }

    /// Wait for the workers to finish; their counters summed.
    pub fn wait(self) -> io::Result<OriginStats> {
        let mut total = OriginStats::default();
        for h in self.handles {
            match h.join() {
                Ok(r) => total.add(&r?),
                Err(_) => return Err(io::Error::other("an origin worker panicked")),
            }
        }
        Ok(total)
    }
}

#[derive(Clone, Copy, Debug)]
enum Seg {
    /// Bytes of `out`.
    Out(usize, usize),
    /// Content of pattern offset `off`, from body position `pos`, `left` bytes to go.
    Body { off: usize, pos: u64, left: u64 },
}

enum Mode {
    Http,
    /// Emulated SSL handshake: index of the next message; bytes still owed by the client.
    Ssl {
        hs: Handshake,
        next: usize,
        need: usize,
    },
}

struct Conn {
    fd: Fd,
    interest: Interest,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    out: Vec<u8>,
    segs: VecDeque<Seg>,
    requests: u32,
    max_requests: u32,
    close_after: bool,
    /// Reset (not close) once the output is sent: an aborted response.
    abort_after: bool,
    hold_until: Option<Instant>,
    deadline: Instant,
    timer_at: Option<Instant>,
    may_read: bool,
    eof: bool,
    mode: Mode,
    /// Start of the connection or of a CONNECT tunnel: a handshake may begin.
    at_stream_start: bool,
    discard: u64,
}

impl Conn {
    fn has_output(&self) -> bool {
        !self.segs.is_empty()
    }
}

struct Worker<'a> {
    cfg: &'a OriginConfig,
    /// This worker's counters (summed over workers when they stop).
    stats: OriginStats,
    listener: Option<Fd>,
    waker: std::os::fd::RawFd,
    shutdown: Shutdown,
    conns: Slab<Conn>,
    head: RequestHead,
    date: weft_http::DateCache,
    rng: SmallRng,
    /// Accepts until EAGAIN: an instrument should take whatever the load offers.
    acceptor: Acceptor,
    draining: bool,
    spare: Vec<(Vec<u8>, Vec<u8>)>,
}

enum Next {
    Wait,
    Close,
}

impl<'a> Worker<'a> {
    fn new(
        cfg: &'a OriginConfig,
        listener: Fd,
        shutdown: Shutdown,
        waker: std::os::fd::RawFd,
        index: usize,
    ) -> Worker<'a> {
        Worker {
            cfg,
            stats: OriginStats::default(),
            listener: Some(listener),
            waker,
            shutdown,
            conns: Slab::new(),
            head: RequestHead::new(),
            date: weft_http::DateCache::new(),
            rng: SmallRng::seed_from_u64(cfg.seed.wrapping_add(index as u64 * 7919)),
            acceptor: Acceptor::new(None),
            draining: false,
            spare: Vec::new(),
        }
    }

    fn register<P: Poller>(&mut self, cx: &mut Ctx<P>) -> io::Result<()> {
        let reg = |e: weft_io::RegisterError| io::Error::other(e.to_string());
        if let Some(l) = &self.listener {
            cx.register(l.raw(), LISTENER, Interest::READ).map_err(reg)?;
        }
        cx.register(self.waker, WAKER, Interest::READ).map_err(reg)?;
        self.date.update(cx.wall);
        Ok(())
    }

    fn accept<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        let Some(lfd) = self.listener.as_ref().map(|l| l.raw()) else {
            return;
        };
        self.acceptor.begin();
        while let Some((fd, _)) = self.acceptor.next(cx, lfd, LISTENER) {
            self.add_conn(cx, fd);
        }
    }

    fn add_conn<P: Poller>(&mut self, cx: &mut Ctx<P>, fd: Fd) {
        let token = self.conns.next_token();
        let interest = if P::CAPS.fixed_interest {
            Interest::BOTH
        } else {
            Interest::READ
        };
        if cx.register(fd.raw(), token, interest).is_err() {
            let _ = sys::set_linger_zero(fd.raw());
            return;
        }
        self.stats.accepted += 1;
        let max_requests = match &self.cfg.conn_requests {
            Some(d) => (d.sample(&mut self.rng) as u32).max(1),
            None => u32::MAX,
        };
        let (buf, out) = self
            .spare
            .pop()
            .unwrap_or_else(|| (vec![0u8; 16 * 1024], Vec::with_capacity(1024)));
        let now = cx.now;
        let idle = self.cfg.idle_timeout;
        self.conns.insert_with(|_| Conn {
            fd,
            interest,
            buf,
            start: 0,
            end: 0,
            out,
            segs: VecDeque::new(),
            requests: 0,
            max_requests,
            close_after: false,
            abort_after: false,
            hold_until: None,
            deadline: now + idle,
            timer_at: None,
            may_read: true,
            eof: false,
            mode: Mode::Http,
            at_stream_start: true,
            discard: 0,
        });
        self.drive(cx, token);
    }

    fn close<P: Poller>(&mut self, cx: &mut Ctx<P>, token: Token) {
        if let Some(c) = self.conns.remove(token) {
            if c.abort_after {
                let _ = sys::set_linger_zero(c.fd.raw());
            }
            let Conn {
                fd, mut buf, mut out, ..
            } = c;
            cx.close_later(fd, true);
            if self.spare.len() < 1024 {
                out.clear();
                if buf.len() > 64 * 1024 {
                    buf.truncate(16 * 1024);
                    buf.shrink_to_fit();
                }
                self.spare.push((buf, out));
            }
        }
    }

    fn drive<P: Poller>(&mut self, cx: &mut Ctx<P>, token: Token) {
        let Some(c) = self.conns.get_mut(token) else {
            return;
        };
        let now = Instant::now();
        let next = drive_conn(
            c,
            self.cfg,
            &mut self.stats,
            &mut self.head,
            &self.date,
            &mut self.rng,
            now,
            self.draining,
        );
        match next {
            Next::Close => self.close(cx, token),
            Next::Wait => {
                let Some(c) = self.conns.get_mut(token) else { return };
                let want = if P::CAPS.fixed_interest || (c.has_output() && c.hold_until.is_none()) {
                    Interest::BOTH
                } else {
                    Interest::READ
                };
                if want != c.interest {
                    if cx.reregister(c.fd.raw(), token, want).is_err() {
                        self.close(cx, token);
                        return;
                    }
                    c.interest = want;
                }
                let wake = c.hold_until.unwrap_or(c.deadline);
                if c.timer_at.is_none_or(|t| wake < t) {
                    c.timer_at = Some(wake);
                    cx.arm_timer(token, wake);
                }
            }
        }
    }
}

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
fn simple(c: &mut Conn, date: &[u8], status: u16, reason_body: &[u8], head_only: bool, close: bool) {
    let start = c.out.len();
    c.out.extend_from_slice(b"HTTP/1.1 ");
    weft_http::push_decimal(&mut c.out, status as u64);
    c.out.push(b' ');
    c.out.extend_from_slice(weft_http::reason_phrase(status).as_bytes());
    c.out.extend_from_slice(b"\r\nDate: ");
    c.out.extend_from_slice(date);
    c.out
        .extend_from_slice(b"\r\nServer: weft-origin\r\nContent-Type: text/plain\r\nContent-Length: ");
    weft_http::push_decimal(&mut c.out, reason_body.len() as u64);
    c.out.extend_from_slice(b"\r\n");
    if close {
        c.out.extend_from_slice(b"Connection: close\r\n");
    }
    c.out.extend_from_slice(b"\r\n");
    if !head_only {
        c.out.extend_from_slice(reason_body);
    }
    c.segs.push_back(Seg::Out(start, c.out.len()));
}

#[allow(clippy::too_many_arguments)]
fn drive_conn(
    c: &mut Conn,
    cfg: &OriginConfig,
    stats: &mut OriginStats,
    head: &mut RequestHead,
    date: &weft_http::DateCache,
    rng: &mut SmallRng,
    now: Instant,
    draining: bool,
) -> Next {
    loop {
        if c.hold_until.is_some_and(|t| now < t) {
            return Next::Wait;
        }
        c.hold_until = None;
        if c.has_output() {
            match flush(c, stats) {
                Ok(true) => c.deadline = now + cfg.idle_timeout,
                Ok(false) => {
                    c.deadline = now + cfg.idle_timeout;
                    return Next::Wait;
                }
                Err(_) => {
                    stats.reset_unfinished += 1;
                    return Next::Close;
                }
            }
        }
        if c.close_after {
            return Next::Close;
        }
        if c.start < c.end && answer(c, cfg, stats, head, date, rng, now, draining) {
            continue;
        }
        if c.close_after && !c.has_output() {
            return Next::Close;
        }
        if c.eof {
            return Next::Close;
        }
        if !c.may_read {
            return Next::Wait;
        }
        if c.end == c.buf.len() {
            if c.start > 0 {
                c.buf.copy_within(c.start..c.end, 0);
                c.end -= c.start;
                c.start = 0;
            } else if c.buf.len() < cfg.limits.max_head + 4096 {
                let n = (c.buf.len() * 2).min(cfg.limits.max_head + 4096);
                c.buf.resize(n, 0);
            } else {
                return Next::Close;
            }
        }
        let space = c.buf.len() - c.end;
        match sys::read(c.fd.raw(), &mut c.buf[c.end..]) {
            Ok(0) => {
                c.eof = true;
                c.may_read = false;
                if !c.has_output() {
                    return Next::Close;
                }
            }
            Ok(n) => {
                c.end += n;
                c.may_read = n == space;
                c.deadline = now + cfg.idle_timeout;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                c.may_read = false;
                return Next::Wait;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                let counter = if c.start == c.end && !c.has_output() {
                    &mut stats.reset_idle
                } else {
                    &mut stats.reset_unfinished
                };
                *counter += 1;
                return Next::Close;
            }
        }
    }
}

/// Answer what the buffer holds (requests, handshake messages). True when
/// output was produced or input consumed.
#[allow(clippy::too_many_arguments)]
fn answer(
    c: &mut Conn,
    cfg: &OriginConfig,
    stats: &mut OriginStats,
    head: &mut RequestHead,
    date: &weft_http::DateCache,
    rng: &mut SmallRng,
    now: Instant,
    draining: bool,
) -> bool {
    let mut progressed = false;
    while c.start < c.end && !c.close_after && c.hold_until.is_none() && c.out.len() < COALESCE_MAX {
        if c.discard > 0 {
            let n = c.discard.min((c.end - c.start) as u64);
            c.start += n as usize;
            c.discard -= n;
            progressed = true;
            continue;
        }
        if c.at_stream_start {
            c.at_stream_start = false;
            if ssl::starts_handshake(c.buf[c.start]) {
                c.mode = Mode::Ssl {
                    hs: Handshake::Full,
                    next: 0,
                    need: ssl::CLIENT_HELLO,
                };
            }
        }
        if let Mode::Ssl { hs, next, need } = &mut c.mode {
            let avail = c.end - c.start;
            if *next == 0 {
                // The ClientHello says which handshake follows.
                if avail < ssl::CLIENT_HELLO {
                    break;
                }
                match Handshake::from_client_hello(&c.buf[c.start..c.start + ssl::CLIENT_HELLO]) {
                    Some(h) => *hs = h,
                    None => {
                        c.close_after = true;
                        break;
                    }
                }
                c.start += ssl::CLIENT_HELLO;
                *next = 1;
                *need = 0;
            } else {
                let take = (*need).min(avail);
                c.start += take;
                *need -= take;
                if *need > 0 {
                    break;
                }
            }
            progressed = true;
            // Send our flights until the client owes the next one.
            let msgs = hs.messages();
            loop {
                let Some(&(side, _)) = msgs.get(*next) else {
                    stats.handshakes += 1;
                    c.mode = Mode::Http;
                    break;
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
                    Side::Server => {
                        let start = c.out.len();
                        hs.render_flight(&lens[..k], false, &mut c.out);
                        c.segs.push_back(Seg::Out(start, c.out.len()));
                    }
                    Side::Client => {
                        *need = lens[..k].iter().sum();
                        break;
                    }
                }
            }
            continue;
        }
        let data = &c.buf[c.start..c.end];
        let parsed = head.parse(data, &cfg.limits);
        let n = match parsed {
            Ok(None) => break,
            Ok(Some(n)) => n,
            Err(e) => {
                stats.refused += 1;
                simple(c, date.get(), e.status, e.reason.as_bytes(), false, true);
                c.close_after = true;
                c.start = c.end;
                return true;
            }
        };
        progressed = true;
        c.requests += 1;
        stats.requests += 1;
        let req = &c.buf[c.start..c.start + n];
        let method = head.method();
        let head_only = method == Method::Head;
        let mut close = !head.keep_alive() || draining || c.requests >= c.max_requests;
        match head.framing() {
            BodyFraming::Length(len) if len <= MAX_BODY => c.discard = len,
            BodyFraming::None | BodyFraming::UntilClose => {}
            BodyFraming::Length(_) => {
                stats.refused += 1;
                simple(c, date.get(), 413, b"request body too large\n", head_only, true);
                c.close_after = true;
                c.start = c.end;
                return true;
            }
            BodyFraming::Chunked => {
                stats.refused += 1;
                simple(c, date.get(), 411, b"send a Content-Length\n", head_only, true);
                c.close_after = true;
                c.start = c.end;
                return true;
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
                    stats.refused += 1;
                    simple(c, date.get(), 400, b"invalid X-Weft-Think\n", head_only, close);
                    c.start += n;
                    c.close_after |= close;
                    continue;
                }
            },
            None => cfg.think,
        };
        if let Some(d) = think {
            let t = d.sample(rng);
            if t > 0.0 {
                c.hold_until = Some(now + Duration::from_secs_f64(t.min(3600.0)));
            }
        }
        if method == Method::Connect {
            // Stand in for a tunnelling proxy: the tunnel leads to this origin.
            let start = c.out.len();
            c.out.extend_from_slice(b"HTTP/1.1 200 Connection established\r\n\r\n");
            c.segs.push_back(Seg::Out(start, c.out.len()));
            c.start += n;
            c.at_stream_start = true;
            continue;
        }
        if !matches!(method, Method::Get | Method::Head | Method::Post) {
            stats.refused += 1;
            simple(c, date.get(), 405, b"GET, HEAD or POST\n", head_only, close);
            c.start += n;
            c.close_after |= close;
            continue;
        }
        let target = head.target(req);
        let path = content::origin_form(target);
        let spec = urls::parse(path);
        let size = match head.header(req, "x-weft-size") {
            Some(v) => match weft_http::parse_decimal(v) {
                Some(s) => Some(s),
                None => {
                    stats.refused += 1;
                    simple(c, date.get(), 400, b"invalid X-Weft-Size\n", head_only, close);
                    c.start += n;
                    c.close_after |= close;
                    continue;
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
            simple(c, date.get(), status, body, head_only, close);
            c.start += n;
            c.close_after |= close;
            continue;
        };
        if size > cfg.max_size {
            stats.refused += 1;
            simple(c, date.get(), 400, b"size above --max-size\n", head_only, close);
            c.start += n;
            c.close_after |= close;
            continue;
        }
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
                stats.not_modified += 1;
                (304, 0)
            }
            Precondition::Failed => (412, 0),
        };
        let cache_value: &[u8] = match head.header(req, "x-weft-cache") {
            Some(v) if !v.is_empty() && v.iter().all(|&b| (b' '..0x7f).contains(&b)) => v,
            _ => match spec.map(|s| s.cache).unwrap_or(CacheFlag::Default) {
                CacheFlag::NoStore => b"no-store",
                _ => b"",
            },
        };
        let start = c.out.len();
        c.out.extend_from_slice(match status {
            200 => b"HTTP/1.1 200 OK\r\nDate: ",
            304 => b"HTTP/1.1 304 Not Modified\r\nDate: ",
            _ => b"HTTP/1.1 412 Precondition Failed\r\nDate: ",
        });
        c.out.extend_from_slice(date.get());
        c.out.extend_from_slice(b"\r\nServer: weft-origin\r\nContent-Type: ");
        c.out.extend_from_slice(content_type(path));
        if status != 304 {
            c.out.extend_from_slice(b"\r\nContent-Length: ");
            weft_http::push_decimal(&mut c.out, body_len);
        }
        c.out.extend_from_slice(b"\r\nLast-Modified: ");
        c.out.extend_from_slice(&weft_http::fmt_http_date(lm));
        c.out.extend_from_slice(b"\r\nETag: ");
        c.out.extend_from_slice(etag);
        c.out.extend_from_slice(b"\r\nCache-Control: ");
        if !cache_value.is_empty() {
            c.out.extend_from_slice(cache_value);
        } else if let Some(CacheFlag::MaxAge(s)) = spec.map(|s| s.cache) {
            c.out.extend_from_slice(b"max-age=");
            weft_http::push_decimal(&mut c.out, s);
        } else {
            c.out.extend_from_slice(cfg.cache_control.as_bytes());
        }
        c.out.extend_from_slice(b"\r\n");
        if close {
            c.out.extend_from_slice(b"Connection: close\r\n");
        } else if head.version() == Version::Http10 {
            c.out.extend_from_slice(b"Connection: keep-alive\r\n");
        }
        c.out.extend_from_slice(b"\r\n");
        c.segs.push_back(Seg::Out(start, c.out.len()));
        let mut left = body_len;
        if status == 200 && !head_only && body_len >= 2 && cfg.abort > 0.0 && rng.gen::<f64>() < cfg.abort {
            // Abort: half the body, then a reset (the client sees a truncated reply).
            stats.aborted += 1;
            left = body_len / 2;
            c.abort_after = true;
            c.close_after = true;
        }
        if !head_only && left > 0 {
            c.segs.push_back(Seg::Body {
                off: content::offset_of_hash(h),
                pos: 0,
                left,
            });
        }
        c.start += n;
        if close {
            c.close_after = true;
            close = false;
        }
        let _ = close;
    }
    if c.start == c.end {
        c.start = 0;
        c.end = 0;
    }
    progressed
}

/// Send queued segments with writev. Ok(true): all sent.
fn flush(c: &mut Conn, stats: &mut OriginStats) -> io::Result<bool> {
    loop {
        if c.segs.is_empty() {
            c.out.clear();
            return Ok(true);
        }
        let mut iov: [IoSlice<'_>; MAX_IOV] = [IoSlice::new(&[]); MAX_IOV];
        let mut k = 0;
        let mut want = 0usize;
        for s in c.segs.iter() {
            if k == MAX_IOV {
                break;
            }
            let slice: &[u8] = match *s {
                Seg::Out(a, b) => &c.out[a..b],
                Seg::Body { off, pos, left } => content::slice(off, pos, (left as usize).min(content::PERIOD)),
            };
            want += slice.len();
            iov[k] = IoSlice::new(slice);
            k += 1;
        }
        let n = loop {
            match sys::writev(c.fd.raw(), &iov[..k]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                r => break r?,
            }
        };
        let mut left = n;
        while left > 0 {
            let Some(s) = c.segs.front_mut() else { break };
            match s {
                Seg::Out(a, b) => {
                    let len = *b - *a;
                    if left >= len {
                        left -= len;
                        c.segs.pop_front();
                    } else {
                        *a += left;
                        left = 0;
                    }
                }
                Seg::Body { pos, left: rem, .. } => {
                    let take = (left as u64).min(*rem);
                    *pos += take;
                    *rem -= take;
                    left -= take as usize;
                    stats.body_bytes += take;
                    if *rem == 0 {
                        c.segs.pop_front();
                    }
                }
            }
        }
        if n < want {
            return Ok(false);
        }
    }
}

impl<P: Poller> Handler<P> for Worker<'_> {
    fn on_event(&mut self, cx: &mut Ctx<P>, ev: Event) {
        match ev.token {
            LISTENER => {
                if !self.draining && self.acceptor.active() {
                    self.accept(cx);
                }
            }
            WAKER => {
                sys::eventfd_drain(self.waker);
                if self.shutdown.requested() && !self.draining {
                    self.draining = true;
                    if let Some(l) = self.listener.take() {
                        cx.close_later(l, true);
                    }
                    for t in self.conns.tokens() {
                        self.close(cx, t);
                    }
                }
            }
            token => {
                let Some(c) = self.conns.get_mut(token) else {
                    return;
                };
                if ev.readable || ev.error {
                    c.may_read = true;
                }
                self.drive(cx, token);
            }
        }
    }

    fn on_timer(&mut self, cx: &mut Ctx<P>, token: Token, due: Instant) -> Option<Instant> {
        let c = self.conns.get_mut(token)?;
        if c.timer_at != Some(due) {
            return None;
        }
        c.timer_at = None;
        let now = Instant::now();
        if c.hold_until.is_some_and(|t| now >= t) {
            c.hold_until = None;
            self.drive(cx, token);
            return None;
        }
        if c.hold_until.is_none() && now >= c.deadline {
            self.close(cx, token);
            return None;
        }
        let wake = c
            .hold_until
            .unwrap_or(c.deadline)
            .max(cx.now + Duration::from_micros(1));
        c.timer_at = Some(wake);
        Some(wake)
    }

    fn after_batch(&mut self, cx: &mut Ctx<P>) {
        self.date.update(cx.wall);
        let lfd = self.listener.as_ref().map(|l| l.raw());
        if self.acceptor.due(cx, lfd, LISTENER) && !self.draining {
            self.accept(cx);
        }
    }

    fn max_wait(&self) -> Option<Duration> {
        // The Date header is refreshed once a second.
        let date = Duration::from_secs(1);
        Some(self.acceptor.max_wait().map_or(date, |d| d.min(date)))
    }

    fn keep_running(&self) -> bool {
        !(self.draining && self.conns.is_empty())
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
