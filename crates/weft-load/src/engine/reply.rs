//! Replies: heads that may span reads, bodies (length, chunked, until close)
//! with `--verify`, and what a connection does after a complete reply.

use super::*;

impl Core<'_> {
    /// Parse a response head that may span reads. Some(bytes of `d` used).
    pub(super) fn parse_head(&mut self, c: &mut Conn, d: &[u8]) -> Result<Option<usize>, Fail> {
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

    pub(super) fn process(&mut self, c: &mut Conn, data: &[u8], now: Instant) -> Result<Flow, Fail> {
        let mut d = data;
        while !d.is_empty() {
            let step = match c.phase {
                Phase::Tunnel => self.tunnel_reply(c, &mut d, now)?,
                Phase::Handshake => self.handshake_bytes(c, &mut d, now)?,
                Phase::Idle if c.inflight.is_empty() => {
                    // Unasked bytes on an idle connection (a farewell message
                    // before the server closes): ignored.
                    return Ok(Flow::Continue);
                }
                _ => self.reply_bytes(c, &mut d, now)?,
            };
            if let Some(flow) = step {
                return Ok(flow);
            }
        }
        Ok(Flow::Continue)
    }

    /// The proxy's answer to the CONNECT of an SSL-emulation tunnel.
    /// Some(flow): `process` returns it.
    #[inline]
    fn tunnel_reply(&mut self, c: &mut Conn, d: &mut &[u8], now: Instant) -> Result<Option<Flow>, Fail> {
        let Some(used) = self.parse_head(c, d)? else {
            return Ok(Some(Flow::Continue));
        };
        *d = &d[used..];
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
            return Ok(Some(Flow::Close(End::Done)));
        }
        c.phase = Phase::Handshake;
        match self.advance_handshake(c, now) {
            Some(Flow::Close(e)) => Ok(Some(Flow::Close(e))),
            _ => Ok(None),
        }
    }

    /// Bytes of the server's emulated handshake flight.
    #[inline]
    fn handshake_bytes(&mut self, c: &mut Conn, d: &mut &[u8], now: Instant) -> Result<Option<Flow>, Fail> {
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
        *d = &d[take..];
        if ssl.need == 0 {
            if let Some(Flow::Close(e)) = self.advance_handshake(c, now) {
                return Ok(Some(Flow::Close(e)));
            }
        }
        Ok(None)
    }

    /// Bytes of the reply to the oldest request in flight: its head, then its body.
    #[inline]
    fn reply_bytes(&mut self, c: &mut Conn, d: &mut &[u8], now: Instant) -> Result<Option<Flow>, Fail> {
        let Some(meta) = c.inflight.front().copied() else {
            return Err(Fail::Bad);
        };
        if c.sent == 0 {
            // Bytes before any request was written.
            return Err(Fail::Bad);
        }
        if c.rx.in_head {
            let Some(used) = self.parse_head(c, d)? else {
                return Ok(Some(Flow::Continue));
            };
            *d = &d[used..];
            self.stats.head_bytes += self.head.len() as u64;
            let status = self.head.status();
            if (100..200).contains(&status) && status != 101 {
                // Interim response: the real one follows.
                return Ok(None);
            }
            if let Some(abort) = self.begin_body(c, &meta, status) {
                return Ok(Some(abort));
            }
        }
        if self.body_bytes(c, d)? {
            if let Flow::Close(e) = self.reply_done(c, now) {
                if !d.is_empty() {
                    // Bytes after the last expected reply.
                    return Err(Fail::Bad);
                }
                return Ok(Some(Flow::Close(e)));
            }
        }
        Ok(None)
    }

    /// A final head was parsed: set up reading its body. Some(flow): the
    /// workload aborts the transaction here.
    #[inline]
    fn begin_body(&mut self, c: &mut Conn, meta: &ReqMeta, status: u16) -> Option<Flow> {
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
            return Some(Flow::Close(End::Aborted));
        }
        if c.rx.verify && meta.size != u64::MAX {
            if let Body::Length(n) = c.rx.body {
                if n != meta.size {
                    c.rx.verify_ok = false;
                }
            }
        }
        None
    }

    /// Take body bytes off `d`. Ok(true): the body is complete.
    #[inline]
    fn body_bytes(&mut self, c: &mut Conn, d: &mut &[u8]) -> Result<bool, Fail> {
        match c.rx.body {
            Body::Length(n) => {
                let k = ((n - c.rx.pos) as usize).min(d.len());
                self.stats.body_bytes += c.rx.take(&d[..k]);
                *d = &d[k..];
                Ok(c.rx.pos == n)
            }
            Body::UntilClose => {
                self.stats.body_bytes += c.rx.take(d);
                *d = &[];
                Ok(false)
            }
            Body::Chunked => {
                while !d.is_empty() {
                    let r = c.rx.chunked.decode(d).map_err(|_| Fail::Bad)?;
                    if let Some(range) = r.data {
                        self.stats.body_bytes += c.rx.take(&d[range]);
                    }
                    *d = &d[r.consumed..];
                    if c.rx.chunked.is_done() {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
        }
    }

    /// A reply is complete: record it, then decide what the connection does next.
    pub(super) fn reply_done(&mut self, c: &mut Conn, now: Instant) -> Flow {
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
