//! One worker's origin connections while a site is boosted: per origin a
//! *lane* of at most `conns_per_worker` persistent connections, and per
//! connection a *line*: the client whose response is being read (the
//! upstream's owner, as for any proxy transaction) and the clients whose
//! requests were pipelined behind it, in the order they were written.
//!
//! - A request is placed on an idle connection; else a new one is opened
//!   while the lane has room; else, when it is idempotent and has no body,
//!   its head is queued behind the shortest line below `--pipeline-depth`
//!   (the client then waits, holding no upstream), and the heads queued in
//!   one event batch go out together after it, in one write; else it waits
//!   in the lane's queue. A non-idempotent request, or one with a body, only ever
//!   takes an idle connection, and nothing is pipelined behind it; while one
//!   waits, nothing more is pipelined on its lane, so the lines drain and a
//!   stream of GETs cannot starve it.
//! - When the owner's response ends ([`Worker::release_upstream`]), the
//!   connection passes to the next client in line — its response is next on
//!   the wire, and whatever of it was read stays in the connection's input —
//!   or, with nobody in line, stays idle in the lane (not in the proxy's
//!   pool: it is the lane's). Waiting clients are then woken.
//! - When a connection closes or fails ([`Worker::close_upstream`]), the
//!   clients in its line are placed again when their request may be sent
//!   twice (idempotent, not resent before), else answered 502. An origin that
//!   refuses connections (a restart) makes its requests wait up to
//!   [`PATIENCE`], trying again every [`RETRY_EVERY`].
//! - A client that leaves while its request is in line leaves a response
//!   nobody reads: when its turn comes the connection is closed and the rest
//!   of the line placed again.

use super::{Booster, BoosterStats};
use crate::config::ProxyConfig;
use crate::conn::{Phase, Txn};
use crate::worker::{client_of, pair, upstream_of, Flow, Worker};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use weft_http::Method;
use weft_io::{Ctx, Interest, Poller, Token};

/// How long a request waits for an origin that refuses connections.
pub(crate) const PATIENCE: Duration = Duration::from_secs(5);
/// Pause between connection attempts to an origin that refused one.
pub(crate) const RETRY_EVERY: Duration = Duration::from_millis(50);
/// How often one request may be sent again after its connection died (an
/// origin stopping closes its connections, and then refuses what waits in
/// its listen queue: two losses for one restart).
pub(crate) const MAX_RESENDS: u8 = 4;
/// How often the lane connections' TCP_INFO is read (two system calls a
/// second per connection; the last sample is taken when one closes).
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// One origin's connections in one worker.
#[derive(Default)]
struct Lane {
    conns: Vec<Token>,
    /// Clients waiting for room on a connection.
    waiting: VecDeque<Token>,
    /// The origin refused a connection: no new attempt before this.
    retry_at: Option<Instant>,
    /// Waiting requests that need a connection to themselves: while there
    /// are any, nothing more is pipelined, so lines drain and they get one.
    alone: Vec<Token>,
}

/// The clients of one connection after its owner.
struct Line {
    addr: SocketAddr,
    behind: VecDeque<Token>,
    /// Requests may be pipelined behind the owner's.
    open: bool,
    /// Responses read on the connection, and what its last TCP_INFO
    /// sample had counted (segments sent, received; responses).
    responses: u64,
    seen: (u32, u32, u64),
}

impl Line {
    fn new(addr: SocketAddr, open: bool) -> Line {
        Line {
            addr,
            behind: VecDeque::new(),
            open,
            responses: 0,
            seen: (0, 0, 0),
        }
    }
}

/// A worker's lanes.
#[derive(Default)]
pub(crate) struct Lanes {
    lanes: HashMap<SocketAddr, Lane>,
    lines: HashMap<Token, Line>,
    /// Clients waiting for an origin that refused connections: since when.
    down_since: HashMap<Token, Instant>,
    /// Clients whose request was sent again: how often.
    resends: HashMap<Token, u8>,
    /// Connections with pipelined requests queued this batch: flushed
    /// after it, so one write (and few packets) carries them all.
    unsent: Vec<Token>,
    /// When the lane connections' TCP_INFO is sampled next.
    sample_at: Option<Instant>,
}

impl Lanes {
    /// May `ct`'s request go out once more (it is idempotent, has no body,
    /// nothing of its response was sent, and it was not resent too often)?
    /// Counts the attempt.
    fn may_resend(&mut self, ct: Token, txn: &Txn) -> bool {
        if !pipelinable(txn) || txn.responded {
            return false;
        }
        let n = self.resends.entry(ct).or_insert(0);
        *n += 1;
        *n <= MAX_RESENDS
    }
}

impl Lanes {
    /// When a lane may try its origin again.
    pub(crate) fn next_retry(&self) -> Option<Instant> {
        self.lanes.values().filter_map(|l| l.retry_at).min()
    }
}

/// The booster, when the worker runs one.
pub(crate) fn booster_of(cfg: &ProxyConfig) -> Option<&Booster> {
    cfg.front.as_deref()?.booster()
}

/// May this request share a connection with others (and be sent again)?
fn pipelinable(txn: &Txn) -> bool {
    let idempotent = txn.method.is_safe() || matches!(txn.method, Method::Put | Method::Delete);
    idempotent && !txn.had_body && !txn.connect
}

/// Was the request boosted when it was placed (its site's state then)?
fn boosted(txn: &Txn) -> bool {
    txn.booster_site.is_some_and(|(_, on)| on)
}

/// Is the client waiting in a lane or a line (placed, no upstream)?
fn waits(txn: &Txn) -> bool {
    txn.phase == Phase::Resolve && txn.up.is_none() && !txn.addrs.is_empty()
}

impl Worker<'_> {
    /// Place the routed request of `ct` on its site's origin (503 past
    /// `--max-queue`); it connects (or joins a lane) at its next step.
    pub(crate) fn booster_place<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token, b: &Booster) {
        let Some(txn) = client_of(&mut self.slab, ct).and_then(|c| c.txn.as_mut()) else {
            return;
        };
        let i = b.site_for(&txn.host_value);
        let Some(boosted) = b.admit(i) else {
            self.fail(cx, ct, 503, "origin at capacity (the booster's queue is full)");
            return;
        };
        txn.booster_site = Some((i, boosted));
        txn.addrs.clear();
        txn.addrs.push(b.sites[i].spec.origin);
        txn.addr_index = 0;
        txn.phase = Phase::Connect;
    }

    /// `txn_connect` of a booster's request to `addr`: None to open a new
    /// connection (or for a site not boosted: the proxy's ordinary path).
    pub(crate) fn booster_connect<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token, addr: SocketAddr) -> Option<Flow> {
        let b = booster_of(self.sh.cfg)?;
        let txn = client_of(&mut self.slab, ct)?.txn.as_ref()?;
        if !boosted(txn) {
            return None;
        }
        let pipe_ok = pipelinable(txn);
        let lane = self.lanes.lanes.entry(addr).or_default();
        // A connection that frees up while a request waits to have one to
        // itself is kept for it.
        let reserved = !lane.alone.is_empty() && !lane.alone.contains(&ct);
        let idle = lane
            .conns
            .iter()
            .copied()
            .filter(|_| !reserved)
            .find(|&ut| upstream_of(&mut self.slab, ut).is_some_and(|u| u.owner.is_none()));
        if idle.is_some() || lane.conns.len() < b.conns_per_worker {
            lane.alone.retain(|&t| t != ct);
        }
        if let Some(ut) = idle {
            let u = upstream_of(&mut self.slab, ut)?;
            u.owner = Some(ct);
            u.last_activity = cx.now;
            u.want = Interest::NONE;
            if let Some(line) = self.lanes.lines.get_mut(&ut) {
                line.open = pipe_ok;
            }
            self.sh.stats.upstream_reused += 1;
            return Some(self.begin_exchange(ct, ut));
        }
        let down = lane.retry_at.is_some_and(|t| t > cx.now);
        if !down && lane.conns.len() < b.conns_per_worker {
            // A connection pooled while the site passed straight through
            // joins the lane (else the caller opens one; never a pooled one
            // outside the lane, which would carry a boosted request alone).
            return self.adopt_pooled(cx, ct, addr, pipe_ok);
        }
        let depth = b.cfg.pipeline.max(1);
        // A request sent again goes first on a connection (the origin
        // answers at least that one), never behind others.
        let behind_ok = pipe_ok && !down && lane.alone.is_empty() && !self.lanes.resends.contains_key(&ct);
        let lines = &self.lanes.lines;
        let shortest = lane
            .conns
            .iter()
            .filter_map(|ut| lines.get(ut).map(|l| (*ut, l)))
            .filter(|(_, l)| behind_ok && l.open && l.behind.len() + 1 < depth)
            .min_by_key(|(_, l)| l.behind.len())
            .map(|(ut, _)| ut);
        if let Some(ut) = shortest {
            return Some(self.pipeline_behind(ct, ut, b));
        }
        let lane = self.lanes.lanes.entry(addr).or_default();
        if !pipe_ok && !lane.alone.contains(&ct) {
            lane.alone.push(ct);
        }
        if self.lanes.resends.contains_key(&ct) || !pipe_ok {
            lane.waiting.push_front(ct);
        } else {
            lane.waiting.push_back(ct);
        }
        BoosterStats::bump(&b.stats.queued);
        let txn = client_of(&mut self.slab, ct)?.txn.as_mut()?;
        txn.phase = Phase::Resolve;
        Some(Flow::Wait)
    }

    /// Take a connection to `addr` from the proxy's idle pool into the lane
    /// for `ct`'s request; None when the pool has none.
    fn adopt_pooled<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token, addr: SocketAddr, open: bool) -> Option<Flow> {
        let ut = self.claim_pooled(ct, &addr, cx.now)?;
        self.lanes.lanes.entry(addr).or_default().conns.push(ut);
        self.lanes.lines.insert(ut, Line::new(addr, open));
        Some(self.begin_exchange(ct, ut))
    }

    /// Queue `ct`'s request behind those on `ut`; it goes out after the
    /// batch ([`Worker::booster_tick`]) with the others queued meanwhile.
    fn pipeline_behind(&mut self, ct: Token, ut: Token, b: &Booster) -> Flow {
        let sh = &mut self.sh;
        let Some((c, u)) = pair(&mut self.slab, ct, ut) else {
            return Flow::Closed;
        };
        crate::upstream::queue_request(sh, c, u);
        if let Some(txn) = c.txn.as_mut() {
            txn.phase = Phase::Resolve;
        }
        if let Some(line) = self.lanes.lines.get_mut(&ut) {
            line.behind.push_back(ct);
        }
        if !self.lanes.unsent.contains(&ut) {
            self.lanes.unsent.push(ut);
        }
        BoosterStats::bump(&b.stats.pipelined);
        self.sh.stats.upstream_reused += 1;
        Flow::Wait
    }

    /// Send the requests pipelined during the batch. A connection that
    /// will not take them all keeps the rest: its owner's next exchange
    /// step sends them (a body relay does not), at the latest when the
    /// connection passes to the next in line.
    fn flush_pipelined(&mut self, now: Instant) {
        for ut in std::mem::take(&mut self.lanes.unsent) {
            let Some(u) = upstream_of(&mut self.slab, ut) else {
                continue;
            };
            if !u.may_write || u.connecting || u.out.is_empty() {
                continue;
            }
            match u.out.flush(&u.fd, &[], &mut []) {
                Ok(sent) if sent.blocked => {
                    u.may_write = false;
                    u.want.write = true;
                }
                Ok(_) => u.last_activity = now,
                // The owner's next read or write sees the failure.
                Err(_) => {}
            }
        }
    }

    /// A connection was just opened for `ct`'s request to `addr`: it joins
    /// the lane when the site is boosted and the lane has room.
    pub(crate) fn booster_opened(&mut self, ct: Token, ut: Token, addr: SocketAddr) {
        let Some(b) = booster_of(self.sh.cfg) else { return };
        let Some(txn) = client_of(&mut self.slab, ct).and_then(|c| c.txn.as_ref()) else {
            return;
        };
        if !boosted(txn) {
            return;
        }
        let open = pipelinable(txn);
        let lane = self.lanes.lanes.entry(addr).or_default();
        if lane.conns.len() >= b.conns_per_worker {
            return;
        }
        lane.conns.push(ut);
        self.lanes.lines.insert(ut, Line::new(addr, open));
        BoosterStats::bump(&b.stats.upstream_connects);
    }

    /// The owner's response on `ut` ended. None: not a lane connection;
    /// Some(true): handled (passed to the next in line, or closed);
    /// Some(false): it goes idle in its lane (the caller parks it, not in
    /// the proxy's pool) — then [`Worker::booster_wake`] its lane.
    pub(crate) fn booster_release<P: Poller>(&mut self, cx: &mut Ctx<P>, ut: Token, reusable: bool) -> Option<bool> {
        let b = booster_of(self.sh.cfg)?;
        let line = self.lanes.lines.get_mut(&ut)?;
        let u = upstream_of(&mut self.slab, ut)?;
        BoosterStats::bump(&b.stats.upstream_responses);
        line.responses += 1;
        if let Some(owner) = u.owner {
            self.lanes.down_since.remove(&owner);
            self.lanes.resends.remove(&owner);
        }
        if b.cfg.delayed_ack && reusable {
            // The kernel returns to quick ACKs by itself: off again after
            // every response (the first window went out quick).
            let _ = weft_io::sys::set_quickack(&u.fd, false);
        }
        if !reusable || self.sh.draining {
            self.close_upstream(cx, ut);
            return Some(true);
        }
        let Some(next) = line.behind.pop_front() else {
            line.open = true;
            return Some(false);
        };
        let addr = line.addr;
        line.open = true;
        let txn = client_of(&mut self.slab, next)
            .and_then(|c| c.txn.as_mut())
            .filter(|t| waits(t));
        let Some(txn) = txn else {
            // Its client left: nobody reads that response.
            self.close_upstream(cx, ut);
            return Some(true);
        };
        txn.up = Some(ut);
        txn.phase = Phase::Exchange;
        let u = upstream_of(&mut self.slab, ut)?;
        u.owner = Some(next);
        u.last_activity = cx.now;
        u.want = Interest::NONE;
        u.deadline = None;
        self.ready.push(next);
        self.booster_wake(addr);
        Some(true)
    }

    /// Connection `ut` was closed (`sent`: its requests had gone out): its
    /// line is placed again or answered 502.
    pub(crate) fn booster_closed<P: Poller>(&mut self, cx: &mut Ctx<P>, ut: Token, sent: bool) {
        // Outside booster mode a closing upstream pays one config check, no map lookup.
        let Some(b) = booster_of(self.sh.cfg) else { return };
        let Some(line) = self.lanes.lines.remove(&ut) else {
            return;
        };
        if let Some(lane) = self.lanes.lanes.get_mut(&line.addr) {
            lane.conns.retain(|&t| t != ut);
        }
        for ct in line.behind {
            let Some(txn) = client_of(&mut self.slab, ct)
                .and_then(|c| c.txn.as_mut())
                .filter(|t| waits(t))
            else {
                continue;
            };
            if sent && !self.lanes.may_resend(ct, txn) {
                BoosterStats::bump(&b.stats.failed_upstream);
                self.fail(cx, ct, 502, "the origin connection closed before the response");
            } else {
                if sent {
                    BoosterStats::bump(&b.stats.resent);
                }
                txn.phase = Phase::Connect;
            }
            self.ready.push(ct);
        }
        self.booster_wake(line.addr);
    }

    /// `ct`'s connection to its origin failed before a response
    /// (`connected`: after the connection was up). Some: placed again (or
    /// waiting for the origin to come back); None: the caller answers 502.
    pub(crate) fn booster_failed<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token, connected: bool) -> Option<Flow> {
        let b = booster_of(self.sh.cfg)?;
        let txn = client_of(&mut self.slab, ct)?.txn.as_mut()?;
        let addr = *txn.addrs.first()?;
        if !boosted(txn) && !txn.up.is_some_and(|ut| self.lanes.lines.contains_key(&ut)) {
            return None;
        }
        if connected {
            if !self.lanes.may_resend(ct, txn) {
                BoosterStats::bump(&b.stats.failed_upstream);
                return None;
            }
            txn.phase = Phase::Connect;
            BoosterStats::bump(&b.stats.resent);
        } else {
            // The origin refuses connections (a restart?): wait for it.
            let since = *self.lanes.down_since.entry(ct).or_insert(cx.now);
            if cx.now.saturating_duration_since(since) >= PATIENCE {
                self.lanes.down_since.remove(&ct);
                BoosterStats::bump(&b.stats.failed_upstream);
                return None;
            }
            txn.phase = Phase::Resolve;
            let lane = self.lanes.lanes.entry(addr).or_default();
            lane.retry_at = Some(cx.now + RETRY_EVERY);
            lane.waiting.push_front(ct);
        }
        let ut = txn.up.take();
        if let Some(ut) = ut {
            self.close_upstream(cx, ut);
        }
        Some(if connected { Flow::Again } else { Flow::Wait })
    }

    /// Room opened on `addr`'s lane: wake the clients waiting there (they
    /// are placed again at their next step).
    pub(crate) fn booster_wake(&mut self, addr: SocketAddr) {
        let Some(b) = booster_of(self.sh.cfg) else { return };
        let Some(lane) = self.lanes.lanes.get_mut(&addr) else {
            return;
        };
        if lane.retry_at.is_some() {
            return;
        }
        let mut n = b.cfg.pipeline.max(1) + b.conns_per_worker;
        while n > 0 {
            let Some(ct) = lane.waiting.pop_front() else { break };
            let txn = client_of(&mut self.slab, ct)
                .and_then(|c| c.txn.as_mut())
                .filter(|t| waits(t));
            let Some(txn) = txn else {
                // Its client left, or its request ended some other way.
                lane.alone.retain(|&t| t != ct);
                continue;
            };
            txn.phase = Phase::Connect;
            self.ready.push(ct);
            n -= 1;
        }
    }

    /// After each batch: lanes whose origin refused a connection try again
    /// when their pause is over; stale waiting records go.
    pub(crate) fn booster_tick(&mut self, now: Instant) {
        self.flush_pipelined(now);
        if !self.lanes.lines.is_empty() && self.lanes.sample_at.is_none_or(|t| t <= now) {
            self.lanes.sample_at = Some(now + SAMPLE_EVERY);
            let lines: Vec<Token> = self.lanes.lines.keys().copied().collect();
            for ut in lines {
                if let Some(u) = upstream_of(&mut self.slab, ut) {
                    let info = weft_io::sys::tcp_info(&u.fd).ok();
                    self.booster_sample(ut, info);
                }
            }
        }
        let due: Vec<SocketAddr> = self
            .lanes
            .lanes
            .iter_mut()
            .filter(|(_, l)| l.retry_at.is_some_and(|t| t <= now))
            .map(|(a, l)| {
                l.retry_at = None;
                *a
            })
            .collect();
        for addr in due {
            self.booster_wake(addr);
        }
        if self.lanes.down_since.len() > 1024 {
            self.lanes
                .down_since
                .retain(|_, t| now.saturating_duration_since(*t) < PATIENCE * 2);
        }
        if self.lanes.resends.len() > 1024 {
            let slab = &mut self.slab;
            self.lanes.resends.retain(|&ct, _| client_of(slab, ct).is_some());
        }
    }

    /// A lane connection is closing: its last TCP_INFO sample.
    pub(crate) fn booster_closing(&mut self, ut: Token, fd: &weft_io::sys::Fd) {
        // Outside booster mode: one config check, no map lookup.
        if booster_of(self.sh.cfg).is_some() && self.lanes.lines.contains_key(&ut) {
            self.booster_sample(ut, weft_io::sys::tcp_info(fd).ok());
        }
    }

    /// Add what lane connection `ut` counted since its last sample to the
    /// booster's segment counters (the responses with them, so the figure
    /// per request covers the same span).
    fn booster_sample(&mut self, ut: Token, info: Option<weft_io::sys::TcpInfo>) {
        let (Some(b), Some(info)) = (booster_of(self.sh.cfg), info) else {
            return;
        };
        let Some(line) = self.lanes.lines.get_mut(&ut) else {
            return;
        };
        let (out, inn, resp) = line.seen;
        line.seen = (info.segs_out, info.segs_in, line.responses);
        let st = &b.stats;
        let add = |c: &std::sync::atomic::AtomicU64, n: u64| {
            c.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        };
        add(&st.origin_segs_received, u64::from(info.segs_out.wrapping_sub(out)));
        add(&st.origin_segs_sent, u64::from(info.segs_in.wrapping_sub(inn)));
        add(&st.sampled_responses, line.responses - resp);
    }

    /// Draining: idle lane connections close (busy ones when their line ends).
    pub(crate) fn booster_drain<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        let idle: Vec<Token> = self
            .lanes
            .lines
            .keys()
            .copied()
            .filter(|&ut| upstream_of(&mut self.slab, ut).is_some_and(|u| u.owner.is_none()))
            .collect();
        for ut in idle {
            self.close_upstream(cx, ut);
        }
    }
}
