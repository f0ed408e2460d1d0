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
//!
//! Files: `schedule` (open-loop arrival times), `arrivals` (starting
//! sessions and agents' requests), `lifecycle` (opening, closing and stopping
//! connections), `cycle` (one connection's write/read cycle, rendering and the
//! SSL-emulation handshake), `reply` (parsing and accounting replies).

mod arrivals;
mod cycle;
mod lifecycle;
mod reply;
mod schedule;

pub use schedule::Schedule;

use crate::config::{ClientClose, LoadConfig};
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

    /// Body bytes received: checked against the content pattern under
    /// `--verify`, counted. Returns their length.
    #[inline]
    fn take(&mut self, piece: &[u8]) -> u64 {
        if self.verify && self.verify_ok && !crate::content::matches(self.content, self.pos, piece) {
            self.verify_ok = false;
        }
        self.pos += piece.len() as u64;
        piece.len() as u64
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
}

fn nofile_limit() -> u64 {
    sys::raise_nofile_limit().unwrap_or(0)
}

impl<P: Poller> Handler<P> for Engine<'_> {
    fn on_event(&mut self, cx: &mut Ctx<P>, ev: Event) {
        let Some(c) = self.conns.get_mut(ev.token) else {
            return;
        };
        c.may_read |= ev.may_read();
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
