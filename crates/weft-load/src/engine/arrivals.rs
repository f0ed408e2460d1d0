//! Arrivals: the open-loop schedule, closed-loop sessions and their restarts,
//! and the agents that request-driven workloads queue requests at.

use super::*;

impl Engine<'_> {
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
    pub(super) fn arrivals_behind(&self) -> bool {
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

    pub(super) fn budget_allows(&self) -> bool {
        self.core.plan.budget.is_none_or(|b| self.core.arrivals < b)
    }

    pub(super) fn arrive<P: Poller>(&mut self, cx: &mut Ctx<P>) -> Option<Instant> {
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

    pub(super) fn start_session<P: Poller>(&mut self, cx: &mut Ctx<P>, closed_loop: bool, delay: Option<Duration>) {
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

    pub(super) fn connect_session<P: Poller>(&mut self, cx: &mut Ctx<P>, st: Token) {
        let present = self.core.sessions.get(st).is_some_and(|s| s.conn.is_none());
        if present && self.open_conn(cx, Owner::Session(st)).is_none() && self.core.sessions.get(st).is_some() {
            // Could not even open a socket: the session fails (counted).
            self.end_session(cx, st, true);
        }
    }

    /// The session is over; a closed-loop client starts its next one after
    /// `--think` (and at least 1 ms after a failure, so a refusing server
    /// cannot make clients spin or recurse).
    pub(super) fn end_session<P: Poller>(&mut self, cx: &mut Ctx<P>, st: Token, failed: bool) {
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

    pub(super) fn pool_arrival<P: Poller>(&mut self, cx: &mut Ctx<P>, agent: u32, item: u64) {
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
    pub(super) fn pool_dispatch<P: Poller>(&mut self, cx: &mut Ctx<P>, agent: u32) {
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
}
