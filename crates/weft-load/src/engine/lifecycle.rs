//! Connections: opening (socket, optimistic first write, registration),
//! driving, closing (counting how each ended, recycling its buffers, letting
//! its owner go on) and the graceful then forced stop.

use super::*;

impl Engine<'_> {
    /// socket + connect, the owner's first output written at once, register.
    pub(super) fn open_conn<P: Poller>(&mut self, cx: &mut Ctx<P>, owner: Owner) -> Option<Token> {
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
    pub(super) fn drive<P: Poller>(&mut self, cx: &mut Ctx<P>, token: Token) {
        let Engine { conns, core } = self;
        let Some(c) = conns.get_mut(token) else {
            return;
        };
        let now = Instant::now();
        let was = c.may_read;
        match core.drive_conn(c, now) {
            Flow::Continue => {
                // The EAGAIN report (`Ctx::settled`): a read that ran dry,
                // and a flush that blocked (output left, no think time).
                let blocked = c.has_output() && c.think_until.is_none();
                cx.settled_cycle(c.fd.raw(), was, c.may_read, blocked);
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

    pub(super) fn run_dispatches<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        while let Some(a) = self.core.to_dispatch.pop() {
            self.pool_dispatch(cx, a);
        }
    }

    /// Close a connection, count how it ended, and let its owner go on.
    pub(super) fn close_conn<P: Poller>(&mut self, cx: &mut Ctx<P>, token: Token, end: End) {
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

    pub(super) fn begin_stop<P: Poller>(&mut self, cx: &mut Ctx<P>) {
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

    pub(super) fn force_stop<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        for t in self.conns.tokens() {
            self.close_conn(cx, t, End::Failed(Fail::Timeout));
        }
        self.core.sessions = Slab::new();
    }

    pub(super) fn natural_end(&self) -> bool {
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
