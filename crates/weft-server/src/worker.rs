//! One worker: a listener, an event loop and the connections it accepted.
//!
//! Everything a worker touches is its own (connections, file cache, Date,
//! scratch buffer, counters), so the hot path takes no lock. The worker is
//! generic over the event backend; `lib.rs` picks the backend once at start-up
//! and each gets its own compiled loop.
//!
//! Per connection, [`Worker::drive`] runs the cycle: send what is queued; answer
//! every complete request already buffered (pipelined responses are coalesced
//! into one write); read more only when the socket may have some. When it must
//! wait, the connection says for what, and level-triggered backends have their
//! interest updated; edge-triggered registrations never change.
//!
//! Beside this file: `cycle.rs` (the connection cycle and answering a
//! request, shared with the blocking architectures), `slots.rs` (connections
//! asleep between requests, woken, closed), `amped.rs` (helpers and the
//! disk), `handoff.rs` (connections handed over by a front-end) and
//! `blocking.rs` (`--arch mt` and `mp`).

pub(crate) mod amped;
mod blocking;
mod cycle;
mod handoff;
mod slots;

pub(crate) use amped::Wait;
use cycle::{drive_conn, linger_read};
pub(crate) use handoff::Handoff;
use slots::busy;

use crate::accesslog::AccessLog;
use crate::config::ServeConfig;
use crate::conn::{Conn, Slot};
use crate::files::FileCache;
use crate::respond::{self, Persist};
use crate::stats::ServeStats;
use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};
use weft_http::RequestHead;
use weft_io::door::{LISTENER, WAKER};
use weft_io::group::Drain;
use weft_io::sys::{self, Fd};
use weft_io::{accept, pools, timer};
use weft_io::{
    BufPool, Ctx, Door, Event, Handler, Interest, OwnPool, Poller, PoolGauges, Readiness, RecordPool, RegisterError,
    Shutdown, Slab, Token, TrackerStats,
};

/// The helper pool's eventfd (AMPED).
const HELPERS: Token = Token::new(u32::MAX - 3, 0);
/// The file cache's change notices (`--snapshot-check notify`).
const NOTICES: Token = Token::new(u32::MAX - 4, 0);

/// How long a closing connection may linger reading the client's leftovers.
pub(crate) const LINGER: Duration = weft_io::LINGER_TIME;
/// Largest request body skipped to keep a connection alive; larger ones close it.
const MAX_DISCARD: u64 = weft_http::MAX_BODY_DISCARD;
/// Stop coalescing pipelined responses beyond this much queued output.
const COALESCE_MAX: usize = 64 * 1024;
/// Input buffer lent at a connection's first read; grows (up to the head
/// limit) only when a request head does not fit.
const INPUT_BUF: usize = 4096;
/// Idle input buffers a worker keeps for reuse.
const INPUT_POOL_KEEP: usize = 256;
/// Capacity of a fresh output buffer (a head, or a head and a small file).
const OUTPUT_BUF: usize = 4096;
/// Idle output buffers a worker keeps for reuse: enough that connections
/// blocked on a full socket (which hold theirs) rarely empty the pool.
const OUTPUT_POOL_KEEP: usize = 1024;
/// Connection records a worker keeps for reuse (`worker/slots.rs`), and
/// what a quiet second's decay leaves of them.
const RECORDS_KEPT: usize = 256;
const RECORDS_FLOOR: usize = 16;

/// Requests one connection may have answered per pass of the loop: a client
/// with a long pipelined backlog (or one that keeps its socket full) is
/// served in slices, so the other connections of the batch are not starved.
/// Large enough that ordinary pipelining (a browser's few requests, wrk's
/// `--pipeline 16`) finishes in one pass.
const REQUESTS_PER_PASS: u32 = 64;

/// A connection handed over by a front-end (`--handoff-socket`): the
/// channel it came on, its id there, and the bytes the front-end read.
pub(crate) struct Handed<'b> {
    pub(crate) channel: Token,
    pub(crate) id: u64,
    pub(crate) rule: weft_io::handoff::NextRule,
    pub(crate) bytes: &'b [u8],
}

/// What a connection waits for after `drive`.
enum Next {
    Read,
    Write,
    /// Used up its budget of requests for this pass with work left: drive it
    /// again after the batch (no kernel event may come for input already read).
    Resume,
    Close,
}

/// State shared by the connections of one worker (split from the connection
/// table so both can be borrowed at once).
pub(crate) struct Shared<'a> {
    pub(crate) cfg: &'a ServeConfig,
    pub(crate) files: Option<FileCache>,
    pub(crate) head: RequestHead,
    pub(crate) date: weft_http::DateCache,
    pub(crate) rel: Vec<u8>,
    /// The copy path's read buffer (allocated on first use).
    pub(crate) scratch: Vec<u8>,
    /// Input buffers lent to connections while they hold unparsed bytes.
    pub(crate) pool: BufPool,
    /// Output buffers lent to connections while they have bytes to send.
    pub(crate) own_pool: OwnPool,
    /// Records of busy connections, lent while a connection is busy
    /// (`worker/slots.rs`).
    pub(crate) records: RecordPool<Conn>,
    pub(crate) stats: ServeStats,
    /// Response times (head start to response queued), published to the
    /// worker's latency slot about once a second.
    pub(crate) latency: weft_core::metrics::Latency,
    pub(crate) log: Option<AccessLog>,
    pub(crate) draining: bool,
    /// `--cgi` / `--fastcgi`: requests in flight and application connections.
    pub(crate) cgi: Option<crate::cgi::Cgi>,
    /// AMPED: the disk is left to helpers (residency tests, parked requests).
    pub(crate) amped: bool,
    /// What the request being answered waits for (AMPED); the worker parks
    /// the connection and submits it.
    pub(crate) wait: Option<Wait>,
    /// The helpers' queue is full: answer 503 instead of waiting.
    pub(crate) overloaded: bool,
    /// Resuming after a helper loaded the range: skip the residency test.
    pub(crate) loaded: bool,
    /// The `nowait` residency probe's buffer (allocated on first use).
    pub(crate) probe: Vec<u8>,
    /// The IO-Lite object cache (`--object-cache`).
    pub(crate) objects: Option<crate::objects::Objects>,
    /// `--page-cache-admit reuse` (AMPED): drops one-timers' pages.
    pub(crate) admit: Option<crate::admit::Admission>,
    /// Files whose bodies are in flight on connections whose send blocked.
    pub(crate) tails: std::collections::HashMap<Token, amped::InFlight>,
    /// The file the response just answered is sent from (until the flush).
    pub(crate) in_flight: Option<amped::InFlight>,
    /// Large bodies being fed chunk by chunk (`crate::stream`).
    pub(crate) feeds: std::collections::HashMap<Token, crate::stream::Feed>,
    /// Memory-pressure notifications already followed (`crate::memory`).
    pub(crate) pressure_seen: u64,
    /// The access log's cache field for the response just answered: `HIT`
    /// (the body from memory: the object cache or a small file's copy),
    /// `MISS` (read or sent from the file); None: `-`.
    pub(crate) cache_status: Option<&'static str>,
}

/// One worker's handler.
pub struct Worker<'a> {
    shared: Shared<'a>,
    slot: &'a crate::admin::WorkerSlot,
    conns: Slab<Slot>,
    /// The listener, its accept pass and the shutdown waker.
    door: Door,
    refused_logged: u64,
    /// The `tracked` backend's counters, copied after each batch.
    tracker: Option<TrackerStats>,
    /// Connections that used up their budget of requests in this pass with
    /// work left ([`REQUESTS_PER_PASS`]); driven again after the batch.
    resume: Vec<Token>,
    /// When the pools may shrink next (about once a second while they hold
    /// more idle buffers than their floor: a burst's buffers do not stay).
    next_decay: Instant,
    /// `--handoff-socket`: front-end channels and their reports.
    handoff: Option<Handoff>,
    /// AMPED: this worker's side of the helper pool.
    helpers: Option<amped::Amped>,
    /// Connections whose helper job finished (reused between wake-ups).
    resumed: Vec<amped::Finished>,
}

impl<'a> Worker<'a> {
    /// A worker over its listener.
    pub fn new(
        cfg: &'a ServeConfig,
        listener: Fd,
        files: Option<FileCache>,
        shutdown: Shutdown,
        waker: RawFd,
        log: Option<AccessLog>,
        slot: &'a crate::admin::WorkerSlot,
    ) -> Worker<'a> {
        Worker {
            slot,
            shared: Shared {
                cfg,
                files,
                head: RequestHead::new(),
                date: weft_http::DateCache::new(),
                rel: Vec::with_capacity(256),
                scratch: Vec::new(),
                pool: BufPool::new(INPUT_BUF, INPUT_POOL_KEEP),
                // Pipelined answers coalesce up to COALESCE_MAX, plus the
                // last one (at most a small file held in memory).
                own_pool: OwnPool::new(
                    OUTPUT_BUF,
                    COALESCE_MAX + cfg.small_file_max as usize + OUTPUT_BUF,
                    OUTPUT_POOL_KEEP,
                ),
                records: RecordPool::default(),
                stats: ServeStats::default(),
                latency: weft_core::metrics::Latency::new(),
                log,
                draining: false,
                cgi: None,
                amped: false,
                wait: None,
                overloaded: false,
                loaded: false,
                probe: Vec::new(),
                tails: std::collections::HashMap::new(),
                in_flight: None,
                feeds: std::collections::HashMap::new(),
                pressure_seen: 0,
                cache_status: None,
                objects: (cfg.object_cache > 0)
                    .then(|| crate::objects::Objects::new(cfg.object_cache, cfg.cache_policy)),
                admit: None,
            },
            conns: Slab::new(),
            door: Door::new(listener, waker, shutdown, cfg.accept_limit),
            refused_logged: 0,
            tracker: None,
            resume: Vec::new(),
            next_decay: Instant::now(),
            handoff: None,
            helpers: None,
            resumed: Vec::new(),
        }
    }

    /// AMPED: leave the disk to `pool`'s helpers (this worker is `index`).
    pub fn with_helpers(mut self, pool: std::sync::Arc<amped::Helpers>, index: usize) -> Self {
        self.helpers = Some(amped::Amped::new(pool, index));
        self.shared.amped = true;
        let reuse = self.shared.cfg.page_cache_admit == crate::admit::PageCacheAdmit::Reuse;
        self.shared.admit = reuse.then(|| crate::admit::Admission::new(self.shared.cfg.file_cache));
        self
    }

    /// Also adopt connections handed over on `listener` (a duplicate of the
    /// `--handoff-socket` listener).
    pub fn with_handoff(mut self, listener: Fd) -> Self {
        self.handoff = Some(Handoff::new(listener));
        self
    }

    /// Answer the `--cgi` / `--fastcgi` prefixes (`index`: this worker's).
    pub fn with_cgi(mut self, index: usize) -> Self {
        if let Some(c) = &self.shared.cfg.cgi {
            self.shared.cgi = Some(crate::cgi::Cgi::new(c.clone(), index, self.shared.cfg.workers));
        }
        self
    }

    /// Register the listener and the shutdown waker.
    pub fn register<P: Poller>(&mut self, cx: &mut Ctx<P>) -> io::Result<()> {
        let reg = |e: RegisterError| io::Error::other(e.to_string());
        // CGI children hold weft's descriptors from vfork to exec: what the
        // loop closes leaves its set first (docs/serve.md, "Children").
        let children = self.shared.cfg.cgi.as_ref().is_some_and(|g| g.starts_processes());
        cx.set_children_share(children);
        self.door.register(cx)?;
        if let Some(h) = &self.helpers {
            cx.register(h.waker(), HELPERS, Interest::READ).map_err(reg)?;
        }
        if let Some(n) = self.shared.files.as_mut().and_then(|f| f.notice()) {
            cx.register(n.fd().raw(), NOTICES, Interest::READ).map_err(reg)?;
        }
        if let Some(h) = &self.handoff {
            h.register(cx)?;
        }
        self.shared.date.update(cx.wall);
        Ok(())
    }

    /// Counters, with this thread's system calls.
    pub fn stats(&self) -> ServeStats {
        let mut s = self.shared.stats;
        s.syscalls = sys::SysCounts::current();
        s.tracker = self.tracker;
        s.open_connections = self.conns.len() as u64;
        s.conn_records_pooled = self.shared.records.len() as u64;
        s.pools = PoolGauges::of(&self.shared.pool, &self.shared.own_pool);
        s.cgi = self.shared.cgi.as_ref().map(crate::cgi::Cgi::stats);
        crate::objects::report_caches(self.shared.files.as_ref(), self.shared.objects.as_ref(), &mut s);
        if let Some(a) = &self.shared.admit {
            (s.admit_dropped_files, s.admit_dropped_bytes) = (a.dropped_files, a.dropped_bytes);
        }
        s
    }

    /// Shrink the pools after a burst (at most once a second).
    fn decay_pools(&mut self, now: Instant) {
        if !pools::decay(
            &mut self.next_decay,
            now,
            &mut self.shared.pool,
            &mut self.shared.own_pool,
        ) {
            return;
        }
        self.shared.records.decay(RECORDS_FLOOR);
        if let Some(n) = self.shared.files.as_mut().and_then(|f| f.notice()) {
            n.sweep();
        }
        crate::memory::each_second(&mut self.shared, &self.conns);
    }

    /// Do the pools hold more idle buffers than they keep for good?
    fn pools_above_floor(&self) -> bool {
        self.shared.pool.above_floor()
            || self.shared.own_pool.above_floor()
            || self.shared.records.len() > RECORDS_FLOOR
    }

    fn accept<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        if !self.door.begin(self.shared.draining) {
            return;
        }
        while let Some((fd, peer)) = self.door.next(cx) {
            self.add_conn(cx, fd, peer, None);
        }
    }

    /// A new connection: accepted, or `handed` over by a front-end with the
    /// bytes it read (they start the input buffer, as if read here).
    fn add_conn<P: Poller>(
        &mut self,
        cx: &mut Ctx<P>,
        fd: Fd,
        peer: Option<std::net::SocketAddr>,
        handed: Option<Handed<'_>>,
    ) {
        if accept::at_max(self.shared.cfg.max_connections, self.conns.len()) {
            // The documented ceiling (N × per-connection + caches).
            self.shared.stats.refused_max_connections += 1;
            accept::refuse(fd);
            self.handed_closed(handed.as_ref());
            return;
        }
        let token = self.conns.next_token();
        let interest = P::CAPS.first_interest(Interest::READ);
        if let Err(e) = cx.register(fd.raw(), token, interest) {
            self.shared.stats.refused_fd_limit += 1;
            if self.refused_logged.is_multiple_of(1000) {
                weft_core::warn!(
                    "closing connection from {}: {e} ({} refused so far)",
                    peer.map(|p| p.to_string()).unwrap_or_else(|| "?".into()),
                    self.refused_logged + 1
                );
            }
            self.refused_logged += 1;
            accept::refuse(fd);
            self.handed_closed(handed.as_ref());
            return;
        }
        self.shared.stats.accepted += 1;
        let now = cx.now;
        let records = &mut self.shared.records;
        let t = self
            .conns
            .insert_with(|t| Slot::Busy(records.lend(Conn::new(fd, t, peer, interest, now))));
        debug_assert_eq!(t, token);
        // A new connection usually has its request already queued (the client
        // wrote right after connecting): try to read it now.
        if let Some(c) = busy(&mut self.conns, token) {
            c.may_read = true;
            if let Some(h) = handed {
                self.shared.stats.handoffs += 1;
                c.handed = Some(crate::conn::HandedAt::new(h.channel, h.id, h.rule));
                if !h.bytes.is_empty() {
                    let n = h.bytes.len();
                    let max = n.max(self.shared.cfg.limits.max_head + 1024);
                    let room = c.input.reserve(n, max, &mut self.shared.pool);
                    let k = n.min(room);
                    c.input.spare_mut()[..k].copy_from_slice(&h.bytes[..k]);
                    c.input.commit(k);
                    c.head_started = Some(now);
                    c.last_activity = now;
                }
            }
        }
        self.drive(cx, token);
    }

    /// A handed-over connection that was never adopted counts as closed.
    fn handed_closed(&mut self, handed: Option<&Handed<'_>>) {
        if let (Some(h), Some(hs)) = (handed, self.handoff.as_mut()) {
            hs.closed(h.channel, h.id);
        }
    }

    /// Run the connection's cycle and settle what it waits for.
    fn drive<P: Poller>(&mut self, cx: &mut Ctx<P>, token: Token) {
        self.wake(token);
        let Some(c) = busy(&mut self.conns, token) else {
            return;
        };
        if c.parked {
            // Waiting for a helper: events are remembered (`may_read`), the
            // helper's answer drives it. Zero-copy completions (EPOLLERR) are read.
            crate::stream::reap(c, &mut self.shared);
            return;
        }
        let next = if c.lingering {
            linger_read(c, &mut self.shared.pool)
        } else {
            drive_conn(c, &mut self.shared, self.handoff.as_ref(), cx.now, cx.wall)
        };
        if let Some(wait) = self.shared.wait.take() {
            if !matches!(next, Next::Close) {
                self.park(cx, token, wait);
                return;
            }
        }
        let Some(c) = busy(&mut self.conns, token) else {
            return;
        };
        // Everything read is answered (and sent): the buffers go back to the
        // pools, so a connection waiting for its next request holds none.
        pools::release_idle(
            &mut c.input,
            &mut c.out,
            &mut self.shared.pool,
            &mut self.shared.own_pool,
        );
        let back = matches!(next, Next::Read) && wants_back(c) && handoff::goes_back(self.handoff.as_ref(), c);
        if back && self.give_back(cx, token) {
            return;
        }
        let Some(c) = busy(&mut self.conns, token) else {
            return;
        };
        match next {
            Next::Close => self.close(cx, token),
            Next::Read | Next::Write | Next::Resume => {
                let want = if matches!(next, Next::Write) {
                    Interest::WRITE
                } else {
                    Interest::READ
                };
                // `may_read` is this connection's readiness view (cleared by
                // EAGAIN or a short read); waiting to write means a write came
                // up short. A readiness-tracking backend keeps both.
                cx.learned(
                    c.fd.raw(),
                    Readiness {
                        readable: c.may_read,
                        writable: !matches!(next, Next::Write),
                    },
                );
                if !P::CAPS.fixed_interest && c.interest != want {
                    if cx.reregister(c.fd.raw(), token, want).is_err() {
                        self.close(cx, token);
                        return;
                    }
                    c.interest = want;
                }
                if matches!(next, Next::Resume) && !c.resume_queued {
                    c.resume_queued = true;
                    self.resume.push(token);
                }
                schedule(c, self.shared.cfg, self.shared.draining, cx);
                if matches!(next, Next::Read) {
                    self.sleep(token);
                }
            }
        }
    }

    /// The shutdown waker fired: on a stop request (once), stop accepting
    /// and drain.
    fn woken<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        if !self.door.woken(cx) || self.shared.draining {
            return;
        }
        self.shared.draining = true;
        self.door.close_with_grace(cx, self.shared.cfg.grace);
        if let Some(h) = self.handoff.as_mut() {
            h.stop_listening(cx);
        }
        for t in self.conns.tokens() {
            if self.drain_idle(cx, t) {
                continue;
            }
            let Some(c) = busy(&mut self.conns, t) else {
                continue;
            };
            // A CGI request in flight is finished like a response being sent.
            let idle = c.is_idle() && !c.lingering && !crate::cgi::busy(&self.shared, c);
            match Drain::of(idle, c.last_activity, cx.now) {
                Drain::KeepUntil(until) => {
                    c.deadline = until;
                    timer::arm(cx, t, until, &mut c.timer_at);
                }
                Drain::Close => self.close(cx, t),
                // A response being sent is the connection's last; a request
                // still arriving is answered with `Connection: close`
                // (answer() sees `draining`).
                Drain::Finish => {
                    if c.has_output() {
                        c.close_after = true;
                    }
                }
            }
        }
    }
}

impl<P: Poller> Handler<P> for Worker<'_> {
    fn on_event(&mut self, cx: &mut Ctx<P>, ev: Event) {
        match ev.token {
            LISTENER => self.accept(cx),
            WAKER => self.woken(cx),
            HELPERS => self.helpers_done(cx),
            NOTICES => {
                if let Some(n) = self.shared.files.as_mut().and_then(|f| f.notice()) {
                    // Read to EAGAIN. A readiness-tracking backend is told, or
                    // it offers the descriptor at every pass of its table from
                    // the first change on: 32 reads per request under load.
                    n.take();
                    cx.learned(n.fd().raw(), Readiness::default());
                }
            }
            handoff::LISTENER => {
                if !self.shared.draining {
                    self.accept_channels(cx);
                }
            }
            token if Handoff::is_channel(token) => self.read_channel(cx, token),
            // cgi: an application connection; drive the client it serves.
            token if crate::cgi::is_upstream(token) => {
                if let Some(client) = crate::cgi::on_event(&mut self.shared, token, &ev) {
                    self.drive(cx, client);
                }
            }
            token => {
                self.wake(token);
                let Some(c) = busy(&mut self.conns, token) else {
                    // Stale: the connection was closed earlier in this batch.
                    return;
                };
                ev.merge_read(&mut c.may_read, &mut c.read_closed);
                self.drive(cx, token);
            }
        }
    }

    fn timer_armed(&self, token: Token, due: Instant) -> bool {
        self.conns.get(token).is_some_and(|c| c.timer_at() == Some(due))
    }

    fn on_timer(&mut self, cx: &mut Ctx<P>, token: Token, due: Instant) -> Option<Instant> {
        let (timer_at, deadline) = self.conns.get_mut(token)?.timer_mut();
        if let Err(next) = timer::expired(timer_at, due, cx.now, deadline) {
            return next;
        }
        // Timed out. A client that never finished its request head gets a 408
        // (best effort, one send); the others (idle ones too) are simply closed.
        if let Some(c) =
            busy(&mut self.conns, token).filter(|c| !c.lingering && !c.has_output() && c.head_started.is_some())
        {
            let mut out = Vec::with_capacity(256);
            respond::simple(
                &mut out,
                408,
                self.shared.date.get(),
                b"",
                "request head not received in time",
                false,
                Persist::Close,
            );
            let _ = sys::send(&c.fd, &out, false);
        }
        self.shared.stats.timeouts += 1;
        self.close(cx, token);
        None
    }

    fn after_batch(&mut self, cx: &mut Ctx<P>) {
        self.shared.date.update(cx.wall);
        if !self.resume.is_empty() {
            // One more slice for each connection that used up its budget;
            // those that use it up again wait for the next pass.
            let mut resume = std::mem::take(&mut self.resume);
            for &t in &resume {
                if let Some(c) = busy(&mut self.conns, t) {
                    c.resume_queued = false;
                    self.drive(cx, t);
                }
            }
            resume.clear();
            if self.resume.is_empty() {
                self.resume = resume;
            }
        }
        if P::CAPS.tracks_readiness {
            self.tracker = cx.poller.tracker_stats();
        }
        // cgi: registrations, timeouts and requests that waited for a connection.
        for t in crate::cgi::after_batch(&mut self.shared, cx) {
            self.drive(cx, t);
        }
        self.decay_pools(cx.now);
        if let (Some(a), Some(files)) = (self.shared.admit.as_mut(), self.shared.files.as_mut()) {
            a.run(cx.now, files);
        }
        if self.door.due(cx) {
            self.accept(cx);
        }
        if let Some(log) = &mut self.shared.log {
            log.flush_if_due(cx.now);
        }
        if let Some(h) = self.handoff.as_mut() {
            h.send_reports(cx);
        }
        if self.door.grace_ended(cx.now, self.conns.len(), "responses") {
            for t in self.conns.tokens() {
                self.close(cx, t);
            }
        }
        // Last: the loop marks the batch published when this returns
        // (`publish_clock`), so nothing this batch counts may come after.
        self.slot.counters.publish(&self.stats());
        self.slot.latency.publish(&mut self.shared.latency, cx.now);
    }

    fn max_wait(&self) -> Option<Duration> {
        let reports = self.handoff.as_ref().is_some_and(Handoff::reports_waiting);
        let decay = self.pools_above_floor() || self.shared.latency.count() > 0;
        timer::soonest([
            (!self.resume.is_empty()).then_some(Duration::ZERO),
            // A front-end's channel was full: try its reports again soon.
            reports.then_some(Duration::from_millis(1)),
            // Wake to shrink the pools and publish the latencies.
            decay.then_some(pools::DECAY_EVERY),
            self.door.max_wait(),
            crate::cgi::max_wait(&self.shared),
            self.shared.log.as_ref().and_then(|l| l.max_wait()),
            (self.shared.admit.as_ref().and_then(|a| a.due())).map(|t| t.saturating_duration_since(Instant::now())),
        ])
    }

    fn keep_running(&self) -> bool {
        !(self.shared.draining && self.conns.is_empty())
    }

    fn publish_clock(&self) -> Option<&weft_core::metrics::PublishClock> {
        Some(&self.slot.clock)
    }
}

impl Drop for Worker<'_> {
    fn drop(&mut self) {
        self.slot.latency.flush(&mut self.shared.latency);
        if let Some(log) = &mut self.shared.log {
            log.flush(Instant::now());
        }
    }
}

/// A handed-over connection whose front-end wants it back after each
/// response, now idle: its answers are sent, and nothing is half done.
fn wants_back(c: &Conn) -> bool {
    c.handed.is_some_and(|h| h.gives_back())
        && c.requests > 0
        && !c.has_output()
        && !c.close_after
        && !c.lingering
        && c.discard == 0
        && !c.eof
}

/// Set the connection's deadline for its state and make sure a timer will see
/// it (`draining`: an idle one is kept as the drain rule says).
fn schedule<P: Poller>(c: &mut Conn, cfg: &ServeConfig, draining: bool, cx: &mut Ctx<P>) {
    c.deadline = if c.lingering {
        c.deadline
    } else if c.has_output() {
        c.last_activity + cfg.send_timeout
    } else if let Some(t) = c.head_started {
        t + cfg.header_timeout
    } else {
        c.last_activity + Drain::idle_for(cfg.idle_timeout, draining)
    };
    timer::arm(cx, c.token, c.deadline, &mut c.timer_at);
}
