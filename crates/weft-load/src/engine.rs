//! The client engine: one event loop per thread over weft-io's `run`.
//!
//! **Arrivals.** Open loop (httperf): the next session (or, for PolyMix and
//! logged-timing traces, the next request) is due at `t0 + offset`, where the
//! offset is a running sum of inter-arrival draws counted from the start time —
//! never from the moment the previous arrival was handled — so a late wake-up
//! delays arrivals by at most one loop iteration and never lowers the rate.
//! One loop timer (the `ARRIVAL` token) is re-armed for the next due time;
//! every arrival already due when it fires starts at once. Closed loop: N
//! sessions start at `t0`; each restarts (after `--think`) when it ends.
//!
//! **Connections.** A session owns one connection at a time; an agent (robot,
//! client host) owns a small pool; `--idle` connections are owned by nobody,
//! carry no request and are reopened when the server closes them (idleconn).
//! Per request the engine makes no allocation (buffers are reused and recycled
//! between connections) and no system call beyond connect, write, read and
//! close: the first request is written optimistically right after the
//! non-blocking connect (on loopback the connection is already established),
//! the socket is registered once with the interest it needs, and a reply that
//! completes does not trigger a speculative read. Timers live in the loop's
//! heap, one armed entry per connection, moved lazily.
//!
//! **Replies** are parsed with weft-http's `ResponseHead` (heads) and
//! `ChunkedDecoder` (bodies) straight out of one per-thread read buffer; only
//! a head split across reads is copied, into the connection's small head
//! buffer. `--verify` compares body bytes with slices of the deterministic
//! content pattern as they arrive.

use crate::config::{Arrivals, ClientClose, LoadConfig};
use crate::request::Writer;
use crate::ssl::{Handshake, Side};
use crate::stats::Stats;
use crate::workload::{Arrival, Cursor, Drive, Next, Out, Prepared, ReqMeta, Workload};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_http::{BodyFraming, ChunkedDecoder, Limits, ResponseHead};
use weft_io::sys::{self, Fd};
use weft_io::{Ctx, Event, Handler, Interest, Poller, Slab, Token};

const ARRIVAL: Token = Token::new(u32::MAX, 0);
const TICK: Token = Token::new(u32::MAX - 1, 0);
/// Timer tokens of sessions waiting to start carry this bit in their index.
const SESSION_BIT: u32 = 1 << 31;
/// Per-thread read buffer.
const READ_BUF: usize = 64 * 1024;
/// Most requests waiting at one agent; later arrivals are dropped and counted.
const MAX_PENDING: usize = 10_000;
/// Recycled buffer sets kept per thread.
const MAX_SPARE: usize = 4096;
/// Most arrivals started per timer callback. A loop that runs behind catches
/// up in slices of this many, with a round of I/O events between them: when
/// connect() itself slows down (thousands of connections piled up behind a
/// stalled server make the kernel's port search long), starting every due
/// arrival at once would starve the replies that let connections close, and
/// the client would never recover.
const ARRIVAL_BATCH: u32 = 64;

/// Open-loop arrival times, in seconds after the start: a running sum of
/// inter-arrival draws counted from the start (never from when the previous
/// arrival was handled), so the offered rate does not drift.
#[derive(Clone, Debug)]
pub struct Schedule {
    kind: Arrivals,
    rate: f64,
    phase: f64,
    count: u64,
    next: f64,
}

impl Schedule {
    /// Arrivals at `rate` per second, the first at `phase` seconds.
    pub fn new(kind: Arrivals, rate: f64, phase: f64) -> Schedule {
        Schedule {
            kind,
            rate,
            phase,
            count: 0,
            next: phase,
        }
    }

    /// When the next arrival is due.
    #[inline]
    pub fn due(&self) -> f64 {
        self.next
    }

    /// The next arrival was made: draw the one after.
    pub fn advance<R: Rng>(&mut self, rng: &mut R) {
        self.count += 1;
        match self.kind {
            // The k-th arrival at phase + k/R, computed from the count so no
            // rounding error accumulates.
            Arrivals::Fixed => self.next = self.phase + self.count as f64 / self.rate,
            Arrivals::Exp => {
                let e: f64 = rand_distr::Distribution::sample(&rand_distr::Exp1, rng);
                self.next += e / self.rate;
            }
            Arrivals::Uniform => self.next += 2.0 * rng.gen::<f64>() / self.rate,
        }
    }
}

/// Live counters of one thread, read by the progress line.
#[derive(Default)]
#[repr(align(64))]
pub struct Slot {
    /// Requests written.
    pub requests: AtomicU64,
    /// Replies received.
    pub replies: AtomicU64,
    /// Errors.
    pub errors: AtomicU64,
    /// Connections open.
    pub open: AtomicU64,
}

/// What one thread does.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Thread index.
    pub index: usize,
    /// Threads in the run.
    pub threads: usize,
    /// This thread's arrival rate (open loop).
    pub rate: Option<f64>,
    /// Offset of the first arrival, seconds.
    pub phase: f64,
    /// Closed-loop clients.
    pub clients: usize,
    /// Most arrivals (sessions, or requests for request-driven workloads).
    pub budget: Option<u64>,
    /// Idle connections to hold.
    pub idle: usize,
    /// Random seed of this thread.
    pub seed: u64,
}

/// What the threads share (read-only).
pub struct Shared<'a> {
    /// The configuration.
    pub cfg: &'a LoadConfig,
    /// Renders requests.
    pub writer: &'a Writer,
    /// Renders requests inside CONNECT tunnels (origin form).
    pub tunnel: &'a Writer,
    /// The workload data.
    pub prepared: &'a Arc<Prepared>,
    /// Where connections go (the proxy, or the origin).
    pub target: SocketAddr,
    /// Start time (common to all threads).
    pub t0: Instant,
    /// Stop early (Ctrl-C).
    pub stop: &'a AtomicBool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    Session(Token),
    Pool(u32),
    Idle,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for the CONNECT reply of an SSL-emulation tunnel.
    Tunnel,
    /// Exchanging emulated handshake messages.
    Handshake,
    /// Requests being written or awaited.
    Active,
    /// Requests rendered, waiting for the think time to pass.
    Thinking,
    /// Nothing outstanding (pooled keep-alive, or an idle connection).
    Idle,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Body {
    Length(u64),
    Chunked,
    UntilClose,
}

struct Rx {
    in_head: bool,
    got_any: bool,
    status: u16,
    keep_alive: bool,
    body: Body,
    pos: u64,
    chunked: ChunkedDecoder,
    verify: bool,
    verify_ok: bool,
    content: usize,
    /// The reply's head has an `Age` field: a cache answered it.
    cached: bool,
}

impl Rx {
    fn new() -> Rx {
        Rx {
            in_head: true,
            got_any: false,
            status: 0,
            keep_alive: true,
            body: Body::Length(0),
            pos: 0,
            chunked: ChunkedDecoder::new(),
            verify: false,
            verify_ok: true,
            content: 0,
            cached: false,
        }
    }
}

struct SslState {
    hs: Handshake,
    flights: &'static [(Side, usize)],
    /// Index of the next message.
    next: usize,
    /// Bytes still expected from the server.
    need: usize,
    /// Size of the server flight being received.
    need_total: usize,
}

/// Buffers kept from closed connections for new ones.
struct Bufs {
    out: Vec<u8>,
    head: Vec<u8>,
    inflight: VecDeque<ReqMeta>,
}

struct Conn {
    fd: Fd,
    token: Token,
    owner: Owner,
    phase: Phase,
    interest: Interest,
    opened: Instant,
    connected: bool,
    out: Vec<u8>,
    out_pos: usize,
    inflight: VecDeque<ReqMeta>,
    /// Requests in `inflight` before this index are written.
    sent: usize,
    rx: Rx,
    head_buf: Vec<u8>,
    uses: u32,
    use_limit: u32,
    deadline: Instant,
    think_until: Option<Instant>,
    timer_at: Option<Instant>,
    may_read: bool,
    replies: u32,
    /// A request asked the server to close (or the server said it will).
    close_after: bool,
    ssl: Option<SslState>,
}

impl Conn {
    #[inline]
    fn has_output(&self) -> bool {
        self.out_pos < self.out.len()
    }
    /// Waiting for the server (a timeout applies).
    #[inline]
    fn busy(&self) -> bool {
        match self.phase {
            Phase::Tunnel | Phase::Handshake => true,
            Phase::Active => self.has_output() || !self.inflight.is_empty() || !self.connected,
            Phase::Thinking => false,
            Phase::Idle => !self.connected,
        }
    }
}

struct Session {
    conn: Option<Token>,
    calls_left: u32,
    persist: bool,
    ssl: Option<Handshake>,
    cursor: Cursor,
    closed_loop: bool,
    /// Waiting to start (closed-loop think between sessions).
    start_at: Option<Instant>,
}

#[derive(Default)]
struct Pool {
    open: usize,
    idle: Vec<Token>,
    pending: VecDeque<u64>,
}

/// Why a request or connection failed.
#[derive(Clone, Copy, Debug)]
enum Fail {
    Errno(Option<i32>),
    /// Closed by the server before any byte of an awaited reply.
    Reset,
    /// Malformed or truncated reply.
    Bad,
    Timeout,
}

/// How a connection ends.
#[derive(Clone, Copy, Debug)]
enum End {
    /// The client is done with it.
    Done,
    /// The server closed it (or announced it would) with nothing outstanding.
    ServerClosed,
    /// The workload aborts the transaction in progress (not an error).
    Aborted,
    /// An error.
    Failed(Fail),
}

enum Flow {
    Continue,
    Close(End),
}

/// Everything but the connection table (split so both can be borrowed).
struct Core<'a> {
    sh: &'a Shared<'a>,
    plan: Plan,
    wl: Workload,
    drive: Drive,
    rng: SmallRng,
    sessions: Slab<Session>,
    pools: Vec<Pool>,
    conns_per_agent: usize,
    /// The workload's share of transactions aborted on purpose.
    abort_prob: f64,
    rbuf: Vec<u8>,
    spare: Vec<Bufs>,
    head: ResponseHead,
    limits: Limits,
    stats: Stats,
    timeout: Duration,
    stop_at: Option<Instant>,
    stopping: bool,
    hard_stop: Option<Instant>,
    /// Open-loop arrival times.
    schedule: Schedule,
    /// Arrivals made (for the fixed schedule and the budget).
    arrivals: u64,
    arrivals_done: bool,
    timed_next: Option<Arrival>,
    followups: Vec<u64>,
    to_dispatch: Vec<u32>,
    open: u64,
    arrivals_dropped: u64,
    /// Only idle connections: the run lasts its duration.
    idle_only: bool,
    /// Next `--local-addrs` entry.
    next_local: usize,
    /// Next `--local-ports` offset (advances by the thread count).
    next_port: u32,
    slot: &'a Slot,
}

/// One thread's handler.
pub struct Engine<'a> {
    conns: Slab<Conn>,
    core: Core<'a>,
}

fn second(t0: Instant, now: Instant) -> usize {
    now.saturating_duration_since(t0).as_secs() as usize
}

impl<'a> Engine<'a> {
    /// An engine for one thread.
    pub fn new(sh: &'a Shared<'a>, plan: Plan, slot: &'a Slot) -> Engine<'a> {
        let rate = plan.rate.unwrap_or(0.0);
        let wl = Workload::for_thread(sh.prepared, plan.index, plan.threads, rate);
        let drive = sh.prepared.drive();
        let agents = wl.agents();
        let conns_per_agent = wl.conns_per_agent();
        let abort_prob = wl.abort_prob();
        let mut pools = Vec::new();
        pools.resize_with(agents, Pool::default);
        let stop_at = sh.cfg.duration.map(|d| sh.t0 + d);
        let first_local = plan.index;
        let idle_only = plan.idle > 0 && plan.clients == 0 && plan.rate.is_none() && drive == Drive::Sessions;
        Engine {
            conns: Slab::new(),
            core: Core {
                sh,
                rng: SmallRng::seed_from_u64(plan.seed),
                schedule: Schedule::new(sh.cfg.arrivals, plan.rate.unwrap_or(1.0), plan.phase),
                plan,
                wl,
                drive,
                sessions: Slab::new(),
                pools,
                conns_per_agent,
                abort_prob,
                rbuf: vec![0u8; READ_BUF],
                spare: Vec::new(),
                head: ResponseHead::new(),
                limits: Limits::default(),
                stats: Stats::default(),
                timeout: sh.cfg.timeout,
                stop_at,
                stopping: false,
                hard_stop: None,
                arrivals: 0,
                arrivals_done: false,
                timed_next: None,
                followups: Vec::with_capacity(32),
                to_dispatch: Vec::new(),
                open: 0,
                arrivals_dropped: 0,
                idle_only,
                next_local: first_local,
                next_port: first_local as u32,
                slot,
            },
        }
    }

    /// The measurements (after the loop ended).
    pub fn into_stats(self) -> Stats {
        let mut s = self.core.stats;
        s.workload_exhausted |= self.core.wl.exhausted();
        s
    }

    /// Arrivals dropped because an agent had too many waiting.
    pub fn arrivals_dropped(&self) -> u64 {
        self.core.arrivals_dropped
    }

    /// Open the idle connections, start closed-loop clients, arm the timers.
    pub fn start<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        for _ in 0..self.core.plan.idle {
            if self.open_conn(cx, Owner::Idle).is_some() {
                self.core.stats.idle_opened += 1;
            } else if self.core.stats.errors.fd_unavailable > 0 {
                break;
            }
        }
        let t0 = self.core.sh.t0;
        match self.core.drive {
            Drive::Sessions if self.core.plan.rate.is_none() => {
                for _ in 0..self.core.plan.clients {
                    if !self.budget_allows() {
                        break;
                    }
                    self.core.arrivals += 1;
                    self.start_session(cx, true, None);
                }
                self.core.arrivals_done = true;
            }
            Drive::Requests { timed: true } => {
                self.core.timed_next = self.core.wl.next_arrival(&mut self.core.rng);
                match self.core.timed_next {
                    Some(a) => cx.arm_timer(ARRIVAL, t0 + Duration::from_secs_f64(a.at.unwrap_or(0.0))),
                    None => self.core.arrivals_done = true,
                }
            }
            _ => cx.arm_timer(ARRIVAL, t0 + Duration::from_secs_f64(self.core.schedule.due())),
        }
        if let Some(at) = self.core.stop_at {
            cx.arm_timer(TICK, at);
        }
    }

    /// Arrivals due before --duration ended are still to be started.
    fn arrivals_behind(&self) -> bool {
        let (Some(d), false) = (self.core.sh.cfg.duration, self.core.arrivals_done || self.core.stopping) else {
            return false;
        };
        let next = match self.core.drive {
            Drive::Requests { timed: true } => self.core.timed_next.map(|a| a.at.unwrap_or(0.0)),
            _ if self.core.plan.rate.is_some() => Some(self.core.schedule.due()),
            _ => None,
        };
        next.is_some_and(|t| t < d.as_secs_f64()) && self.budget_allows()
    }

    fn budget_allows(&self) -> bool {
        self.core.plan.budget.is_none_or(|b| self.core.arrivals < b)
    }

    fn arrive<P: Poller>(&mut self, cx: &mut Ctx<P>) -> Option<Instant> {
        let t0 = self.core.sh.t0;
        let now = Instant::now();
        let mut elapsed = now.saturating_duration_since(t0).as_secs_f64();
        // Nothing due at or after --duration starts, even when the loop runs
        // late: R·D arrivals in D seconds, as httperf's --num-conns makes.
        if let Some(d) = self.core.sh.cfg.duration {
            let end = d.as_secs_f64();
            if elapsed >= end {
                elapsed = end * (1.0 - f64::EPSILON);
                if self.core.schedule.due() > end && self.core.timed_next.is_none_or(|a| a.at.unwrap_or(0.0) > end) {
                    self.core.arrivals_done = true;
                }
            }
        }
        // After ARRIVAL_BATCH arrivals the rest wait for the next round
        // (already due: the timer fires right after the loop's next poll).
        let mut made = 0u32;
        let resume = cx.now + Duration::from_micros(1);
        if let Drive::Requests { timed: true } = self.core.drive {
            while let Some(a) = self.core.timed_next {
                if self.core.stopping || self.core.arrivals_done || !self.budget_allows() {
                    self.core.arrivals_done = true;
                    return None;
                }
                if a.at.unwrap_or(0.0) > elapsed {
                    return Some(t0 + Duration::from_secs_f64(a.at.unwrap_or(0.0)));
                }
                if made == ARRIVAL_BATCH {
                    return Some(resume);
                }
                made += 1;
                self.core.arrivals += 1;
                self.pool_arrival(cx, a.agent, a.item);
                self.core.timed_next = self.core.wl.next_arrival(&mut self.core.rng);
            }
            self.core.arrivals_done = true;
            return None;
        }
        while self.core.schedule.due() <= elapsed {
            if self.core.stopping || self.core.arrivals_done || !self.budget_allows() {
                self.core.arrivals_done = true;
                return None;
            }
            if made == ARRIVAL_BATCH {
                return Some(resume);
            }
            made += 1;
            self.core.arrivals += 1;
            match self.core.drive {
                Drive::Sessions => self.start_session(cx, false, None),
                Drive::Requests { .. } => {
                    if let Some(a) = self.core.wl.next_arrival(&mut self.core.rng) {
                        self.pool_arrival(cx, a.agent, a.item);
                    }
                }
            }
            self.core.schedule.advance(&mut self.core.rng);
        }
        if self.core.arrivals_done {
            return None;
        }
        let due = t0 + Duration::from_secs_f64(self.core.schedule.due());
        // The loop's clock is refreshed once per batch; never re-arm in its past.
        Some(due.max(cx.now + Duration::from_micros(1)))
    }

    // ---------------------------------------------------------------------
    // Sessions

    fn start_session<P: Poller>(&mut self, cx: &mut Ctx<P>, closed_loop: bool, delay: Option<Duration>) {
        if self.core.stopping {
            return;
        }
        let init = self.core.wl.new_session(&mut self.core.rng);
        let cfg = self.core.sh.cfg;
        let calls = if init.calls == 0 {
            match cfg.calls {
                Some(0) => u32::MAX,
                Some(n) => n,
                None if closed_loop => u32::MAX,
                None => 1,
            }
        } else {
            init.calls
        };
        // HTTP/1.0 single-request connections do not ask for keep-alive (the
        // server closes, as httperf's and SPECweb99's HTTP/1.0 clients see it).
        let persist = init.persist && !(cfg.http10 && calls == 1);
        // A restart goes through the timer heap (due at the loop's batch time
        // plus the think time), never straight into connect: a session that
        // fails at once cannot recurse into the next one.
        let start_at = delay.map(|d| cx.now + d);
        let st = self.core.sessions.insert_with(|_| Session {
            conn: None,
            calls_left: calls,
            persist,
            ssl: init.ssl,
            cursor: Cursor::default(),
            closed_loop,
            start_at,
        });
        self.core.stats.sessions += 1;
        if let Some(at) = start_at {
            cx.arm_timer(Token::new(st.index() | SESSION_BIT, st.generation()), at);
            return;
        }
        self.connect_session(cx, st);
    }

    fn connect_session<P: Poller>(&mut self, cx: &mut Ctx<P>, st: Token) {
        let present = self.core.sessions.get(st).is_some_and(|s| s.conn.is_none());
        if present && self.open_conn(cx, Owner::Session(st)).is_none() && self.core.sessions.get(st).is_some() {
            // Could not even open a socket: the session fails (counted).
            self.end_session(cx, st, true);
        }
    }

    /// The session is over; a closed-loop client starts its next one after
    /// `--think` (and at least 1 ms after a failure, so a refusing server
    /// cannot make clients spin or recurse).
    fn end_session<P: Poller>(&mut self, cx: &mut Ctx<P>, st: Token, failed: bool) {
        let Some(s) = self.core.sessions.remove(st) else {
            return;
        };
        if s.closed_loop && !self.core.stopping && self.budget_allows() && !self.core.wl.exhausted() {
            self.core.arrivals += 1;
            let mut think = Duration::from_secs_f64(self.core.sh.cfg.think.sample(&mut self.core.rng));
            if failed {
                think = think.max(Duration::from_millis(1));
            }
            self.start_session(cx, true, Some(think));
        }
    }

    // ---------------------------------------------------------------------
    // Agents (request-driven workloads)

    fn pool_arrival<P: Poller>(&mut self, cx: &mut Ctx<P>, agent: u32, item: u64) {
        let Some(p) = self.core.pools.get_mut(agent as usize) else {
            return;
        };
        if p.pending.len() >= MAX_PENDING {
            self.core.arrivals_dropped += 1;
            return;
        }
        p.pending.push_back(item);
        self.pool_dispatch(cx, agent);
    }

    /// Give an agent's waiting requests to its idle connections, or to new ones.
    fn pool_dispatch<P: Poller>(&mut self, cx: &mut Ctx<P>, agent: u32) {
        loop {
            if self.core.stopping {
                return;
            }
            let p = &mut self.core.pools[agent as usize];
            if p.pending.is_empty() {
                return;
            }
            if let Some(t) = p.idle.pop() {
                let Engine { conns, core } = self;
                let Some(c) = conns.get_mut(t) else { continue };
                let now = Instant::now();
                core.render_pool(c, agent, now);
                c.phase = Phase::Active;
                self.drive(cx, t);
                continue;
            }
            if p.open >= self.core.conns_per_agent {
                return;
            }
            if self.open_conn(cx, Owner::Pool(agent)).is_none() {
                return;
            }
        }
    }

    // ---------------------------------------------------------------------
    // Connections

    /// socket + connect, the owner's first output written at once, register.
    fn open_conn<P: Poller>(&mut self, cx: &mut Ctx<P>, owner: Owner) -> Option<Token> {
        if self.core.stopping {
            return None;
        }
        let target = self.core.sh.target;
        self.core.stats.connections += 1;
        let fd = match self.core.connect_socket(&target) {
            Ok(fd) => fd,
            Err(e) => {
                self.core.fail_open(e);
                return None;
            }
        };
        let now = Instant::now();
        let bufs = self.core.spare.pop().unwrap_or_else(|| Bufs {
            out: Vec::with_capacity(512),
            head: Vec::new(),
            inflight: VecDeque::with_capacity(self.core.sh.cfg.pipeline as usize),
        });
        let use_limit = match owner {
            Owner::Pool(_) => self.core.wl.conn_use_limit(&mut self.core.rng),
            _ => u32::MAX,
        };
        let timeout = self.core.timeout;
        let token = self.conns.insert_with(|token| Conn {
            fd,
            token,
            owner,
            phase: Phase::Active,
            interest: Interest::NONE,
            opened: now,
            connected: false,
            out: bufs.out,
            out_pos: 0,
            inflight: bufs.inflight,
            sent: 0,
            rx: Rx::new(),
            head_buf: bufs.head,
            uses: 0,
            use_limit,
            deadline: now + timeout,
            think_until: None,
            timer_at: None,
            may_read: false,
            replies: 0,
            close_after: false,
            ssl: None,
        });
        self.core.open += 1;
        self.core.stats.max_open = self.core.stats.max_open.max(self.core.open);
        let Engine { conns, core } = self;
        let c = conns.get_mut(token).expect("just inserted");
        let first = match owner {
            Owner::Session(st) => match core.sessions.get_mut(st) {
                Some(s) => {
                    s.conn = Some(token);
                    core.session_first_output(c, st, now)
                }
                None => Flow::Close(End::Done),
            },
            Owner::Pool(a) => {
                core.pools[a as usize].open += 1;
                core.render_pool(c, a, now);
                Flow::Continue
            }
            Owner::Idle => {
                c.phase = Phase::Idle;
                Flow::Continue
            }
        };
        if let Flow::Close(end) = first {
            self.close_conn(cx, token, end);
            return None;
        }
        // Optimistic first write (see the module doc).
        let Engine { conns, core } = self;
        let c = conns.get_mut(token).expect("just inserted");
        if c.has_output() && c.think_until.is_none() {
            if let Err(e) = core.flush(c, now) {
                self.close_conn(cx, token, End::Failed(Fail::Errno(e.raw_os_error())));
                return None;
            }
        }
        let c = self.conns.get_mut(token).expect("just inserted");
        let want = self.core.want::<P>(c);
        if let Err(e) = cx.register(c.fd.raw(), token, want) {
            let errno = match e {
                weft_io::RegisterError::Io(e) => e.raw_os_error(),
                weft_io::RegisterError::OutOfRange(_, max) => {
                    // select(2): the backend's own descriptor limit.
                    self.core.stats.fd_limit.get_or_insert(max as u64);
                    Some(sys::Errno::TooManyOpenFiles.raw())
                }
            };
            if errno == Some(sys::Errno::TooManyOpenFiles.raw()) && self.core.stats.fd_limit.is_none() {
                self.core.stats.fd_limit = Some(nofile_limit());
            }
            // Never registered: nothing is queued for it in the poller.
            let c = self.conns.remove(token).expect("present");
            self.core.open -= 1;
            if let Owner::Pool(a) = owner {
                self.core.pools[a as usize].open -= 1;
            }
            self.core.stats.record_errno(errno);
            drop(c);
            if let Owner::Session(st) = owner {
                if let Some(s) = self.core.sessions.get_mut(st) {
                    s.conn = None;
                }
            }
            return None;
        }
        c.interest = want;
        self.core.schedule(c, cx);
        Some(token)
    }

    /// Run a connection's cycle and settle what it waits for.
    fn drive<P: Poller>(&mut self, cx: &mut Ctx<P>, token: Token) {
        let Engine { conns, core } = self;
        let Some(c) = conns.get_mut(token) else {
            return;
        };
        let now = Instant::now();
        match core.drive_conn(c, now) {
            Flow::Continue => {
                let want = core.want::<P>(c);
                if !P::CAPS.fixed_interest && want != c.interest {
                    if let Err(e) = cx.reregister(c.fd.raw(), token, want) {
                        self.close_conn(cx, token, End::Failed(Fail::Errno(e.raw_os_error())));
                        return;
                    }
                    c.interest = want;
                }
                core.schedule(c, cx);
            }
            Flow::Close(end) => self.close_conn(cx, token, end),
        }
    }

    fn run_dispatches<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        while let Some(a) = self.core.to_dispatch.pop() {
            self.pool_dispatch(cx, a);
        }
    }

    /// Close a connection, count how it ended, and let its owner go on.
    fn close_conn<P: Poller>(&mut self, cx: &mut Ctx<P>, token: Token, end: End) {
        let Some(c) = self.conns.remove(token) else {
            return;
        };
        let now = Instant::now();
        self.core.open -= 1;
        if let End::Failed(fail) = end {
            self.core.count_failure(&c, fail);
        }
        if c.replies > 0 {
            let _ = self
                .core
                .stats
                .conn_life_us
                .record((now.saturating_duration_since(c.opened).as_micros() as u64).max(1));
        }
        let registered = c.interest != Interest::NONE;
        // Unsent requests (rendered but never written) go back to the session.
        let unsent = (c.inflight.len() - c.sent) as u32;
        let (owner, connected) = (c.owner, c.connected);
        if matches!(end, End::Aborted) {
            // Reset, as a browser's stop does: the server learns at once.
            let _ = sys::set_linger_zero(c.fd.raw());
        } else if matches!(end, End::Done) && connected && self.core.sh.cfg.client_close == ClientClose::Reset {
            // The client ends a connection whose replies are all in: close
            // with RST (SO_LINGER 0) so its port keeps no TIME_WAIT entry. One
            // system call per client-closed connection; without it connect()
            // spends its time searching ports still in TIME_WAIT past ~10,000
            // connections/s on loopback. The server sees ECONNRESET where it
            // would have read EOF, after every reply was delivered.
            let _ = sys::set_linger_zero(c.fd.raw());
        }
        let Conn {
            fd,
            mut out,
            head_buf: mut head,
            mut inflight,
            ..
        } = c;
        cx.close_later(fd, registered);
        if self.core.spare.len() < MAX_SPARE {
            out.clear();
            head.clear();
            inflight.clear();
            self.core.spare.push(Bufs { out, head, inflight });
        }
        let failed = matches!(end, End::Failed(_));
        match owner {
            Owner::Session(st) => {
                let mut reconnect = false;
                if let Some(s) = self.core.sessions.get_mut(st) {
                    s.conn = None;
                    if s.calls_left != u32::MAX {
                        s.calls_left = s.calls_left.saturating_add(unsent);
                    }
                    // The server closed a persistent connection: the session
                    // goes on over a new one while it has requests left.
                    reconnect = matches!(end, End::ServerClosed) && s.calls_left > 0 && !self.core.stopping;
                }
                if reconnect {
                    self.connect_session(cx, st);
                } else {
                    self.end_session(cx, st, failed);
                }
            }
            Owner::Pool(a) => {
                let p = &mut self.core.pools[a as usize];
                p.open -= 1;
                if let Some(i) = p.idle.iter().position(|&t| t == token) {
                    p.idle.swap_remove(i);
                }
                if !p.pending.is_empty() {
                    self.core.to_dispatch.push(a);
                }
            }
            Owner::Idle => {
                // idleconn: reopen what the server closed; a connection that
                // never got established is counted as an error, not retried.
                let reopen = connected && !self.core.stopping;
                if reopen {
                    self.core.stats.idle_closed_by_server += 1;
                }
                if reopen {
                    self.open_conn(cx, Owner::Idle);
                }
            }
        }
    }

    fn begin_stop<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        if self.core.stopping {
            return;
        }
        self.core.stopping = true;
        self.core.arrivals_done = true;
        let grace = self.core.timeout + Duration::from_secs(1);
        let hard = Instant::now() + grace;
        self.core.hard_stop = Some(hard);
        cx.arm_timer(TICK, hard);
        for p in &mut self.core.pools {
            p.pending.clear();
        }
        // Sessions waiting to start never will.
        for st in self.core.sessions.tokens() {
            let waiting = self.core.sessions.get(st).is_some_and(|s| s.conn.is_none());
            if waiting {
                self.core.sessions.remove(st);
            }
        }
        // Close everything that is not waiting for a reply.
        for t in self.conns.tokens() {
            let close = self.conns.get(t).is_some_and(|c| !c.busy());
            if close {
                self.close_conn(cx, t, End::Done);
            }
        }
    }

    fn force_stop<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        for t in self.conns.tokens() {
            self.close_conn(cx, t, End::Failed(Fail::Timeout));
        }
        self.core.sessions = Slab::new();
    }

    fn natural_end(&self) -> bool {
        if !self.core.arrivals_done || self.core.stopping || self.core.idle_only {
            return false;
        }
        match self.core.drive {
            Drive::Sessions => self.core.sessions.is_empty(),
            Drive::Requests { .. } => self
                .core
                .pools
                .iter()
                .all(|p| p.pending.is_empty() && p.open == p.idle.len()),
        }
    }
}

fn nofile_limit() -> u64 {
    sys::raise_nofile_limit().unwrap_or(0)
}

impl Core<'_> {
    /// socket, the source address or port asked for, and a non-blocking connect.
    fn connect_socket(&mut self, target: &SocketAddr) -> io::Result<Fd> {
        let cfg = self.sh.cfg;
        // --local-ports: a refused port (a listener on it, or a TIME_WAIT
        // entry for the same 4-tuple that cannot be reused yet) costs a new
        // socket and the next port; bounded, then the connect counts as
        // addr_unavailable.
        let attempts = if cfg.local_ports.is_some() { 64 } else { 1 };
        for _ in 0..attempts {
            let fd = sys::tcp_socket(target)?;
            if let Some(n) = cfg.recv_buffer {
                let _ = sys::set_rcvbuf(&fd, n);
            }
            let ip = if cfg.local_addrs.is_empty() {
                None
            } else {
                let ip = cfg.local_addrs[self.next_local % cfg.local_addrs.len()];
                self.next_local = self.next_local.wrapping_add(1);
                Some(ip)
            };
            let port = cfg.local_ports.map(|(lo, hi)| {
                // Threads take interleaved ports so they never pick the same one.
                let span = (hi - lo) as u32 + 1;
                let p = lo as u32 + self.next_port % span;
                self.next_port = self.next_port.wrapping_add(self.plan.threads as u32);
                p as u16
            });
            match (ip, port) {
                (None, None) => {}
                (ip, None) => {
                    // --local-addrs: each source address has its own port
                    // space. IP_BIND_ADDRESS_NO_PORT defers the port choice to
                    // connect, where the whole 4-tuple is known. Two more
                    // system calls per connection, paid only when asked for.
                    let _ = sys::set_bind_address_no_port(&fd, true);
                    sys::bind(fd.raw(), &SocketAddr::new(ip.expect("an address"), 0))?;
                }
                (ip, Some(port)) => {
                    // SO_REUSEADDR lets bind take a port whose earlier
                    // connection is in TIME_WAIT; connect then reuses that
                    // entry when the kernel allows it (tcp_tw_reuse).
                    let _ = sys::set_reuseaddr(&fd, true);
                    let ip = ip.unwrap_or(match target {
                        SocketAddr::V4(_) => std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
                        SocketAddr::V6(_) => std::net::IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
                    });
                    if let Err(e) = sys::bind(fd.raw(), &SocketAddr::new(ip, port)) {
                        if sys::is(&e, sys::Errno::AddrInUse) {
                            continue;
                        }
                        return Err(e);
                    }
                }
            }
            match sys::connect(fd.raw(), target) {
                Ok(_) => return Ok(fd),
                Err(e) if port.is_some() && sys::is(&e, sys::Errno::AddrNotAvailable) => {}
                Err(e) => return Err(e),
            }
        }
        // Every port tried was taken (EADDRINUSE or EADDRNOTAVAIL): out of ports.
        Err(sys::Errno::AddrNotAvailable.into())
    }

    fn fail_open(&mut self, e: io::Error) {
        let errno = e.raw_os_error();
        if sys::is_fd_exhaustion(&e) && self.stats.fd_limit.is_none() {
            self.stats.fd_limit = Some(nofile_limit());
        }
        self.stats.record_errno(errno);
    }

    fn count_failure(&mut self, c: &Conn, fail: Fail) {
        // One error per written request left without a reply; a connection
        // that failed before any request was written counts once.
        let n = (c.sent as u64).max(1);
        for _ in 0..n {
            match fail {
                Fail::Errno(e) => self.stats.record_errno(e),
                Fail::Reset => self.stats.errors.reset += 1,
                Fail::Bad => self.stats.errors.bad_response += 1,
                Fail::Timeout => self.stats.errors.timeout += 1,
            }
        }
    }

    /// The interest a connection needs now.
    fn want<P: Poller>(&self, c: &Conn) -> Interest {
        if P::CAPS.fixed_interest {
            return Interest::BOTH;
        }
        if (c.has_output() && c.think_until.is_none()) || !c.connected {
            Interest::BOTH
        } else {
            Interest::READ
        }
    }

    /// Make sure a timer will look at the connection's deadline.
    fn schedule<P: Poller>(&self, c: &mut Conn, cx: &mut Ctx<P>) {
        let wake = match (c.think_until, c.busy()) {
            (Some(t), _) => Some(t),
            (None, true) => Some(c.deadline),
            (None, false) => None,
        };
        if let Some(w) = wake {
            if c.timer_at.is_none_or(|t| w < t) {
                c.timer_at = Some(w);
                cx.arm_timer(c.token, w);
            }
        }
    }

    /// First output of a session's new connection: the SSL prelude or requests.
    fn session_first_output(&mut self, c: &mut Conn, st: Token, now: Instant) -> Flow {
        let s = self.sessions.get(st).expect("caller checked");
        if let Some(hs) = s.ssl {
            let flights = hs.messages();
            c.ssl = Some(SslState {
                hs,
                flights,
                next: 0,
                need: 0,
                need_total: 0,
            });
            if self.sh.writer.via_proxy {
                self.sh.writer.push_connect(&mut c.out, 0);
                c.phase = Phase::Tunnel;
                return Flow::Continue;
            }
            c.phase = Phase::Handshake;
            self.advance_handshake(c, now);
            return Flow::Continue;
        }
        self.render_session(c, st, now)
    }

    /// Render the session's next burst (up to `--pipeline` requests).
    fn render_session(&mut self, c: &mut Conn, st: Token, now: Instant) -> Flow {
        let Some(s) = self.sessions.get_mut(st) else {
            return Flow::Close(End::Done);
        };
        if s.calls_left == 0 {
            return Flow::Close(End::Done);
        }
        let depth = self.sh.cfg.pipeline.max(1);
        let writer = if c.ssl.is_some() {
            self.sh.tunnel
        } else {
            self.sh.writer
        };
        let mut think = Duration::ZERO;
        let mut made = 0;
        while made < depth && s.calls_left > 0 {
            let mut out = Out {
                buf: &mut c.out,
                writer,
                keep_alive: s.persist,
                verify: self.sh.cfg.verify,
                now,
            };
            match self.wl.next_request(&mut s.cursor, &mut self.rng, &mut out) {
                Next::Request(meta, t) => {
                    if made == 0 {
                        think = t;
                        if s.cursor.n > 1 && !self.sh.cfg.think.is_zero() {
                            think += Duration::from_secs_f64(self.sh.cfg.think.sample(&mut self.rng));
                        }
                    }
                    c.inflight.push_back(meta);
                    c.uses += 1;
                    made += 1;
                    if s.calls_left != u32::MAX {
                        s.calls_left -= 1;
                    }
                    if !s.persist || self.sh.writer.close {
                        c.close_after = true;
                    }
                }
                Next::Exhausted => {
                    self.stats.workload_exhausted = true;
                    s.calls_left = 0;
                    break;
                }
            }
        }
        if made == 0 {
            return Flow::Close(End::Done);
        }
        if think.is_zero() {
            c.phase = Phase::Active;
        } else {
            c.phase = Phase::Thinking;
            c.think_until = Some(now + think);
        }
        Flow::Continue
    }

    /// Render an agent's next waiting request on this connection.
    fn render_pool(&mut self, c: &mut Conn, agent: u32, now: Instant) {
        let Some(item) = self.pools[agent as usize].pending.pop_front() else {
            c.phase = Phase::Idle;
            return;
        };
        let mut out = Out {
            buf: &mut c.out,
            writer: self.sh.writer,
            keep_alive: true,
            verify: self.sh.cfg.verify,
            now,
        };
        let meta = self.wl.render_item(item, &mut self.rng, &mut out);
        if self.sh.writer.close {
            c.close_after = true;
        }
        c.inflight.push_back(meta);
        c.uses += 1;
        c.phase = Phase::Active;
    }

    /// Queue the client's next handshake flight; set how much the server owes.
    /// After the last message the session's first requests follow.
    fn advance_handshake(&mut self, c: &mut Conn, now: Instant) -> Option<Flow> {
        let ssl = c.ssl.as_mut().expect("handshake state");
        loop {
            let Some(&(side, _)) = ssl.flights.get(ssl.next) else {
                // Handshake complete.
                match ssl.hs {
                    Handshake::Full => self.stats.ssl_handshakes.0 += 1,
                    Handshake::Abbreviated => self.stats.ssl_handshakes.1 += 1,
                }
                c.phase = Phase::Active;
                let Owner::Session(st) = c.owner else {
                    return Some(Flow::Close(End::Done));
                };
                return Some(self.render_session(c, st, now));
            };
            let mut lens = [0usize; 6];
            let mut k = 0;
            while let Some(&(s, len)) = ssl.flights.get(ssl.next) {
                if s != side {
                    break;
                }
                lens[k] = len;
                k += 1;
                ssl.next += 1;
            }
            match side {
                Side::Client => {
                    let first = lens[0] == crate::ssl::CLIENT_HELLO && ssl.next == k;
                    ssl.hs.render_flight(&lens[..k], first, &mut c.out);
                }
                Side::Server => {
                    ssl.need = lens[..k].iter().sum();
                    ssl.need_total = ssl.need;
                    return None;
                }
            }
        }
    }

    /// Write queued output. Ok(true): all written.
    fn flush(&mut self, c: &mut Conn, now: Instant) -> io::Result<bool> {
        while c.out_pos < c.out.len() {
            match sys::retry(|| sys::send(&c.fd, &c.out[c.out_pos..], false)) {
                Ok(n) => {
                    c.out_pos += n;
                    self.stats.bytes_sent += n as u64;
                    c.deadline = now + self.timeout;
                    if !c.connected {
                        c.connected = true;
                        self.stats.record_connect(now.saturating_duration_since(c.opened));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        c.out.clear();
        c.out_pos = 0;
        let sec = second(self.sh.t0, now);
        let ssl_first = c.ssl.is_some() && c.replies == 0;
        for (i, m) in c.inflight.iter_mut().enumerate().skip(c.sent) {
            // The first request over an emulated SSL connection is timed from
            // the connection's start: the handshake is part of its latency.
            m.sent_at = if ssl_first && i == 0 { c.opened } else { now };
            self.stats.record_request(0, sec);
        }
        c.sent = c.inflight.len();
        Ok(true)
    }

    /// The cycle: write what is due, read what is there, parse replies, queue
    /// follow-up requests.
    fn drive_conn(&mut self, c: &mut Conn, now: Instant) -> Flow {
        loop {
            if c.has_output() && c.think_until.is_none() {
                match self.flush(c, now) {
                    Ok(_) => {}
                    Err(e) => return Flow::Close(End::Failed(Fail::Errno(e.raw_os_error()))),
                }
            }
            if c.phase == Phase::Idle && !c.connected && !c.may_read {
                // An idle connection learns it is established from a writable event.
                return Flow::Continue;
            }
            if !c.may_read {
                return Flow::Continue;
            }
            let mut buf = std::mem::take(&mut self.rbuf);
            let r = sys::retry(|| sys::read(&c.fd, &mut buf));
            let flow = match r {
                Ok(0) => {
                    c.may_read = false;
                    Some(self.on_eof(c, now))
                }
                Ok(n) => {
                    c.may_read = n == buf.len();
                    self.stats.bytes_received += n as u64;
                    c.deadline = now + self.timeout;
                    if !c.connected {
                        c.connected = true;
                        self.stats.record_connect(now.saturating_duration_since(c.opened));
                    }
                    match self.process(c, &buf[..n], now) {
                        Ok(Flow::Continue) => None,
                        Ok(close) => Some(close),
                        Err(fail) => Some(Flow::Close(End::Failed(fail))),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    c.may_read = false;
                    None
                }
                Err(e) => Some(Flow::Close(End::Failed(Fail::Errno(e.raw_os_error())))),
            };
            self.rbuf = buf;
            if let Some(f) = flow {
                return f;
            }
            if !(c.may_read || c.has_output() && c.think_until.is_none()) {
                return Flow::Continue;
            }
        }
    }

    fn on_eof(&mut self, c: &mut Conn, now: Instant) -> Flow {
        if !c.rx.in_head && c.rx.body == Body::UntilClose && !c.inflight.is_empty() {
            c.rx.keep_alive = false;
            if let Flow::Close(e) = self.reply_done(c, now) {
                return Flow::Close(e);
            }
            return Flow::Close(End::ServerClosed);
        }
        if c.sent > 0 {
            return Flow::Close(End::Failed(if c.rx.got_any { Fail::Bad } else { Fail::Reset }));
        }
        match c.phase {
            Phase::Tunnel | Phase::Handshake => Flow::Close(End::Failed(Fail::Reset)),
            _ => Flow::Close(End::ServerClosed),
        }
    }

    /// Parse a response head that may span reads. Some(bytes of `d` used).
    fn parse_head(&mut self, c: &mut Conn, d: &[u8]) -> Result<Option<usize>, Fail> {
        c.rx.got_any = true;
        if c.head_buf.is_empty() {
            return match self.head.parse(d, &self.limits) {
                Ok(Some(n)) => {
                    c.rx.cached = self.head.header(d, "age").is_some();
                    Ok(Some(n))
                }
                Ok(None) => {
                    c.head_buf.extend_from_slice(d);
                    Ok(None)
                }
                Err(_) => Err(Fail::Bad),
            };
        }
        let old = c.head_buf.len();
        c.head_buf.extend_from_slice(d);
        match self.head.parse(&c.head_buf, &self.limits) {
            Ok(Some(n)) => {
                c.rx.cached = self.head.header(&c.head_buf, "age").is_some();
                c.head_buf.clear();
                Ok(Some(n - old))
            }
            Ok(None) => Ok(None),
            Err(_) => Err(Fail::Bad),
        }
    }

    fn process(&mut self, c: &mut Conn, data: &[u8], now: Instant) -> Result<Flow, Fail> {
        let mut d = data;
        while !d.is_empty() {
            match c.phase {
                Phase::Tunnel => {
                    let Some(used) = self.parse_head(c, d)? else {
                        return Ok(Flow::Continue);
                    };
                    d = &d[used..];
                    self.stats.head_bytes += self.head.len() as u64;
                    let status = self.head.status();
                    c.rx = Rx::new();
                    if !(200..300).contains(&status) {
                        // The proxy refused the tunnel: that is its answer.
                        self.stats.record_reply(
                            status,
                            now.saturating_duration_since(c.opened),
                            second(self.sh.t0, now),
                            false,
                        );
                        if let Owner::Session(st) = c.owner {
                            if let Some(s) = self.sessions.get_mut(st) {
                                s.calls_left = 0;
                            }
                        }
                        return Ok(Flow::Close(End::Done));
                    }
                    c.phase = Phase::Handshake;
                    if let Some(Flow::Close(e)) = self.advance_handshake(c, now) {
                        return Ok(Flow::Close(e));
                    }
                }
                Phase::Handshake => {
                    let ssl = c.ssl.as_mut().expect("handshake state");
                    if ssl.need == 0 {
                        return Err(Fail::Bad);
                    }
                    // Each server flight starts with a TLS record type.
                    if ssl.need == ssl.need_total && !matches!(d[0], 0x16 | 0x14) {
                        return Err(Fail::Bad);
                    }
                    let take = ssl.need.min(d.len());
                    ssl.need -= take;
                    d = &d[take..];
                    if ssl.need == 0 {
                        if let Some(Flow::Close(e)) = self.advance_handshake(c, now) {
                            return Ok(Flow::Close(e));
                        }
                    }
                }
                Phase::Idle if c.inflight.is_empty() => {
                    // Unasked bytes on an idle connection (a farewell message
                    // before the server closes): ignored.
                    return Ok(Flow::Continue);
                }
                _ => {
                    let Some(meta) = c.inflight.front().copied() else {
                        return Err(Fail::Bad);
                    };
                    if c.sent == 0 {
                        // Bytes before any request was written.
                        return Err(Fail::Bad);
                    }
                    if c.rx.in_head {
                        let Some(used) = self.parse_head(c, d)? else {
                            return Ok(Flow::Continue);
                        };
                        d = &d[used..];
                        self.stats.head_bytes += self.head.len() as u64;
                        let status = self.head.status();
                        if (100..200).contains(&status) && status != 101 {
                            // Interim response: the real one follows.
                            continue;
                        }
                        c.rx.in_head = false;
                        c.rx.status = status;
                        c.rx.keep_alive = self.head.keep_alive(meta.method);
                        c.rx.pos = 0;
                        c.rx.verify = meta.verify && status == 200;
                        c.rx.verify_ok = true;
                        c.rx.content = meta.content as usize;
                        c.rx.body = match self.head.framing(meta.method) {
                            BodyFraming::None => Body::Length(0),
                            BodyFraming::Length(n) => Body::Length(n),
                            BodyFraming::Chunked => {
                                c.rx.chunked = ChunkedDecoder::new();
                                Body::Chunked
                            }
                            BodyFraming::UntilClose => Body::UntilClose,
                        };
                        if self.abort_prob > 0.0
                            && matches!(c.owner, Owner::Pool(_))
                            && !matches!(c.rx.body, Body::Length(0))
                            && self.rng.gen::<f64>() < self.abort_prob
                        {
                            // The robot aborts this transaction mid-reply.
                            self.stats.aborted += 1;
                            return Ok(Flow::Close(End::Aborted));
                        }
                        if c.rx.verify && meta.size != u64::MAX {
                            if let Body::Length(n) = c.rx.body {
                                if n != meta.size {
                                    c.rx.verify_ok = false;
                                }
                            }
                        }
                    }
                    let done = match c.rx.body {
                        Body::Length(n) => {
                            let k = ((n - c.rx.pos) as usize).min(d.len());
                            if c.rx.verify
                                && c.rx.verify_ok
                                && !crate::content::matches(c.rx.content, c.rx.pos, &d[..k])
                            {
                                c.rx.verify_ok = false;
                            }
                            c.rx.pos += k as u64;
                            self.stats.body_bytes += k as u64;
                            d = &d[k..];
                            c.rx.pos == n
                        }
                        Body::UntilClose => {
                            if c.rx.verify && c.rx.verify_ok && !crate::content::matches(c.rx.content, c.rx.pos, d) {
                                c.rx.verify_ok = false;
                            }
                            c.rx.pos += d.len() as u64;
                            self.stats.body_bytes += d.len() as u64;
                            d = &[];
                            false
                        }
                        Body::Chunked => {
                            let mut done = false;
                            while !d.is_empty() {
                                let r = c.rx.chunked.decode(d).map_err(|_| Fail::Bad)?;
                                if let Some(range) = r.data {
                                    let piece = &d[range];
                                    if c.rx.verify
                                        && c.rx.verify_ok
                                        && !crate::content::matches(c.rx.content, c.rx.pos, piece)
                                    {
                                        c.rx.verify_ok = false;
                                    }
                                    c.rx.pos += piece.len() as u64;
                                    self.stats.body_bytes += piece.len() as u64;
                                }
                                d = &d[r.consumed..];
                                if c.rx.chunked.is_done() {
                                    done = true;
                                    break;
                                }
                            }
                            done
                        }
                    };
                    if done {
                        if let Flow::Close(e) = self.reply_done(c, now) {
                            if !d.is_empty() {
                                // Bytes after the last expected reply.
                                return Err(Fail::Bad);
                            }
                            return Ok(Flow::Close(e));
                        }
                    }
                }
            }
        }
        Ok(Flow::Continue)
    }

    /// A reply is complete: record it, then decide what the connection does next.
    fn reply_done(&mut self, c: &mut Conn, now: Instant) -> Flow {
        let meta = c.inflight.pop_front().expect("a reply answers a request");
        c.sent -= 1;
        let status = c.rx.status;
        let sec = second(self.sh.t0, now);
        self.stats
            .record_reply(status, now.saturating_duration_since(meta.sent_at), sec, c.rx.cached);
        c.replies += 1;
        if c.rx.verify {
            self.stats.verified += 1;
            let size_ok = meta.size == u64::MAX || meta.size == c.rx.pos;
            if !c.rx.verify_ok || !size_ok {
                self.stats.errors.verify += 1;
            }
        }
        if !c.rx.keep_alive {
            c.close_after = true;
        }
        if let Owner::Pool(a) = c.owner {
            self.followups.clear();
            self.wl.on_reply(&meta, status, &mut self.followups);
            if !self.followups.is_empty() {
                let p = &mut self.pools[a as usize];
                for &f in &self.followups {
                    if p.pending.len() < MAX_PENDING {
                        p.pending.push_back(f);
                    }
                }
                self.to_dispatch.push(a);
            }
        }
        c.rx.in_head = true;
        c.rx.got_any = false;
        if !c.inflight.is_empty() {
            return Flow::Continue;
        }
        // The burst is answered.
        if c.close_after {
            return Flow::Close(End::ServerClosed);
        }
        if self.stopping {
            return Flow::Close(End::Done);
        }
        match c.owner {
            Owner::Session(st) => self.render_session(c, st, now),
            Owner::Pool(a) => {
                if c.uses >= c.use_limit {
                    return Flow::Close(End::Done);
                }
                if !self.pools[a as usize].pending.is_empty() {
                    self.render_pool(c, a, now);
                } else {
                    c.phase = Phase::Idle;
                    self.pools[a as usize].idle.push(c.token);
                }
                Flow::Continue
            }
            Owner::Idle => Flow::Continue,
        }
    }
}

impl<P: Poller> Handler<P> for Engine<'_> {
    fn on_event(&mut self, cx: &mut Ctx<P>, ev: Event) {
        let Some(c) = self.conns.get_mut(ev.token) else {
            return;
        };
        if ev.readable || ev.error {
            c.may_read = true;
        }
        if ev.writable && !c.connected && c.phase == Phase::Idle && !ev.error {
            // An idle connection is established: from now on only a close matters.
            c.connected = true;
            let d = Instant::now().saturating_duration_since(c.opened);
            self.core.stats.record_connect(d);
        }
        self.drive(cx, ev.token);
        self.run_dispatches(cx);
    }

    fn on_timer(&mut self, cx: &mut Ctx<P>, token: Token, due: Instant) -> Option<Instant> {
        if token == ARRIVAL {
            return self.arrive(cx);
        }
        if token == TICK {
            let now = Instant::now();
            if let Some(h) = self.core.hard_stop {
                if now >= h {
                    self.force_stop(cx);
                    return None;
                }
            }
            if let Some(s) = self.core.stop_at {
                if now >= s {
                    // A loop running late finishes the arrivals due before
                    // --duration first (R·D of them, as httperf's --num-conns
                    // makes), for at most --timeout more.
                    if self.arrivals_behind() && now < s + self.core.timeout {
                        return Some(now.max(cx.now) + Duration::from_millis(1));
                    }
                    self.begin_stop(cx);
                }
            }
            return None;
        }
        if token.index() & SESSION_BIT != 0 {
            let st = Token::new(token.index() & !SESSION_BIT, token.generation());
            let waiting = self.core.sessions.get_mut(st).map(|s| s.start_at.take().is_some());
            if waiting == Some(true) {
                self.connect_session(cx, st);
            }
            return None;
        }
        let now = Instant::now();
        let c = self.conns.get_mut(token)?;
        if c.timer_at != Some(due) {
            return None;
        }
        c.timer_at = None;
        if let Some(t) = c.think_until {
            if now >= t {
                c.think_until = None;
                c.phase = Phase::Active;
                c.deadline = now + self.core.timeout;
                self.drive(cx, token);
                self.run_dispatches(cx);
                return None;
            }
        } else if c.busy() && now >= c.deadline {
            self.close_conn(cx, token, End::Failed(Fail::Timeout));
            return None;
        }
        let c = self.conns.get_mut(token)?;
        let wake = c.think_until.or(c.busy().then_some(c.deadline))?;
        let wake = wake.max(cx.now + Duration::from_micros(1));
        c.timer_at = Some(wake);
        Some(wake)
    }

    fn after_batch(&mut self, cx: &mut Ctx<P>) {
        self.run_dispatches(cx);
        let s = &self.core.stats;
        let slot = self.core.slot;
        slot.requests.store(s.requests, Ordering::Relaxed);
        slot.replies.store(s.replies_total(), Ordering::Relaxed);
        slot.errors.store(s.errors.total(), Ordering::Relaxed);
        slot.open.store(self.core.open, Ordering::Relaxed);
        if !self.core.stopping && self.core.sh.stop.load(Ordering::Relaxed) {
            self.begin_stop(cx);
        }
        if self.natural_end() {
            self.begin_stop(cx);
        }
    }

    fn max_wait(&self) -> Option<Duration> {
        // Bounded so a Ctrl-C is seen promptly even when nothing happens.
        Some(Duration::from_millis(100))
    }

    fn keep_running(&self) -> bool {
        !(self.core.stopping && self.conns.is_empty())
    }
}

/// Run one thread's engine to completion on backend `P`.
/// Returns the measurements, the arrivals dropped, and when the loop ended.
pub fn run_thread<P: Poller>(sh: &Shared<'_>, plan: Plan, slot: &Slot) -> io::Result<(Stats, u64, Instant)> {
    let mut cx: Ctx<P> = Ctx::new()?;
    let mut engine = Engine::new(sh, plan, slot);
    let now = Instant::now();
    if sh.t0 > now {
        std::thread::sleep(sh.t0 - now);
    }
    engine.start(&mut cx);
    weft_io::run(&mut cx, &mut engine)?;
    let end = Instant::now();
    let dropped = engine.arrivals_dropped();
    Ok((engine.into_stats(), dropped, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_schedule_does_not_drift() {
        let mut s = Schedule::new(Arrivals::Fixed, 3000.0, 0.5 / 3000.0);
        let mut rng = SmallRng::seed_from_u64(1);
        for _ in 0..3_000_000 {
            s.advance(&mut rng);
        }
        // Arrival 3,000,000 of a 3000/s schedule is due at exactly 1000 s (+ phase).
        assert!((s.due() - (1000.0 + 0.5 / 3000.0)).abs() < 1e-9, "{}", s.due());
    }

    #[test]
    fn random_schedules_keep_the_rate() {
        for kind in [Arrivals::Exp, Arrivals::Uniform] {
            let mut s = Schedule::new(kind, 1000.0, 0.0);
            let mut rng = SmallRng::seed_from_u64(7);
            let n = 1_000_000;
            let mut gaps = Vec::with_capacity(n);
            let mut last = 0.0;
            for _ in 0..n {
                s.advance(&mut rng);
                gaps.push(s.due() - last);
                last = s.due();
            }
            // n arrivals take n/R seconds within 0.5 %.
            assert!((s.due() - 1000.0).abs() < 5.0, "{kind:?}: {}", s.due());
            let mean = gaps.iter().sum::<f64>() / n as f64;
            let var = gaps.iter().map(|g| (g - mean) * (g - mean)).sum::<f64>() / n as f64;
            // Exponential: sd = mean; uniform on [0, 2/R): sd = mean/sqrt(3).
            let want = if kind == Arrivals::Exp {
                mean
            } else {
                mean / 3f64.sqrt()
            };
            assert!((var.sqrt() - want).abs() < 0.01 * want, "{kind:?}: sd {}", var.sqrt());
        }
    }
}
