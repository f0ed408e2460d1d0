//! A transaction: one forwarded request, from its upstream connection to
//! the end of its response — resolve → connect (or reuse) → exchange (send
//! the request and its body, read the response head) → relay the body —
//! and a CONNECT tunnel, the transaction that becomes a byte pipe.
//!
//! `Phase` says where a transaction is; [`Worker::step_txn`] advances it one
//! step. Failures end it through [`Worker::fail`]: an error answer when
//! nothing of the response has gone out yet, a closed client otherwise.

use crate::client::{drop_overtaken_body, set_notsent_lowat, ClientRead};
use crate::config::SpliceMode;
use crate::conn::{Client, Phase, ReqBody, Txn, Upstream};
use crate::relay::{splice_request_body, BodyEnd, Ends, Pump};
use crate::response::store_object;
use crate::tunnel::{Side, Tunnel, TunnelEnds, TunnelState};
use crate::upstream::{read_response_head, HeadRead};
use crate::worker::{client_of, interest, pair, Flow, Shared, Worker, BATCH_TIMER, BATCH_WAIT};
use std::os::fd::AsFd;
use std::time::Instant;
use weft_http::respond::{self, Persist};
use weft_http::Method;
use weft_io::sys;
use weft_io::{Ctx, Interest, Poller, Token};

/// Request bytes queued towards the upstream above which no more of the
/// request body is taken from the client.
const REQ_QUEUE_HIGH: u64 = 256 * 1024;
/// Most request body bytes buffered from the client at once.
const REQ_BODY_INPUT: usize = 64 * 1024;

/// What sending the request (and the body received so far) came to.
enum Sent {
    /// All there is to send now is sent or queued.
    Ok,
    /// The chunked request body is malformed: 400.
    BadBody,
    /// The upstream refused the bytes.
    UpstreamClosed,
    /// The client went away while its body was read.
    ClientGone,
}

/// Move request body bytes received from the client behind the head queued
/// for the upstream, and send; read more of the body from the client while
/// the upstream takes it.
fn send_request(c: &mut Client, u: &mut Upstream, sh: &mut Shared<'_>, now: Instant) -> Sent {
    let mut moved = false;
    loop {
        if let Some(sent) = spliced_body(c, u, sh, now) {
            return sent;
        }
        let txn = c.txn.as_mut().expect("exchange has a txn");
        let body_done = match &mut txn.body {
            ReqBody::None => true,
            ReqBody::Length(left) => {
                let avail = c.input.len() as u64;
                let take = avail.min(*left) as usize;
                if take > 0 && u.out.len() < REQ_QUEUE_HIGH {
                    u.out.push_copy(&c.input.pending()[..take]);
                    c.input.consume(take);
                    *left -= take as u64;
                    moved = true;
                }
                *left == 0
            }
            ReqBody::Chunked(dec) => {
                let avail = c.input.pending();
                if !avail.is_empty() && u.out.len() < REQ_QUEUE_HIGH {
                    match dec.decode_all(avail, |_| {}) {
                        Ok(k) => {
                            u.out.push_copy(&avail[..k]);
                            c.input.consume(k);
                            moved = true;
                        }
                        Err(_) => return Sent::BadBody,
                    }
                }
                dec.is_done()
            }
        };
        if body_done {
            txn.body = ReqBody::None;
        }
        // Send.
        if !u.out.is_empty() {
            if !u.may_write {
                u.want.write = true;
            } else {
                match u.out.flush(&u.fd, &[], &mut []) {
                    Ok(sent) => {
                        if sent.total() > 0 {
                            u.last_activity = now;
                        }
                        if sent.blocked {
                            u.may_write = false;
                            u.want.write = true;
                        }
                    }
                    Err(_) => return Sent::UpstreamClosed,
                }
            }
        }
        if body_done || !u.out.is_empty() {
            return Sent::Ok;
        }
        // More request body from the client.
        if !c.input.is_empty() && !moved {
            continue;
        }
        if c.fd.is_none() {
            return Sent::Ok;
        }
        if !c.may_read {
            c.want.read = true;
            return Sent::Ok;
        }
        if let Some(sent) = spliced_body(c, u, sh, now) {
            return sent;
        }
        match c.read_input(REQ_BODY_INPUT, &mut sh.bufs) {
            ClientRead::Data { .. } => {
                c.last_activity = now;
                moved = false;
            }
            ClientRead::WouldBlock | ClientRead::Full => return Sent::Ok,
            ClientRead::Eof | ClientRead::Failed => return Sent::ClientGone,
        }
    }
}

/// The rest of a long request body by splice, where that applies
/// (`relay/request_body.rs`).
fn spliced_body(c: &mut Client, u: &mut Upstream, sh: &mut Shared<'_>, now: Instant) -> Option<Sent> {
    Some(
        match splice_request_body(c, u, &mut sh.pipes, sh.cfg, &mut sh.stats, now)? {
            Ok(()) => Sent::Ok,
            Err(BodyEnd::ClientGone) => Sent::ClientGone,
            Err(BodyEnd::UpstreamClosed) => Sent::UpstreamClosed,
        },
    )
}

impl Worker<'_> {
    /// The upstream connection of `ct`'s transaction, if it has one.
    fn txn_upstream(&mut self, ct: Token) -> Option<Token> {
        client_of(&mut self.slab, ct)?.txn.as_ref()?.up
    }

    pub(crate) fn step_txn<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) -> Flow {
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        let phase = c.txn.as_ref().map(|t| t.phase).unwrap_or(Phase::Resolve);
        if phase != Phase::Body {
            // Keep earlier pipelined answers moving, and read ahead.
            if let Some(f) = self.client_side_while_waiting(cx, ct) {
                return f;
            }
        }
        match phase {
            Phase::Resolve => Flow::Wait,
            Phase::Connect => self.txn_connect(cx, ct),
            Phase::Exchange => self.txn_exchange(cx, ct),
            Phase::Body => self.txn_body(cx, ct),
        }
    }

    /// Send the request (and body), read the response head.
    fn txn_exchange<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) -> Flow {
        let Some(ut) = self.txn_upstream(ct) else {
            return Flow::Closed;
        };
        let limits = self.sh.cfg.limits;
        let first_read = self.sh.cfg.first_read;
        let Some((c, u)) = pair(&mut self.slab, ct, ut) else {
            return self.fail(cx, ct, 502, "upstream connection lost");
        };
        // Connection establishment.
        if u.connecting {
            if !u.may_write {
                u.want.write = true;
                return Flow::Wait;
            }
            match sys::take_socket_error(&u.fd) {
                Ok(None) => {
                    u.connecting = false;
                    u.last_activity = cx.now;
                }
                Ok(Some(e)) | Err(e) => return self.connect_failed(cx, ct, e),
            }
        }
        if c.txn.as_ref().is_some_and(|t| t.connect) {
            return self.start_tunnel(cx, ct, ut);
        }
        // Request body bytes already received go out behind the head.
        match send_request(c, u, &mut self.sh, cx.now) {
            Sent::Ok => {}
            Sent::BadBody => return self.fail(cx, ct, 400, "invalid chunked request body"),
            Sent::UpstreamClosed => return self.upstream_lost(cx, ct, "the upstream closed the connection"),
            Sent::ClientGone => {
                self.close_client(cx, ct);
                return Flow::Closed;
            }
        }
        // The response head (also while the body is still going out: an
        // early answer such as 413 is read and relayed).
        let upgrade = c.txn.as_ref().is_some_and(|t| t.upgrade);
        match read_response_head(
            u,
            upgrade,
            &mut self.sh.resp,
            &mut self.sh.bufs,
            &limits,
            first_read,
            cx.now,
        ) {
            HeadRead::Head(n) => self.on_response_head(cx, ct, ut, n),
            HeadRead::Switched(n) => self.switch_protocols(cx, ct, ut, n),
            HeadRead::Interim(n) => {
                // Relayed at once (the next step flushes it) to an HTTP/1.1
                // client, before the final response; never stored.
                if c.txn.as_ref().is_some_and(|t| !t.http10) {
                    let (sh, v) = (&self.sh, c.out.own_mut());
                    let rdata = &u.buf.pending()[..n];
                    let client = crate::headers::HeadFor::Client;
                    crate::headers::write_response_fields(v, &sh.resp, rdata, &sh.via, sh.date.get(), client);
                    weft_http::encode::end(v);
                }
                u.buf.consume(n);
                Flow::Again
            }
            HeadRead::Wait => Flow::Wait,
            HeadRead::Bad(reason) => self.fail(cx, ct, 502, reason),
            HeadRead::Lost(reason) => self.upstream_lost(cx, ct, reason),
        }
    }

    /// Answer the client with an error (or close it if its response has
    /// begun) and end the transaction; the upstream is closed.
    pub(crate) fn fail<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token, status: u16, reason: &str) -> Flow {
        // The origin failed (no connection, no answer, a timeout): a stale
        // stored response may answer instead (`stale-if-error`).
        if matches!(status, 502 | 504) {
            if let Some(obj) = self.stale_stand_in(ct, weft_http::date::unix_secs(cx.wall)) {
                weft_core::debug!("{reason}: answered from a stale stored response");
                return self.serve_stale(cx, ct, obj);
            }
        }
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        let Some((mut txn, ut)) = c.end_txn(&mut self.sh) else {
            return Flow::Again;
        };
        if let Some(relay) = txn.relay.take() {
            relay.abandon(&mut self.sh.stats, true);
        }
        let responded = txn.responded;
        let head_only = txn.method == Method::Head;
        let body_pending = !matches!(txn.body, ReqBody::None);
        let keep = txn.client_keep_alive && !body_pending && !self.sh.draining;
        c.spare = Some(txn);
        if let Some(ut) = ut {
            self.close_upstream(cx, ut);
        }
        match status {
            502 => self.sh.stats.errors_502 += 1,
            504 => self.sh.stats.errors_504 += 1,
            _ => {}
        }
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        if responded || c.fd.is_none() {
            self.close_client(cx, ct);
            return Flow::Closed;
        }
        let persist = if keep { Persist::Default } else { Persist::Close };
        let date = self.sh.date.get();
        {
            let v = c.out.own_mut();
            respond::simple(v, status, date, b"", reason, head_only, persist);
        }
        crate::accesslog::answered(&mut self.sh, c, status, "-", 0);
        if !keep {
            c.close_after = true;
            c.linger_on_close = body_pending;
        }
        Flow::Again
    }

    fn txn_body<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) -> Flow {
        let Some(ut) = self.txn_upstream(ct) else {
            return Flow::Closed;
        };
        let sh = &mut self.sh;
        let Some((c, u)) = pair(&mut self.slab, ct, ut) else {
            return Flow::Closed;
        };
        let txn = c.txn.as_mut().expect("body has a txn");
        let relay = txn.relay.as_mut().expect("body has a relay");
        let result = {
            let mut ends = Ends {
                client: c.fd.as_ref().map(|f| f.as_fd()),
                client_may_write: &mut c.may_write,
                out: &mut c.out,
                up: u.fd.as_fd(),
                up_may_read: &mut u.may_read,
                up_buf: &mut u.buf,
                bufs: &mut sh.bufs,
                kernel: &mut sh.sockmap,
            };
            relay.pump(&mut ends, &mut sh.stats)
        };
        if !relay.moved_nothing() {
            u.last_activity = cx.now;
            c.last_activity = cx.now;
        }
        if relay.take_batch_start() {
            self.batching.push(ct);
            if !self.batch_timer {
                self.batch_timer = true;
                cx.arm_timer(BATCH_TIMER, cx.now + BATCH_WAIT);
            }
        }
        let gone = relay.client_gone();
        let in_kernel = relay.in_kernel();
        feed_followers(sh, &c.key, txn, &mut c.out);
        if gone {
            if let Some(fd) = c.fd.take() {
                // The client left; the object is still being filled.
                cx.close_later(fd, true);
            }
        }
        match result {
            Pump::Whole => {
                // Stored before the client has the last bytes: the request
                // it sends once it has them finds the object, on any worker.
                let relay = txn.relay.as_mut().expect("present");
                let body = relay.take_whole(&mut c.out, &mut sh.stats);
                complete_fill(sh, &c.key, txn, body);
                Flow::Again
            }
            Pump::Done => {
                let mut relay = txn.relay.take().expect("present");
                if relay.upstream_tainted() {
                    txn.up_keep_alive = false;
                }
                if let Some(b) = relay.take_buffer() {
                    if sh.relay_bufs.len() < 16 {
                        sh.relay_bufs.push(b);
                    }
                }
                let body = relay.finish(&mut c.out, &mut sh.pipes, &mut sh.stats);
                complete_fill(sh, &c.key, txn, body);
                self.finish_txn(cx, ct)
            }
            Pump::Wait { up_read, client_write } => {
                u.want = interest(up_read, false);
                c.want = interest(false, client_write);
                // Notice a client that hangs up (the cache fill goes on
                // without it), and keep pipelined requests flowing in.
                let max = sh.cfg.limits.max_head + 1024;
                // A body in the kernel: the client's pending error is its
                // marker, which a read would take; pipelined requests wait.
                if c.fd.is_none() || in_kernel {
                    return Flow::Wait;
                }
                // The rest of a request body this response overtook is read
                // and dropped meanwhile, also while the response waits for
                // the client: a client that writes its whole body before it
                // reads would otherwise stall both directions.
                if c.discard > 0 {
                    drop_overtaken_body(c, cx.now);
                }
                let dropping = c.discard > 0;
                if c.eof || (client_write && !dropping) || !c.has_room(max) {
                    return Flow::Wait;
                }
                if !c.may_read {
                    c.want.read = true;
                    return Flow::Wait;
                }
                match c.read_input(max, &mut sh.bufs) {
                    ClientRead::WouldBlock if dropping => {
                        c.want.read = true;
                        Flow::Wait
                    }
                    // A FIN: no more requests, but a half-closed client
                    // still reads this response (a gone one makes the
                    // next write fail).
                    ClientRead::Eof | ClientRead::WouldBlock | ClientRead::Full => Flow::Wait,
                    ClientRead::Data { .. } => Flow::Again,
                    ClientRead::Failed => {
                        // A reset: the client is gone.
                        c.eof = true;
                        let relay = c.txn.as_mut().and_then(|t| t.relay.as_mut()).expect("body has a relay");
                        if relay.client_left(&mut c.out) {
                            if let Some(fd) = c.fd.take() {
                                cx.close_later(fd, true);
                            }
                            Flow::Again
                        } else {
                            self.close_client(cx, ct);
                            Flow::Closed
                        }
                    }
                }
            }
            Pump::Yield => Flow::Yield,
            Pump::ClientAborted => {
                self.close_client(cx, ct);
                Flow::Closed
            }
            Pump::UpstreamFailed(reason) => {
                // Warn, as nginx logs "upstream prematurely closed": the
                // client gets a cut response, which an operator should see.
                weft_core::warn!("{reason}: the client's response is cut");
                let relay = txn.relay.take().expect("present");
                relay.abandon(&mut sh.stats, true);
                // Never a short response that looks complete: close the client.
                self.close_client(cx, ct);
                Flow::Closed
            }
        }
    }

    /// The exchange is complete: release the upstream (AutoRelease), go on
    /// with the client's next request.
    pub(crate) fn finish_txn<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) -> Flow {
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        let Some((txn, ut)) = c.end_txn(&mut self.sh) else {
            return Flow::Again;
        };
        let reusable = txn.up_keep_alive;
        if txn.client_close {
            c.close_after = true;
        }
        c.spare = Some(txn);
        let gone = c.fd.is_none();
        if let Some(ut) = ut {
            self.release_upstream(cx, ut, reusable);
        }
        if gone {
            self.close_client(cx, ct);
            return Flow::Closed;
        }
        Flow::Again
    }

    // ------------------------------------------------------------------
    // Tunnels

    /// CONNECT: the upstream is connected, the client is told so, and the
    /// connection becomes a tunnel.
    fn start_tunnel<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token, ut: Token) -> Flow {
        if let Some(c) = client_of(&mut self.slab, ct) {
            c.out.push_copy(b"HTTP/1.1 200 Connection established\r\n\r\n");
        }
        self.become_tunnel(cx, ct, ut)
    }

    /// The upstream answered a forwarded Upgrade with 101 (its head is the
    /// first `n` bytes of its input): the head goes to the client with the
    /// Upgrade it agreed to, whatever the upstream sent behind it follows,
    /// and the connection becomes a tunnel, as a CONNECT does. The upstream
    /// connection is the client's from now on (never pooled again).
    fn switch_protocols<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token, ut: Token, n: usize) -> Flow {
        let sh = &mut self.sh;
        let Some((c, u)) = pair(&mut self.slab, ct, ut) else {
            return Flow::Closed;
        };
        {
            let data = &u.buf.pending()[..n];
            let v = c.out.own_mut();
            let client = crate::headers::HeadFor::Client;
            crate::headers::write_response_fields(v, &sh.resp, data, &sh.via, sh.date.get(), client);
            // Upgrade is hop-by-hop, so the relay above left it out; the
            // client must see which protocol the upstream switched to.
            for value in sh.resp.header_all(data, "upgrade") {
                v.extend_from_slice(b"Upgrade: ");
                v.extend_from_slice(value);
                v.extend_from_slice(b"\r\n");
            }
            v.extend_from_slice(b"Connection: upgrade\r\n");
            weft_http::encode::end(v);
        }
        u.buf.consume(n);
        if !u.buf.is_empty() {
            // The new protocol's first bytes, read with the head.
            c.out.push_copy(u.buf.pending());
        }
        u.buf.discard(&mut sh.bufs);
        if let Some(txn) = c.txn.as_mut() {
            txn.responded = true;
            txn.status = 101;
            crate::front::count_bytes(sh.cfg, txn, n as u64);
        }
        sh.stats.upgrades += 1;
        crate::accesslog::answered(sh, c, 101, "-", 0);
        self.become_tunnel(cx, ct, ut)
    }

    /// Turn the client's transaction into a tunnel to `ut`: the client's
    /// bytes after its request head (and a FIN seen meanwhile) belong to it.
    fn become_tunnel<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token, ut: Token) -> Flow {
        let splice = self.sh.cfg.splice != SpliceMode::Off;
        // The end-of-stream marker arrives as an error on a socket weft may
        // have no interest in: select and the user-level trackers would
        // not report it, so their tunnels splice.
        let kernel = self.sh.cfg.splice == SpliceMode::Sockmap
            && crate::tunnel::KernelFwd::backend_fits(P::CAPS.name, P::CAPS.tracks_readiness);
        // The ring wakes weft when a direction has used its redirect budget.
        let ring = kernel && self.sh.sockmap_ring(cx);
        let sh = &mut self.sh;
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        let Some(mut txn) = c.txn.take() else {
            return Flow::Again;
        };
        txn.up = None;
        // weft front: the back-end's slot is given back now (a tunnel is
        // not a request in progress).
        crate::front::release(sh.cfg, &mut txn);
        c.spare = Some(txn);
        let mut tunnel = Box::new(Tunnel::new(splice, &mut sh.pipes, &mut sh.tunnel_bufs, &mut sh.stats));
        if kernel {
            tunnel.want_kernel(&mut sh.sockmap, ring, ct.0, &mut sh.stats);
        }
        // A FIN seen while the tunnel was being set up is the tunnel's to
        // forward: reading again returns EOF, which the tunnel turns into a
        // half-close towards the upstream.
        if c.eof {
            c.eof = false;
            c.may_read = true;
        }
        // What the client sent after its CONNECT head belongs to the tunnel.
        if !c.input.is_empty() {
            tunnel.to_upstream.push_copy(c.input.pending());
            c.input.discard(&mut sh.bufs);
        }
        set_notsent_lowat(&c.fd, &mut c.notsent_lowat, !tunnel.to_kernel(), self.sh.cfg);
        c.tunnel = Some((tunnel, ut));
        c.last_activity = cx.now;
        Flow::Again
    }

    pub(crate) fn step_tunnel<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) -> Flow {
        let Some(ut) = client_of(&mut self.slab, ct)
            .and_then(|c| c.tunnel.as_ref())
            .map(|t| t.1)
        else {
            return Flow::Closed;
        };
        let sh = &mut self.sh;
        let Some((c, u)) = pair(&mut self.slab, ct, ut) else {
            self.close_client(cx, ct);
            return Flow::Closed;
        };
        let Some(cfd) = c.fd.as_ref().map(|f| f.as_fd()) else {
            self.close_client(cx, ct);
            return Flow::Closed;
        };
        let (tunnel, _) = c.tunnel.as_mut().expect("checked");
        let mut ends = TunnelEnds {
            client: Side {
                fd: cfd,
                may_read: &mut c.may_read,
                may_write: &mut c.may_write,
            },
            up: Side {
                fd: u.fd.as_fd(),
                may_read: &mut u.may_read,
                may_write: &mut u.may_write,
            },
            client_out: &mut c.out,
            bufs: &mut sh.tunnel_bufs,
            fwd: &mut sh.sockmap,
        };
        let state = tunnel.pump(&mut ends, &mut sh.stats);
        match state {
            TunnelState::Done | TunnelState::Failed => {
                self.close_client(cx, ct);
                Flow::Closed
            }
            TunnelState::Yield => {
                c.last_activity = cx.now;
                Flow::Yield
            }
            TunnelState::Wait {
                client_read,
                client_write,
                up_read,
                up_write,
            } => {
                if tunnel.in_kernel() {
                    // Joined: the source's end of stream, not its bytes (a
                    // read interest would wake the loop for every batch the
                    // psock redirects away, to find nothing: 13 of a 1 MiB
                    // echo tunnel's 20 context switches). Errors, and so the
                    // markers, come whatever the interest. (Under
                    // epoll-et and uring, which register both directions
                    // and ignore `want`, `settle` registers the end of stream
                    // alone by `Caps::reregistration`.)
                    let hangup = |wait: bool| if wait { Interest::HANGUP } else { Interest::NONE };
                    c.want = hangup(client_read);
                    u.want = hangup(up_read);
                } else {
                    c.want = interest(client_read, client_write);
                    u.want = interest(up_read, up_write);
                }
                if !tunnel.moved_nothing() {
                    c.last_activity = cx.now;
                }
                // sockmap: a finished socket, hung up both ways, is not polled.
                let [cq, uq] = tunnel.take_quiet();
                if let (true, Some(fd)) = (cq, c.fd.as_ref()) {
                    cx.deregister(fd.raw());
                    c.interest = Interest::NONE;
                }
                if uq {
                    cx.deregister(u.fd.raw());
                    u.interest = Interest::NONE;
                }
                Flow::Wait
            }
        }
    }
}

impl Client {
    /// End the client's transaction (failed or complete): take it, give its
    /// front-end admission back, and detach its upstream (returned for the
    /// caller to close or release). `None` when no transaction is open.
    pub(crate) fn end_txn(&mut self, sh: &mut Shared<'_>) -> Option<(Box<Txn>, Option<Token>)> {
        let mut txn = self.txn.take()?;
        crate::accesslog::relay_ended(sh, self, &mut txn);
        crate::front::release(sh.cfg, &mut txn);
        // A fill that ends here without having stored its object.
        crate::client::end_fill(sh, &self.key, &mut txn, crate::fill::Outcome::Failed);
        let up = txn.up.take();
        Some((txn, up))
    }
}

/// The relay's fill ended with `body` (None: not kept): store it and tell
/// the requests waiting for this fill. Once per fill (`end_fill` forgets it).
fn complete_fill(sh: &mut Shared<'_>, key: &[u8], txn: &mut Txn, body: Option<weft_buf::Aggregate>) {
    let outcome = match (txn.plan.take(), body) {
        (Some(plan), Some(body)) => {
            if let Some(feed) = txn.feed.take() {
                feed.complete(&body);
            }
            store_object(sh, key, plan, body, txn.request_time);
            crate::fill::Outcome::Stored
        }
        // Read through but not kept (too large for the cache once its length
        // showed): the key passes, as for an uncacheable head.
        (Some(_), None) => crate::fill::Outcome::Uncacheable,
        (None, _) => crate::fill::Outcome::Failed,
    };
    // Requests waiting for this fill find the object now.
    crate::client::end_fill(sh, key, txn, outcome);
}

/// Requests following the fill `txn` leads (for `key`) get what its relay
/// has read (`fill.rs`), in parts of the object being filled. A body of
/// unknown length that has grown past `--max-object-size` stops being
/// filled: its fill ends here, as one whose head showed it too large does,
/// so its followers are cut now (the rest would not be kept for them) and
/// its waiters go upstream, rather than each waiting for the end of the
/// leader's transfer; the key passes.
fn feed_followers(sh: &mut Shared<'_>, key: &[u8], txn: &mut Txn, out: &mut weft_io::OutChain) {
    if txn.fill && txn.relay.as_ref().is_some_and(|r| !r.filling()) {
        crate::client::end_fill(sh, key, txn, crate::fill::Outcome::Uncacheable);
        return;
    }
    let (Some(feed), Some(relay)) = (&txn.feed, txn.relay.as_mut()) else {
        return;
    };
    if feed.wants(relay.unfed()) {
        if let Some(part) = relay.cut(out, &mut sh.stats) {
            feed.append(part);
        }
    }
}
