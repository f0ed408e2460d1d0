//! One worker: a listener, an event loop, client and upstream connections.
//!
//! The structure follows `weft serve`'s worker (per-worker loop, slab with
//! generation tokens, one timer per connection, deferred close, graceful
//! drain). Per client connection, `Worker::drive` runs steps until one has
//! to wait:
//!
//! 1. a CONNECT tunnel, if any, is pumped both ways (`txn.rs`);
//! 2. a transaction in flight advances (`txn.rs`): resolve → connect (or take
//!    a pooled connection, `upstream.rs`) → send the request and read the
//!    response head → relay the body (`response.rs` chooses how, `relay.rs`
//!    moves it: copy, splice, or splice + tee into the cache);
//! 3. queued output is flushed (`client.rs`);
//! 4. buffered requests are answered in order (`request.rs`) — from the cache
//!    at once (`cache.rs` finds, `hit.rs` answers), or by starting a
//!    transaction (pipelined requests behind it wait);
//! 5. more input is read (`client.rs`, the one place the client socket is read).
//!
//! Events on an upstream socket drive its owner client. When a transaction
//! ends, both connections go back to normal processing — the client to its
//! next request, the upstream to the pool — with no extra step (the paper's
//! AutoRelease). Level-triggered backends get each socket's interest updated
//! to what its last step waits for; edge-triggered ones are registered once
//! for both directions.
//!
//! This file holds the worker itself: its state, the event handler, timers,
//! the per-batch work and draining; `worker/timeouts.rs` what an expired
//! timer does to a client or an upstream.

mod timeouts;

use crate::acl::Cidr;
use crate::cache::TwoTier;
use crate::config::ProxyConfig;
pub(crate) use crate::conn::{client_of, pair, upstream_of};
use crate::conn::{ClientPool, Entry, Phase, INPUT_BUF, INPUT_BUFS_KEPT};
use crate::disk::{DiskStore, Loaded};
use crate::resolve::{Answer, DnsCache, Resolver};
use crate::stats::{ProxyStats, Slot};
use crate::store::Store;
use crate::upstream::UpstreamPool;
use std::io;
use std::os::fd::{AsFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weft_http::caching::CacheRules;
use weft_http::ResponseHead;
use weft_io::door::{LISTENER, WAKER};
use weft_io::group::Drain;
use weft_io::sys::{self, Fd};
use weft_io::{pools, timer};
use weft_io::{
    BufPool, Ctx, Door, Event, Handler, Interest, OwnPool, PipePool, Poller, PoolGauges, Readiness, RegisterError,
    Shutdown, Slab, Token,
};

const RESOLVER: Token = Token::new(u32::MAX - 2, 0);
/// The disk store's mailbox: loads finished.
const DISK: Token = Token::new(u32::MAX - 4, 0);
/// Collapsed forwarding's mailbox: fills that parked requests waited for ended.
const FILLS: Token = Token::new(u32::MAX - 7, 0);
/// `weft front`: queued requests admitted (`Worker::on_front_admitted`).
const FRONT: Token = Token::new(u32::MAX - 5, 0);
/// The sockmap body verdict's ring buffer: bodies whose last byte has been
/// redirected (`relay/kernel.rs`).
const SOCKMAP_RING: Token = Token::new(u32::MAX - 6, 0);
/// The worker's one timer for read batches (`cut_stalled_batches`).
pub(crate) const BATCH_TIMER: Token = Token::new(u32::MAX - 3, 0);

/// Steps per drive before yielding to other connections.
const MAX_STEPS: usize = 64;
/// Grown input buffers (the chunked relay's) a worker keeps for reuse.
const GROWN_BUFS_KEPT: usize = 16;
/// Capacity of a fresh output buffer (a response or request head).
const OUTPUT_BUF: usize = 2048;
/// Output buffers that grew past this (pipelined answers coalesced) are
/// freed when given back.
const OUTPUT_BUF_MAX: usize = 128 * 1024;
/// How long an upstream may stay quiet while a read batch (`--rcv-lowat`)
/// is pending before the batch is cut and the relay reads what has come.
/// Batches are asked only of an upstream delivering in bulk, which fills them
/// in well under a millisecond on a fast path; this only bounds how long a
/// sender that stalls mid-body has its bytes held (one to two seconds: one
/// worker timer checks every pending batch). Not a timer per body: a near
/// timer behind every body shortens the loop's sleeps, and at 10 ms it cost
/// 13 µs per 256 KiB miss here (100 ms: 6 µs; an ad-hoc A/B of builds with
/// different waits, docs/results.md).
pub(crate) const BATCH_WAIT: Duration = Duration::from_secs(1);

/// What a step leaves the connection doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Run another step.
    Again,
    /// Wait for an event (wants recorded).
    Wait,
    /// Drive again after this batch (fairness).
    Yield,
    /// The client connection is gone.
    Closed,
}

/// A readable event on a pooled upstream: is it stale (nothing there: a
/// completion posted for bytes already read)? Then the readiness is cleared
/// and the connection stays pooled. False: a FIN, unasked bytes or an error.
fn still_idle<P: Poller>(cx: &mut Ctx<P>, slab: &mut Slab<Entry>, t: Token) -> bool {
    let Some(u) = upstream_of(slab, t) else { return false };
    if !sys::empty_now(&u.fd) {
        return false;
    }
    u.may_read = false;
    let read = Readiness {
        readable: true,
        writable: false,
    };
    cx.settled(u.fd.raw(), read, Readiness::default());
    true
}

#[inline]
pub(crate) fn interest(read: bool, write: bool) -> Interest {
    Interest {
        read,
        write,
        hangup: false,
    }
}

/// State a worker's connections share (split from the slab so both can be
/// borrowed at once).
pub(crate) struct Shared<'a> {
    pub(crate) cfg: &'a ProxyConfig,
    pub(crate) index: usize,
    pub(crate) allow: Vec<Cidr>,
    /// `1.1 name` for Via, and `name` for loop detection.
    pub(crate) via: Vec<u8>,
    pub(crate) via_name: Vec<u8>,
    /// The memory and disk stores, in their order.
    pub(crate) cache: TwoTier<'a>,
    pub(crate) pipes: PipePool,
    /// Input buffers lent to client and upstream connections.
    pub(crate) bufs: BufPool,
    /// Output buffers lent to client and upstream connections while a
    /// request is in flight.
    pub(crate) own_pool: OwnPool,
    /// Client records (with their request state) lent to connections
    /// while they are not idle; the idle ones are `Entry::Idle`, counted.
    pub(crate) clients: ClientPool,
    pub(crate) idle_clients: usize,
    /// An empty head (the access log's when a head did not parse).
    pub(crate) blank_head: weft_http::RequestHead,
    /// Client and upstream connections open.
    pub(crate) open_clients: usize,
    pub(crate) open_upstreams: usize,
    /// Response times (see `stats::LATENCY_HELP`), published to the
    /// worker's latency slot about once a second.
    pub(crate) latency: weft_core::metrics::Latency,
    /// `--access-log`: this worker's buffer of lines.
    pub(crate) log: Option<crate::accesslog::Log>,
    /// Idle upstream connections.
    pub(crate) pool: UpstreamPool,
    pub(crate) dns: DnsCache,
    pub(crate) resolver: &'a Resolver,
    pub(crate) stats: ProxyStats,
    pub(crate) date: weft_http::DateCache,
    pub(crate) resp: ResponseHead,
    pub(crate) scratch: Vec<u8>,
    pub(crate) vary_scratch: Vec<u8>,
    /// Recycled relay buffers (copy path).
    pub(crate) relay_bufs: Vec<bytes::BytesMut>,
    /// Recycled tunnel copy buffers.
    pub(crate) tunnel_bufs: crate::tunnel::TunnelBufs,
    /// The sockmap forwarder (`--splice sockmap`), loaded at the first
    /// tunnel or body.
    pub(crate) sockmap: crate::sockmap::KernelFwd,
    /// Its body ring is registered with the event loop (or cannot be).
    pub(crate) sockmap_ring: Option<bool>,
    /// Bodies the ring reported, (client token, upstream cookie).
    pub(crate) sockmap_done: Vec<(u64, u64)>,
    /// The `sockmap_stamp_records` gauge.
    pub(crate) stamp_gauge: crate::sockmap::StampGauge,
    pub(crate) rules: CacheRules,
    pub(crate) draining: bool,
    /// Background revalidations open (`background.rs`; at most
    /// `background::BACKGROUND_MAX`).
    pub(crate) backgrounds: usize,
    /// `--cache-status`: this cache's identifier in `Cache-Status`.
    pub(crate) cache_status: Option<Vec<u8>>,
    /// The background request a request has asked for (a revalidation
    /// after a stale answer, a range fill after a 206): the head to send and
    /// the claim, started once the request's borrows end.
    pub(crate) background_wanted: Option<(Vec<u8>, crate::background::Claim)>,
    /// Range fills under way in the process (`background.rs`); None: off.
    pub(crate) range_fills: Option<Arc<crate::background::RangeFills>>,
}

impl Shared<'_> {
    /// Whether the sockmap forwarder is loaded (at the first call) and its
    /// ring is registered with the event loop (at the first call): bodies
    /// and tunnels need its wake-ups.
    pub(crate) fn sockmap_ring<P: Poller>(&mut self, cx: &mut Ctx<P>) -> bool {
        if self.sockmap_ring.is_none() {
            let fd = self.sockmap.ring_fd();
            let ok = fd.is_some_and(|fd| cx.register(fd, SOCKMAP_RING, Interest::READ).is_ok());
            self.sockmap_ring = Some(ok);
        }
        self.sockmap_ring == Some(true)
    }
}

/// One worker's handler.
pub struct Worker<'a> {
    pub(crate) sh: Shared<'a>,
    slot: &'a Slot,
    pub(crate) slab: Slab<Entry>,
    /// The listener, its accept pass and the shutdown waker.
    pub(crate) door: Door,
    pub(crate) ready: Vec<Token>,
    /// Clients whose relay may be waiting for a read batch.
    pub(crate) batching: Vec<Token>,
    /// BATCH_TIMER is armed.
    pub(crate) batch_timer: bool,
    answers: Vec<Answer>,
    loaded: Vec<Loaded>,
    /// Requests woken by ended fills (reused buffer).
    pub(crate) filled: Vec<crate::fill::Woken>,
    pub(crate) refused_logged: u64,
    /// When the pools may shrink next (about once a second).
    next_decay: Instant,
    /// `weft front --mode handoff`: this worker's channels to the back-ends.
    pub(crate) channels: crate::front::Channels,
    /// `weft front --mode booster`: this worker's origin connections.
    pub(crate) lanes: crate::booster::Lanes,
}

/// What the worker is given at start.
pub struct WorkerSetup<'a> {
    pub cfg: &'a ProxyConfig,
    pub index: usize,
    pub listener: Fd,
    pub shutdown: Shutdown,
    pub store: Option<&'a Mutex<Store>>,
    pub disk: Option<&'a DiskStore>,
    /// Collapsed forwarding's registry (`fill.rs`); None: off.
    pub fills: Option<&'a crate::fill::Fills>,
    /// Range fills under way in the process (`background.rs`); None: off.
    pub(crate) range_fills: Option<Arc<crate::background::RangeFills>>,
    pub pipes: PipePool,
    pub resolver: &'a Resolver,
    pub via_name: String,
    pub slot: &'a Slot,
    pub log: Option<crate::accesslog::Log>,
}

impl<'a> Worker<'a> {
    /// A worker over its listener.
    pub fn new(s: WorkerSetup<'a>) -> Worker<'a> {
        let door = Door::new(s.listener, s.shutdown.waker(s.index), s.shutdown, s.cfg.accept_limit);
        let cache_status = s
            .cfg
            .cache_status
            .then(|| crate::cache_status::id(s.via_name.as_bytes()));
        Worker {
            sh: Shared {
                cfg: s.cfg,
                index: s.index,
                allow: s.cfg.effective_allow(),
                via: format!("1.1 {} (weft)", s.via_name).into_bytes(),
                via_name: s.via_name.into_bytes(),
                cache: TwoTier::new(s.store, s.disk, s.fills, s.index),
                pipes: s.pipes,
                // A few grown buffers (the chunked relay's 128 KiB) are kept,
                // so pooled upstreams need not keep theirs.
                bufs: BufPool::new(INPUT_BUF, INPUT_BUFS_KEPT).keep_large(GROWN_BUFS_KEPT),
                own_pool: OwnPool::new(OUTPUT_BUF, OUTPUT_BUF_MAX, INPUT_BUFS_KEPT),
                clients: ClientPool::default(),
                idle_clients: 0,
                blank_head: weft_http::RequestHead::empty(),
                open_clients: 0,
                open_upstreams: 0,
                latency: weft_core::metrics::Latency::new(),
                log: s.log,
                pool: UpstreamPool::default(),
                dns: DnsCache::new(s.cfg.dns_ttl),
                resolver: s.resolver,
                stats: ProxyStats::default(),
                date: weft_http::DateCache::new(),
                resp: ResponseHead::new(),
                scratch: Vec::with_capacity(1024),
                vary_scratch: Vec::new(),
                relay_bufs: Vec::new(),
                tunnel_bufs: Default::default(),
                sockmap: Default::default(),
                sockmap_ring: None,
                sockmap_done: Vec::new(),
                stamp_gauge: Default::default(),
                rules: crate::store::cache_rules(s.cfg).unwrap_or_default(),
                draining: false,
                backgrounds: 0,
                cache_status,
                background_wanted: None,
                range_fills: s.range_fills,
            },
            slot: s.slot,
            slab: Slab::new(),
            door,
            ready: Vec::new(),
            batching: Vec::new(),
            batch_timer: false,
            answers: Vec::new(),
            loaded: Vec::new(),
            filled: Vec::new(),
            refused_logged: 0,
            next_decay: Instant::now(),
            channels: Default::default(),
            lanes: Default::default(),
        }
    }

    /// Register the listener, the shutdown waker and the resolver's and disk
    /// store's mailboxes.
    pub fn register<P: Poller>(&mut self, cx: &mut Ctx<P>) -> io::Result<()> {
        let reg = |e: RegisterError| io::Error::other(e.to_string());
        self.door.register(cx)?;
        cx.register(self.sh.resolver.waker(self.sh.index), RESOLVER, Interest::READ)
            .map_err(reg)?;
        if let Some(fd) = self.sh.cache.disk_waker() {
            cx.register(fd, DISK, Interest::READ).map_err(reg)?;
        }
        if let Some(fd) = self.sh.cache.fill_waker() {
            cx.register(fd, FILLS, Interest::READ).map_err(reg)?;
        }
        if let Some(front) = self.sh.cfg.front.as_deref() {
            cx.register(front.waker(self.sh.index), FRONT, Interest::READ)
                .map_err(reg)?;
        }
        self.sh.date.update(cx.wall);
        Ok(())
    }

    /// Counters, with this thread's system calls.
    pub fn stats(&self) -> ProxyStats {
        let mut s = self.sh.stats;
        s.syscalls = sys::SysCounts::current();
        let sh = &self.sh;
        s.open_connections = sh.open_clients as u64;
        s.upstream_connections = sh.open_upstreams as u64;
        s.upstream_pooled = sh.pool.len() as u64;
        s.pools = PoolGauges::of(&sh.bufs, &sh.own_pool);
        s.request_state_pooled = sh.clients.len() as u64;
        s.idle_connections = sh.idle_clients as u64;
        s.sockmap_stamp_records = sh.stamp_gauge.last();
        s
    }

    /// Counters at exit: the gauges that are counted now and then, now.
    pub fn final_stats(&mut self) -> ProxyStats {
        self.sh.stamp_gauge.refresh(&self.sh.sockmap, None);
        self.stats()
    }

    /// Shrink the pools after a burst (at most once a second).
    fn decay_pools(&mut self, now: Instant) {
        if !pools::decay(&mut self.next_decay, now, &mut self.sh.bufs, &mut self.sh.own_pool) {
            return;
        }
        self.sh.clients.decay(weft_io::input::DECAY_FLOOR);
    }

    /// Do the pools hold more than they keep for good?
    fn pools_above_floor(&self) -> bool {
        self.sh.bufs.above_floor()
            || self.sh.own_pool.above_floor()
            || self.sh.clients.len() > weft_io::input::DECAY_FLOOR
    }

    /// A client's requests whose responses are out (no transaction, nothing
    /// queued) get their time recorded; an idle client gives its buffers
    /// back and falls asleep (`Entry::Idle`, its record back in the pool).
    fn after_drive(&mut self, ct: Token) {
        let sh = &mut self.sh;
        let Some(c) = client_of(&mut self.slab, ct) else {
            return;
        };
        if c.requests > c.timed && c.txn.is_none() && c.follow.is_none() && c.out.is_empty() {
            let began = c.began.take().unwrap_or(c.last_activity);
            // A fresh clock read (vDSO, no system call), once per drive that
            // ended responses: the loop's cached `now` is the batch's start.
            let d = Instant::now().saturating_duration_since(began);
            for _ in c.timed..c.requests {
                sh.latency.record(d);
            }
            c.timed = c.requests;
        }
        if c.may_sleep() {
            pools::release_idle(&mut c.input, &mut c.out, &mut sh.bufs, &mut sh.own_pool);
            self.sleep_client(ct);
        }
    }

    // ------------------------------------------------------------------
    // Driving a client

    pub(crate) fn drive<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) {
        self.wake_client(ct);
        let before = self.views::<P>(ct);
        self.drive_steps(cx, ct);
        self.report_views(cx, before);
    }

    /// The readiness views of the client `ct` and of its upstream, for a
    /// readiness-tracking backend only (a constant `None` otherwise).
    fn views<P: Poller>(&self, ct: Token) -> [Option<(Token, Readiness)>; 2] {
        if !P::CAPS.tracks_readiness {
            return [None, None];
        }
        let Some(Entry::Client(c)) = self.slab.get(ct) else {
            return [None, None];
        };
        let ut = c.txn.as_ref().and_then(|t| t.up).or(c.tunnel.as_ref().map(|t| t.1));
        [Some(ct), ut].map(|t| t.and_then(|t| self.view(t).map(|(_, r)| (t, r))))
    }

    fn view(&self, t: Token) -> Option<(RawFd, Readiness)> {
        let (fd, readable, writable) = match self.slab.get(t)? {
            Entry::Client(c) => (c.fd.as_ref()?.raw(), c.may_read, c.may_write),
            Entry::Idle(i) => (i.raw_fd()?, i.may_read, i.may_write),
            Entry::Upstream(u) => (u.fd.raw(), u.may_read, u.may_write),
        };
        Some((fd, Readiness { readable, writable }))
    }

    /// Tell a readiness-tracking backend which directions the drive used up
    /// (`Ctx::settled`): the proxy's one EAGAIN report, for every read and
    /// write site (client, upstream, relay, tunnel) at once.
    fn report_views<P: Poller>(&self, cx: &mut Ctx<P>, before: [Option<(Token, Readiness)>; 2]) {
        for (t, was) in before.into_iter().flatten() {
            if let Some((fd, now)) = self.view(t) {
                cx.settled(fd, was, now);
            }
        }
    }

    fn drive_steps<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) {
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
        self.after_drive(ct);
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
                relay.stop_batching(u.fd.as_fd(), &mut self.sh.stats);
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
        let Some(c) = client_of(&mut self.slab, ct) else {
            return;
        };
        // A body in the kernel moves without waking weft: the client's
        // timer watches it (`on_timer` looks at the bytes it acknowledged).
        let in_kernel = c
            .txn
            .as_ref()
            .and_then(|t| t.relay.as_ref())
            .is_some_and(|r| r.in_kernel());
        // A tunnel joined in the kernel writes into both its sockets.
        let tunnel_in_kernel = c.tunnel.as_ref().is_some_and(|(t, _)| t.in_kernel());
        let change = P::CAPS.reregistration(c.interest, c.want, in_kernel || tunnel_in_kernel);
        if let (Some(fd), Some(target)) = (&c.fd, change) {
            if cx.reregister(fd.raw(), ct, target).is_err() {
                self.close_client(cx, ct);
                return;
            }
            c.interest = target;
        }
        let ut = c.txn.as_ref().and_then(|t| t.up).or(c.tunnel.as_ref().map(|t| t.1));
        let in_txn = c.txn.is_some();
        c.deadline = if c.fd.is_none() {
            None
        } else if c.lingering {
            c.deadline
        } else if let Some((t, _)) = c.tunnel.as_ref().filter(|(t, _)| t.draining()) {
            // A sockmap direction that ended or was taken over: nothing
            // tells weft when its destination has been written the
            // redirected bytes; look again soon.
            Some(cx.now + t.drain_wait())
        } else if c.tunnel.is_some() {
            Some(c.last_activity + cfg.tunnel_idle())
        } else if c.want.write || in_kernel {
            Some(c.last_activity + cfg.send_timeout)
        } else if c.fill_wait.is_some() {
            // Waiting for another request's fill (since it parked): not for
            // longer than this.
            Some(c.last_activity + cfg.collapse_timeout)
        } else if c.follow.is_some() {
            // Following a fill that has nothing new (the fill's own upstream
            // timeout ends it first, and its end wakes this one).
            Some(c.last_activity + cfg.upstream_timeout)
        } else if in_txn {
            None
        } else if let Some(t) = c.head_started {
            Some(t + cfg.header_timeout)
        } else {
            Some(c.last_activity + Drain::idle_for(cfg.idle_timeout, self.sh.draining))
        };
        arm(cx, ct, c.deadline, &mut c.timer_at);
        let tunnel = c.tunnel.is_some();
        let Some(ut) = ut else { return };
        let Some(u) = upstream_of(&mut self.slab, ut) else {
            return;
        };
        // A relay's upstream is only read from, by weft or by the psock.
        if let Some(target) = P::CAPS.reregistration(u.interest, u.want, tunnel_in_kernel) {
            if cx.reregister(u.fd.raw(), ut, target).is_err() {
                self.close_client(cx, ct);
                return;
            }
            u.interest = target;
        }
        u.deadline = if tunnel || in_kernel {
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
            return self.step_linger(cx, ct);
        }
        if c.tunnel.is_some() {
            return self.step_tunnel(cx, ct);
        }
        if c.txn.is_some() {
            return self.step_txn(cx, ct);
        }
        self.step_idle(cx, ct)
    }

    // ------------------------------------------------------------------
    // Helper threads' results

    /// The disk store read what parked requests asked for: answer them again.
    fn on_loaded<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        self.sh.cache.take_loaded(&mut self.loaded);
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

    /// The verdicts' ring: bodies whose last byte has been redirected and
    /// tunnel sources past their redirect budget; drive their clients (which
    /// queue the end-of-stream marker, or take the tunnel's direction over).
    fn on_sockmap_ring<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        let mut done = std::mem::take(&mut self.sh.sockmap_done);
        if let Some(f) = self.sh.sockmap.ready() {
            f.take_done(&mut done);
        }
        self.sh.sockmap.reap();
        for &(token, cookie) in &done {
            let ct = Token(token);
            let Some(c) = client_of(&mut self.slab, ct) else {
                continue;
            };
            if c.tunnel.as_ref().is_some_and(|(t, _)| t.kernel_passing(cookie)) {
                self.drive(cx, ct);
                continue;
            }
            let Some(relay) = c.txn.as_mut().and_then(|t| t.relay.as_mut()) else {
                continue;
            };
            if relay.kernel_redirected(cookie) {
                self.drive(cx, ct);
            }
        }
        done.clear();
        self.sh.sockmap_done = done;
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
    // Shutdown

    /// The shutdown waker fired: on a stop request (once), stop accepting
    /// and drain.
    fn woken<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        if !self.door.woken(cx) || self.sh.draining {
            return;
        }
        self.sh.draining = true;
        self.door.close_with_grace(cx, self.sh.cfg.grace);
        for ut in self.sh.pool.drain() {
            if let Some(Entry::Upstream(mut u)) = self.slab.remove(ut) {
                self.sh.open_upstreams -= 1;
                pools::release_all(&mut u.buf, &mut u.out, &mut self.sh.bufs, &mut self.sh.own_pool);
                cx.close_later(u.fd, true);
            }
        }
        self.booster_drain(cx);
        for t in self.slab.tokens() {
            if self.drain_idle(cx, t) {
                continue;
            }
            let Some(c) = client_of(&mut self.slab, t) else {
                continue;
            };
            match Drain::of(c.is_idle() && !c.lingering, c.last_activity, cx.now) {
                Drain::KeepUntil(until) => {
                    c.deadline = Some(until);
                    arm(cx, t, until, &mut c.timer_at);
                }
                Drain::Close => self.close_client(cx, t),
                Drain::Finish => c.close_after = true,
            }
        }
    }
}

pub(crate) use weft_io::timer::arm;

impl<P: Poller> Handler<P> for Worker<'_> {
    fn on_event(&mut self, cx: &mut Ctx<P>, ev: Event) {
        match ev.token {
            LISTENER => self.accept(cx),
            WAKER => self.woken(cx),
            // The mailboxes' eventfds are drained by taking what they hold
            // (a handoff channel reports its EAGAIN where it reads).
            RESOLVER => {
                cx.learned(self.sh.resolver.waker(self.sh.index), Readiness::default());
                self.on_answers(cx);
            }
            DISK => {
                if let Some(fd) = self.sh.cache.disk_waker() {
                    cx.learned(fd, Readiness::default());
                }
                self.on_loaded(cx);
            }
            FILLS => {
                if let Some(fd) = self.sh.cache.fill_waker() {
                    cx.learned(fd, Readiness::default());
                }
                self.on_filled(cx);
            }
            SOCKMAP_RING => self.on_sockmap_ring(cx),
            FRONT => {
                if let Some(front) = self.sh.cfg.front.as_deref() {
                    cx.learned(front.waker(self.sh.index), Readiness::default());
                }
                self.on_front_admitted(cx);
            }
            token if crate::front::channel_of(token).is_some() => {
                if let Some(s) = crate::front::channel_of(token) {
                    self.on_handoff_channel(cx, s);
                }
            }
            token => {
                let owner = match self.slab.get_mut(token) {
                    None => return,
                    Some(Entry::Client(c)) => {
                        ev.merge_read(&mut c.may_read, &mut c.read_closed);
                        c.may_write |= ev.may_write();
                        Some(token)
                    }
                    // `drive` wakes it.
                    Some(Entry::Idle(i)) => {
                        ev.merge_read(&mut i.may_read, &mut i.read_closed);
                        i.may_write |= ev.may_write();
                        Some(token)
                    }
                    Some(Entry::Upstream(u)) => {
                        u.may_read |= ev.may_read();
                        u.may_write |= ev.may_write();
                        u.owner
                    }
                };
                match owner {
                    Some(ct) => self.drive(cx, ct),
                    None => {
                        // An idle pooled connection: the upstream closed it
                        // (or sent something unasked). Either way it is done
                        // — unless the wake-up is stale (uring posts a
                        // multishot poll's completion for bytes the relay
                        // has since read; measured, 15 % of pooled upstreams
                        // were closed so): a peek tells, one call instead of
                        // a new connection.
                        if ev.error || (ev.readable && !still_idle(cx, &mut self.slab, token)) {
                            self.close_upstream(cx, token);
                        }
                    }
                }
            }
        }
    }

    fn timer_armed(&self, token: Token, due: Instant) -> bool {
        match self.slab.get(token) {
            Some(Entry::Client(c)) => c.timer_at == Some(due),
            Some(Entry::Idle(i)) => i.timer_at == Some(due),
            Some(Entry::Upstream(u)) => u.timer_at == Some(due),
            None => token == BATCH_TIMER,
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
                if let Err(next) = timer::expired(&mut c.timer_at, due, cx.now, c.deadline) {
                    return next;
                }
                Who::Client
            }
            // An idle keep-alive client timed out: woken to be closed.
            Entry::Idle(i) => {
                if let Err(next) = timer::expired(&mut i.timer_at, due, cx.now, i.deadline) {
                    return next;
                }
                self.wake_client(token);
                Who::Client
            }
            Entry::Upstream(u) => {
                if let Err(next) = timer::expired(&mut u.timer_at, due, cx.now, u.deadline) {
                    return next;
                }
                Who::Upstream(u.owner, u.connecting, u.want.read || u.want.write)
            }
        };
        if !matches!(who, Who::Upstream(None, _, _)) {
            // An idle pooled connection expiring is housekeeping, not a timeout.
            self.sh.stats.timeouts += 1;
        }
        match who {
            Who::Client => self.client_timed_out(cx, token),
            Who::Upstream(owner, connecting, waiting) => self.upstream_timed_out(cx, token, owner, connecting, waiting),
        }
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
        self.decay_pools(cx.now);
        self.booster_tick(cx.now);
        if let Some(log) = &mut self.sh.log {
            log.flush_if_due(cx.now);
        }
        if self.door.due(cx) {
            self.accept(cx);
        }
        if self.door.grace_ended(cx.now, self.slab.len(), "transfers") {
            for t in self.slab.tokens() {
                match self.slab.get(t) {
                    Some(Entry::Client(_) | Entry::Idle(_)) => self.close_client(cx, t),
                    Some(Entry::Upstream(_)) => self.close_upstream(cx, t),
                    None => {}
                }
            }
        }
        // Last: the loop marks the batch published when this returns
        // (`publish_clock`), so nothing this batch counts may come after.
        self.sh.stamp_gauge.refresh(&self.sh.sockmap, Some(cx.now));
        self.slot.publish(&self.stats());
        self.slot.latency.publish(&mut self.sh.latency, cx.now);
    }

    fn max_wait(&self) -> Option<Duration> {
        let decay = self.pools_above_floor() || self.sh.latency.count() > 0;
        timer::soonest([
            (!self.ready.is_empty()).then_some(Duration::ZERO),
            // Wake to shrink the pools and publish the latencies.
            decay.then_some(pools::DECAY_EVERY),
            self.door.max_wait(),
            self.sh.log.as_ref().and_then(|l| l.max_wait()),
            self.lanes
                .next_retry()
                .map(|t| t.saturating_duration_since(Instant::now())),
        ])
    }

    fn keep_running(&self) -> bool {
        !(self.sh.draining && self.slab.is_empty())
    }

    fn publish_clock(&self) -> Option<&weft_core::metrics::PublishClock> {
        Some(&self.slot.clock)
    }
}

impl Drop for Worker<'_> {
    fn drop(&mut self) {
        // The last latencies recorded reach the slot (a scrape after stop,
        // and the sum at exit, see them).
        self.slot.latency.flush(&mut self.sh.latency);
        if let Some(log) = &mut self.sh.log {
            log.flush(Instant::now());
        }
    }
}
