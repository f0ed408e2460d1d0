//! The upstream side: the pool of idle connections per address (most
//! recently used first), connecting, handing a connection to a transaction
//! and back (AutoRelease), retrying once when a reused connection turns out
//! dead before any response byte, and reading a response head.

use crate::conn::{Client, Entry, Phase, ReqBody, Upstream};
use crate::headers::{self, Forward};
use crate::worker::{arm, client_of, pair, upstream_of, Flow, Shared, Worker};
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::time::Instant;
use weft_http::{Limits, ResponseHead};
use weft_io::sys::{self, Errno};
use weft_io::{pools, BufPool, Ctx, InputBuf, Interest, OutChain, Poller, Readiness, Token};

/// Idle upstream connections of one worker, per address.
#[derive(Default)]
pub(crate) struct UpstreamPool {
    idle: HashMap<SocketAddr, Vec<Token>>,
    /// Idle connections over every address (a gauge read every batch).
    count: usize,
}

impl UpstreamPool {
    /// The most recently released idle connection to `addr`.
    pub(crate) fn take(&mut self, addr: &SocketAddr) -> Option<Token> {
        let t = self.idle.get_mut(addr).and_then(|l| l.pop());
        self.count -= usize::from(t.is_some());
        t
    }

    /// Forget an idle connection (it is being closed).
    pub(crate) fn forget(&mut self, addr: &SocketAddr, ut: Token) {
        if let Some(list) = self.idle.get_mut(addr) {
            let before = list.len();
            list.retain(|&t| t != ut);
            self.count -= before - list.len();
        }
    }

    /// `addr` has `max` idle connections already.
    pub(crate) fn is_full(&self, addr: &SocketAddr, max: usize) -> bool {
        self.idle.get(addr).map_or(0, |l| l.len()) >= max
    }

    /// Keep `ut` idle for reuse.
    pub(crate) fn put(&mut self, addr: SocketAddr, ut: Token) {
        self.idle.entry(addr).or_default().push(ut);
        self.count += 1;
    }

    /// Idle connections over every address.
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Every idle connection, forgotten.
    pub(crate) fn drain(&mut self) -> Vec<Token> {
        self.count = 0;
        self.idle.drain().flat_map(|(_, v)| v).collect()
    }
}

/// What reading a response head came to.
pub(crate) enum HeadRead {
    /// A final response head, this many bytes at the front of the input.
    Head(usize),
    /// An interim response head (1xx but 100 and 101: 102, 103 Early
    /// Hints...), this many bytes at the front: relayed, never cached.
    Interim(usize),
    /// 101 Switching Protocols to a forwarded Upgrade, this many bytes at
    /// the front: what follows is the new protocol's.
    Switched(usize),
    /// Waiting for the upstream to send more.
    Wait,
    /// A malformed, oversized or cut head: 502.
    Bad(&'static str),
    /// The connection failed before any byte of a response (may be retried).
    Lost(&'static str),
}

/// Read the upstream's response head into its input buffer (reads of
/// `first_read` bytes, so a body's first bytes stay small) and parse it into
/// `resp`. 100 Continue is dropped (the proxy answered Expect: 100-continue
/// itself); 101 ends the head reading where an upgrade was forwarded
/// (`upgrade`) and is refused otherwise; other 1xx are handed back to be
/// relayed.
pub(crate) fn read_response_head(
    u: &mut Upstream,
    upgrade: bool,
    resp: &mut ResponseHead,
    bufs: &mut BufPool,
    limits: &Limits,
    first_read: usize,
    now: Instant,
) -> HeadRead {
    loop {
        let pending = u.buf.pending();
        if !pending.is_empty() {
            match resp.parse(pending, limits) {
                Ok(Some(n)) => {
                    let status = resp.status();
                    if (100..200).contains(&status) {
                        if status == 101 {
                            if upgrade {
                                return HeadRead::Switched(n);
                            }
                            return HeadRead::Bad("upstream switched protocols unasked");
                        }
                        if status != 100 {
                            return HeadRead::Interim(n);
                        }
                        u.buf.consume(n);
                        continue;
                    }
                    return HeadRead::Head(n);
                }
                Ok(None) => {}
                Err(e) => {
                    weft_core::debug!("bad response from upstream: {}", e.reason);
                    return HeadRead::Bad(e.reason);
                }
            }
        }
        if !u.may_read {
            u.want.read = true;
            return HeadRead::Wait;
        }
        let room = u.buf.reserve(first_read, limits.max_head + 1024, bufs);
        if room == 0 {
            return HeadRead::Bad("response head too large");
        }
        let want = room.min(first_read.max(1));
        match sys::read(&u.fd, &mut u.buf.spare_mut()[..want]) {
            Ok(0) => {
                let started = !u.buf.is_empty();
                return if started {
                    HeadRead::Bad("upstream closed the connection in the response head")
                } else {
                    HeadRead::Lost("upstream closed the connection before responding")
                };
            }
            Ok(n) => {
                // A short read is not taken as "drained" here: a FIN may
                // have come with the head, and an edge-triggered backend
                // would not report it again (close-delimited bodies end on it).
                u.buf.commit(n);
                u.last_activity = now;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                u.may_read = false;
                u.want.read = true;
                return HeadRead::Wait;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return HeadRead::Lost("upstream connection failed before responding"),
        }
    }
}

/// Queue the client's request head for the upstream (behind whatever is
/// queued there already: the booster pipelines several clients' requests).
pub(crate) fn queue_request(sh: &mut Shared<'_>, c: &mut Client, u: &mut Upstream) {
    let Some(txn) = c.txn.as_ref() else { return };
    let data = &c.req_data;
    let validators = txn
        .stored
        .as_ref()
        .map(|(_, o)| (o.etag.as_deref(), o.last_modified.as_ref().map(|(v, _)| &v[..])));
    let client_ip = c.peer.map(|p| p.ip());
    let chunked = matches!(txn.body, ReqBody::Chunked(_));
    let head = &c.req;
    let fwd = Forward {
        method: txn.method,
        path: &txn.path,
        host: &txn.host_value,
        via: &sh.via,
        client: client_ip,
        chunked_body: chunked,
        upgrade: txn.upgrade,
        validators,
    };
    u.out.lend_own(&mut sh.own_pool);
    headers::write_request(u.out.own_mut(), head, data, &fwd);
    // booster: the parsed target for the origin's accelerator.
    if crate::booster::booster_of(sh.cfg).is_some() {
        crate::booster::add_target(u.out.own_mut(), &txn.path);
    }
}

impl Worker<'_> {
    pub(crate) fn close_upstream<P: Poller>(&mut self, cx: &mut Ctx<P>, ut: Token) {
        if let Some(Entry::Upstream(mut u)) = self.slab.remove(ut) {
            self.sh.open_upstreams -= 1;
            pools::release_all(&mut u.buf, &mut u.out, &mut self.sh.bufs, &mut self.sh.own_pool);
            if u.owner.is_none() {
                self.sh.pool.forget(&u.addr, ut);
            }
            let sent = !u.connecting;
            // booster: a lane connection's last segment counts.
            self.booster_closing(ut, &u.fd);
            cx.close_later(u.fd, true);
            // booster: the requests pipelined on it are placed again.
            self.booster_closed(cx, ut, sent);
        }
    }

    /// Hand an upstream connection back to the pool (or close it).
    pub(crate) fn release_upstream<P: Poller>(&mut self, cx: &mut Ctx<P>, ut: Token, reusable: bool) {
        // booster: a lane's connection passes to the next in line, or idles in its lane.
        let lane = match self.booster_release(cx, ut, reusable) {
            Some(true) => return,
            Some(false) => true,
            None => false,
        };
        let max = self.sh.cfg.pool_size;
        let draining = self.sh.draining;
        let Some(u) = upstream_of(&mut self.slab, ut) else {
            return;
        };
        let full = !lane && self.sh.pool.is_full(&u.addr, max);
        if !reusable || draining || full || !u.buf.is_empty() || !u.out.is_empty() {
            self.close_upstream(cx, ut);
            return;
        }
        // Nothing may wait in the socket: a body read to its length leaves
        // whatever the upstream sent past it there (an overrun), and an
        // idle connection's next "response" would be those bytes, answered
        // to another request. Its readable event cannot be relied on: the
        // next request may take the connection before the loop waits again,
        // and an edge-triggered backend reported those bytes already, with
        // the body. One peek per pooled response (a FIN found here also
        // closes it now, not at a failed reuse).
        if !sys::empty_now(&u.fd) {
            self.sh.stats.upstream_not_empty += 1;
            self.close_upstream(cx, ut);
            return;
        }
        // Pooled, it holds no buffer: both go back to the worker's pools
        // (lent again by the next exchange; grown ones are kept there).
        pools::release_idle(&mut u.buf, &mut u.out, &mut self.sh.bufs, &mut self.sh.own_pool);
        // The response was read whole: whatever readiness a tracking backend
        // still holds was that response's. Pooled, only a new arrival (the
        // upstream's FIN, or bytes unasked) may wake it, and that is a new
        // event; a kept bit would close the connection at the next pass.
        let read = Readiness {
            readable: true,
            writable: false,
        };
        cx.settled(u.fd.raw(), read, Readiness::default());
        u.owner = None;
        u.reused = true;
        u.want = Interest::READ;
        u.last_activity = cx.now;
        u.deadline = Some(cx.now + self.sh.cfg.pool_idle_timeout);
        let addr = u.addr;
        if !lane {
            self.sh.pool.put(addr, ut);
        }
        if !P::CAPS.keeps_both() && u.interest != Interest::READ {
            if cx.reregister(u.fd.raw(), ut, Interest::READ).is_err() {
                self.close_upstream(cx, ut);
                return;
            }
            u.interest = Interest::READ;
        }
        arm(cx, ut, u.deadline, &mut u.timer_at);
        if lane {
            self.booster_wake(addr);
        }
    }

    // ------------------------------------------------------------------
    // Connecting

    /// A pooled connection to `addr` (most recently used first), now
    /// owned by `ct`; None when the pool has none.
    pub(crate) fn claim_pooled(&mut self, ct: Token, addr: &SocketAddr, now: Instant) -> Option<Token> {
        while let Some(ut) = self.sh.pool.take(addr) {
            let Some(u) = upstream_of(&mut self.slab, ut) else {
                continue;
            };
            u.owner = Some(ct);
            u.last_activity = now;
            u.want = Interest::NONE;
            // Nothing waits on a pooled connection (bytes or a FIN there
            // would have closed it): the response comes after the request,
            // and its arrival is an event. A read right after the send
            // found nothing about half the time (docs/results.md).
            u.may_read = false;
            self.sh.stats.upstream_reused += 1;
            return Some(ut);
        }
        None
    }

    /// Take a pooled connection or open a new one.
    pub(crate) fn txn_connect<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) -> Flow {
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        let Some(txn) = c.txn.as_mut() else { return Flow::Again };
        let Some(&addr) = txn.addrs.get(txn.addr_index) else {
            return self.fail(cx, ct, 502, "no upstream address left to try");
        };
        let use_pool = !txn.retried && !txn.connect;
        // booster: a boosted origin's requests go to its lane.
        if let Some(f) = self.booster_connect(cx, ct, addr) {
            return f;
        }
        if use_pool {
            if let Some(ut) = self.claim_pooled(ct, &addr, cx.now) {
                return self.begin_exchange(ct, ut);
            }
        }
        let fd = match sys::tcp_socket(&addr) {
            Ok(fd) => fd,
            Err(e) => {
                weft_core::warn!("upstream socket: {e}");
                return self.fail(cx, ct, 502, "cannot create a socket to the upstream");
            }
        };
        let _ = sys::set_nodelay(&fd, true);
        self.sh.stats.upstream_connects += 1;
        let connected = match sys::connect(&fd, &addr) {
            Ok(done) => done,
            Err(e) => return self.connect_failed(cx, ct, e),
        };
        let ut = self.slab.next_token();
        let initial = P::CAPS.first_interest_kept(Interest::WRITE);
        if cx.register(fd.raw(), ut, initial).is_err() {
            return self.fail(cx, ct, 502, "cannot watch the upstream connection");
        }
        let now = cx.now;
        self.sh.open_upstreams += 1;
        self.slab.insert_with(|_| {
            Entry::Upstream(Box::new(Upstream {
                fd,
                addr,
                owner: Some(ct),
                connecting: !connected,
                buf: InputBuf::new(),
                out: OutChain::new(),
                may_read: false,
                may_write: connected,
                interest: initial,
                want: Interest::WRITE,
                reused: false,
                last_activity: now,
                deadline: None,
                timer_at: None,
            }))
        });
        self.booster_opened(ct, ut, addr);
        self.begin_exchange(ct, ut)
    }

    pub(crate) fn connect_failed<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token, e: io::Error) -> Flow {
        if let Some(f) = self.front_backend_failed(cx, ct, false) {
            return f;
        }
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        let Some(txn) = c.txn.as_mut() else { return Flow::Again };
        if let Some(ut) = txn.up.take() {
            self.close_upstream(cx, ut);
        }
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        let Some(txn) = c.txn.as_mut() else { return Flow::Again };
        weft_core::debug!("connect to {:?}: {e}", txn.addrs.get(txn.addr_index));
        txn.addr_index += 1;
        if txn.addr_index < txn.addrs.len() {
            txn.phase = Phase::Connect;
            return Flow::Again;
        }
        let reason = match Errno::of(&e) {
            Some(Errno::ConnRefused) => "connection refused by the upstream",
            Some(Errno::NetUnreachable | Errno::HostUnreachable) => "upstream unreachable",
            Some(Errno::TimedOut) => "upstream connect timed out",
            _ => "cannot connect to the upstream",
        };
        self.fail(cx, ct, 502, reason)
    }

    /// Attach the upstream and queue the request.
    pub(crate) fn begin_exchange(&mut self, ct: Token, ut: Token) -> Flow {
        let sh = &mut self.sh;
        let Some((c, u)) = pair(&mut self.slab, ct, ut) else {
            return Flow::Closed;
        };
        let Some(txn) = c.txn.as_mut() else { return Flow::Again };
        txn.up = Some(ut);
        txn.phase = Phase::Exchange;
        if txn.connect {
            return Flow::Again;
        }
        queue_request(sh, c, u);
        Flow::Again
    }

    /// A connection failed before any response byte: retry once on a fresh
    /// connection when that is safe, else 502.
    pub(crate) fn upstream_lost<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token, reason: &'static str) -> Flow {
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        let Some(txn) = c.txn.as_mut() else { return Flow::Again };
        let ut = txn.up;
        let reused = ut
            .and_then(|t| match self.slab.get(t) {
                Some(Entry::Upstream(u)) => Some(u.reused && u.buf.is_empty()),
                _ => None,
            })
            .unwrap_or(false);
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        let txn = c.txn.as_mut().expect("checked");
        if reused && txn.retryable() {
            txn.retried = true;
            txn.up = None;
            txn.phase = Phase::Connect;
            self.sh.stats.upstream_retries += 1;
            if let Some(ut) = ut {
                self.close_upstream(cx, ut);
            }
            return Flow::Again;
        }
        if let Some(f) = self.front_backend_failed(cx, ct, true) {
            return f;
        }
        self.fail(cx, ct, 502, reason)
    }
}
