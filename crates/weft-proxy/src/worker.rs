//! One worker: a listener, an event loop, client and upstream connections.
//!
//! The structure follows `weft serve`'s worker (per-worker loop, slab with
//! generation tokens, one timer per connection, deferred close, graceful
//! drain). Per client connection, [`Worker::drive`] runs steps until one has
//! to wait:
//!
//! 1. a CONNECT tunnel, if any, is pumped both ways;
//! 2. a transaction in flight advances: resolve → connect (or take a pooled
//!    connection) → send the request and read the response head → relay the
//!    body (see `relay.rs`: copy, splice, or splice + tee into the cache);
//! 3. queued output is flushed;
//! 4. buffered requests are answered in order — from the cache at once, or by
//!    starting a transaction (pipelined requests behind it wait);
//! 5. more input is read.
//!
//! Events on an upstream socket drive its owner client. When a transaction
//! ends, both connections go back to normal processing — the client to its
//! next request, the upstream to the pool — with no extra step (the paper's
//! AutoRelease). Level-triggered backends get each socket's interest updated
//! to what its last step waits for; edge-triggered ones are registered once
//! for both directions.

use crate::acl::{self, Cidr};
use crate::config::{ProxyConfig, SpliceMode};
use crate::conn::{Client, Entry, Phase, ReqBody, StorePlan, Txn, Upstream};
use crate::disk::{DiskStore, Loaded};
use crate::headers::{self, Forward, HeadFor};
use crate::outq::OutQueue;
use crate::relay::{Ends, Framing, Pump, Relay, UpBuf, Want};
use crate::resolve::{self, Answer, DnsCache, Lookup, Resolver};
use crate::stats::{ProxyStats, Slot};
use crate::store::{Object, Store};
use crate::tunnel::{Side, Tunnel, TunnelState};
use bytes::Bytes;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weft_http::caching::{self, Heuristic, StoreQuery, Usable};
use weft_http::date::unix_secs;
use weft_http::respond::{self, Persist};
use weft_http::{
    BodyFraming, CacheControl, ChunkedDecoder, Method, Precondition, RangeOutcome, RequestHead, ResponseHead, Version,
};
use weft_io::sys::{self, Fd};
use weft_io::{Acceptor, Ctx, Event, Handler, Interest, PipePool, Poller, RegisterError, Shutdown, Slab, Token};

const LISTENER: Token = Token::new(u32::MAX, 0);
const WAKER: Token = Token::new(u32::MAX - 1, 0);
const RESOLVER: Token = Token::new(u32::MAX - 2, 0);
/// The disk store's mailbox: loads finished.
const DISK: Token = Token::new(u32::MAX - 4, 0);
/// The worker's one timer for read batches (`cut_stalled_batches`).
const BATCH_TIMER: Token = Token::new(u32::MAX - 3, 0);

/// How long a closing connection may linger reading the client's leftovers.
const LINGER: Duration = Duration::from_secs(2);
/// Bytes a lingering close reads before giving up.
const LINGER_MAX: usize = 256 * 1024;
/// Stop answering pipelined hits beyond this much queued output.
const COALESCE_MAX: usize = 256 * 1024;
/// Steps per drive before yielding to other connections.
const MAX_STEPS: usize = 64;
/// How long an upstream may stay quiet while a read batch (`--rcv-lowat`)
/// is pending before the batch is cut and the relay reads what has come.
/// Batches are asked only of an upstream delivering in bulk, which fills them
/// in well under a millisecond on a fast path; this only bounds how long a
/// sender that stalls mid-body has its bytes held (one to two seconds: one
/// worker timer checks every pending batch). Not a timer per body: a near
/// timer behind every body shortens the loop's sleeps, and at 10 ms it cost
/// 13 µs per 256 KiB miss here (100 ms: 6 µs; an ad-hoc A/B of builds with
/// different waits, docs/results.md).
const BATCH_WAIT: Duration = Duration::from_secs(1);

/// What a step leaves the connection doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    /// Run another step.
    Again,
    /// Wait for an event (wants recorded).
    Wait,
    /// Drive again after this batch (fairness).
    Yield,
    /// The client connection is gone.
    Closed,
}

fn client_of(slab: &mut Slab<Entry>, t: Token) -> Option<&mut Client> {
    match slab.get_mut(t)? {
        Entry::Client(c) => Some(&mut **c),
        Entry::Upstream(_) => None,
    }
}

fn upstream_of(slab: &mut Slab<Entry>, t: Token) -> Option<&mut Upstream> {
    match slab.get_mut(t)? {
        Entry::Upstream(u) => Some(&mut **u),
        Entry::Client(_) => None,
    }
}

fn pair(slab: &mut Slab<Entry>, ct: Token, ut: Token) -> Option<(&mut Client, &mut Upstream)> {
    match slab.get2_mut(ct, ut)? {
        (Entry::Client(c), Entry::Upstream(u)) => Some((&mut **c, &mut **u)),
        _ => None,
    }
}

#[inline]
fn interest(read: bool, write: bool) -> Interest {
    Interest { read, write }
}

/// State a worker's connections share (split from the slab so both can be
/// borrowed at once).
struct Shared<'a> {
    cfg: &'a ProxyConfig,
    index: usize,
    allow: Vec<Cidr>,
    /// `1.1 name` for Via, and `name` for loop detection.
    via: Vec<u8>,
    via_name: Vec<u8>,
    store: Option<&'a Mutex<Store>>,
    disk: Option<&'a DiskStore>,
    /// Number of the next park for a disk load.
    next_disk_wait: u64,
    pipes: PipePool,
    pool: HashMap<SocketAddr, Vec<Token>>,
    dns: DnsCache,
    resolver: &'a Resolver,
    stats: ProxyStats,
    date: weft_http::DateCache,
    resp: ResponseHead,
    scratch: Vec<u8>,
    vary_scratch: Vec<u8>,
    /// Recycled relay buffers (copy path).
    relay_bufs: Vec<bytes::BytesMut>,
    /// Recycled tunnel copy buffers.
    tunnel_bufs: crate::tunnel::TunnelBufs,
    heuristic: Heuristic,
    draining: bool,
}

/// One worker's handler.
pub struct Worker<'a> {
    sh: Shared<'a>,
    slot: &'a Slot,
    slab: Slab<Entry>,
    listener: Option<Fd>,
    waker: RawFd,
    shutdown: Shutdown,
    acceptor: Acceptor,
    grace_deadline: Option<Instant>,
    ready: Vec<Token>,
    /// Clients whose relay may be waiting for a read batch.
    batching: Vec<Token>,
    /// BATCH_TIMER is armed.
    batch_timer: bool,
    answers: Vec<Answer>,
    loaded: Vec<Loaded>,
    refused_logged: u64,
}

/// What the worker is given at start.
pub struct WorkerSetup<'a> {
    pub cfg: &'a ProxyConfig,
    pub index: usize,
    pub listener: Fd,
    pub shutdown: Shutdown,
    pub store: Option<&'a Mutex<Store>>,
    pub disk: Option<&'a DiskStore>,
    pub pipes: PipePool,
    pub resolver: &'a Resolver,
    pub via_name: String,
    pub slot: &'a Slot,
}

impl<'a> Worker<'a> {
    /// A worker over its listener.
    pub fn new(s: WorkerSetup<'a>) -> Worker<'a> {
        let waker = s.shutdown.waker(s.index);
        Worker {
            sh: Shared {
                cfg: s.cfg,
                index: s.index,
                allow: s.cfg.effective_allow(),
                via: format!("1.1 {} (weft)", s.via_name).into_bytes(),
                via_name: s.via_name.into_bytes(),
                store: s.store,
                disk: s.disk,
                next_disk_wait: 0,
                pipes: s.pipes,
                pool: HashMap::new(),
                dns: DnsCache::new(s.cfg.dns_ttl),
                resolver: s.resolver,
                stats: ProxyStats::default(),
                date: weft_http::DateCache::new(),
                resp: ResponseHead::new(),
                scratch: Vec::with_capacity(1024),
                vary_scratch: Vec::new(),
                relay_bufs: Vec::new(),
                tunnel_bufs: Default::default(),
                heuristic: Heuristic::default(),
                draining: false,
            },
            slot: s.slot,
            slab: Slab::new(),
            listener: Some(s.listener),
            waker,
            shutdown: s.shutdown,
            acceptor: Acceptor::new(s.cfg.accept_limit),
            grace_deadline: None,
            ready: Vec::new(),
            batching: Vec::new(),
            batch_timer: false,
            answers: Vec::new(),
            loaded: Vec::new(),
            refused_logged: 0,
        }
    }

    /// Register the listener, the shutdown waker and the resolver's and disk
    /// store's mailboxes.
    pub fn register<P: Poller>(&mut self, cx: &mut Ctx<P>) -> io::Result<()> {
        let reg = |e: RegisterError| io::Error::other(e.to_string());
        if let Some(l) = &self.listener {
            cx.register(l.raw(), LISTENER, Interest::READ).map_err(reg)?;
        }
        cx.register(self.waker, WAKER, Interest::READ).map_err(reg)?;
        cx.register(self.sh.resolver.waker(self.sh.index), RESOLVER, Interest::READ)
            .map_err(reg)?;
        if let Some(d) = self.sh.disk {
            cx.register(d.waker(self.sh.index), DISK, Interest::READ).map_err(reg)?;
        }
        self.sh.date.update(cx.wall);
        Ok(())
    }

    /// Counters, with this thread's system calls.
    pub fn stats(&self) -> ProxyStats {
        let mut s = self.sh.stats;
        s.syscalls = sys::SysCounts::current();
        s
    }

    // ------------------------------------------------------------------
    // Accepting

    fn accept<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        let Some(lfd) = self.listener.as_ref().map(|l| l.raw()) else {
            return;
        };
        self.acceptor.begin();
        while let Some((fd, peer)) = self.acceptor.next(cx, lfd, LISTENER) {
            self.add_client(cx, fd, peer);
        }
    }

    fn add_client<P: Poller>(&mut self, cx: &mut Ctx<P>, fd: Fd, peer: Option<SocketAddr>) {
        let token = self.slab.next_token();
        let initial = if P::CAPS.edge_triggered {
            Interest::BOTH
        } else {
            Interest::READ
        };
        if let Err(e) = cx.register(fd.raw(), token, initial) {
            self.sh.stats.refused_fd_limit += 1;
            if self.refused_logged.is_multiple_of(1000) {
                weft_core::warn!("closing a client connection: {e}");
            }
            self.refused_logged += 1;
            let _ = sys::set_linger_zero(fd.raw());
            return;
        }
        self.sh.stats.accepted += 1;
        let allowed = peer.map(|p| acl::allowed(&self.sh.allow, p.ip())).unwrap_or(false);
        let now = cx.now;
        let t = self
            .slab
            .insert_with(|_| Entry::Client(Box::new(Client::new(fd, peer, allowed, initial, now))));
        debug_assert_eq!(t, token);
        self.drive(cx, token);
    }

    // ------------------------------------------------------------------
    // Closing

    /// Close a client and whatever it owns (transaction upstream, tunnel).
    fn close_client<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) {
        let Some(Entry::Client(mut c)) = self.slab.remove(ct) else {
            return;
        };
        if let Some(fd) = c.fd.take() {
            cx.close_later(fd, true);
        }
        if let Some(mut txn) = c.txn.take() {
            if let Some(relay) = txn.relay.take() {
                relay.abandon(&mut self.sh.stats, false);
            }
            if let Some(ut) = txn.up.take() {
                self.close_upstream(cx, ut);
            }
        }
        if let Some((tunnel, ut)) = c.tunnel.take() {
            tunnel.close(&mut self.sh.pipes, &mut self.sh.tunnel_bufs);
            self.close_upstream(cx, ut);
        }
    }

    fn close_upstream<P: Poller>(&mut self, cx: &mut Ctx<P>, ut: Token) {
        if let Some(Entry::Upstream(u)) = self.slab.remove(ut) {
            if u.owner.is_none() {
                if let Some(list) = self.sh.pool.get_mut(&u.addr) {
                    list.retain(|&t| t != ut);
                }
            }
            cx.close_later(u.fd, true);
        }
    }

    /// Hand an upstream connection back to the pool (or close it).
    fn release_upstream<P: Poller>(&mut self, cx: &mut Ctx<P>, ut: Token, reusable: bool) {
        let max = self.sh.cfg.pool_size;
        let draining = self.sh.draining;
        let Some(u) = upstream_of(&mut self.slab, ut) else {
            return;
        };
        let list = self.sh.pool.entry(u.addr).or_default();
        if !reusable || draining || list.len() >= max || u.buf.start != u.buf.end || !u.out.is_empty() {
            self.close_upstream(cx, ut);
            return;
        }
        u.owner = None;
        u.reused = true;
        u.want = Interest::READ;
        u.last_activity = cx.now;
        u.deadline = Some(cx.now + self.sh.cfg.pool_idle_timeout);
        list.push(ut);
        if !P::CAPS.edge_triggered && u.interest != Interest::READ {
            if cx.reregister(u.fd.raw(), ut, Interest::READ).is_err() {
                self.close_upstream(cx, ut);
                return;
            }
            u.interest = Interest::READ;
        }
        arm(cx, ut, u.deadline, &mut u.timer_at);
    }

    // ------------------------------------------------------------------
    // Driving a client

    fn drive<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) {
        let mut flow = Flow::Again;
        for _ in 0..MAX_STEPS {
            flow = self.step(cx, ct);
            if flow != Flow::Again {
                break;
            }
        }
        match flow {
            Flow::Closed => return,
            Flow::Yield | Flow::Again => {
                if !self.ready.contains(&ct) {
                    self.ready.push(ct);
                }
            }
            Flow::Wait => {}
        }
        self.settle(cx, ct);
    }

    /// BATCH_TIMER: cut every read batch whose upstream has been quiet for
    /// BATCH_WAIT (a sender that stalled mid-body: the bytes that came are
    /// relayed, and the rest of the response streams as it arrives), forget
    /// sessions no longer batching, and re-arm while any remain. Not a
    /// timeout: the upstream timeout still applies.
    fn cut_stalled_batches<P: Poller>(&mut self, cx: &mut Ctx<P>) -> Option<Instant> {
        let mut list = std::mem::take(&mut self.batching);
        let mut next: Option<Instant> = None;
        let mut cut = Vec::new();
        list.retain(|&ct| {
            let ut = client_of(&mut self.slab, ct)
                .and_then(|c| c.txn.as_ref())
                .and_then(|t| t.up);
            let Some((c, u)) = ut.and_then(|ut| pair(&mut self.slab, ct, ut)) else {
                return false;
            };
            let Some(relay) = c.txn.as_mut().and_then(|t| t.relay.as_mut()).filter(|r| r.batching()) else {
                return false;
            };
            let due = u.last_activity + BATCH_WAIT;
            if cx.now >= due && u.want.read {
                relay.stop_batching(u.fd.raw(), &mut self.sh.stats);
                u.may_read = true;
                cut.push(ct);
                return false;
            }
            // Not quiet that long, or waiting on its client: look again later.
            let at = if due > cx.now { due } else { cx.now + BATCH_WAIT };
            next = Some(next.map_or(at, |n| n.min(at)));
            true
        });
        for ct in cut {
            self.drive(cx, ct);
        }
        // Sessions that started batching while the cut ones were driven.
        list.append(&mut self.batching);
        self.batching = list;
        if self.batching.is_empty() {
            self.batch_timer = false;
            return None;
        }
        Some(next.unwrap_or(cx.now + BATCH_WAIT))
    }

    /// Update interests and timers of the client and its upstream.
    fn settle<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) {
        let cfg = self.sh.cfg;
        let fixed = P::CAPS.edge_triggered;
        let Some(c) = client_of(&mut self.slab, ct) else {
            return;
        };
        if let Some(fd) = &c.fd {
            if !fixed && c.interest != c.want {
                if cx.reregister(fd.raw(), ct, c.want).is_err() {
                    self.close_client(cx, ct);
                    return;
                }
                c.interest = c.want;
            }
        }
        let ut = c.txn.as_ref().and_then(|t| t.up).or(c.tunnel.as_ref().map(|t| t.1));
        let in_txn = c.txn.is_some();
        c.deadline = if c.fd.is_none() {
            None
        } else if c.lingering {
            c.deadline
        } else if c.tunnel.is_some() {
            Some(c.last_activity + cfg.idle_timeout)
        } else if c.want.write {
            Some(c.last_activity + cfg.send_timeout)
        } else if in_txn {
            None
        } else if let Some(t) = c.head_started {
            Some(t + cfg.header_timeout)
        } else {
            Some(c.last_activity + cfg.idle_timeout)
        };
        arm(cx, ct, c.deadline, &mut c.timer_at);
        let tunnel = c.tunnel.is_some();
        let Some(ut) = ut else { return };
        let Some(u) = upstream_of(&mut self.slab, ut) else {
            return;
        };
        if !fixed && u.interest != u.want {
            if cx.reregister(u.fd.raw(), ut, u.want).is_err() {
                self.close_client(cx, ct);
                return;
            }
            u.interest = u.want;
        }
        u.deadline = if tunnel {
            None
        } else if u.connecting {
            Some(u.last_activity + cfg.connect_timeout)
        } else {
            Some(u.last_activity + cfg.upstream_timeout)
        };
        arm(cx, ut, u.deadline, &mut u.timer_at);
    }

    fn step<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) -> Flow {
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        c.want = Interest::NONE;
        let ut = c.txn.as_ref().and_then(|t| t.up).or(c.tunnel.as_ref().map(|t| t.1));
        if let Some(u) = ut.and_then(|ut| upstream_of(&mut self.slab, ut)) {
            u.want = Interest::NONE;
        }
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        if c.lingering {
            return match linger_read(c) {
                Flow::Closed => {
                    self.close_client(cx, ct);
                    Flow::Closed
                }
                f => f,
            };
        }
        if c.tunnel.is_some() {
            return self.step_tunnel(cx, ct);
        }
        if c.txn.is_some() {
            return self.step_txn(cx, ct);
        }
        let Some(fd) = c.fd.as_ref().map(|f| f.raw()) else {
            self.close_client(cx, ct);
            return Flow::Closed;
        };
        if !c.out.is_empty() {
            if !c.may_write {
                c.want = Interest::WRITE;
                return Flow::Wait;
            }
            let mut wb = false;
            match c.out.flush(fd, &[], &mut wb) {
                Ok((n, _)) => {
                    if n > 0 {
                        c.last_activity = cx.now;
                    }
                    if wb {
                        c.may_write = false;
                        c.want = Interest::WRITE;
                        return Flow::Wait;
                    }
                }
                Err(_) => {
                    self.close_client(cx, ct);
                    return Flow::Closed;
                }
            }
        }
        if c.close_after {
            if c.linger_on_close {
                if sys::shutdown_write(fd).is_err() {
                    self.close_client(cx, ct);
                    return Flow::Closed;
                }
                c.lingering = true;
                c.deadline = Some(cx.now + LINGER);
                c.timer_at = None;
                return Flow::Again;
            }
            self.close_client(cx, ct);
            return Flow::Closed;
        }
        if c.disk_wait.is_some() {
            // The request at the front waits for the disk store (`on_loaded`).
            return Flow::Wait;
        }
        if c.start < c.end {
            if let Some(f) = self.answer_next(cx, ct) {
                return f;
            }
        }
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        if c.eof {
            self.close_client(cx, ct);
            return Flow::Closed;
        }
        if !c.may_read {
            c.want = Interest::READ;
            return Flow::Wait;
        }
        let max = self.sh.cfg.limits.max_head + 1024;
        if !c.reserve_input(max) {
            self.close_client(cx, ct);
            return Flow::Closed;
        }
        let space = c.buf.len() - c.end;
        match sys::read(fd, &mut c.buf[c.end..]) {
            Ok(0) => {
                c.eof = true;
                c.may_read = false;
                Flow::Again
            }
            Ok(n) => {
                c.end += n;
                c.last_activity = cx.now;
                if c.head_started.is_none() {
                    c.head_started = Some(cx.now);
                }
                // A short read drained the socket, unless the FIN came with
                // the data: then the next read returns EOF and no new event
                // would announce it on an edge-triggered backend.
                c.may_read = n == space || c.read_closed;
                Flow::Again
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                c.may_read = false;
                c.want = Interest::READ;
                Flow::Wait
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Flow::Again,
            Err(_) => {
                self.close_client(cx, ct);
                Flow::Closed
            }
        }
    }

    // ------------------------------------------------------------------
    // Requests

    /// Parse and answer the request at the front of the buffer. None: the
    /// head is incomplete (read more).
    fn answer_next<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) -> Option<Flow> {
        let limits = self.sh.cfg.limits;
        let c = client_of(&mut self.slab, ct)?;
        if c.out.len() >= COALESCE_MAX {
            return None;
        }
        let parsed = c.req.parse(&c.buf[c.start..c.end], &limits);
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
                reject(c, &self.sh.date, e.status, e.reason);
                return Some(Flow::Again);
            }
        };
        if !c.disk_checked {
            self.sh.stats.requests += 1;
            c.requests += 1;
        }
        c.head_started = None;
        let head_end = c.start + n;
        if !c.allowed {
            self.sh.stats.denied += 1;
            reject(c, &self.sh.date, 403, "client address not allowed to use this proxy");
            return Some(Flow::Again);
        }
        let routed = self.route(cx, ct, head_end);
        let c = client_of(&mut self.slab, ct)?;
        if c.disk_wait.is_none() {
            c.disk_checked = false;
            c.disk_loaded = None;
        }
        match routed {
            Ok(f) => Some(f),
            Err((status, reason)) => {
                self.sh.stats.bad_requests += 1;
                reject(c, &self.sh.date, status, reason);
                Some(Flow::Again)
            }
        }
    }

    /// Work out where a request goes, answer it from the cache, or start a
    /// transaction.
    fn route<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token, head_end: usize) -> Result<Flow, (u16, &'static str)> {
        let cfg = self.sh.cfg;
        let sh = &mut self.sh;
        let c = client_of(&mut self.slab, ct).ok_or((500, "connection gone"))?;
        let data = &c.buf[c.start..head_end];
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
        let target = req.target(data);
        // Target host, port and path.
        let mut key_host: &[u8] = b"";
        let mut key_port = 80u16;
        if method == Method::Connect {
            if cfg.is_reverse() {
                c.spare = Some(txn);
                return Err((405, "CONNECT is only served in forward-proxy mode"));
            }
            let Some((h, p)) = headers::split_authority(target, 443) else {
                c.spare = Some(txn);
                return Err((400, "invalid CONNECT target"));
            };
            if !cfg.connect_ports.contains(&p) {
                c.spare = Some(txn);
                return Err((403, "CONNECT to this port is not allowed"));
            }
            txn.connect = true;
            push_lower(&mut txn.host, h);
            txn.port = p;
        } else if req.is_absolute_form() {
            let Some((scheme, authority, path)) = weft_http::split_absolute(target) else {
                c.spare = Some(txn);
                return Err((400, "invalid absolute-form target"));
            };
            if !scheme.eq_ignore_ascii_case(b"http") {
                c.spare = Some(txn);
                return Err((400, "only http:// URLs are proxied (use CONNECT for https)"));
            }
            let Some((h, p)) = headers::split_authority(authority, 80) else {
                c.spare = Some(txn);
                return Err((400, "invalid host in the request target"));
            };
            key_host = h;
            key_port = p;
            txn.path.extend_from_slice(path);
            txn.host_value.extend_from_slice(authority);
            if !cfg.is_reverse() {
                push_lower(&mut txn.host, h);
                txn.port = p;
            }
        } else {
            if !cfg.is_reverse() {
                c.spare = Some(txn);
                return Err((400, "a forward proxy needs an absolute-form target (http://host/path)"));
            }
            txn.path.extend_from_slice(target);
            if let Some(h) = req.host(data) {
                txn.host_value.extend_from_slice(h);
                if let Some((kh, kp)) = headers::split_authority(h, 80) {
                    key_host = kh;
                    key_port = kp;
                }
            }
        }
        if cfg.is_reverse() {
            let up = pick_route(cfg, &txn.host_value).ok_or((421, "no upstream is configured for this host"));
            let up = match up {
                Ok(u) => u,
                Err(e) => {
                    c.spare = Some(txn);
                    return Err(e);
                }
            };
            txn.host.push_str(&up.host);
            txn.port = up.port;
            if txn.host_value.is_empty() {
                txn.host_value.extend_from_slice(up.to_string().as_bytes());
                key_host = b"";
            }
            if key_host.is_empty() {
                headers::cache_key(&mut c.key, up.host.as_bytes(), up.port, &txn.path);
            }
        }
        if !txn.connect && !key_host.is_empty() {
            headers::cache_key(&mut c.key, key_host, key_port, &txn.path);
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
        txn.cacheable = sh.store.is_some() && matches!(method, Method::Get | Method::Head) && !txn.connect;
        // The cache.
        if txn.cacheable {
            let now = unix_secs(cx.wall);
            let store = sh.store.expect("cacheable implies a store");
            let vary_scratch = &mut sh.vary_scratch;
            let mut select = |o: &Object| match &o.vary {
                None => true,
                Some(v) => {
                    caching::vary_key([&v[..]], req, data, vary_scratch);
                    vary_scratch[..] == o.vary_key[..]
                }
            };
            let found = store
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .lookup(&c.key, &mut select)
                .or_else(|| {
                    let loaded = c.disk_loaded.as_deref()?;
                    loaded.iter().find(|(_, o)| select(o)).cloned()
                });
            match found {
                Some((id, obj)) => {
                    let age = obj.age(now);
                    match caching::decide(obj.lifetime, age, &obj.cc, &txn.req_cc) {
                        u @ (Usable::Fresh | Usable::StaleAllowed) => {
                            if u == Usable::StaleAllowed {
                                sh.stats.stale_hits += 1;
                            }
                            sh.stats.hits += 1;
                            let close = !txn.client_keep_alive || sh.draining || !matches!(txn.body, ReqBody::None);
                            if obj.body.len() > sh.cfg.notsent_lowat {
                                set_notsent_lowat(&c.fd, &mut c.notsent_lowat, false, sh.cfg);
                            }
                            serve_hit(&mut c.out, req, data, &obj, now, close, false, &mut sh.stats);
                            c.start = head_end;
                            c.close_after |= close;
                            c.spare = Some(txn);
                            return Ok(Flow::Again);
                        }
                        Usable::Revalidate => {
                            if txn.req_cc.only_if_cached {
                                c.spare = Some(txn);
                                sh.stats.only_if_cached_misses += 1;
                                return Err((504, "not in cache (only-if-cached)"));
                            }
                            if obj.etag.is_some() || obj.last_modified.is_some() {
                                txn.stored = Some((id, obj));
                            }
                        }
                    }
                }
                // Not in memory, but on disk: park until the disk store has
                // put the key's objects in memory, then answer again.
                None if !c.disk_checked && sh.disk.is_some_and(|d| d.contains(&c.key)) => {
                    let d = sh.disk.expect("checked");
                    let wait = sh.next_disk_wait;
                    sh.next_disk_wait += 1;
                    d.load(&c.key, sh.index, ct, wait);
                    sh.stats.disk_loads += 1;
                    c.disk_wait = Some(wait);
                    c.disk_checked = true;
                    c.spare = Some(txn);
                    return Ok(Flow::Wait);
                }
                None if txn.req_cc.only_if_cached => {
                    c.spare = Some(txn);
                    sh.stats.only_if_cached_misses += 1;
                    return Err((504, "not in cache (only-if-cached)"));
                }
                None => {}
            }
        }
        if txn.stored.is_some() {
            sh.stats.revalidations += 1;
        } else if !txn.connect {
            sh.stats.misses += 1;
        }
        // Keep the head: the input buffer moves on while the request is forwarded.
        c.req_data.clear();
        c.req_data.extend_from_slice(data);
        c.start = head_end;
        if c.req.expect_continue() && !matches!(txn.body, ReqBody::None) && !txn.http10 {
            c.out.push_copy(b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        txn.request_time = unix_secs(cx.wall);
        c.txn = Some(txn);
        self.resolve(cx, ct);
        Ok(Flow::Again)
    }

    /// Find the transaction's upstream addresses (or wait for the resolver).
    fn resolve<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) {
        let sh = &mut self.sh;
        let Some(c) = client_of(&mut self.slab, ct) else { return };
        let Some(txn) = c.txn.as_mut() else { return };
        if let Some(a) = resolve::literal(&txn.host, txn.port) {
            txn.addrs.push(a);
            txn.phase = Phase::Connect;
            return;
        }
        match sh.dns.lookup(&txn.host, txn.port, cx.now, ct, sh.resolver, sh.index) {
            Lookup::Ready(addrs) => {
                txn.addrs.extend_from_slice(addrs);
                txn.phase = Phase::Connect;
            }
            Lookup::Waiting => txn.phase = Phase::Resolve,
        }
    }

    /// The disk store read what parked requests asked for: answer them again.
    fn on_loaded<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        let Some(d) = self.sh.disk else { return };
        d.take_loaded(self.sh.index, &mut self.loaded);
        let loaded = std::mem::take(&mut self.loaded);
        for l in &loaded {
            let Some(c) = client_of(&mut self.slab, l.token) else {
                continue;
            };
            if c.disk_wait != Some(l.wait) {
                continue; // that client is gone and its slot reused
            }
            c.disk_wait = None;
            c.disk_loaded = Some(l.objects.clone());
            self.drive(cx, l.token);
        }
        self.loaded = loaded;
        self.loaded.clear();
    }

    fn on_answers<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        self.sh.resolver.take_answers(self.sh.index, &mut self.answers);
        let answers = std::mem::take(&mut self.answers);
        for a in answers {
            let (host, port) = (a.host.clone(), a.port);
            let (waiters, err) = self.sh.dns.answer(a, cx.now);
            for ct in waiters {
                let Some(c) = client_of(&mut self.slab, ct) else {
                    continue;
                };
                let Some(txn) = c.txn.as_mut() else { continue };
                if txn.phase != Phase::Resolve || txn.host != host || txn.port != port {
                    continue;
                }
                match &err {
                    Some(e) => {
                        weft_core::debug!("{e}");
                        self.fail(cx, ct, 502, "cannot resolve the upstream host name");
                    }
                    None => {
                        self.resolve(cx, ct);
                    }
                }
                self.drive(cx, ct);
            }
        }
    }

    // ------------------------------------------------------------------
    // Transactions

    fn step_txn<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) -> Flow {
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        let phase = c.txn.as_ref().map(|t| t.phase).unwrap_or(Phase::Resolve);
        if phase != Phase::Body {
            // Keep earlier pipelined answers moving, and read ahead.
            if let Some(f) = self.client_side_while_waiting(cx, ct) {
                return f;
            }
        }
        match phase {
            Phase::Resolve => Flow::Wait,
            Phase::Connect => self.txn_connect(cx, ct),
            Phase::Exchange => self.txn_exchange(cx, ct),
            Phase::Body => self.txn_body(cx, ct),
        }
    }

    /// Flush queued client output and read ahead (bounded) while a
    /// transaction waits on its upstream. A FIN from the client only ends its
    /// requests: a half-closed client still reads, so what it asked for is
    /// answered (as HAProxy and weft serve do); a client that is really gone
    /// shows up as a write error, which aborts the transaction.
    fn client_side_while_waiting<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) -> Option<Flow> {
        let c = client_of(&mut self.slab, ct)?;
        let fd = c.fd.as_ref()?.raw();
        let streaming_body = c
            .txn
            .as_ref()
            .is_some_and(|t| !matches!(t.body, ReqBody::None) && !t.connect);
        if !c.out.is_empty() && c.may_write {
            let mut wb = false;
            match c.out.flush(fd, &[], &mut wb) {
                Ok(_) => {
                    if wb {
                        c.may_write = false;
                    }
                }
                Err(_) => {
                    self.close_client(cx, ct);
                    return Some(Flow::Closed);
                }
            }
        }
        if !c.out.is_empty() {
            c.want.write = true;
        }
        if streaming_body {
            return None;
        }
        let max = self.sh.cfg.limits.max_head + 1024;
        if c.eof || !c.reserve_input(max) {
            return None;
        }
        if !c.may_read {
            c.want.read = true;
            return None;
        }
        match sys::read(fd, &mut c.buf[c.end..]) {
            Ok(0) => {
                c.eof = true;
                c.may_read = false;
                None
            }
            Ok(n) => {
                c.end += n;
                None
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                c.may_read = false;
                c.want.read = true;
                None
            }
            Err(_) => {
                self.close_client(cx, ct);
                Some(Flow::Closed)
            }
        }
    }

    /// Take a pooled connection or open a new one.
    fn txn_connect<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) -> Flow {
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        let Some(txn) = c.txn.as_mut() else { return Flow::Again };
        let Some(&addr) = txn.addrs.get(txn.addr_index) else {
            return self.fail(cx, ct, 502, "no upstream address left to try");
        };
        let use_pool = !txn.retried && !txn.connect;
        // A pooled connection to the same address (most recently used first).
        if use_pool {
            while let Some(ut) = self.sh.pool.get_mut(&addr).and_then(|l| l.pop()) {
                let Some(u) = upstream_of(&mut self.slab, ut) else {
                    continue;
                };
                u.owner = Some(ct);
                u.last_activity = cx.now;
                u.want = Interest::NONE;
                self.sh.stats.upstream_reused += 1;
                return self.begin_exchange(ct, ut);
            }
        }
        let fd = match sys::tcp_socket(&addr) {
            Ok(fd) => fd,
            Err(e) => {
                weft_core::warn!("upstream socket: {e}");
                return self.fail(cx, ct, 502, "cannot create a socket to the upstream");
            }
        };
        let _ = sys::setsockopt_int(fd.raw(), libc::IPPROTO_TCP, libc::TCP_NODELAY, 1);
        self.sh.stats.upstream_connects += 1;
        let connected = match sys::connect(fd.raw(), &addr) {
            Ok(done) => done,
            Err(e) => return self.connect_failed(cx, ct, e),
        };
        let ut = self.slab.next_token();
        let initial = if P::CAPS.edge_triggered {
            Interest::BOTH
        } else {
            Interest::WRITE
        };
        if cx.register(fd.raw(), ut, initial).is_err() {
            return self.fail(cx, ct, 502, "cannot watch the upstream connection");
        }
        let now = cx.now;
        self.slab.insert_with(|_| {
            Entry::Upstream(Box::new(Upstream {
                fd,
                addr,
                owner: Some(ct),
                connecting: !connected,
                buf: UpBuf::default(),
                out: OutQueue::new(),
                may_read: false,
                may_write: connected,
                interest: initial,
                want: Interest::WRITE,
                reused: false,
                last_activity: now,
                deadline: None,
                timer_at: None,
            }))
        });
        self.begin_exchange(ct, ut)
    }

    fn connect_failed<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token, e: io::Error) -> Flow {
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        let Some(txn) = c.txn.as_mut() else { return Flow::Again };
        if let Some(ut) = txn.up.take() {
            self.close_upstream(cx, ut);
        }
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        let Some(txn) = c.txn.as_mut() else { return Flow::Again };
        weft_core::debug!("connect to {:?}: {e}", txn.addrs.get(txn.addr_index));
        txn.addr_index += 1;
        if txn.addr_index < txn.addrs.len() {
            txn.phase = Phase::Connect;
            return Flow::Again;
        }
        let reason = match e.raw_os_error() {
            Some(libc::ECONNREFUSED) => "connection refused by the upstream",
            Some(libc::ENETUNREACH) | Some(libc::EHOSTUNREACH) => "upstream unreachable",
            Some(libc::ETIMEDOUT) => "upstream connect timed out",
            _ => "cannot connect to the upstream",
        };
        self.fail(cx, ct, 502, reason)
    }

    /// Attach the upstream and queue the request.
    fn begin_exchange(&mut self, ct: Token, ut: Token) -> Flow {
        let sh = &mut self.sh;
        let Some((c, u)) = pair(&mut self.slab, ct, ut) else {
            return Flow::Closed;
        };
        let Some(txn) = c.txn.as_mut() else { return Flow::Again };
        txn.up = Some(ut);
        txn.phase = Phase::Exchange;
        if txn.connect {
            return Flow::Again;
        }
        let data = &c.req_data;
        let validators = txn
            .stored
            .as_ref()
            .map(|(_, o)| (o.etag.as_deref(), o.last_modified.as_ref().map(|(v, _)| &v[..])));
        let client_ip = c.peer.map(|p| p.ip());
        let chunked = matches!(txn.body, ReqBody::Chunked(_));
        let head = &c.req;
        let fwd = Forward {
            method: txn.method,
            path: &txn.path,
            host: &txn.host_value,
            via: &sh.via,
            client: client_ip,
            chunked_body: chunked,
            validators,
        };
        u.out.write_own(|v| headers::write_request(v, head, data, &fwd));
        Flow::Again
    }

    /// Send the request (and body), read the response head.
    fn txn_exchange<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) -> Flow {
        let Some(ut) = client_of(&mut self.slab, ct)
            .and_then(|c| c.txn.as_ref())
            .and_then(|t| t.up)
        else {
            return Flow::Closed;
        };
        let limits = self.sh.cfg.limits;
        let first_read = self.sh.cfg.first_read;
        let Some((c, u)) = pair(&mut self.slab, ct, ut) else {
            return self.fail(cx, ct, 502, "upstream connection lost");
        };
        // Connection establishment.
        if u.connecting {
            if !u.may_write {
                u.want.write = true;
                return Flow::Wait;
            }
            match sys::take_socket_error(u.fd.raw()) {
                Ok(None) => {
                    u.connecting = false;
                    u.last_activity = cx.now;
                }
                Ok(Some(e)) | Err(e) => return self.connect_failed(cx, ct, e),
            }
        }
        if c.txn.as_ref().is_some_and(|t| t.connect) {
            return self.start_tunnel(cx, ct, ut);
        }
        // Request body bytes already received go out behind the head.
        let mut moved = false;
        loop {
            let txn = c.txn.as_mut().expect("exchange has a txn");
            let body_done = match &mut txn.body {
                ReqBody::None => true,
                ReqBody::Length(left) => {
                    let avail = (c.end - c.start) as u64;
                    let take = avail.min(*left) as usize;
                    if take > 0 && u.out.len() < 256 * 1024 {
                        u.out.push_copy(&c.buf[c.start..c.start + take]);
                        c.start += take;
                        *left -= take as u64;
                        moved = true;
                    }
                    *left == 0
                }
                ReqBody::Chunked(dec) => {
                    let avail = &c.buf[c.start..c.end];
                    if !avail.is_empty() && u.out.len() < 256 * 1024 {
                        match dec.decode_all(avail, |_| {}) {
                            Ok(k) => {
                                u.out.push_copy(&avail[..k]);
                                c.start += k;
                                moved = true;
                            }
                            Err(_) => {
                                return self.fail(cx, ct, 400, "invalid chunked request body");
                            }
                        }
                    }
                    dec.is_done()
                }
            };
            if body_done {
                txn.body = ReqBody::None;
            }
            // Send.
            if !u.out.is_empty() {
                if !u.may_write {
                    u.want.write = true;
                } else {
                    let mut wb = false;
                    match u.out.flush(u.fd.raw(), &[], &mut wb) {
                        Ok((n, _)) => {
                            if n > 0 {
                                u.last_activity = cx.now;
                            }
                            if wb {
                                u.may_write = false;
                                u.want.write = true;
                            }
                        }
                        Err(_) => return self.upstream_lost(cx, ct, "the upstream closed the connection"),
                    }
                }
            }
            if body_done || !u.out.is_empty() {
                break;
            }
            // More request body from the client.
            if c.start < c.end && !moved {
                continue;
            }
            let Some(cfd) = c.fd.as_ref().map(|f| f.raw()) else {
                break;
            };
            if !c.may_read {
                c.want.read = true;
                break;
            }
            if !c.reserve_input(64 * 1024) {
                break;
            }
            match sys::read(cfd, &mut c.buf[c.end..]) {
                Ok(0) => {
                    self.close_client(cx, ct);
                    return Flow::Closed;
                }
                Ok(n) => {
                    c.end += n;
                    c.last_activity = cx.now;
                    moved = false;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    c.may_read = false;
                    c.want.read = true;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.close_client(cx, ct);
                    return Flow::Closed;
                }
            }
        }
        // The response head (also while the body is still going out: an
        // early answer such as 413 is read and relayed).
        loop {
            let pending = u.buf.pending();
            if !pending.is_empty() {
                match self.sh.resp.parse(pending, &limits) {
                    Ok(Some(n)) => {
                        let status = self.sh.resp.status();
                        if (100..200).contains(&status) {
                            if status == 101 {
                                return self.fail(cx, ct, 502, "upstream switched protocols unasked");
                            }
                            // Interim responses are not relayed (the proxy
                            // answered Expect: 100-continue itself).
                            u.buf.consume(n);
                            continue;
                        }
                        return self.on_response_head(cx, ct, ut, n);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        weft_core::debug!("bad response from upstream: {}", e.reason);
                        return self.fail(cx, ct, 502, e.reason);
                    }
                }
            }
            if !u.may_read {
                u.want.read = true;
                return Flow::Wait;
            }
            let room = u.buf.reserve(first_read, limits.max_head + 1024);
            if room == 0 {
                return self.fail(cx, ct, 502, "response head too large");
            }
            let end = u.buf.end;
            let want = room.min(first_read.max(1));
            match sys::read(u.fd.raw(), &mut u.buf.buf[end..end + want]) {
                Ok(0) => {
                    let started = u.buf.end > 0;
                    return if started {
                        self.fail(cx, ct, 502, "upstream closed the connection in the response head")
                    } else {
                        self.upstream_lost(cx, ct, "upstream closed the connection before responding")
                    };
                }
                Ok(n) => {
                    // A short read is not taken as "drained" here: a FIN may
                    // have come with the head, and an edge-triggered backend
                    // would not report it again (close-delimited bodies end on it).
                    u.buf.end += n;
                    u.last_activity = cx.now;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    u.may_read = false;
                    u.want.read = true;
                    return Flow::Wait;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.upstream_lost(cx, ct, "upstream connection failed before responding"),
            }
        }
    }

    /// A connection failed before any response byte: retry once on a fresh
    /// connection when that is safe, else 502.
    fn upstream_lost<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token, reason: &'static str) -> Flow {
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        let Some(txn) = c.txn.as_mut() else { return Flow::Again };
        let ut = txn.up;
        let reused = ut
            .and_then(|t| match self.slab.get(t) {
                Some(Entry::Upstream(u)) => Some(u.reused && u.buf.end == 0),
                _ => None,
            })
            .unwrap_or(false);
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        let txn = c.txn.as_mut().expect("checked");
        if reused && txn.retryable() {
            txn.retried = true;
            txn.up = None;
            txn.phase = Phase::Connect;
            self.sh.stats.upstream_retries += 1;
            if let Some(ut) = ut {
                self.close_upstream(cx, ut);
            }
            return Flow::Again;
        }
        self.fail(cx, ct, 502, reason)
    }

    /// Answer the client with an error (or close it if its response has
    /// begun) and end the transaction; the upstream is closed.
    fn fail<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token, status: u16, reason: &str) -> Flow {
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        let Some(mut txn) = c.txn.take() else {
            return Flow::Again;
        };
        let ut = txn.up.take();
        if let Some(relay) = txn.relay.take() {
            relay.abandon(&mut self.sh.stats, true);
        }
        let responded = txn.responded;
        let body_pending = !matches!(txn.body, ReqBody::None);
        let keep = txn.client_keep_alive && !body_pending && !self.sh.draining;
        c.spare = Some(txn);
        if let Some(ut) = ut {
            self.close_upstream(cx, ut);
        }
        match status {
            502 => self.sh.stats.errors_502 += 1,
            504 => self.sh.stats.errors_504 += 1,
            _ => {}
        }
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        if responded || c.fd.is_none() {
            self.close_client(cx, ct);
            return Flow::Closed;
        }
        let persist = if keep { Persist::Default } else { Persist::Close };
        let date = self.sh.date.get();
        c.out.write_own(|v| {
            respond::simple(v, status, date, b"", reason, false, persist);
        });
        if !keep {
            c.close_after = true;
            c.linger_on_close = body_pending;
        }
        Flow::Again
    }

    /// The response head is parsed (`self.sh.resp`, `n` bytes at the front
    /// of the upstream buffer): decide caching, queue the client's head and
    /// start the body relay.
    fn on_response_head<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token, ut: Token, n: usize) -> Flow {
        let cfg = self.sh.cfg;
        let sh = &mut self.sh;
        let Some((c, u)) = pair(&mut self.slab, ct, ut) else {
            return Flow::Closed;
        };
        set_notsent_lowat(&c.fd, &mut c.notsent_lowat, true, cfg);
        let txn = c.txn.as_mut().expect("head has a txn");
        let now = unix_secs(cx.wall);
        let resp = &sh.resp;
        let rdata = &u.buf.buf[u.buf.start..u.buf.start + n];
        let status = resp.status();
        txn.status = status;
        let method = txn.method;
        let framing = resp.framing(method);
        txn.up_keep_alive = resp.keep_alive(method) && matches!(txn.body, ReqBody::None);
        // A revalidation answered 304: refresh the stored object and serve it.
        if let Some((id, obj)) = txn.stored.take() {
            if status == 304 {
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
                        if let Some(store) = sh.store {
                            let kept = store.lock().unwrap_or_else(|e| e.into_inner()).replace(id, o.clone());
                            if let (true, Some(d)) = (kept, sh.disk) {
                                d.write(&c.key, &o);
                            }
                        }
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
                serve_hit(&mut c.out, &c.req, &c.req_data, &serve, now, close, true, &mut sh.stats);
                c.close_after |= close;
                self.release_upstream(cx, ut, reusable);
                return Flow::Again;
            }
        }
        // Unsafe methods invalidate what is stored for the URI (RFC 9111 §4.4).
        if caching::invalidates(method, status) {
            if let Some(store) = sh.store {
                // The URI, and same-origin Location / Content-Location ones.
                let mut named: [Option<Vec<u8>>; 2] = [None, None];
                for (key, field) in named.iter_mut().zip(["location", "content-location"]) {
                    *key = resp
                        .header(rdata, field)
                        .and_then(|v| same_origin_key(&c.key, v, &mut sh.scratch));
                }
                let keys = || std::iter::once(&c.key[..]).chain(named.iter().flatten().map(|k| &k[..]));
                // Disk first, and not under the memory store's lock: a load
                // holds the disk index's lock while it inserts in memory, so
                // once the index has forgotten a key nothing brings it back.
                if let Some(d) = sh.disk {
                    keys().for_each(|k| d.remove(k));
                }
                let mut st = store.lock().unwrap_or_else(|e| e.into_inner());
                for k in keys() {
                    sh.stats.invalidated += st.invalidate(k) as u64;
                }
            }
        }
        // Storable?
        let rcc = CacheControl::parse(resp.header_all(rdata, "cache-control"));
        let req = &c.req;
        let qdata = &c.req_data;
        let mut plan = None;
        if txn.cacheable {
            let q = StoreQuery {
                method,
                status,
                request: &txn.req_cc,
                response: &rcc,
                authorization: req.header(qdata, "authorization").is_some(),
                expires: resp.header(rdata, "expires").is_some(),
                vary_star: caching::vary_has_star(resp.header_all(rdata, "vary")),
            };
            let fits = match framing {
                BodyFraming::Length(len) => len <= cfg.max_object_size,
                _ => true,
            };
            if caching::storable(&q).is_ok() && fits {
                let mut head = Vec::with_capacity(n + 64);
                headers::write_response_fields(&mut head, resp, rdata, &sh.via, sh.date.get(), HeadFor::Store);
                head.extend_from_slice(b"\r\n");
                let mut vk = Vec::new();
                let vary: Vec<&[u8]> = resp.header_all(rdata, "vary").collect();
                if !vary.is_empty() {
                    caching::vary_key(vary, req, qdata, &mut vk);
                }
                plan = Some(StorePlan {
                    head: Bytes::from(head),
                    vary_key: vk,
                    response_time: now,
                });
            }
        }
        if plan.is_none() {
            sh.stats.uncacheable += 1;
        }
        // The client's head.
        let keep_framing = !txn.http10;
        let mut client_close = !txn.client_keep_alive || sh.draining || !matches!(txn.body, ReqBody::None);
        match framing {
            BodyFraming::UntilClose => client_close = true,
            BodyFraming::Chunked if txn.http10 => client_close = true,
            _ => {}
        }
        txn.client_close = client_close;
        let date = sh.date.get();
        let via = &sh.via;
        let http10 = txn.http10;
        c.out.write_own(|v| {
            headers::write_response_fields(v, resp, rdata, via, date, HeadFor::Client);
            match framing {
                BodyFraming::Length(len) => {
                    v.extend_from_slice(b"Content-Length: ");
                    weft_http::push_decimal(v, len);
                    v.extend_from_slice(b"\r\n");
                }
                BodyFraming::Chunked if !http10 => v.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
                BodyFraming::None if method == Method::Head && status != 304 => {
                    if let Some(len) = resp.content_length() {
                        v.extend_from_slice(b"Content-Length: ");
                        weft_http::push_decimal(v, len);
                        v.extend_from_slice(b"\r\n");
                    }
                }
                BodyFraming::None if status != 304 && status != 204 && status >= 200 => {
                    v.extend_from_slice(b"Content-Length: 0\r\n");
                }
                _ => {}
            }
            if client_close {
                v.extend_from_slice(b"Connection: close\r\n");
            } else if http10 {
                v.extend_from_slice(b"Connection: keep-alive\r\n");
            }
            v.extend_from_slice(b"\r\n");
        });
        txn.responded = true;
        u.buf.consume(n);
        let relay_framing = match framing {
            BodyFraming::None | BodyFraming::Length(0) => None,
            BodyFraming::Length(len) => Some(Framing::Length(len)),
            BodyFraming::Chunked => Some(Framing::Chunked {
                dec: ChunkedDecoder::new(),
                keep_framing,
            }),
            BodyFraming::UntilClose => Some(Framing::Close),
        };
        let Some(relay_framing) = relay_framing else {
            // No body: done now.
            if let Some(p) = plan {
                store_object(sh, &c.key, p, weft_buf::Aggregate::new(), txn.request_time);
            }
            return self.finish_txn(cx, ct);
        };
        let remaining = match relay_framing {
            Framing::Length(len) => len.saturating_sub(u.buf.pending().len() as u64),
            _ => u64::MAX,
        };
        let big = match cfg.splice {
            SpliceMode::Off => false,
            SpliceMode::On => remaining > 0,
            SpliceMode::Auto => remaining >= cfg.splice_threshold,
        };
        let want = match (plan.is_some(), big) {
            (_, false) => Want::Copy,
            (true, true) if cfg.keep_copy => Want::Tee,
            (true, true) => Want::Copy,
            (false, true) => Want::Splice,
        };
        let pipe_min = match cfg.splice {
            SpliceMode::Off => u64::MAX,
            SpliceMode::On => 1,
            SpliceMode::Auto => cfg.splice_threshold,
        };
        let fill_max = plan.as_ref().map(|_| cfg.max_object_size);
        let spare = if fill_max.is_none() { sh.relay_bufs.pop() } else { None };
        let mut relay = Relay::new(
            relay_framing,
            want,
            fill_max,
            pipe_min,
            cfg.first_read,
            cfg.rcv_lowat,
            spare,
            &mut sh.pipes,
            &mut sh.stats,
        );
        {
            let mut ends = Ends {
                client: c.fd.as_ref().map(|f| f.raw()),
                client_may_write: &mut c.may_write,
                out: &mut c.out,
                up: u.fd.raw(),
                up_may_read: &mut u.may_read,
                up_buf: &mut u.buf,
            };
            relay.start(&mut ends, &mut sh.stats);
        }
        txn.plan = plan;
        txn.relay = Some(relay);
        txn.phase = Phase::Body;
        Flow::Again
    }

    fn txn_body<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) -> Flow {
        let Some(ut) = client_of(&mut self.slab, ct)
            .and_then(|c| c.txn.as_ref())
            .and_then(|t| t.up)
        else {
            return Flow::Closed;
        };
        let sh = &mut self.sh;
        let Some((c, u)) = pair(&mut self.slab, ct, ut) else {
            return Flow::Closed;
        };
        let txn = c.txn.as_mut().expect("body has a txn");
        let relay = txn.relay.as_mut().expect("body has a relay");
        let result = {
            let mut ends = Ends {
                client: c.fd.as_ref().map(|f| f.raw()),
                client_may_write: &mut c.may_write,
                out: &mut c.out,
                up: u.fd.raw(),
                up_may_read: &mut u.may_read,
                up_buf: &mut u.buf,
            };
            relay.pump(&mut ends, &mut sh.stats)
        };
        u.last_activity = cx.now;
        c.last_activity = cx.now;
        if relay.take_batch_start() {
            self.batching.push(ct);
            if !self.batch_timer {
                self.batch_timer = true;
                cx.arm_timer(BATCH_TIMER, cx.now + BATCH_WAIT);
            }
        }
        let gone = relay.client_gone();
        if gone {
            if let Some(fd) = c.fd.take() {
                // The client left; the object is still being filled.
                cx.close_later(fd, true);
            }
        }
        match result {
            Pump::Done => {
                let mut relay = txn.relay.take().expect("present");
                if let Some(b) = relay.take_buffer() {
                    if sh.relay_bufs.len() < 16 {
                        sh.relay_bufs.push(b);
                    }
                }
                let body = relay.finish(&mut sh.pipes, &mut sh.stats);
                if let (Some(plan), Some(body)) = (txn.plan.take(), body) {
                    store_object(sh, &c.key, plan, body, txn.request_time);
                }
                self.finish_txn(cx, ct)
            }
            Pump::Wait { up_read, client_write } => {
                u.want = interest(up_read, false);
                c.want = interest(false, client_write);
                // Notice a client that hangs up (the cache fill goes on
                // without it), and keep pipelined requests flowing in.
                let max = sh.cfg.limits.max_head + 1024;
                let Some(cfd) = c.fd.as_ref().map(|f| f.raw()) else {
                    return Flow::Wait;
                };
                if c.eof || client_write || !c.reserve_input(max) {
                    return Flow::Wait;
                }
                if !c.may_read {
                    c.want.read = true;
                    return Flow::Wait;
                }
                let end = c.end;
                match sys::read(cfd, &mut c.buf[end..]) {
                    Ok(0) => {
                        // A FIN: no more requests, but a half-closed client
                        // still reads this response (a gone one makes the
                        // next write fail).
                        c.eof = true;
                        c.may_read = false;
                        Flow::Wait
                    }
                    Ok(n) => {
                        c.end += n;
                        Flow::Again
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        c.may_read = false;
                        c.want.read = true;
                        Flow::Wait
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => Flow::Again,
                    Err(_) => {
                        // A reset: the client is gone.
                        c.eof = true;
                        let relay = c.txn.as_mut().and_then(|t| t.relay.as_mut()).expect("body has a relay");
                        if relay.client_left(&mut c.out) {
                            if let Some(fd) = c.fd.take() {
                                cx.close_later(fd, true);
                            }
                            Flow::Again
                        } else {
                            self.close_client(cx, ct);
                            Flow::Closed
                        }
                    }
                }
            }
            Pump::Yield => Flow::Yield,
            Pump::ClientAborted => {
                self.close_client(cx, ct);
                Flow::Closed
            }
            Pump::UpstreamFailed(reason) => {
                weft_core::debug!("{reason}");
                let relay = txn.relay.take().expect("present");
                relay.abandon(&mut sh.stats, true);
                // Never a short response that looks complete: close the client.
                self.close_client(cx, ct);
                Flow::Closed
            }
        }
    }

    /// The exchange is complete: release the upstream (AutoRelease), go on
    /// with the client's next request.
    fn finish_txn<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) -> Flow {
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        let Some(mut txn) = c.txn.take() else {
            return Flow::Again;
        };
        let ut = txn.up.take();
        let reusable = txn.up_keep_alive;
        if txn.client_close {
            c.close_after = true;
        }
        c.spare = Some(txn);
        let gone = c.fd.is_none();
        if let Some(ut) = ut {
            self.release_upstream(cx, ut, reusable);
        }
        if gone {
            self.close_client(cx, ct);
            return Flow::Closed;
        }
        Flow::Again
    }

    // ------------------------------------------------------------------
    // Tunnels

    fn start_tunnel<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token, ut: Token) -> Flow {
        let splice = self.sh.cfg.splice != SpliceMode::Off;
        let sh = &mut self.sh;
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        let Some(mut txn) = c.txn.take() else {
            return Flow::Again;
        };
        txn.up = None;
        c.spare = Some(txn);
        let mut tunnel = Box::new(Tunnel::new(splice, &mut sh.pipes, &mut sh.tunnel_bufs, &mut sh.stats));
        // A FIN seen while the tunnel was being set up is the tunnel's to
        // forward: reading again returns EOF, which the tunnel turns into a
        // half-close towards the upstream.
        if c.eof {
            c.eof = false;
            c.may_read = true;
        }
        // What the client sent after its CONNECT head belongs to the tunnel.
        if c.start < c.end {
            tunnel.to_upstream.push_copy(&c.buf[c.start..c.end]);
            c.start = 0;
            c.end = 0;
        }
        c.out.push_copy(b"HTTP/1.1 200 Connection established\r\n\r\n");
        set_notsent_lowat(&c.fd, &mut c.notsent_lowat, true, self.sh.cfg);
        c.tunnel = Some((tunnel, ut));
        c.last_activity = cx.now;
        Flow::Again
    }

    fn step_tunnel<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) -> Flow {
        let Some(ut) = client_of(&mut self.slab, ct)
            .and_then(|c| c.tunnel.as_ref())
            .map(|t| t.1)
        else {
            return Flow::Closed;
        };
        let sh = &mut self.sh;
        let Some((c, u)) = pair(&mut self.slab, ct, ut) else {
            self.close_client(cx, ct);
            return Flow::Closed;
        };
        let Some(cfd) = c.fd.as_ref().map(|f| f.raw()) else {
            self.close_client(cx, ct);
            return Flow::Closed;
        };
        let (tunnel, _) = c.tunnel.as_mut().expect("checked");
        let mut cside = Side {
            fd: cfd,
            may_read: &mut c.may_read,
            may_write: &mut c.may_write,
        };
        let mut uside = Side {
            fd: u.fd.raw(),
            may_read: &mut u.may_read,
            may_write: &mut u.may_write,
        };
        let state = tunnel.pump(&mut cside, &mut uside, &mut c.out, &mut sh.tunnel_bufs, &mut sh.stats);
        match state {
            TunnelState::Done | TunnelState::Failed => {
                self.close_client(cx, ct);
                Flow::Closed
            }
            TunnelState::Yield => {
                c.last_activity = cx.now;
                Flow::Yield
            }
            TunnelState::Wait {
                client_read,
                client_write,
                up_read,
                up_write,
            } => {
                c.want = interest(client_read, client_write);
                u.want = interest(up_read, up_write);
                c.last_activity = cx.now;
                Flow::Wait
            }
        }
    }

    // ------------------------------------------------------------------
    // Shutdown

    fn start_draining<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        if self.sh.draining {
            return;
        }
        self.sh.draining = true;
        self.grace_deadline = Some(cx.now + self.sh.cfg.grace);
        if let Some(l) = self.listener.take() {
            cx.close_later(l, true);
        }
        let pooled: Vec<Token> = self.sh.pool.drain().flat_map(|(_, v)| v).collect();
        for ut in pooled {
            if let Some(Entry::Upstream(u)) = self.slab.remove(ut) {
                cx.close_later(u.fd, true);
            }
        }
        for t in self.slab.tokens() {
            let Some(c) = client_of(&mut self.slab, t) else {
                continue;
            };
            if c.is_idle() && !c.lingering {
                self.close_client(cx, t);
            } else {
                c.close_after = true;
            }
        }
    }
}

/// Arm the entry's timer if its deadline is earlier than the armed one.
fn arm<P: Poller>(cx: &mut Ctx<P>, token: Token, deadline: Option<Instant>, timer_at: &mut Option<Instant>) {
    if let Some(d) = deadline {
        if timer_at.is_none_or(|t| d < t) {
            *timer_at = Some(d);
            cx.arm_timer(token, d);
        }
    }
}

/// Append ASCII `b` lowercased (host names were checked to be ASCII).
fn push_lower(s: &mut String, b: &[u8]) {
    s.extend(b.iter().map(|&c| c.to_ascii_lowercase() as char));
}

/// The upstream for a reverse-proxied Host value: a route for the whole
/// value, then for the host without its port, then `--upstream`.
fn pick_route<'c>(cfg: &'c ProxyConfig, host_value: &[u8]) -> Option<&'c crate::config::HostPort> {
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
        let (scheme, authority, path) = weft_http::split_absolute(value)?;
        if !scheme.eq_ignore_ascii_case(b"http") {
            return None;
        }
        let (h, p) = headers::split_authority(authority, 80)?;
        headers::cache_key(out, h, p, path);
        if !out.starts_with(origin) || out.get(origin.len()).is_some_and(|&b| b != b'/') {
            return None;
        }
    }
    Some(out.clone())
}

fn store_object(sh: &mut Shared<'_>, key: &[u8], plan: StorePlan, body: weft_buf::Aggregate, request_time: u64) {
    let Some(store) = sh.store else { return };
    if let Some(obj) = Object::build(
        plan.head,
        body,
        &plan.vary_key,
        request_time,
        plan.response_time,
        &sh.heuristic,
    ) {
        let obj = Arc::new(obj);
        if store
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert_shared(key, obj.clone())
            .is_some()
        {
            sh.stats.stored += 1;
            if let Some(d) = sh.disk {
                d.write(key, &obj);
            }
        }
    }
}

/// Queue an error response and close afterwards (lingering, so the client
/// can read it).
fn reject(c: &mut Client, date: &weft_http::DateCache, status: u16, reason: &str) {
    let d = date.get();
    c.out.write_own(|v| {
        respond::simple(v, status, d, b"", reason, false, Persist::Close);
    });
    c.close_after = true;
    c.linger_on_close = true;
    c.start = c.end;
}

/// Bound (`on`) or unbound the unsent bytes the client socket holds
/// (TCP_NOTSENT_LOWAT, `--notsent-lowat`). Bounded while upstream bodies and
/// tunnels are relayed: the body then waits in the pipe and the upstream
/// socket instead of piling up in the client socket, where a pacing
/// congestion control would release it from a timer in the proxy's context
/// (see `tune_listener`). Unbounded for cache hits larger than the bound:
/// their bytes are already in memory, and a bound would split one writev of
/// the object into a write and an epoll_ctl pair per 32 KiB (measured: 1 MiB
/// hits cost 342 µs of proxy CPU with the bound, 157 without). One
/// setsockopt per change of kind on a connection, none while it stays the
/// same.
/// (Takes the client's fields apart so a caller may hold its input buffer.)
fn set_notsent_lowat(fd: &Option<Fd>, state: &mut bool, on: bool, cfg: &ProxyConfig) {
    if cfg.notsent_lowat == 0 || *state == on {
        return;
    }
    let Some(fd) = fd.as_ref() else { return };
    let v = if on {
        cfg.notsent_lowat.min(i32::MAX as usize) as i32
    } else {
        0
    };
    // 0 restores the kernel's default (net.ipv4.tcp_notsent_lowat).
    if sys::setsockopt_int(fd.raw(), libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, v).is_ok() {
        *state = on;
    }
}

/// Answer a request (head `data`, parsed as `req`) from a stored object: its
/// conditionals, Range and HEAD applied. Body bytes go out as shared segments
/// of the object (no copy).
/// `validated`: the origin has just validated the object for this request
/// (a 304 to our conditional request): the answer then has no `Age`, whose
/// presence says the opposite (RFC 9111 §5.1), so clients and measuring
/// tools can tell it from a hit.
#[allow(clippy::too_many_arguments)]
fn serve_hit(
    out: &mut OutQueue,
    req: &RequestHead,
    data: &[u8],
    obj: &Object,
    now: u64,
    close: bool,
    validated: bool,
    st: &mut ProxyStats,
) {
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
            out.write_own(|v| {
                headers::write_304_fields(v, &obj.head[..stored_fields], obj.status_line_len);
                tail(v, None);
            });
        }
        Precondition::Failed => {
            out.write_own(|v| {
                v.extend_from_slice(b"HTTP/1.1 412 Precondition Failed\r\n");
                tail(v, Some(0));
            });
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
                    out.write_own(|v| {
                        v.extend_from_slice(b"HTTP/1.1 206 Partial Content\r\n");
                    });
                    out.push_shared(obj.head.slice(obj.status_line_len..stored_fields));
                    out.write_own(|v| {
                        v.extend_from_slice(b"Content-Range: bytes ");
                        weft_http::push_decimal(v, start);
                        v.push(b'-');
                        weft_http::push_decimal(v, end_inclusive);
                        v.push(b'/');
                        weft_http::push_decimal(v, len);
                        v.extend_from_slice(b"\r\n");
                        tail(v, Some(n));
                    });
                    for seg in obj.body.slice(start as usize, (end_inclusive + 1) as usize).segments() {
                        out.push_shared(seg.clone());
                    }
                    st.bytes_cache += n;
                }
                RangeOutcome::Unsatisfiable => {
                    out.write_own(|v| {
                        v.extend_from_slice(b"HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */");
                        weft_http::push_decimal(v, len);
                        v.extend_from_slice(b"\r\n");
                        tail(v, Some(0));
                    });
                }
                RangeOutcome::Full | RangeOutcome::Multiple => {
                    out.push_shared(obj.head.slice(..stored_fields));
                    let cl = if obj.status == 204 { None } else { Some(len) };
                    out.write_own(|v| tail(v, cl));
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

/// Read and discard after shutting down our side, until EOF, a cap or the deadline.
fn linger_read(c: &mut Client) -> Flow {
    let Some(fd) = c.fd.as_ref().map(|f| f.raw()) else {
        return Flow::Closed;
    };
    if c.buf.is_empty() {
        c.buf = vec![0u8; crate::conn::INITIAL_INPUT];
    }
    let mut total = 0usize;
    loop {
        match sys::read(fd, &mut c.buf) {
            Ok(0) => return Flow::Closed,
            Ok(n) => {
                total += n;
                if total > LINGER_MAX {
                    return Flow::Closed;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                c.may_read = false;
                c.want = Interest::READ;
                return Flow::Wait;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Flow::Closed,
        }
    }
}

impl<P: Poller> Handler<P> for Worker<'_> {
    fn on_event(&mut self, cx: &mut Ctx<P>, ev: Event) {
        match ev.token {
            LISTENER => {
                if !self.sh.draining && self.acceptor.active() {
                    self.accept(cx);
                }
            }
            WAKER => {
                sys::eventfd_drain(self.waker);
                if self.shutdown.requested() {
                    self.start_draining(cx);
                }
            }
            RESOLVER => self.on_answers(cx),
            DISK => self.on_loaded(cx),
            token => {
                let owner = match self.slab.get_mut(token) {
                    None => return,
                    Some(Entry::Client(c)) => {
                        if ev.readable || ev.error {
                            c.may_read = true;
                        }
                        c.read_closed |= ev.read_closed;
                        if ev.writable || ev.error {
                            c.may_write = true;
                        }
                        Some(token)
                    }
                    Some(Entry::Upstream(u)) => {
                        if ev.readable || ev.error {
                            u.may_read = true;
                        }
                        if ev.writable || ev.error {
                            u.may_write = true;
                        }
                        u.owner
                    }
                };
                match owner {
                    Some(ct) => self.drive(cx, ct),
                    None => {
                        // An idle pooled connection: the upstream closed it
                        // (or sent something unasked). Either way it is done.
                        if ev.readable || ev.error {
                            self.close_upstream(cx, token);
                        }
                    }
                }
            }
        }
    }

    fn on_timer(&mut self, cx: &mut Ctx<P>, token: Token, due: Instant) -> Option<Instant> {
        if token == BATCH_TIMER {
            return self.cut_stalled_batches(cx);
        }
        enum Who {
            Client,
            Upstream(Option<Token>, bool, bool),
        }
        let who = match self.slab.get_mut(token)? {
            Entry::Client(c) => {
                if c.timer_at != Some(due) {
                    return None;
                }
                c.timer_at = None;
                let d = c.deadline?;
                if cx.now < d {
                    c.timer_at = Some(d);
                    return Some(d);
                }
                Who::Client
            }
            Entry::Upstream(u) => {
                if u.timer_at != Some(due) {
                    return None;
                }
                u.timer_at = None;
                let d = u.deadline?;
                if cx.now < d {
                    u.timer_at = Some(d);
                    return Some(d);
                }
                Who::Upstream(u.owner, u.connecting, u.want.read || u.want.write)
            }
        };
        if !matches!(who, Who::Upstream(None, _, _)) {
            // An idle pooled connection expiring is housekeeping, not a timeout.
            self.sh.stats.timeouts += 1;
        }
        match who {
            Who::Client => {
                let c = client_of(&mut self.slab, token)?;
                if !c.lingering && c.txn.is_none() && c.tunnel.is_none() && c.out.is_empty() && c.head_started.is_some()
                {
                    if let Some(fd) = &c.fd {
                        let mut out = Vec::with_capacity(256);
                        respond::simple(
                            &mut out,
                            408,
                            self.sh.date.get(),
                            b"",
                            "request head not received in time",
                            false,
                            Persist::Close,
                        );
                        let _ = sys::send(fd.raw(), &out, false);
                    }
                }
                self.close_client(cx, token);
            }
            Who::Upstream(None, _, _) => self.close_upstream(cx, token),
            Who::Upstream(Some(ct), connecting, waiting) => {
                let phase = client_of(&mut self.slab, ct)
                    .and_then(|c| c.txn.as_ref())
                    .map(|t| t.phase);
                if !waiting && !connecting && phase == Some(Phase::Body) {
                    // The body waits on the client, not the upstream: the
                    // client's send timeout governs.
                    self.sh.stats.timeouts -= 1;
                    let later = cx.now + self.sh.cfg.upstream_timeout;
                    let u = upstream_of(&mut self.slab, token)?;
                    u.deadline = Some(later);
                    u.timer_at = Some(later);
                    return Some(later);
                }
                match phase {
                    Some(Phase::Body) => {
                        self.close_client(cx, ct);
                    }
                    Some(_) => {
                        let reason = if connecting {
                            "upstream connect timed out"
                        } else {
                            "upstream response timed out"
                        };
                        self.fail(cx, ct, 504, reason);
                        self.drive(cx, ct);
                    }
                    None => self.close_upstream(cx, token),
                }
            }
        }
        None
    }

    fn after_batch(&mut self, cx: &mut Ctx<P>) {
        self.sh.date.update(cx.wall);
        let ready = std::mem::take(&mut self.ready);
        for t in &ready {
            self.drive(cx, *t);
        }
        if self.ready.is_empty() {
            self.ready = ready;
            self.ready.clear();
        }
        self.slot.publish(&self.stats());
        let lfd = self.listener.as_ref().map(|l| l.raw());
        if self.acceptor.due(cx, lfd, LISTENER) && !self.sh.draining {
            self.accept(cx);
        }
        if let Some(deadline) = self.grace_deadline {
            if cx.now >= deadline && !self.slab.is_empty() {
                weft_core::warn!(
                    "grace period over: closing {} connection(s) with transfers in flight",
                    self.slab.len()
                );
                for t in self.slab.tokens() {
                    match self.slab.get(t) {
                        Some(Entry::Client(_)) => self.close_client(cx, t),
                        Some(Entry::Upstream(_)) => self.close_upstream(cx, t),
                        None => {}
                    }
                }
            }
        }
    }

    fn max_wait(&self) -> Option<Duration> {
        let mut w: Option<Duration> = None;
        let mut bound = |d: Duration| w = Some(w.map_or(d, |x| x.min(d)));
        if !self.ready.is_empty() {
            bound(Duration::ZERO);
        }
        if let Some(d) = self.acceptor.max_wait() {
            bound(d);
        }
        if let Some(d) = self.grace_deadline {
            bound(d.saturating_duration_since(Instant::now()));
        }
        w
    }

    fn keep_running(&self) -> bool {
        !(self.sh.draining && self.slab.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notsent_lowat_follows_what_the_connection_sends() {
        let cfg = ProxyConfig::default();
        let l = sys::tcp_listener(&SocketAddr::from(([127, 0, 0, 1], 0)), false, 4).unwrap();
        let _peer = std::net::TcpStream::connect(sys::local_addr(l.raw()).unwrap()).unwrap();
        let (fd, _) = sys::accept(l.raw()).unwrap();
        let raw = fd.raw();
        let lowat = || sys::getsockopt_int(raw, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT).unwrap();
        let mut c = Client::new(fd, None, true, Interest::READ, Instant::now());
        assert_eq!(lowat(), 0);
        set_notsent_lowat(&c.fd, &mut c.notsent_lowat, true, &cfg);
        assert_eq!(lowat() as usize, cfg.notsent_lowat, "bounded while relaying");
        assert!(c.notsent_lowat);
        set_notsent_lowat(&c.fd, &mut c.notsent_lowat, false, &cfg);
        assert_eq!(lowat(), 0, "unbounded for a large hit");
        // `--notsent-lowat 0` never touches the socket.
        let off = ProxyConfig {
            notsent_lowat: 0,
            ..ProxyConfig::default()
        };
        set_notsent_lowat(&c.fd, &mut c.notsent_lowat, true, &off);
        assert_eq!(lowat(), 0);
    }
}
