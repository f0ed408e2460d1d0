//! CGI and FastCGI in `weft serve` (issue 24; thesis 004 §2.2.6: Flash-Lite's
//! persistent CGI, whose output reaches the network without a copy).
//!
//! Three ways a request under a configured prefix is answered:
//!
//! - `--fastcgi PREFIX=ADDR|unix:PATH`: a FastCGI application server (php-fpm,
//!   or any responder) weft does not start; persistent connections
//!   (FCGI_KEEP_CONN), opened on demand and kept idle per worker;
//! - `--cgi PREFIX=PROGRAM` (`--cgi-mode fastcgi`, the default): weft starts
//!   `--cgi-workers` processes of PROGRAM, each on its own listening socket
//!   handed over as descriptor 0 (FCGI_LISTENSOCK_FILENO), and supervises
//!   them ([`pool`]): one that crashes, hangs past `--cgi-timeout` or writes
//!   more than it declared is killed and started again. The processes are
//!   split among the serve workers, each holding one persistent connection
//!   to each of its own, so no connection moves between threads;
//! - `--cgi PREFIX=PROGRAM --cgi-mode cgi1`: CGI/1.1, a process per request
//!   with the standard environment ([`fork`]).
//!
//! The exchange ([`txn`]) runs on the serve worker's event loop and never
//! blocks it: the request (BEGIN_REQUEST, PARAMS from
//! `weft_http::fastcgi::env`, the body as STDIN records) is written as the
//! application's socket takes it; the reply's record headers and the CGI
//! head are read into user space, and every STDOUT payload after the head is
//! spliced socket → pipe → client socket (the output chain's pipe segments):
//! record payloads never enter weft's address space. `--cgi-send copy`
//! reads them instead (the lab's comparison).
//!
//! The worker calls in at six places (`worker.rs`, marked `// cgi:`; MT and
//! MP call [`blocking_step`] instead of the last three): start
//! a request ([`begin`]), drive a connection with a request in flight
//! ([`drive`]), an application socket's event ([`on_event`]), a client
//! connection closed ([`client_closed`]), after each batch ([`after_batch`]:
//! registrations, timeouts, requests waiting for a connection) and the
//! loop's longest sleep ([`max_wait`]).

mod fork;
pub mod pool;
mod txn;

use crate::conn::Conn;
use crate::respond::{self, Persist};
use crate::worker::Shared;
use pool::Pool;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use weft_http::{BodyFraming, Method, Version};
use weft_io::sys::Fd;
use weft_io::{Ctx, Event, Interest, PipeBudget, PipePool, Poller, Slab, Token};

pub(crate) use txn::Txn;

weft_core::metrics! {
    /// CGI and FastCGI counters of one serve worker.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct CgiStats {
        /// Requests passed to a CGI program or FastCGI application.
        counter requests,
        /// Response body bytes spliced from the application to the client.
        counter bytes_spliced,
        /// Response body bytes read into weft and written (head remainders,
        /// small records, `--cgi-send copy`, CGI/1.1 leftovers).
        counter bytes_copied,
        /// Request body bytes sent to applications.
        counter bytes_in,
        /// Connections opened to applications.
        counter connects,
        /// Processes started for CGI/1.1 requests.
        counter forks,
        /// Application processes replaced (crashed, hung, overran).
        counter restarts,
        /// Responses cut at their declared Content-Length.
        counter cut,
        /// 502 answers (malformed output, crash, refused connection).
        counter status_502,
        /// 504 answers (no answer within `--cgi-timeout`).
        counter status_504,
        /// 413 answers (request body over `--cgi-max-body`).
        counter status_413,
        /// Responses aborted after their head was sent.
        counter aborted,
    }
    groups {}
}

/// How response bodies reach the client (`--cgi-send`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Send {
    /// Splice every payload of at least `SPLICE_MIN` bytes, from TCP and
    /// Unix stream sockets and CGI/1.1 pipes alike. (Unix sockets were
    /// copied here once: before Linux 6.5 their buffers were linear and a
    /// splice copied in the kernel. Since 6.5 an application's sendfile or
    /// vmsplice into a Unix socket attaches pages (MSG_SPLICE_PAGES), and
    /// weft's splice out of it moves those pages: lab `cgi` measures
    /// splice cheaper than copy on both kinds.)
    #[default]
    Auto,
    /// Always splice.
    Splice,
    /// Always read into weft and write.
    Copy,
}

impl Handler {
    /// Are payloads spliced under `send`?
    fn splices(&self, send: Send) -> bool {
        let _ = self;
        send != Send::Copy
    }
}

/// Where a FastCGI application listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix stream socket path (or `@name`).
    Unix(String),
}

/// How a prefix is answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Handler {
    /// `--fastcgi`: an application server weft does not start.
    FastCgi(Address),
    /// `--cgi` in `fastcgi` mode: a pool of processes weft supervises.
    Pool(PathBuf),
    /// `--cgi` in `cgi1` mode: a process per request.
    Fork(PathBuf),
}

/// One prefix and what answers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// URL path prefix (`/app`: `/app` and `/app/...`, not `/apple`).
    pub prefix: String,
    /// What answers it.
    pub handler: Handler,
}

/// CGI settings of `weft serve` (validated by the CLI).
#[derive(Debug, Default)]
pub struct CgiConfig {
    /// Prefixes, longest match first.
    pub routes: Vec<Route>,
    /// Processes per `--cgi` pool (at least one per serve worker).
    pub workers: usize,
    /// Largest request body passed on; larger ones get 413.
    pub max_body: u64,
    /// An application that makes no progress this long: 504 and replaced.
    pub timeout: Duration,
    /// Largest CGI response head.
    pub max_head: usize,
    /// How response bodies reach the client.
    pub send: Send,
    /// Idle connections kept per worker and `--fastcgi` prefix.
    pub keep_idle: usize,
    /// The pools, started by the first worker.
    pools: OnceLock<Vec<Option<Arc<Pool>>>>,
}

impl CgiConfig {
    /// Does weft start processes for these routes (`--cgi`, either mode)?
    /// Then a child holds a reference to every descriptor of weft's from its
    /// vfork until its exec has closed them, and a descriptor weft closes in
    /// that window stays open, and registered with epoll, until the child
    /// gets the CPU.
    pub fn starts_processes(&self) -> bool {
        self.routes
            .iter()
            .any(|r| matches!(r.handler, Handler::Pool(_) | Handler::Fork(_)))
    }

    /// Settings with the defaults for everything but the routes.
    pub fn new(mut routes: Vec<Route>) -> CgiConfig {
        routes.sort_by_key(|r| std::cmp::Reverse(r.prefix.len()));
        CgiConfig {
            routes,
            workers: 4,
            max_body: 1 << 20,
            timeout: Duration::from_secs(30),
            max_head: 16 * 1024,
            send: Send::Auto,
            keep_idle: 64,
            pools: OnceLock::new(),
        }
    }

    /// The route whose prefix the request path starts with.
    fn route(&self, target: &[u8]) -> Option<usize> {
        let path_end = memchr_q(target);
        let path = &target[..path_end];
        self.routes.iter().position(|r| {
            let p = r.prefix.trim_end_matches('/').as_bytes();
            path.starts_with(p) && (path.len() == p.len() || path[p.len()] == b'/' || p.is_empty())
        })
    }

    fn pools(&self, serve_workers: usize) -> &[Option<Arc<Pool>>] {
        self.pools.get_or_init(|| {
            self.routes
                .iter()
                .map(|r| match &r.handler {
                    Handler::Pool(p) => {
                        let n = self.workers.max(serve_workers).div_ceil(serve_workers) * serve_workers;
                        match Pool::start(p, n) {
                            Ok(pool) => Some(pool),
                            Err(e) => {
                                weft_core::warn!("--cgi {}: cannot start {}: {e}", r.prefix, p.display());
                                None
                            }
                        }
                    }
                    _ => None,
                })
                .collect()
        })
    }
}

fn memchr_q(target: &[u8]) -> usize {
    target.iter().position(|&b| b == b'?').unwrap_or(target.len())
}

/// Upstream tokens: far above any client slot, below the handoff channels.
const UP_BASE: u32 = 0xFF00_0000;

/// Is `t` an application connection's token?
pub(crate) fn is_upstream(t: Token) -> bool {
    (UP_BASE..0xFFF0_0000).contains(&t.index())
}

fn up_token(t: Token) -> Token {
    Token::new(t.index() + UP_BASE, t.generation())
}

fn slab_token(t: Token) -> Token {
    Token::new(t.index() - UP_BASE, t.generation())
}

/// One connection to an application (or a CGI/1.1 process's stdout).
pub(crate) struct Up {
    pub(crate) fd: Fd,
    route: usize,
    /// The pool slot it is connected to (`--cgi` pools).
    slot: Option<usize>,
    /// The client whose request it carries.
    client: Option<Token>,
    /// Interest wanted, and registered (None: not yet).
    want: Interest,
    have: Option<Interest>,
    /// Not reusable: close when the request ends.
    broken: bool,
    /// Its own view of read readiness: set by a readable event (or an
    /// error, or the end of stream), cleared by a read that met EAGAIN. A
    /// client is driven by its own events too (a fixed-interest
    /// level-triggered backend reports it writable at every wait), and each
    /// of those drives read the application's socket to find nothing: 42
    /// reads per request under epoll-once in `application_connections_are_kept`.
    may_read: bool,
}

/// One pool slot as a worker uses it.
#[derive(Clone, Copy)]
struct SlotUse {
    slot: usize,
    /// Its connection, when open.
    up: Option<Token>,
    /// Not before the pool has started this generation (a replacement).
    min_gen: u64,
}

/// Per-route state of one worker.
#[derive(Default)]
struct RouteState {
    /// Idle connections (slab tokens), most recently used last.
    idle: Vec<Token>,
    /// Connections in use or idle.
    open: usize,
    /// Pool slots this worker owns.
    slots: Vec<SlotUse>,
    /// Clients waiting for a connection.
    waiting: VecDeque<Token>,
}

/// One worker's CGI state.
pub(crate) struct Cgi {
    cfg: Arc<CgiConfig>,
    pools: Vec<Option<Arc<Pool>>>,
    routes: Vec<RouteState>,
    ups: Slab<Up>,
    txns: HashMap<Token, Txn>,
    pipes: PipePool,
    /// Clients to drive after the batch (timed out, or a connection freed).
    wake: Vec<Token>,
    /// Descriptors to close through the loop (they may be registered).
    closing: Vec<(Fd, bool)>,
    /// Application connections whose registration must change.
    dirty: Vec<Token>,
    /// Application connections whose reads (`.0`) or writes (`.1`) met
    /// EAGAIN in this batch, for a readiness-tracking backend (`tracked`),
    /// which hands a token out again until told its readiness is used up:
    /// untold, it woke the client at every pass of its table for nothing (19
    /// reads per 64 KiB FastCGI request against epoll's 3). Reported in
    /// [`after_batch`], where the loop is at hand and before the backend
    /// next waits, so nothing newer than the EAGAIN can be cleared.
    spent: Vec<(Token, bool, bool)>,
    /// CGI/1.1 processes that closed their output but have not exited.
    zombies: Vec<std::process::Child>,
    pub(crate) stats: CgiStats,
    pub(crate) scratch: Vec<u8>,
    params: Vec<u8>,
    next_tick: Instant,
    /// Client connections' local addresses (SERVER_PORT), asked once per
    /// connection rather than once per request.
    local: HashMap<Token, SocketAddr>,
    /// Local redirects in progress: the connection's request count when the
    /// redirected request was put in front of its input, and the depth.
    redirects: HashMap<Token, (u64, u8)>,
    /// Parses a logged request's head again when its reply is over.
    log_parser: weft_http::RequestHead,
}

impl Cgi {
    /// The state of serve worker `index` of `workers`.
    pub(crate) fn new(cfg: Arc<CgiConfig>, index: usize, workers: usize) -> Cgi {
        let workers = workers.max(1);
        let pools = cfg.pools(workers).to_vec();
        let routes = pools
            .iter()
            .map(|p| RouteState {
                slots: p
                    .as_ref()
                    .map(|p| {
                        (0..p.len())
                            .filter(|s| s % workers == index % workers)
                            .map(|slot| SlotUse {
                                slot,
                                up: None,
                                min_gen: 0,
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                ..Default::default()
            })
            .collect();
        Cgi {
            cfg,
            pools,
            routes,
            ups: Slab::new(),
            txns: HashMap::new(),
            pipes: PipePool::new(PipeBudget::new(4096, 1 << 20), 64),
            wake: Vec::new(),
            closing: Vec::new(),
            dirty: Vec::new(),
            spent: Vec::new(),
            zombies: Vec::new(),
            stats: CgiStats::default(),
            scratch: Vec::new(),
            params: Vec::new(),
            next_tick: Instant::now(),
            local: HashMap::new(),
            redirects: HashMap::new(),
            log_parser: weft_http::RequestHead::new(),
        }
    }

    /// The client connection's local address (getsockname once per connection).
    fn local_addr(&mut self, c: &Conn) -> SocketAddr {
        *self
            .local
            .entry(c.token)
            .or_insert_with(|| weft_io::sys::local_addr(&c.fd).unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0))))
    }

    /// The counters, for the worker's stats.
    pub(crate) fn stats(&self) -> CgiStats {
        self.stats
    }

    /// Take an idle connection for `route`, or open one. None: all busy
    /// (the caller waits) — or the application cannot be reached (`Err`).
    fn acquire(&mut self, route: usize, client: Token) -> Result<Option<Token>, ()> {
        let rs = &mut self.routes[route];
        if let Some(pool) = &self.pools[route] {
            // A pool slot of this worker with no request in flight.
            let ups = &self.ups;
            let free = |s: &SlotUse| {
                s.up.is_none_or(|t| ups.get(t).is_none_or(|u| u.client.is_none()))
                    && pool.generation(s.slot) >= s.min_gen
            };
            let Some(i) = rs.slots.iter().position(free) else {
                return Ok(None);
            };
            let SlotUse { slot, up: held, .. } = rs.slots[i];
            let t = match held.filter(|t| self.ups.get(*t).is_some()) {
                Some(t) => t,
                None => {
                    let fd = weft_io::sys::unix_stream_connect(pool.path(slot)).map_err(|e| {
                        weft_core::debug!("cgi: connecting to pool slot {slot}: {e}");
                    })?;
                    self.stats.connects += 1;
                    let t = self.insert_up(fd, route, Some(slot));
                    self.routes[route].slots[i].up = Some(t);
                    t
                }
            };
            self.ups.get_mut(t).ok_or(())?.client = Some(client);
            return Ok(Some(t));
        }
        let Handler::FastCgi(addr) = &self.cfg.routes[route].handler else {
            return Err(());
        };
        if let Some(t) = rs.idle.pop() {
            if let Some(u) = self.ups.get_mut(t) {
                u.client = Some(client);
                return Ok(Some(t));
            }
        }
        if rs.open >= 1024 {
            return Ok(None);
        }
        let fd = match addr {
            Address::Unix(p) => weft_io::sys::unix_stream_connect(p),
            Address::Tcp(a) => weft_io::sys::tcp_socket(a).and_then(|fd| {
                weft_io::sys::connect(&fd, a)?;
                let _ = weft_io::sys::set_nodelay(&fd, true);
                Ok(fd)
            }),
        }
        .map_err(|e| weft_core::debug!("cgi: connecting to {addr:?}: {e}"))?;
        self.stats.connects += 1;
        self.routes[route].open += 1;
        let t = self.insert_up(fd, route, None);
        if let Some(u) = self.ups.get_mut(t) {
            u.client = Some(client);
        }
        Ok(Some(t))
    }

    fn insert_up(&mut self, fd: Fd, route: usize, slot: Option<usize>) -> Token {
        let t = self.ups.insert_with(|_| Up {
            fd,
            route,
            slot,
            client: None,
            want: Interest::BOTH,
            have: None,
            broken: false,
            may_read: true,
        });
        self.dirty.push(t);
        t
    }

    /// The request on `up` is over: keep the connection for the next one,
    /// or close it (and, for a pool slot, have its process replaced).
    fn release(&mut self, up: Token, replace: bool) {
        let Some(u) = self.ups.get_mut(up) else {
            return;
        };
        u.client = None;
        let route = u.route;
        let keep = !u.broken && !replace;
        if !keep {
            let u = self.ups.remove(up).expect("present");
            if let (Some(slot), true) = (u.slot, replace) {
                if let Some(p) = &self.pools[route] {
                    let next = p.replace(slot);
                    self.stats.restarts += 1;
                    for s in self.routes[route].slots.iter_mut().filter(|s| s.slot == slot) {
                        s.min_gen = next;
                        s.up = None;
                    }
                }
            }
            if u.slot.is_none() {
                self.routes[route].open -= 1;
            }
            self.closing.push((u.fd, u.have.is_some()));
        } else if u.slot.is_none() {
            u.want = Interest::READ;
            self.dirty.push(up);
            if self.routes[route].idle.len() < self.cfg.keep_idle {
                self.routes[route].idle.push(up);
            } else {
                let u = self.ups.remove(up).expect("present");
                self.routes[route].open -= 1;
                self.closing.push((u.fd, u.have.is_some()));
            }
        } else if u.want != Interest::READ {
            u.want = Interest::READ;
            self.dirty.push(up);
        }
        if let Some(c) = self.routes[route].waiting.pop_front() {
            self.wake.push(c);
        }
    }

    /// A read (`read`) or write of application connection `up` met EAGAIN
    /// (see `spent`).
    fn spent(&mut self, up: Token, read: bool, write: bool) {
        if let (true, Some(u)) = (read, self.ups.get_mut(up)) {
            u.may_read = false;
        }
        self.spent.push((up, read, write));
    }

    /// May a read of application connection `up` find something (see
    /// `Up::may_read`)?
    fn may_read(&self, up: Token) -> bool {
        self.ups.get(up).is_some_and(|u| u.may_read)
    }

    /// Ask for `interest` on `up` (applied after the batch).
    fn want(&mut self, up: Token, interest: Interest) {
        if let Some(u) = self.ups.get_mut(up) {
            if u.want != interest {
                u.want = interest;
                self.dirty.push(up);
            }
        }
    }
}

/// Start answering the request whose head is the first `head_len` input
/// bytes, if its path is under a CGI prefix. Returns false when it is not
/// (the caller serves it as usual). The head is consumed; the body is
/// passed on as it arrives ([`drive`]).
pub(crate) fn begin(c: &mut Conn, s: &mut Shared<'_>, head_len: usize, now: Instant) -> bool {
    let Some(g) = s.cgi.as_mut() else {
        return false;
    };
    let data = &c.input.pending()[..head_len];
    let Some(route) = g.cfg.route(s.head.target(data)) else {
        return false;
    };
    g.stats.requests += 1;
    // A local redirect's request is the one put in front of the input
    // (the connection has answered no other request since).
    let depth = match g.redirects.remove(&c.token) {
        Some((at, d)) if at == c.requests => d,
        _ => 0,
    };
    let body = match s.head.framing() {
        BodyFraming::Length(n) => n,
        BodyFraming::None | BodyFraming::UntilClose => 0,
        BodyFraming::Chunked => {
            let why = "a chunked request body is not passed to CGI programs: send Content-Length";
            refuse(c, s, head_len, 411, why);
            return true;
        }
    };
    if body > g.cfg.max_body {
        g.stats.status_413 += 1;
        refuse(c, s, head_len, 413, "the request body is larger than --cgi-max-body");
        return true;
    }
    let head_only = s.head.method() == Method::Head;
    let max = s.cfg.max_requests;
    let persist = if !s.head.keep_alive() || s.draining || (max > 0 && c.requests + 1 >= max) {
        Persist::Close
    } else if s.head.version() == Version::Http10 {
        Persist::KeepAlive10
    } else {
        Persist::Default
    };
    let root = s
        .cfg
        .root
        .as_ref()
        .map(|p| p.as_os_str().as_encoded_bytes())
        .unwrap_or(b"");
    let mut t = txn::start(g, c, &s.head, head_len, route, body, (persist, head_only, now), root);
    t.depth = depth;
    t.started = c.head_started.unwrap_or(now);
    if s.log.is_some() {
        t.log_head = Some(c.input.pending()[..head_len].to_vec());
    }
    c.input.consume(head_len);
    g.txns.insert(c.token, t);
    true
}

/// Answer `status` without reading the body, and close (lingering).
fn refuse(c: &mut Conn, s: &mut Shared<'_>, head_len: usize, status: u16, why: &str) {
    let bytes = respond::simple(c.out.own_mut(), status, s.date.get(), b"", why, false, Persist::Close);
    s.stats.status.count(status);
    if let Some(log) = &mut s.log {
        let data = &c.input.pending()[..head_len];
        let took = c.head_started.map(|t| t.elapsed());
        log.log(&s.head, data, &log_entry(c, status, bytes, false, took));
    }
    c.close_after = true;
    c.linger_on_close = true;
    c.input.clear();
}

/// An access-log entry for a CGI reply.
fn log_entry(
    c: &Conn,
    status: u16,
    bytes: u64,
    head_only: bool,
    took: Option<Duration>,
) -> crate::accesslog::Entry<'static> {
    crate::accesslog::Entry {
        peer: c.peer,
        status,
        bytes,
        wall: std::time::SystemTime::now(),
        head_only,
        took,
        cache: None,
    }
}

/// Local redirects followed for one request at most (Apache's and nginx's
/// limit of internal redirects is 10 too); one more is a 500.
pub(crate) const MAX_LOCAL_REDIRECTS: u8 = 10;

/// A reply is over: count its status, log it, and follow a local redirect.
fn finished(c: &mut Conn, s: &mut Shared<'_>, mut t: Txn) {
    let Some(g) = s.cgi.as_mut() else {
        return;
    };
    t.finish(g, c);
    if let Some(loc) = t.redirect.take() {
        if t.depth >= MAX_LOCAL_REDIRECTS {
            let why = "the CGI program's local redirects went too deep";
            t.status = 500;
            t.sent = respond::simple(c.out.own_mut(), 500, s.date.get(), b"", why, t.head_only, t.persist);
            if t.persist == Persist::Close {
                c.close_after = true;
            }
        } else {
            redirect(c, s, &t, &loc);
            return;
        }
    }
    s.stats.status.count(t.status);
    if let (Some(log), Some(head)) = (&mut s.log, t.log_head.as_ref()) {
        let Some(g) = s.cgi.as_mut() else {
            return;
        };
        // A head that parsed once parses again; if not, the request line is logged.
        let _ = g.log_parser.parse(head, &s.cfg.limits);
        let took = Some(Instant::now().saturating_duration_since(t.started));
        log.log(&g.log_parser, head, &log_entry(c, t.status, t.sent, t.head_only, took));
    }
}

/// Put `GET loc` (`HEAD loc`) in front of the connection's input: it is answered next,
/// as any request (a file, or a CGI prefix again, one level deeper).
fn redirect(c: &mut Conn, s: &mut Shared<'_>, t: &Txn, loc: &[u8]) {
    let mut req = Vec::with_capacity(loc.len() + t.host.len() + 64);
    // GET, as RFC 3875 §6.2.2 has it (a POST's body went to the program);
    // a HEAD stays a HEAD.
    req.extend_from_slice(if t.head_only { b"HEAD " } else { b"GET " });
    req.extend_from_slice(loc);
    req.extend_from_slice(if t.http10 {
        b" HTTP/1.0\r\nHost: "
    } else {
        b" HTTP/1.1\r\nHost: "
    });
    req.extend_from_slice(&t.host);
    req.extend_from_slice(match t.persist {
        Persist::Close => b"\r\nConnection: close\r\n\r\n",
        Persist::KeepAlive10 => b"\r\nConnection: keep-alive\r\n\r\n",
        Persist::Default => b"\r\n\r\n",
    });
    let rest = c.input.pending().to_vec();
    let need = req.len() + rest.len();
    c.input.clear();
    if c.input.reserve(need, need.max(c.input.capacity()), &mut s.pool) < need {
        c.close_after = true;
        return;
    }
    let room = c.input.spare_mut();
    room[..req.len()].copy_from_slice(&req);
    room[req.len()..need].copy_from_slice(&rest);
    c.input.commit(need);
    c.head_started = Some(t.started);
    if let Some(g) = s.cgi.as_mut() {
        g.redirects.insert(c.token, (c.requests, t.depth + 1));
    }
}

/// Is a CGI request in flight on `c`?
#[inline]
pub(crate) fn busy(s: &Shared<'_>, c: &Conn) -> bool {
    s.cgi.as_ref().is_some_and(|g| g.txns.contains_key(&c.token))
}

/// What [`drive`] did.
pub(crate) enum Drove {
    /// Output was queued, or the request ended: flush and call again.
    Progress,
    /// Nothing to do until an event.
    Wait,
}

/// Move the request in flight on `c` forward.
pub(crate) fn drive(c: &mut Conn, s: &mut Shared<'_>, now: Instant) -> Drove {
    let Some(g) = s.cgi.as_mut() else {
        return Drove::Wait;
    };
    let Some(mut t) = g.txns.remove(&c.token) else {
        return Drove::Wait;
    };
    c.out.lend_own(&mut s.own_pool);
    let date = s.date.get();
    let r = t.drive(g, c, date, now);
    if c.input.is_empty() {
        // The body is in: the header timeout no longer applies.
        c.head_started = None;
    }
    if matches!(r, txn::Done::Queued | txn::Done::Yes) {
        c.last_activity = now;
    }
    match r {
        txn::Done::No => {
            g.txns.insert(c.token, t);
            Drove::Wait
        }
        txn::Done::Queued => {
            g.txns.insert(c.token, t);
            Drove::Progress
        }
        txn::Done::Yes => {
            finished(c, s, t);
            Drove::Progress
        }
    }
}

/// An event on an application connection: the client to drive, if any.
pub(crate) fn on_event(s: &mut Shared<'_>, token: Token, ev: &Event) -> Option<Token> {
    let g = s.cgi.as_mut()?;
    let t = slab_token(token);
    let u = g.ups.get_mut(t)?;
    if ev.readable || ev.error || ev.read_closed {
        u.may_read = true;
    }
    if let Some(c) = u.client {
        // A writable event the exchange has no use for (its request is
        // sent) does not drive the client: a fixed-interest level-triggered
        // backend (epoll-once) reports the socket writable at every wait,
        // and each drive tried a read that found nothing (40 reads per
        // request in `application_connections_are_kept` under epoll-once).
        let unwanted = ev.writable && !u.want.write && !ev.readable && !ev.error && !ev.read_closed;
        return (!unwanted).then_some(c);
    }
    if ev.readable && !ev.error && !ev.read_closed && weft_io::sys::empty_now(&u.fd) {
        // A stale wake-up: an event for bytes the exchange has since read
        // (uring posts a multishot poll's completion, epoll-once an armed
        // event) may arrive after the connection went idle. Taken for a
        // close, it was: under `--event uring` weft reconnected for 4 % of
        // requests (3,410 connects in 79,750 requests at 64 KiB, against 50
        // with this peek; `tests/cgi.rs` application_connections_are_kept
        // saw 18-46 connections for 4 clients under uring and epoll-once),
        // and the application had to accept a new connection each time.
        g.spent(t, true, false);
        return None;
    }
    if ev.readable || ev.error || ev.read_closed {
        // An idle connection has nothing to say: the application closed it.
        u.broken = true;
        let route = u.route;
        g.routes[route].idle.retain(|x| *x != t);
        g.release(t, false);
    }
    None
}

/// The client connection `token` closed: drop its request in flight.
pub(crate) fn client_closed(s: &mut Shared<'_>, token: Token) {
    let Some(g) = s.cgi.as_mut() else {
        return;
    };
    if let Some(t) = g.txns.remove(&token) {
        t.abandon(g);
    }
    g.local.remove(&token);
    g.redirects.remove(&token);
    for r in &mut g.routes {
        r.waiting.retain(|c| *c != token);
    }
}

/// After each batch: apply registrations, close what must close, time out
/// requests, and return the clients to drive.
pub(crate) fn after_batch<P: Poller>(s: &mut Shared<'_>, cx: &mut Ctx<P>) -> Vec<Token> {
    let Some(g) = s.cgi.as_mut() else {
        return Vec::new();
    };
    for (fd, registered) in g.closing.drain(..) {
        // When weft starts processes, the loop takes a registered descriptor
        // out of the interest set before the close (`Ctx::set_children_share`,
        // set in `Worker::register`): a CGI/1.1 child holds a reference to
        // every descriptor of weft's from its vfork until its exec has closed
        // them, and a finished request's pipe kept reporting its hang-up to a
        // connection that was gone, at every wait until the child got the
        // CPU: 31-40 epoll_wait calls per request with four clients (89 on a
        // loaded machine) where 2 do (2026-12-02).
        cx.close_later(fd, registered);
    }
    for (t, read, write) in g.spent.drain(..) {
        // A connection closed in this batch is gone from the slab (its
        // descriptor is closed through the loop, above).
        if let Some(u) = g.ups.get(t) {
            let before = weft_io::Readiness {
                readable: read,
                writable: write,
            };
            cx.settled(u.fd.raw(), before, weft_io::Readiness::default());
        }
    }
    while let Some(t) = g.dirty.pop() {
        let Some(u) = g.ups.get_mut(t) else {
            continue;
        };
        let want = if P::CAPS.fixed_interest { Interest::BOTH } else { u.want };
        if want == Interest::NONE && !P::CAPS.edge_triggered {
            // Nothing wanted from it for now (its bytes wait in the client's
            // output chain, or the client is behind). A level-triggered
            // backend reports a hang-up whatever the interest, so a program
            // that exited with its output still in the pipe would wake the
            // loop at every wait until a slow client took it. Out of the set
            // until it is wanted again (then added back).
            if u.have.take().is_some() {
                cx.deregister(u.fd.raw());
            }
            continue;
        }
        let r = match u.have {
            None => cx
                .register(u.fd.raw(), up_token(t), want)
                .map_err(|e| std::io::Error::other(e.to_string())),
            Some(h) if h != want => cx.reregister(u.fd.raw(), up_token(t), want),
            Some(_) => Ok(()),
        };
        match r {
            Ok(()) => u.have = Some(want),
            Err(e) => {
                weft_core::warn!("cgi: cannot register an application connection: {e}");
                u.broken = true;
                if let Some(c) = u.client {
                    g.wake.push(c);
                }
            }
        }
    }
    if cx.now >= g.next_tick {
        g.next_tick = cx.now + Duration::from_millis(50);
        g.zombies.retain_mut(|ch| matches!(ch.try_wait(), Ok(None)));
        // A replaced process may be up again: let a waiting request look.
        for r in &mut g.routes {
            if let Some(c) = r.waiting.pop_front() {
                g.wake.push(c);
            }
        }
        for (client, t) in g.txns.iter_mut() {
            if t.timed_out(cx.now) {
                g.wake.push(*client);
            }
        }
    }
    std::mem::take(&mut g.wake)
}

/// The blocking architectures (MT, MP), which have no event loop: do what
/// [`after_batch`] does without a poller (close what must close, reap,
/// time out the request in flight). None: no request in flight; else the
/// application connection the thread must also wait for (and whether for
/// writing), if there is one yet.
pub(crate) fn blocking_step(
    s: &mut Shared<'_>,
    client: Token,
    now: Instant,
) -> Option<Option<(std::os::fd::RawFd, bool)>> {
    let g = s.cgi.as_mut()?;
    // Nothing is registered anywhere: closing is dropping.
    g.closing.clear();
    g.dirty.clear();
    g.wake.clear();
    g.zombies.retain_mut(|ch| matches!(ch.try_wait(), Ok(None)));
    let t = g.txns.get_mut(&client)?;
    t.timed_out(now);
    let up = t.up.and_then(|u| g.ups.get_mut(u)).filter(|u| u.want != Interest::NONE);
    Some(up.map(|u| {
        // No events here: the thread waits on the descriptor itself before
        // it drives again, so that drive may read.
        u.may_read = true;
        (u.fd.raw(), u.want.write && !u.want.read)
    }))
}

/// How long the loop may sleep at most.
pub(crate) fn max_wait(s: &Shared<'_>) -> Option<Duration> {
    let g = s.cgi.as_ref()?;
    if !g.wake.is_empty() || !g.dirty.is_empty() || !g.closing.is_empty() {
        return Some(Duration::ZERO);
    }
    (!g.txns.is_empty() || !g.zombies.is_empty()).then_some(Duration::from_millis(50))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_whole_segments_longest_first() {
        let r = |p: &str| Route {
            prefix: p.into(),
            handler: Handler::FastCgi(Address::Unix("/x".into())),
        };
        let c = CgiConfig::new(vec![r("/app"), r("/app/admin/"), r("/")]);
        let at = |t: &str| c.route(t.as_bytes()).map(|i| c.routes[i].prefix.as_str());
        assert_eq!(at("/app"), Some("/app"));
        assert_eq!(at("/app/x?y=1"), Some("/app"));
        assert_eq!(at("/app?y=1"), Some("/app"));
        assert_eq!(at("/app/admin/z"), Some("/app/admin/"));
        assert_eq!(at("/apple"), Some("/"));
        let c = CgiConfig::new(vec![r("/app")]);
        assert_eq!(c.route(b"/apple"), None);
        assert_eq!(c.route(b"/"), None);
    }

    #[test]
    fn upstream_tokens_do_not_meet_client_or_handoff_tokens() {
        let t = Token::new(5, 9);
        assert!(is_upstream(up_token(t)));
        assert_eq!(slab_token(up_token(t)), t);
        assert!(!is_upstream(t));
        assert!(!is_upstream(Token::new(0xFFF0_0000, 0)));
    }

    #[test]
    fn send_modes() {
        let unix = Handler::FastCgi(Address::Unix("/s".into()));
        let tcp = Handler::FastCgi(Address::Tcp("127.0.0.1:9000".parse().unwrap()));
        assert!(unix.splices(Send::Auto) && tcp.splices(Send::Auto));
        assert!(Handler::Fork("/p".into()).splices(Send::Auto));
        assert!(unix.splices(Send::Splice) && !tcp.splices(Send::Copy));
    }
}
