//! One connection's cycle: the socket and its source address, interest and
//! timers, rendering requests, the SSL-emulation handshake, flushing output and
//! reading input.

use super::*;

impl Core<'_> {
    /// socket, the source address or port asked for, and a non-blocking connect.
    pub(super) fn connect_socket(&mut self, target: &SocketAddr) -> io::Result<Fd> {
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

    pub(super) fn fail_open(&mut self, e: io::Error) {
        let errno = e.raw_os_error();
        if sys::is_fd_exhaustion(&e) && self.stats.fd_limit.is_none() {
            self.stats.fd_limit = Some(nofile_limit());
        }
        self.stats.record_errno(errno);
    }

    pub(super) fn count_failure(&mut self, c: &Conn, fail: Fail) {
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
    pub(super) fn want<P: Poller>(&self, c: &Conn) -> Interest {
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
    pub(super) fn schedule<P: Poller>(&self, c: &mut Conn, cx: &mut Ctx<P>) {
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
    pub(super) fn session_first_output(&mut self, c: &mut Conn, st: Token, now: Instant) -> Flow {
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
    pub(super) fn render_session(&mut self, c: &mut Conn, st: Token, now: Instant) -> Flow {
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
    pub(super) fn render_pool(&mut self, c: &mut Conn, agent: u32, now: Instant) {
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
    pub(super) fn advance_handshake(&mut self, c: &mut Conn, now: Instant) -> Option<Flow> {
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
    pub(super) fn flush(&mut self, c: &mut Conn, now: Instant) -> io::Result<bool> {
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
    pub(super) fn drive_conn(&mut self, c: &mut Conn, now: Instant) -> Flow {
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

    pub(super) fn on_eof(&mut self, c: &mut Conn, now: Instant) -> Flow {
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
}
