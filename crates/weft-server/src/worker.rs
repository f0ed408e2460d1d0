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

use crate::config::{SendMode, ServeConfig};
use crate::conn::{BodyPath, Conn, FileBody};
use crate::files::{http_mtime, CachedFile, FileCache, Lookup};
use crate::respond::{self, Persist};
use crate::stats::ServeStats;
use std::io::{self, IoSlice};
use std::os::fd::RawFd;
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime};
use weft_http::{BodyFraming, Method, Precondition, RangeOutcome, RequestHead, Version};
use weft_io::sys::{self, Fd};
use weft_io::{
    Acceptor, Ctx, Event, Handler, Interest, Poller, Readiness, RegisterError, Shutdown, Slab, Token, TrackerStats,
};

const LISTENER: Token = Token::new(u32::MAX, 0);
const WAKER: Token = Token::new(u32::MAX - 1, 0);

/// How long a closing connection may linger reading the client's leftovers.
const LINGER: Duration = Duration::from_secs(2);
/// Bytes a lingering close reads before giving up.
const LINGER_MAX: usize = 256 * 1024;
/// Largest request body skipped to keep a connection alive; larger ones close it.
const MAX_DISCARD: u64 = 1 << 20;
/// Stop coalescing pipelined responses beyond this much queued output.
const COALESCE_MAX: usize = 64 * 1024;
/// Copy path buffer (per worker).
const COPY_CHUNK: usize = 256 * 1024;
/// Largest sendfile count per call.
const SENDFILE_CHUNK: usize = 0x7fff_f000;

/// Requests one connection may have answered per pass of the loop: a client
/// with a long pipelined backlog (or one that keeps its socket full) is
/// served in slices, so the other connections of the batch are not starved.
/// Large enough that ordinary pipelining (a browser's few requests, wrk's
/// `--pipeline 16`) finishes in one pass.
const REQUESTS_PER_PASS: u32 = 64;

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
struct Shared<'a> {
    cfg: &'a ServeConfig,
    files: Option<FileCache>,
    head: RequestHead,
    date: weft_http::DateCache,
    rel: Vec<u8>,
    scratch: Vec<u8>,
    stats: ServeStats,
    log: Option<AccessLog>,
    draining: bool,
}

/// Combined Log Format lines buffered per worker and appended to the shared
/// file with one write per flush (O_APPEND keeps whole lines intact).
pub struct AccessLog {
    fd: RawFd,
    buf: Vec<u8>,
    last_flush: Instant,
    clock: crate::accesslog::ClfClock,
}

impl AccessLog {
    /// Log to an already opened (O_APPEND) file.
    pub fn new(fd: RawFd, now: Instant) -> AccessLog {
        AccessLog {
            fd,
            buf: Vec::with_capacity(64 * 1024),
            last_flush: now,
            clock: crate::accesslog::ClfClock::new(),
        }
    }

    fn flush(&mut self, now: Instant) {
        let mut off = 0;
        while off < self.buf.len() {
            match sys::write(self.fd, &self.buf[off..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => off += n,
            }
        }
        self.buf.clear();
        self.last_flush = now;
    }
}

/// One worker's handler.
pub struct Worker<'a> {
    shared: Shared<'a>,
    slot: &'a crate::admin::Slot,
    conns: Slab<Conn>,
    listener: Option<Fd>,
    waker: RawFd,
    shutdown: Shutdown,
    /// Edge-triggered and the accept limit stopped before EAGAIN: connections
    /// may still be queued, and no new edge will say so.
    acceptor: Acceptor,
    grace_deadline: Option<Instant>,
    refused_logged: u64,
    /// The `tracked` backend's counters, copied after each batch.
    tracker: Option<TrackerStats>,
    /// Connections that used up their budget of requests in this pass with
    /// work left ([`REQUESTS_PER_PASS`]); driven again after the batch.
    resume: Vec<Token>,
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
        slot: &'a crate::admin::Slot,
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
                stats: ServeStats::default(),
                log,
                draining: false,
            },
            conns: Slab::new(),
            listener: Some(listener),
            waker,
            shutdown,
            acceptor: Acceptor::new(cfg.accept_limit),
            grace_deadline: None,
            refused_logged: 0,
            tracker: None,
            resume: Vec::new(),
        }
    }

    /// Register the listener and the shutdown waker.
    pub fn register<P: Poller>(&mut self, cx: &mut Ctx<P>) -> io::Result<()> {
        let reg = |e: RegisterError| io::Error::other(e.to_string());
        if let Some(l) = &self.listener {
            cx.register(l.raw(), LISTENER, Interest::READ).map_err(reg)?;
        }
        cx.register(self.waker, WAKER, Interest::READ).map_err(reg)?;
        self.shared.date.update(cx.wall);
        Ok(())
    }

    /// Counters, with this thread's system calls.
    pub fn stats(&self) -> ServeStats {
        let mut s = self.shared.stats;
        s.syscalls = sys::SysCounts::current();
        s.tracker = self.tracker;
        s
    }

    fn accept<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        let Some(lfd) = self.listener.as_ref().map(|l| l.raw()) else {
            return;
        };
        self.acceptor.begin();
        while let Some((fd, peer)) = self.acceptor.next(cx, lfd, LISTENER) {
            self.add_conn(cx, fd, peer);
        }
    }

    fn add_conn<P: Poller>(&mut self, cx: &mut Ctx<P>, fd: Fd, peer: Option<std::net::SocketAddr>) {
        let token = self.conns.next_token();
        // Fixed-interest backends: register once for both directions, never modify.
        let interest = if P::CAPS.fixed_interest {
            Interest::BOTH
        } else {
            Interest::READ
        };
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
            // Never registered: close at once (RST, so the client learns now).
            let _ = sys::set_linger_zero(fd.raw());
            drop(fd);
            return;
        }
        self.shared.stats.accepted += 1;
        let now = cx.now;
        let t = self.conns.insert_with(|t| Conn::new(fd, t, peer, interest, now));
        debug_assert_eq!(t, token);
        // A new connection usually has its request already queued (the client
        // wrote right after connecting): try to read it now.
        if let Some(c) = self.conns.get_mut(token) {
            c.may_read = true;
        }
        self.drive(cx, token);
    }

    fn close<P: Poller>(&mut self, cx: &mut Ctx<P>, token: Token) {
        if let Some(c) = self.conns.remove(token) {
            cx.close_later(c.fd, true);
        }
    }

    /// Run the connection's cycle and settle what it waits for.
    fn drive<P: Poller>(&mut self, cx: &mut Ctx<P>, token: Token) {
        let Some(c) = self.conns.get_mut(token) else {
            return;
        };
        let next = if c.lingering {
            linger_read(c)
        } else {
            drive_conn(c, &mut self.shared, cx.now, cx.wall)
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
                schedule(c, self.shared.cfg, cx);
            }
        }
    }

    fn start_draining<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        if self.shared.draining {
            return;
        }
        self.shared.draining = true;
        self.grace_deadline = Some(cx.now + self.shared.cfg.grace);
        if let Some(l) = self.listener.take() {
            // Stop accepting: queued connections that were never accepted are
            // reset by the kernel when the last listener closes.
            cx.close_later(l, true);
        }
        for t in self.conns.tokens() {
            let idle = self.conns.get(t).map(|c| c.is_idle() && !c.lingering).unwrap_or(false);
            if idle {
                self.close(cx, t);
            } else if let Some(c) = self.conns.get_mut(t) {
                // Finish what is in flight: a response being sent is the
                // connection's last; a request still arriving is answered with
                // `Connection: close` (answer() sees `draining`).
                if c.has_output() {
                    c.close_after = true;
                }
            }
        }
    }
}

impl<P: Poller> Handler<P> for Worker<'_> {
    fn on_event(&mut self, cx: &mut Ctx<P>, ev: Event) {
        match ev.token {
            LISTENER => {
                if !self.shared.draining && self.acceptor.active() {
                    self.accept(cx);
                }
            }
            WAKER => {
                sys::eventfd_drain(self.waker);
                cx.learned(self.waker, Readiness::default());
                if self.shutdown.requested() {
                    self.start_draining(cx);
                }
            }
            token => {
                let Some(c) = self.conns.get_mut(token) else {
                    // Stale: the connection was closed earlier in this batch.
                    return;
                };
                if ev.readable || ev.error {
                    c.may_read = true;
                }
                c.read_closed |= ev.read_closed;
                self.drive(cx, token);
            }
        }
    }

    fn on_timer(&mut self, cx: &mut Ctx<P>, token: Token, due: Instant) -> Option<Instant> {
        let c = self.conns.get_mut(token)?;
        if c.timer_at != Some(due) {
            // An older entry superseded by an earlier one.
            return None;
        }
        c.timer_at = None;
        if cx.now < c.deadline {
            c.timer_at = Some(c.deadline);
            return Some(c.deadline);
        }
        // Timed out. A client that never finished its request head gets a 408
        // (best effort, one send); the others are simply closed.
        if !c.lingering && !c.has_output() && c.head_started.is_some() {
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
            let _ = sys::send(c.fd.raw(), &out, false);
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
                if let Some(c) = self.conns.get_mut(t) {
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
        self.slot.publish(&self.stats());
        let lfd = self.listener.as_ref().map(|l| l.raw());
        if self.acceptor.due(cx, lfd, LISTENER) && !self.shared.draining {
            self.accept(cx);
        }
        if let Some(log) = &mut self.shared.log {
            if log.buf.len() >= 32 * 1024 || cx.now.duration_since(log.last_flush) >= Duration::from_secs(1) {
                log.flush(cx.now);
            }
        }
        if let Some(deadline) = self.grace_deadline {
            if cx.now >= deadline && !self.conns.is_empty() {
                weft_core::warn!(
                    "grace period over: closing {} connection(s) with responses in flight",
                    self.conns.len()
                );
                for t in self.conns.tokens() {
                    self.close(cx, t);
                }
            }
        }
    }

    fn max_wait(&self) -> Option<Duration> {
        let mut w: Option<Duration> = None;
        let mut bound = |d: Duration| w = Some(w.map_or(d, |x| x.min(d)));
        if !self.resume.is_empty() {
            bound(Duration::ZERO);
        }
        if let Some(d) = self.acceptor.max_wait() {
            bound(d);
        }
        if self.shared.log.as_ref().is_some_and(|l| !l.buf.is_empty()) {
            bound(Duration::from_secs(1));
        }
        if let Some(d) = self.grace_deadline {
            bound(d.saturating_duration_since(Instant::now()));
        }
        w
    }

    fn keep_running(&self) -> bool {
        !(self.shared.draining && self.conns.is_empty())
    }
}

impl Drop for Worker<'_> {
    fn drop(&mut self) {
        if let Some(log) = &mut self.shared.log {
            log.flush(Instant::now());
        }
    }
}

/// Set the connection's deadline for its state and make sure a timer will see it.
fn schedule<P: Poller>(c: &mut Conn, cfg: &ServeConfig, cx: &mut Ctx<P>) {
    c.deadline = if c.lingering {
        c.deadline
    } else if c.has_output() {
        c.last_activity + cfg.send_timeout
    } else if let Some(t) = c.head_started {
        t + cfg.header_timeout
    } else {
        c.last_activity + cfg.idle_timeout
    };
    // One heap entry per connection normally; a second only when the deadline
    // moved earlier than the armed one (idle → header timeout).
    if c.timer_at.is_none_or(|t| c.deadline < t) {
        c.timer_at = Some(c.deadline);
        cx.arm_timer(c.token, c.deadline);
    }
}

/// Read and discard after shutting down our side, until EOF, a cap or the deadline.
fn linger_read(c: &mut Conn) -> Next {
    if c.buf.is_empty() {
        c.buf = vec![0u8; crate::conn::INITIAL_INPUT];
    }
    let mut total = 0usize;
    loop {
        match sys::read(c.fd.raw(), &mut c.buf) {
            Ok(0) => return Next::Close,
            Ok(n) => {
                total += n;
                if total > LINGER_MAX {
                    return Next::Close;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                c.may_read = false;
                return Next::Read;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Next::Close,
        }
    }
}

/// The connection cycle (see the module doc).
fn drive_conn(c: &mut Conn, s: &mut Shared<'_>, now: Instant, wall: SystemTime) -> Next {
    let mut budget = REQUESTS_PER_PASS;
    loop {
        if c.has_output() {
            match flush(c, s) {
                Ok(true) => c.last_activity = now,
                Ok(false) => {
                    c.last_activity = now;
                    return Next::Write;
                }
                Err(_) => return Next::Close,
            }
        }
        if c.close_after {
            if c.linger_on_close {
                // Let the client read the error response: half-close, then
                // drain what it still sends (nginx's lingering close).
                if sys::shutdown_write(c.fd.raw()).is_err() {
                    return Next::Close;
                }
                c.lingering = true;
                c.deadline = now + LINGER;
                return linger_read(c);
            }
            return Next::Close;
        }
        if budget == 0 && (c.start < c.end || c.may_read) {
            // Everything answered so far is sent; the rest waits its turn.
            return Next::Resume;
        }
        if c.start < c.end && answer_buffered(c, s, now, wall, &mut budget) {
            continue;
        }
        if c.eof {
            return Next::Close;
        }
        if !c.may_read {
            return Next::Read;
        }
        let max = s.cfg.limits.max_head + 1024;
        if !c.reserve_input(max) {
            // The parser would already have answered 431 for an oversized head;
            // a full buffer here means a request we chose not to parse yet.
            return Next::Close;
        }
        let space = c.buf.len() - c.end;
        match sys::read(c.fd.raw(), &mut c.buf[c.end..]) {
            Ok(0) => {
                c.eof = true;
                c.may_read = false;
                // A partial request can never complete; close after any output.
                if !c.has_output() {
                    return Next::Close;
                }
            }
            Ok(n) => {
                c.end += n;
                c.last_activity = now;
                if c.head_started.is_none() && c.discard == 0 {
                    c.head_started = Some(now);
                }
                // A short read drained the socket, unless the FIN is known
                // to follow (see conn.rs).
                c.may_read = n == space || c.read_closed;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                c.may_read = false;
                return Next::Read;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Next::Close,
        }
    }
}

/// Answer every complete request in the buffer (stopping at a file body, a
/// close, or when enough output is queued). True when output was produced.
fn answer_buffered(c: &mut Conn, s: &mut Shared<'_>, now: Instant, wall: SystemTime, budget: &mut u32) -> bool {
    let mut produced = false;
    while *budget > 0 && c.body.is_none() && !c.close_after && c.out.len() - c.out_pos < COALESCE_MAX {
        if c.discard > 0 {
            let n = c.discard.min((c.end - c.start) as u64);
            c.start += n as usize;
            c.discard -= n;
            if c.discard > 0 {
                break;
            }
            c.head_started = None;
        }
        if c.start == c.end {
            break;
        }
        let parsed = s.head.parse(&c.buf[c.start..c.end], &s.cfg.limits);
        match parsed {
            Ok(None) => {
                if c.head_started.is_none() {
                    c.head_started = Some(now);
                }
                break;
            }
            Ok(Some(n)) => {
                let head_end = c.start + n;
                // A chunked body is checked as far as it has arrived before the
                // request is answered, so a malformed one gets its 400; one that
                // arrived whole is skipped and the connection stays usable.
                let mut next = head_end;
                let mut chunked_pending = false;
                if s.head.framing() == BodyFraming::Chunked {
                    let mut dec = weft_http::ChunkedDecoder::new();
                    let avail = &c.buf[head_end..c.end];
                    match dec.decode_all(&avail[..avail.len().min(MAX_DISCARD as usize)], |_| {}) {
                        Ok(k) if dec.is_done() => next = head_end + k,
                        Ok(_) => chunked_pending = true,
                        Err(e) => {
                            reject(c, s, 400, e.0, wall);
                            produced = true;
                            continue;
                        }
                    }
                }
                answer(c, s, head_end, wall, chunked_pending);
                c.start = next;
                c.head_started = None;
                c.requests += 1;
                *budget -= 1;
                s.stats.requests += 1;
                produced = true;
            }
            Err(e) => {
                reject(c, s, e.status, e.reason, wall);
                produced = true;
            }
        }
    }
    if c.start == c.end {
        c.start = 0;
        c.end = 0;
    }
    produced
}

/// Refuse the request at `c.start` with `status` and close (lingering, so the
/// client can read why).
fn reject(c: &mut Conn, s: &mut Shared<'_>, status: u16, reason: &str, wall: SystemTime) {
    s.stats.bad_requests += 1;
    s.stats.requests += 1;
    let date = s.date.get();
    let bytes = respond::simple(&mut c.out, status, date, b"", reason, false, Persist::Close);
    log_request(s, c, c.start, c.end, status, bytes, wall, false);
    c.close_after = true;
    c.linger_on_close = true;
    c.start = c.end;
}

/// Answer one parsed request whose head is `c.buf[c.start..head_end]`.
/// `chunked_pending`: its chunked body has not fully arrived (it is not read:
/// the connection closes after the response).
fn answer(c: &mut Conn, s: &mut Shared<'_>, head_end: usize, wall: SystemTime, chunked_pending: bool) {
    let head = &s.head;
    let method = head.method();
    let max = s.cfg.max_requests;
    let mut close = !head.keep_alive() || s.draining || (max > 0 && c.requests + 1 >= max);
    match head.framing() {
        BodyFraming::None | BodyFraming::UntilClose => {}
        BodyFraming::Chunked if !chunked_pending => {}
        BodyFraming::Length(n) if n <= MAX_DISCARD => c.discard = n,
        // A large body, or a chunked one still arriving, that we will not
        // read: answer, then close.
        BodyFraming::Length(_) | BodyFraming::Chunked => {
            close = true;
            c.linger_on_close = true;
        }
    }
    let persist = if close {
        Persist::Close
    } else if head.version() == Version::Http10 {
        Persist::KeepAlive10
    } else {
        Persist::Default
    };
    if close {
        c.close_after = true;
    }
    let head_only = method == Method::Head;
    let (status, bytes) = match method {
        Method::Get | Method::Head => serve_target(c, s, head_end, persist, head_only),
        Method::Options => {
            let n = respond::simple(
                &mut c.out,
                204,
                s.date.get(),
                b"Allow: GET, HEAD, OPTIONS\r\n",
                "",
                true,
                persist,
            );
            (204, n)
        }
        _ => {
            let n = respond::simple(
                &mut c.out,
                405,
                s.date.get(),
                b"Allow: GET, HEAD, OPTIONS\r\n",
                "this server only serves files",
                head_only,
                persist,
            );
            (405, n)
        }
    };
    log_request(s, c, c.start, head_end, status, bytes, wall, head_only);
}

#[allow(clippy::too_many_arguments)]
fn log_request(
    s: &mut Shared<'_>,
    c: &Conn,
    head_start: usize,
    head_end: usize,
    status: u16,
    bytes: u64,
    wall: SystemTime,
    head_only: bool,
) {
    let Some(log) = &mut s.log else {
        return;
    };
    let data = &c.buf[head_start..head_end];
    let line_end = memchr::memchr(b'\n', data).unwrap_or(data.len().min(8192));
    let line = data[..line_end].strip_suffix(b"\r").unwrap_or(&data[..line_end]);
    let (referer, ua) = if status < 400 || status == 404 || status == 403 || status == 405 {
        (s.head.header(data, "referer"), s.head.header(data, "user-agent"))
    } else {
        (None, None)
    };
    let ip = c.peer.map(|p| p.ip()).unwrap_or(std::net::IpAddr::from([0, 0, 0, 0]));
    let bytes = if head_only { 0 } else { bytes };
    crate::accesslog::write_clf(&mut log.buf, &mut log.clock, ip, wall, line, status, bytes, referer, ua);
}

/// GET/HEAD of a path: file, directory, demo page, or an error. Returns
/// (status, body bytes) for the log.
fn serve_target(c: &mut Conn, s: &mut Shared<'_>, head_end: usize, persist: Persist, head_only: bool) -> (u16, u64) {
    let data = &c.buf[c.start..head_end];
    let mut target = s.head.target(data);
    if s.head.is_absolute_form() {
        // http://authority/path → /path (RFC 9112 §3.2.2: servers accept absolute-form).
        let after_scheme = target.windows(3).position(|w| w == b"://").map(|i| i + 3).unwrap_or(0);
        target = match target[after_scheme..].iter().position(|&b| b == b'/') {
            Some(i) => &target[after_scheme + i..],
            None => b"/",
        };
    }
    s.rel.clear();
    let info = match crate::path::resolve(target, &mut s.rel) {
        Ok(i) => i,
        Err(e) => {
            let n = respond::simple(
                &mut c.out,
                e.status(),
                s.date.get(),
                b"",
                e.reason(),
                head_only,
                persist,
            );
            return (e.status(), n);
        }
    };
    let date = s.date.get();
    let Some(files) = s.files.as_mut() else {
        // The built-in demo site.
        return match crate::demo::lookup(&s.rel) {
            Some(f) if !info.trailing_slash || s.rel.is_empty() => {
                respond::start_head(&mut c.out, 200, date);
                c.out.extend_from_slice(b"Content-Type: ");
                c.out.extend_from_slice(f.content_type.as_bytes());
                c.out.extend_from_slice(b"\r\n");
                respond::end_head(&mut c.out, Some(f.body.len() as u64), persist);
                if !head_only {
                    c.out.extend_from_slice(f.body);
                    s.stats.bytes_memory += f.body.len() as u64;
                }
                (200, f.body.len() as u64)
            }
            _ => (404, respond::simple(&mut c.out, 404, date, b"", "", head_only, persist)),
        };
    };
    let now = c.last_activity;
    match files.lookup(&s.rel, now) {
        Lookup::File(f) => {
            if info.trailing_slash {
                let n = respond::simple(&mut c.out, 404, date, b"", "", head_only, persist);
                return (404, n);
            }
            serve_file(c, s, head_end, f, persist, head_only)
        }
        Lookup::Dir(dirfd) => {
            if !info.trailing_slash {
                // Redirect to the slash form so relative links resolve inside it.
                let path_end = target.iter().position(|&b| b == b'?').unwrap_or(target.len());
                let mut loc = Vec::with_capacity(target.len() + 16);
                loc.extend_from_slice(b"Location: ");
                loc.extend_from_slice(&target[..path_end]);
                loc.push(b'/');
                loc.extend_from_slice(&target[path_end..]);
                loc.extend_from_slice(b"\r\n");
                let n = respond::simple(&mut c.out, 301, date, &loc, "", head_only, persist);
                return (301, n);
            }
            let dir_len = s.rel.len();
            if dir_len > 0 {
                s.rel.push(b'/');
            }
            s.rel.extend_from_slice(b"index.html");
            let found = files.lookup(&s.rel, now);
            s.rel.truncate(dir_len);
            match found {
                Lookup::File(f) => serve_file(c, s, head_end, f, persist, head_only),
                _ if s.cfg.autoindex => autoindex(c, s, dirfd, persist, head_only),
                _ => {
                    let n = respond::simple(
                        &mut c.out,
                        403,
                        date,
                        b"",
                        "directory listing is off",
                        head_only,
                        persist,
                    );
                    (403, n)
                }
            }
        }
        Lookup::NotFound => (404, respond::simple(&mut c.out, 404, date, b"", "", head_only, persist)),
        Lookup::Forbidden => (403, respond::simple(&mut c.out, 403, date, b"", "", head_only, persist)),
    }
}

fn autoindex(c: &mut Conn, s: &mut Shared<'_>, dirfd: Fd, persist: Persist, head_only: bool) -> (u16, u64) {
    let date = s.date.get();
    let entries = match sys::read_dir(dirfd.raw(), 10_000) {
        Ok(e) => e,
        Err(_) => return (403, respond::simple(&mut c.out, 403, date, b"", "", head_only, persist)),
    };
    let mut items: Vec<crate::autoindex::Entry> = entries
        .into_iter()
        .filter_map(|e| {
            let st = e.stat?;
            Some(crate::autoindex::Entry {
                name: e.name,
                is_dir: st.is_dir,
                size: st.size,
                mtime: st.mtime,
            })
        })
        .collect();
    let shown = format!("/{}/", String::from_utf8_lossy(&s.rel));
    let shown = if s.rel.is_empty() { "/".to_string() } else { shown };
    let mut page = Vec::with_capacity(4096);
    crate::autoindex::render(&shown, &mut items, &mut page);
    respond::start_head(&mut c.out, 200, date);
    c.out.extend_from_slice(b"Content-Type: text/html; charset=utf-8\r\n");
    respond::end_head(&mut c.out, Some(page.len() as u64), persist);
    if !head_only {
        c.out.extend_from_slice(&page);
        s.stats.bytes_memory += page.len() as u64;
    }
    (200, page.len() as u64)
}

fn serve_file(
    c: &mut Conn,
    s: &mut Shared<'_>,
    head_end: usize,
    f: Rc<CachedFile>,
    persist: Persist,
    head_only: bool,
) -> (u16, u64) {
    let data = &c.buf[c.start..head_end];
    let head = &s.head;
    let date = s.date.get();
    let len = f.stat.size;
    let mtime = http_mtime(&f.stat);
    match weft_http::evaluate_preconditions(
        head.method(),
        head.header(data, "if-match"),
        head.header(data, "if-unmodified-since"),
        head.header(data, "if-none-match"),
        head.header(data, "if-modified-since"),
        &f.etag,
        mtime,
    ) {
        Precondition::Proceed => {}
        Precondition::NotModified => {
            respond::start_head(&mut c.out, 304, date);
            // 304 carries the validators (RFC 9110 §15.4.5).
            c.out.extend_from_slice(&f.fields);
            respond::end_head(&mut c.out, None, persist);
            return (304, 0);
        }
        Precondition::Failed => {
            let n = respond::simple(&mut c.out, 412, date, b"", "", head_only, persist);
            return (412, n);
        }
    }
    let mut range = RangeOutcome::Full;
    if head.method() == Method::Get {
        if let Some(r) = head.header(data, "range") {
            let allowed = match head.header(data, "if-range") {
                Some(ir) => weft_http::if_range_allows(ir, &f.etag, mtime),
                None => true,
            };
            if allowed {
                range = weft_http::evaluate_range(r, len);
            }
        }
    }
    let (status, start, end) = match range {
        RangeOutcome::Full | RangeOutcome::Multiple => (200, 0, len),
        RangeOutcome::Partial { start, end_inclusive } => (206, start, end_inclusive + 1),
        RangeOutcome::Unsatisfiable => {
            let mut extra = Vec::with_capacity(48);
            extra.extend_from_slice(b"Content-Range: bytes */");
            respond::push_u64(&mut extra, len);
            extra.extend_from_slice(b"\r\n");
            let n = respond::simple(&mut c.out, 416, date, &extra, "", head_only, persist);
            return (416, n);
        }
    };
    respond::start_head(&mut c.out, status, date);
    c.out.extend_from_slice(&f.fields);
    if status == 206 {
        c.out.extend_from_slice(b"Content-Range: bytes ");
        respond::push_u64(&mut c.out, start);
        c.out.push(b'-');
        respond::push_u64(&mut c.out, end - 1);
        c.out.push(b'/');
        respond::push_u64(&mut c.out, len);
        c.out.extend_from_slice(b"\r\n");
    }
    respond::end_head(&mut c.out, Some(end - start), persist);
    if head_only || end == start {
        return (status, end - start);
    }
    if let Some(body) = &f.body {
        // Small file held in memory: one copy into the output buffer buys a
        // single write per response and lets pipelined responses share it.
        c.out.extend_from_slice(&body[start as usize..end as usize]);
        s.stats.bytes_memory += end - start;
        return (status, end - start);
    }
    let path = match s.cfg.send {
        SendMode::Sendfile => BodyPath::Sendfile,
        SendMode::Copy => BodyPath::Copy,
        // Past the in-memory size, sendfile: on loopback too it costs no more
        // CPU than pread + writev at 16 KiB and half as much from 512 KiB up
        // (lab `send-path`, docs/results.md), and over a NIC it saves the copy.
        SendMode::Auto => BodyPath::Sendfile,
    };
    if path == BodyPath::Copy && s.scratch.is_empty() {
        s.scratch = vec![0u8; COPY_CHUNK];
    }
    c.body = Some(FileBody {
        file: f,
        offset: start,
        end,
        path,
    });
    (status, end - start)
}

/// Send queued output. Ok(true): everything sent; Ok(false): the socket is full.
fn flush(c: &mut Conn, s: &mut Shared<'_>) -> io::Result<bool> {
    let fd = c.fd.raw();
    loop {
        let pending = c.out.len() - c.out_pos;
        let Some(body) = c.body.as_mut() else {
            if pending == 0 {
                c.out.clear();
                c.out_pos = 0;
                return Ok(true);
            }
            let n = match retry(|| sys::send(fd, &c.out[c.out_pos..], false)) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            };
            c.out_pos += n;
            if n < pending {
                return Ok(false);
            }
            continue;
        };
        match body.path {
            BodyPath::Sendfile => {
                if pending > 0 {
                    // MSG_MORE: the head waits for the first file bytes, so a
                    // small response leaves in one segment.
                    let n = match retry(|| sys::send(fd, &c.out[c.out_pos..], true)) {
                        Ok(n) => n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                        Err(e) => return Err(e),
                    };
                    c.out_pos += n;
                    if n < pending {
                        return Ok(false);
                    }
                    continue;
                }
                let want = (body.end - body.offset).min(SENDFILE_CHUNK as u64) as usize;
                let before = body.offset;
                let n = match retry(|| sys::sendfile(fd, body.file.fd.raw(), &mut body.offset, want)) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                    Err(e) => return Err(e),
                };
                if n == 0 {
                    // The file shrank after we announced its length: the only
                    // honest thing left is to cut the connection.
                    return Err(io::Error::from_raw_os_error(libc::EIO));
                }
                body.offset = before + n as u64;
                s.stats.bytes_sendfile += n as u64;
                if body.offset >= body.end {
                    c.body = None;
                    c.out.clear();
                    c.out_pos = 0;
                } else if n < want {
                    return Ok(false);
                }
            }
            BodyPath::Copy => {
                let want = ((body.end - body.offset) as usize).min(s.scratch.len());
                let got = retry(|| sys::pread(body.file.fd.raw(), &mut s.scratch[..want], body.offset))?;
                if got == 0 {
                    return Err(io::Error::from_raw_os_error(libc::EIO));
                }
                let iov = [IoSlice::new(&c.out[c.out_pos..]), IoSlice::new(&s.scratch[..got])];
                let iov = if pending == 0 { &iov[1..] } else { &iov[..] };
                let n = match retry(|| sys::writev(fd, iov)) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                    Err(e) => return Err(e),
                };
                let from_out = n.min(pending);
                c.out_pos += from_out;
                let from_file = n - from_out;
                // Bytes read but not accepted by the socket are read again next
                // time (pread at the new offset): cheaper than keeping a
                // per-connection copy buffer for the rare short write.
                body.offset += from_file as u64;
                s.stats.bytes_copy += from_file as u64;
                if body.offset >= body.end {
                    c.body = None;
                    c.out.clear();
                    c.out_pos = 0;
                } else if n < pending + got {
                    return Ok(false);
                }
            }
        }
    }
}

#[inline]
fn retry<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}
