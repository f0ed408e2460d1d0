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
//! Bodies are cyclic runs of the shared content pattern on the connection's
//! output chain ([`weft_io::OutChain`]), sent with one writev per call: there
//! is no per-byte work and no copy per response, so the origin stays cheaper
//! than whatever it is measuring. The workers are a [`weft_io::WorkerGroup`],
//! each on its own SO_REUSEPORT listener with its own event loop; input
//! buffers are lent from a per-worker pool only while bytes are pending.
//!
//! - this module: settings, start/stop, connections and their cycle;
//! - `answer`: requests and emulated handshakes turned into responses.

mod answer;

use crate::dist::Dist;
pub use crate::origin_stats::OriginStats;
use crate::ssl::Handshake;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_http::{Limits, RequestHead};
use weft_io::door::{LISTENER, WAKER};
use weft_io::sys::{self, Fd};
use weft_io::{accept, pools};
use weft_io::{
    BackendKind, BufPool, Ctx, Door, Event, Fill, GroupStats, Handler, InputBuf, Interest, OutChain, OwnPool, Poller,
    Slab, Token, WorkerGroup, WorkerSeat,
};

/// Input buffer lent at a connection's first read.
const INPUT_BUF: usize = 16 * 1024;
/// Idle input and output buffers a worker keeps for reuse.
const SPARE_KEEP: usize = 1024;
/// Capacity of a fresh output buffer (heads and handshake flights).
const OUTPUT_BUF: usize = 1024;

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
    /// Share the listening port with other processes (`--reuse-port`);
    /// otherwise a port another process holds is an error.
    pub reuse_port: bool,
    /// Connections a worker holds at most; more are closed at accept (0 = unlimited).
    pub max_connections: usize,
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
            reuse_port: false,
            max_connections: 0,
        }
    }
}

impl GroupStats for OriginStats {
    fn merge(&mut self, other: &OriginStats) {
        self.add(other);
    }
}

/// A running origin.
pub struct Origin {
    addr: SocketAddr,
    workers: WorkerGroup<OriginStats>,
}

impl Origin {
    /// Bind and start the workers.
    pub fn start(cfg: OriginConfig) -> io::Result<Origin> {
        cfg.event
            .probe()
            .map_err(|e| io::Error::other(format!("--event {}: {e}", cfg.event)))?;
        let _ = sys::raise_nofile_limit();
        let workers = cfg.workers.max(1);
        let share = weft_io::workers::PortShare::from_reuse_port(cfg.reuse_port);
        let (listeners, addr) = weft_io::workers::bind_listeners(cfg.listen, workers, cfg.backlog, share)?;
        let cfg = Arc::new(cfg);
        let workers = WorkerGroup::start("weft-origin", listeners, move |seat: WorkerSeat| {
            weft_io::with_backend!(cfg.event, P => {
                let mut cx: Ctx<P> = Ctx::new()?;
                let mut w = Worker::new(&cfg, seat);
                w.register(&mut cx)?;
                weft_io::run(&mut cx, &mut w)?;
                Ok(w.stats())
            })
        })?;
        Ok(Origin { addr, workers })
    }

    /// Its address and stop switch (it has no admin listener).
    pub fn bound(&self) -> weft_io::Bound {
        weft_io::Bound::of(self.addr, None, &self.workers)
    }

    /// Wait for the workers to finish; their counters summed.
    pub fn wait(self) -> io::Result<OriginStats> {
        self.workers.wait()
    }
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
    /// Unparsed input (storage lent from the worker's pool while pending).
    input: InputBuf,
    /// Heads and bodies to send.
    out: OutChain,
    requests: u32,
    max_requests: u32,
    close_after: bool,
    /// Reset (not close) once the output is sent: an aborted response.
    abort_after: bool,
    /// Our side is shut down after the last response: reading and throwing
    /// away what the peer still sends until it closes (`InputBuf::linger`).
    lingering: bool,
    hold_until: Option<Instant>,
    deadline: Instant,
    timer_at: Option<Instant>,
    may_read: bool,
    /// The peer's FIN is in (RDHUP): a short read no longer means drained,
    /// the next read returns EOF, and an edge-triggered backend would not
    /// report it again.
    read_closed: bool,
    eof: bool,
    mode: Mode,
    /// Start of the connection or of a CONNECT tunnel: a handshake may begin.
    at_stream_start: bool,
    discard: u64,
}

impl Conn {
    fn has_output(&self) -> bool {
        !self.out.is_empty()
    }
}

/// What the connections of one worker share (split from the connection
/// table so both can be borrowed at once).
struct Shared<'a> {
    cfg: &'a OriginConfig,
    /// This worker's counters (summed over workers when they stop).
    stats: OriginStats,
    head: RequestHead,
    date: weft_http::DateCache,
    rng: SmallRng,
    pool: BufPool,
    /// Output buffers lent to connections while they have bytes to send.
    own_pool: OwnPool,
    draining: bool,
}

struct Worker<'a> {
    shared: Shared<'a>,
    /// Accepts until EAGAIN: an instrument should take whatever the load offers.
    door: Door,
    conns: Slab<Conn>,
    /// When the pools may shrink next.
    next_decay: Instant,
}

enum Next {
    Wait,
    Close,
}

impl<'a> Worker<'a> {
    fn new(cfg: &'a OriginConfig, seat: WorkerSeat) -> Worker<'a> {
        Worker {
            shared: Shared {
                cfg,
                stats: OriginStats::default(),
                head: RequestHead::new(),
                date: weft_http::DateCache::new(),
                rng: SmallRng::seed_from_u64(cfg.seed.wrapping_add(seat.index as u64 * 7919)),
                pool: BufPool::new(INPUT_BUF, SPARE_KEEP),
                own_pool: OwnPool::new(OUTPUT_BUF, answer::COALESCE_MAX + OUTPUT_BUF, SPARE_KEEP),
                draining: false,
            },
            door: Door::new(seat.listener, seat.shutdown.waker(seat.index), seat.shutdown, None),
            conns: Slab::new(),
            next_decay: Instant::now(),
        }
    }

    /// Counters, with the memory gauges of now.
    fn stats(&self) -> OriginStats {
        let mut s = self.shared.stats;
        s.open_connections = self.conns.len() as u64;
        s.pools = weft_io::PoolGauges::of(&self.shared.pool, &self.shared.own_pool);
        s
    }

    fn register<P: Poller>(&mut self, cx: &mut Ctx<P>) -> io::Result<()> {
        self.door.register(cx)?;
        self.shared.date.update(cx.wall);
        Ok(())
    }

    /// The shutdown waker fired: on a stop request (once), stop accepting
    /// and close every connection.
    fn woken<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        if !self.door.woken(cx) || self.shared.draining {
            return;
        }
        self.shared.draining = true;
        self.door.close(cx);
        for t in self.conns.tokens() {
            self.close(cx, t);
        }
    }

    fn accept<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        if !self.door.begin(self.shared.draining) {
            return;
        }
        while let Some((fd, _)) = self.door.next(cx) {
            self.add_conn(cx, fd);
        }
    }

    fn add_conn<P: Poller>(&mut self, cx: &mut Ctx<P>, fd: Fd) {
        if accept::at_max(self.shared.cfg.max_connections, self.conns.len()) {
            self.shared.stats.refused_max_connections += 1;
            accept::refuse(fd);
            return;
        }
        let token = self.conns.next_token();
        let interest = P::CAPS.first_interest(Interest::READ);
        if cx.register(fd.raw(), token, interest).is_err() {
            accept::refuse(fd);
            return;
        }
        self.shared.stats.accepted += 1;
        let max_requests = match &self.shared.cfg.conn_requests {
            Some(d) => (d.sample(&mut self.shared.rng) as u32).max(1),
            None => u32::MAX,
        };
        let now = cx.now;
        let idle = self.shared.cfg.idle_timeout;
        self.conns.insert_with(|_| Conn {
            fd,
            interest,
            input: InputBuf::new(),
            out: OutChain::new(),
            requests: 0,
            max_requests,
            close_after: false,
            abort_after: false,
            lingering: false,
            hold_until: None,
            deadline: now + idle,
            timer_at: None,
            may_read: true,
            read_closed: false,
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
                let _ = sys::set_linger_zero(&c.fd);
            }
            let Conn {
                fd, mut input, mut out, ..
            } = c;
            weft_io::pools::release_all(&mut input, &mut out, &mut self.shared.pool, &mut self.shared.own_pool);
            cx.close_later(fd, true);
        }
    }

    fn drive<P: Poller>(&mut self, cx: &mut Ctx<P>, token: Token) {
        let Some(c) = self.conns.get_mut(token) else {
            return;
        };
        let was = c.may_read;
        let next = drive_conn(c, &mut self.shared, Instant::now());
        // The EAGAIN report (`Ctx::settled`): a read that ran dry, and a
        // flush that blocked (output left while no think time holds it).
        let blocked = c.has_output() && c.hold_until.is_none();
        cx.settled_cycle(c.fd.raw(), was, c.may_read, blocked);
        // Everything read is answered (and sent): the buffers go back to
        // the pools.
        weft_io::pools::release_idle(
            &mut c.input,
            &mut c.out,
            &mut self.shared.pool,
            &mut self.shared.own_pool,
        );
        match next {
            Next::Close => self.close(cx, token),
            Next::Wait => {
                // Only what `drive_conn` will act on: a think time waits for
                // its timer and a blocked flush for the socket, neither
                // reading on; level-triggered backends would otherwise report
                // a pipelined request or the peer's FIN at every wait (a
                // half-closed client that stopped reading spun a core). A
                // think time keeps its read interest while nothing unread is
                // waiting (`may_read` false: the last read found EAGAIN; no FIN seen), so
                // the usual quiet client costs no interest change (two
                // epoll_ctl calls per response under epoll, 1.3 µs measured).
                let want = if P::CAPS.fixed_interest {
                    Interest::BOTH
                } else if c.hold_until.is_some() {
                    if c.may_read || c.eof {
                        Interest::NONE
                    } else {
                        Interest::READ
                    }
                } else if c.has_output() {
                    Interest::WRITE
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
                weft_io::timer::arm(cx, token, c.hold_until.unwrap_or(c.deadline), &mut c.timer_at);
            }
        }
    }
}

/// The last response is sent: close, lingering unless the response is an
/// emulated abort (that one resets on purpose). A close with unread bytes
/// (a request body the think time left unread, a pipelined request) would
/// reset the connection and cut the response the peer is still reading.
fn close_lingering(c: &mut Conn, s: &mut Shared<'_>, now: Instant) -> Next {
    // A clean request-response-close exchange has nothing more coming:
    // close at once (nginx's heuristic), as a connection-per-request load wants.
    let seen_more = !c.input.is_empty() || c.discard > 0 || c.may_read;
    if c.abort_after || !weft_io::must_linger(&c.fd, c.eof, seen_more) || sys::shutdown_write(&c.fd).is_err() {
        return Next::Close;
    }
    c.lingering = true;
    c.deadline = now + weft_io::LINGER_TIME;
    linger(c, s)
}

/// Throw away what the peer still sends; close at its end of stream.
fn linger(c: &mut Conn, s: &mut Shared<'_>) -> Next {
    match c.input.linger(&c.fd, &mut s.pool) {
        weft_io::Linger::Wait => {
            c.may_read = false;
            Next::Wait
        }
        weft_io::Linger::Close => Next::Close,
    }
}

/// Send what is queued, answer what is buffered, read more; until the
/// connection must wait (for the socket, or a think time) or close.
fn drive_conn(c: &mut Conn, s: &mut Shared<'_>, now: Instant) -> Next {
    if c.lingering {
        return linger(c, s);
    }
    loop {
        if c.hold_until.is_some_and(|t| now < t) {
            return Next::Wait;
        }
        c.hold_until = None;
        if c.has_output() {
            match c.out.flush(&c.fd, &[], &mut []) {
                Ok(f) => {
                    s.stats.body_bytes += f.shared as u64;
                    // Only bytes moved are activity (epoll-once reports a
                    // half-closed peer at every wait).
                    if f.total() > 0 {
                        c.deadline = now + s.cfg.idle_timeout;
                    }
                    if f.blocked {
                        return Next::Wait;
                    }
                }
                Err(_) => {
                    s.stats.reset_unfinished += 1;
                    return Next::Close;
                }
            }
        }
        if c.close_after {
            return close_lingering(c, s, now);
        }
        if !c.input.is_empty() && answer::answer(c, s, now) {
            continue;
        }
        if c.close_after && !c.has_output() {
            return close_lingering(c, s, now);
        }
        if c.eof {
            return Next::Close;
        }
        if !c.may_read {
            return Next::Wait;
        }
        match c.input.fill(&c.fd, s.cfg.limits.max_head + 4096, &mut s.pool) {
            Fill::Full => return Next::Close,
            Fill::Eof => {
                c.eof = true;
                c.may_read = false;
                if !c.has_output() {
                    return Next::Close;
                }
            }
            Fill::Data(_) => {
                c.may_read = c.input.may_hold_more(c.read_closed);
                c.deadline = now + s.cfg.idle_timeout;
            }
            Fill::WouldBlock => {
                c.may_read = false;
                return Next::Wait;
            }
            Fill::Reset(_) => {
                if c.input.is_empty() && !c.has_output() {
                    s.stats.reset_idle += 1;
                } else {
                    s.stats.reset_unfinished += 1;
                }
                return Next::Close;
            }
        }
    }
}

impl<P: Poller> Handler<P> for Worker<'_> {
    fn on_event(&mut self, cx: &mut Ctx<P>, ev: Event) {
        match ev.token {
            LISTENER => self.accept(cx),
            WAKER => self.woken(cx),
            token => {
                let Some(c) = self.conns.get_mut(token) else {
                    return;
                };
                ev.merge_read(&mut c.may_read, &mut c.read_closed);
                self.drive(cx, token);
            }
        }
    }

    fn timer_armed(&self, token: Token, due: Instant) -> bool {
        self.conns.get(token).is_some_and(|c| c.timer_at == Some(due))
    }

    fn on_timer(&mut self, cx: &mut Ctx<P>, token: Token, due: Instant) -> Option<Instant> {
        let c = self.conns.get_mut(token)?;
        if !weft_io::timer::take_fired(&mut c.timer_at, due) {
            return None;
        }
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
        self.shared.date.update(cx.wall);
        pools::decay(
            &mut self.next_decay,
            cx.now,
            &mut self.shared.pool,
            &mut self.shared.own_pool,
        );
        if self.door.due(cx) {
            self.accept(cx);
        }
    }

    fn max_wait(&self) -> Option<Duration> {
        // The Date header is refreshed once a second.
        let date = Duration::from_secs(1);
        Some(self.door.max_wait().map_or(date, |d| d.min(date)))
    }

    fn keep_running(&self) -> bool {
        !(self.shared.draining && self.conns.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_state_stays_small() {
        // An idle connection's whole cost is this struct (its input buffer
        // is lent only while bytes are pending): issue 21 tracks it.
        let size = std::mem::size_of::<Conn>();
        println!("size_of::<origin::Conn>() = {size}");
        // 288 before `OutChain` counted the bytes a socket was handed.
        assert!(size <= 296, "origin Conn grew to {size} bytes");
    }
}
