//! The client side of a connection: accepting it, reading its socket (in one
//! place, [`Client::read_input`]), flushing what is queued for it while no
//! transaction runs, answering what it sent next, rejecting bad requests,
//! lingering before a close, and closing it with what it owns.

use crate::acl;
use crate::config::ProxyConfig;
use crate::conn::{Client, Entry, IdleClient, ReqBody, Txn, INPUT_BUFS_KEPT};
use crate::fill::Outcome;
use crate::worker::{client_of, upstream_of, Flow, Shared, Worker};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};
use weft_http::respond::{self, Persist};
use weft_io::group::Drain;
use weft_io::sys::{self, Fd};
use weft_io::{accept, pools, BufPool, Ctx, Fill, Interest, Poller, Token};

/// The fill `txn` leads for `key`, if any, ended with `outcome`: its waiters
/// are woken (collapsed forwarding, `fill.rs`). Once per fill. Its stream,
/// if not completed first ([`crate::fill::Feed::complete`]), fails, after
/// the key's state has changed: a follower cut by the failure whose client
/// asks again at once finds the key passing (or free), not the failed
/// stream still published under it.
pub(crate) fn end_fill(sh: &Shared<'_>, key: &[u8], txn: &mut Txn, outcome: Outcome) {
    if std::mem::take(&mut txn.fill) {
        sh.cache.finish_fill(key, outcome, Instant::now());
    }
    txn.feed = None;
}

/// How long a closing connection may linger reading the client's leftovers.
const LINGER: Duration = weft_io::LINGER_TIME;

/// What one read of the client socket did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClientRead {
    /// `n` bytes were appended to the input; `filled`: they filled all the
    /// room there was (the socket may hold more).
    Data { n: usize, filled: bool },
    /// End of file: `eof` is set and `may_read` cleared.
    Eof,
    /// Nothing to read: `may_read` is cleared and the step waits to read.
    WouldBlock,
    /// The input holds `max` bytes already: nothing was read.
    Full,
    /// Any other error (a reset), or no socket.
    Failed,
}

impl Client {
    /// Read the client socket once into the input buffer, growing it up to
    /// `max` bytes, with storage from `pool`. The one place the client
    /// socket is read: callers decide what the outcome means for them
    /// (close, wait, read on).
    pub(crate) fn read_input(&mut self, max: usize, pool: &mut BufPool) -> ClientRead {
        let Some(fd) = self.fd.as_ref() else {
            return ClientRead::Failed;
        };
        match self.input.fill(fd, max, pool) {
            Fill::Data(n) => {
                let filled = self.input.spare_len() == 0;
                if !self.input.may_hold_more(self.read_closed) {
                    self.may_read = false;
                    self.want.read = true;
                }
                ClientRead::Data { n, filled }
            }
            Fill::Eof => {
                self.eof = true;
                self.may_read = false;
                ClientRead::Eof
            }
            Fill::WouldBlock => {
                self.may_read = false;
                self.want.read = true;
                ClientRead::WouldBlock
            }
            Fill::Full => ClientRead::Full,
            Fill::Reset(_) => ClientRead::Failed,
        }
    }

    /// Before a close at the client's timeout: a client that began a
    /// request head and has nothing else under way (no transaction, tunnel
    /// or unsent output) is told 408, once, without waiting.
    pub(crate) fn tell_head_timed_out(&self, date: &[u8]) {
        if self.lingering || self.txn.is_some() || self.tunnel.is_some() || !self.out.is_empty() {
            return;
        }
        if let (Some(fd), Some(_)) = (&self.fd, self.head_started) {
            let mut out = Vec::with_capacity(256);
            respond::simple(
                &mut out,
                408,
                date,
                b"",
                "request head not received in time",
                false,
                Persist::Close,
            );
            let _ = sys::send(fd, &out, false);
        }
    }
}

impl Worker<'_> {
    // ------------------------------------------------------------------
    // Accepting

    pub(crate) fn accept<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        if !self.door.begin(self.sh.draining) {
            return;
        }
        while let Some((fd, peer)) = self.door.next(cx) {
            self.add_client(cx, fd, peer, &[]);
        }
    }

    /// A new client connection: accepted, or given back by a handoff
    /// back-end with the bytes it had read (`read`: they start the input,
    /// as if read here).
    pub(crate) fn add_client<P: Poller>(&mut self, cx: &mut Ctx<P>, fd: Fd, peer: Option<SocketAddr>, read: &[u8]) {
        if accept::at_max(self.sh.cfg.max_connections, self.sh.open_clients) {
            // The documented ceiling (N × per-connection + caches).
            self.sh.stats.refused_max_connections += 1;
            accept::refuse(fd);
            return;
        }
        let token = self.slab.next_token();
        let initial = P::CAPS.first_interest_kept(Interest::READ);
        if let Err(e) = cx.register(fd.raw(), token, initial) {
            self.sh.stats.refused_fd_limit += 1;
            if self.refused_logged.is_multiple_of(1000) {
                weft_core::warn!("closing a client connection: {e}");
            }
            self.refused_logged += 1;
            accept::refuse(fd);
            return;
        }
        self.sh.stats.accepted += 1;
        self.sh.open_clients += 1;
        let allowed = peer.map(|p| acl::allowed(&self.sh.allow, p.ip())).unwrap_or(false);
        let now = cx.now;
        let c = self
            .sh
            .clients
            .lend(IdleClient::new(Some(fd), peer, allowed, initial, now));
        let t = self.slab.insert_with(|_| Entry::Client(c));
        debug_assert_eq!(t, token);
        if !read.is_empty() {
            if let Some(c) = client_of(&mut self.slab, token) {
                let n = read.len();
                let max = n.max(self.sh.cfg.limits.max_head + 1024);
                let room = c.input.reserve(n, max, &mut self.sh.bufs);
                let k = n.min(room);
                c.input.spare_mut()[..k].copy_from_slice(&read[..k]);
                c.input.commit(k);
                c.head_started = Some(now);
            }
        }
        self.drive(cx, token);
    }

    // ------------------------------------------------------------------
    // Closing

    /// Close a client and whatever it owns (transaction upstream, tunnel).
    pub(crate) fn close_client<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) {
        self.wake_client(ct);
        let Some(Entry::Client(mut c)) = self.slab.remove(ct) else {
            return;
        };
        self.sh.open_clients -= 1;
        if c.background.is_some() {
            self.sh.backgrounds -= 1;
        }
        if let Some(relay) = c.txn.as_ref().and_then(|t| t.relay.as_ref()) {
            // A body in the kernel cut here (a timeout): its line counts
            // what the kernel wrote for the client meanwhile.
            relay.note_kernel_cut(&mut c.out, c.fd.as_ref().map(std::os::fd::AsFd::as_fd));
        }
        pools::release_all(&mut c.input, &mut c.out, &mut self.sh.bufs, &mut self.sh.own_pool);
        // A tunnel first, while both its sockets are open: a sockmap
        // tunnel leaves the maps with them (`Forwarder::leave`).
        if let Some((tunnel, ut)) = c.tunnel.take() {
            let up = upstream_of(&mut self.slab, ut).map(|u| u.fd.as_fd());
            let fds = c.fd.as_ref().map(|fd| fd.as_fd()).zip(up).map(|(a, b)| [a, b]);
            tunnel.close(&mut self.sh.pipes, &mut self.sh.tunnel_bufs, &mut self.sh.sockmap, fds);
            self.close_upstream(cx, ut);
        }
        if let Some(fd) = c.fd.take() {
            // Handoff mode: the socket may still be open in a back-end (one
            // it gave back closes its copy at the end of its batch), and
            // then closing ours would not end epoll's registration, whose
            // events would keep waking this worker: remove it first.
            if P::CAPS.close_deregisters && self.sh.cfg.front.as_deref().is_some_and(|f| f.hands_off()) {
                let _ = cx.poller.delete(fd.raw());
            }
            cx.close_later(fd, true);
        }
        if let Some(mut txn) = c.txn.take() {
            // Its output is dropped: the line counts what was sent.
            crate::accesslog::relay_ended(&mut self.sh, &c, &mut txn);
            crate::front::release(self.sh.cfg, &mut txn);
            end_fill(&self.sh, &c.key, &mut txn, Outcome::Failed);
            if let Some(relay) = txn.relay.take() {
                relay.abandon(&mut self.sh.stats, false);
            }
            if let Some(ut) = txn.up.take() {
                self.close_upstream(cx, ut);
            }
        }
        self.sh.clients.give_back(c, INPUT_BUFS_KEPT);
    }

    // ------------------------------------------------------------------
    // Idle keep-alive clients

    /// An idle client (`Entry::Idle`) gets a record from the pool again,
    /// before anything acts on it: an event, its timer, a close. No-op for
    /// any other slot.
    pub(crate) fn wake_client(&mut self, ct: Token) {
        let Some(Entry::Idle(idle)) = self.slab.get_mut(ct) else {
            return;
        };
        let now = idle.last_activity();
        let idle = std::mem::replace(idle, IdleClient::new(None, None, false, Interest::NONE, now));
        let c = self.sh.clients.lend(idle);
        if let Some(slot) = self.slab.get_mut(ct) {
            *slot = Entry::Client(c);
        }
        self.sh.idle_clients -= 1;
    }

    /// An idle client keeps only its idle record, inline in its slot; its
    /// record goes back to the pool. Only when [`Client::may_sleep`], its
    /// buffers already given back.
    pub(crate) fn sleep_client(&mut self, ct: Token) {
        let Some(slot) = self.slab.get_mut(ct) else {
            return;
        };
        let Entry::Client(c) = slot else {
            return;
        };
        let idle = c.sleep();
        if let Entry::Client(c) = std::mem::replace(slot, Entry::Idle(idle)) {
            self.sh.clients.give_back(c, INPUT_BUFS_KEPT);
        }
        self.sh.idle_clients += 1;
    }

    /// A stop request finds `ct` idle: it is closed, or kept asleep until
    /// the drain's deadline (`Drain`). False: not an idle client.
    pub(crate) fn drain_idle<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) -> bool {
        let Some(Entry::Idle(i)) = self.slab.get_mut(ct) else {
            return false;
        };
        match Drain::of(true, i.last_activity(), cx.now) {
            Drain::KeepUntil(until) => {
                i.deadline = Some(until);
                crate::worker::arm(cx, ct, until, &mut i.timer_at);
            }
            // (An idle connection is never `Finish`: nothing is in flight.)
            Drain::Close | Drain::Finish => self.close_client(cx, ct),
        }
        true
    }

    // ------------------------------------------------------------------
    // Between transactions

    /// A client with no transaction or tunnel: flush its output, close it
    /// when asked to, answer the requests it has sent, read more.
    pub(crate) fn step_idle<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) -> Flow {
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        let Some(fd) = c.fd.as_ref() else {
            // No socket: a background revalidation, or a client gone while
            // its object was filled.
            return self.step_background(cx, ct);
        };
        if !c.out.is_empty() {
            if !c.may_write {
                c.want = Interest::WRITE;
                return Flow::Wait;
            }
            match c.out.flush(fd, &[], &mut []) {
                Ok(sent) => {
                    if sent.total() > 0 {
                        c.last_activity = cx.now;
                    }
                    if sent.blocked {
                        c.may_write = false;
                        c.want = Interest::WRITE;
                        return Flow::Wait;
                    }
                }
                Err(_) => {
                    self.close_client(cx, ct);
                    return Flow::Closed;
                }
            }
        }
        if c.follow.is_some() {
            // Answering from a fill under way: its next bytes, or a wait for
            // them; once all are queued, on as after a hit.
            return self.follow_step(ct).unwrap_or(Flow::Again);
        }
        if c.close_after {
            // Linger after an error answer, and whenever the client may still
            // be sending (bytes unanswered, a socket that may hold more, or
            // reads unwatched while a long response waited for the socket),
            // or the kernel holds bytes these flags have not seen yet (a
            // relay that yielded its budget leaves no interest registered):
            // closing with unread bytes would reset the connection and cut
            // the response it is reading (nginx's lingering close).
            let seen_more = !c.input.is_empty() || c.may_read || c.interest == Interest::WRITE;
            let sending = weft_io::must_linger(fd, c.eof, seen_more);
            if c.linger_on_close || sending {
                if sys::shutdown_write(fd).is_err() {
                    self.close_client(cx, ct);
                    return Flow::Closed;
                }
                c.lingering = true;
                c.deadline = Some(cx.now + LINGER);
                c.timer_at = None;
                return Flow::Again;
            }
            self.close_client(cx, ct);
            return Flow::Closed;
        }
        if c.disk_wait.is_some() || c.fill_wait.is_some() {
            // The request at the front waits for the disk store (`on_loaded`)
            // or for another request's fill of its key (`on_filled`).
            return Flow::Wait;
        }
        if c.discard > 0 {
            drop_overtaken_body(c, cx.now);
        }
        if !c.input.is_empty() {
            // A request is arriving: lend the output buffer it needs (given
            // back by `Worker::drive` once the client is idle again).
            c.out.lend_own(&mut self.sh.own_pool);
            if c.began.is_none() {
                c.began = Some(cx.now);
            }
            if let Some(f) = self.answer_next(cx, ct) {
                return f;
            }
        }
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        if c.eof {
            self.close_client(cx, ct);
            return Flow::Closed;
        }
        if !c.may_read {
            c.want = Interest::READ;
            return Flow::Wait;
        }
        let max = self.sh.cfg.limits.max_head + 1024;
        match c.read_input(max, &mut self.sh.bufs) {
            // (`read_input` has already taken a short read as drained.)
            ClientRead::Data { .. } => {
                c.last_activity = cx.now;
                // Body bytes to drop start no request head: the idle timeout,
                // not the head's, bounds a client that stalls in them.
                if c.discard == 0 {
                    if c.head_started.is_none() {
                        c.head_started = Some(cx.now);
                    }
                    if c.began.is_none() {
                        c.began = Some(cx.now);
                    }
                }
                Flow::Again
            }
            ClientRead::Eof => Flow::Again,
            ClientRead::WouldBlock => Flow::Wait,
            ClientRead::Full | ClientRead::Failed => {
                self.close_client(cx, ct);
                Flow::Closed
            }
        }
    }

    /// Flush queued client output and read ahead (bounded) while a
    /// transaction waits on its upstream. A FIN from the client only ends its
    /// requests: a half-closed client still reads, so what it asked for is
    /// answered (as HAProxy and weft serve do); a client that is really gone
    /// shows up as a write error, which aborts the transaction.
    pub(crate) fn client_side_while_waiting<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) -> Option<Flow> {
        let c = client_of(&mut self.slab, ct)?;
        let fd = c.fd.as_ref()?;
        let streaming_body = c
            .txn
            .as_ref()
            .is_some_and(|t| !matches!(t.body, ReqBody::None) && !t.connect);
        if !c.out.is_empty() && c.may_write {
            match c.out.flush(fd, &[], &mut []) {
                Ok(sent) => {
                    if sent.blocked {
                        c.may_write = false;
                    }
                }
                Err(_) => {
                    self.close_client(cx, ct);
                    return Some(Flow::Closed);
                }
            }
        }
        if !c.out.is_empty() {
            c.want.write = true;
        }
        if streaming_body {
            return None;
        }
        let max = self.sh.cfg.limits.max_head + 1024;
        if c.eof || !c.has_room(max) {
            return None;
        }
        if !c.may_read {
            c.want.read = true;
            return None;
        }
        match c.read_input(max, &mut self.sh.bufs) {
            ClientRead::Data { .. } | ClientRead::Eof | ClientRead::WouldBlock | ClientRead::Full => None,
            ClientRead::Failed => {
                self.close_client(cx, ct);
                Some(Flow::Closed)
            }
        }
    }

    /// Read and discard after shutting down our side, until EOF, a cap or
    /// the deadline.
    pub(crate) fn step_linger<P: Poller>(&mut self, cx: &mut Ctx<P>, ct: Token) -> Flow {
        let Some(c) = client_of(&mut self.slab, ct) else {
            return Flow::Closed;
        };
        match linger_read(c, &mut self.sh.bufs) {
            Flow::Closed => {
                self.close_client(cx, ct);
                Flow::Closed
            }
            f => f,
        }
    }
}

/// Drop what has arrived of a request body that its response overtook
/// (`Client::discard`); the bytes after it are the next request, whose head
/// starts now.
pub(crate) fn drop_overtaken_body(c: &mut Client, now: Instant) {
    let n = c.discard.min(c.input.len() as u64);
    c.input.consume(n as usize);
    c.discard -= n;
    if c.discard == 0 && !c.input.is_empty() {
        c.head_started.get_or_insert(now);
        c.began.get_or_insert(now);
    }
}

/// Read and discard what the client still sends (see `step_linger`).
fn linger_read(c: &mut Client, pool: &mut BufPool) -> Flow {
    let Some(fd) = c.fd.as_ref() else {
        return Flow::Closed;
    };
    match c.input.linger(fd, pool) {
        weft_io::Linger::Wait => {
            c.may_read = false;
            c.want.read = true;
            Flow::Wait
        }
        weft_io::Linger::Close => Flow::Closed,
    }
}

/// Queue an error response and close afterwards (lingering, so the client
/// can read it). `head_only`: the request is a HEAD (the body is left out).
pub(crate) fn reject(c: &mut Client, date: &weft_http::DateCache, status: u16, reason: &str, head_only: bool) {
    respond::simple(
        c.out.own_mut(),
        status,
        date.get(),
        b"",
        reason,
        head_only,
        Persist::Close,
    );
    c.close_after = true;
    c.linger_on_close = true;
    c.input.clear();
}

/// Bound (`on`) or unbound the unsent bytes the client socket holds
/// (TCP_NOTSENT_LOWAT, `--notsent-lowat`). Bounded while upstream bodies and
/// tunnels are relayed: the body then waits in the pipe and the upstream
/// socket instead of piling up in the client socket, where a pacing
/// congestion control would release it from a timer in the proxy's context
/// (see `tune_listener`). Unbounded for cache hits larger than the bound:
/// their bytes are already in memory, and a bound would split one writev of
/// the object into a write and an epoll_ctl pair per 32 KiB (measured: 1 MiB
/// hits cost 342 µs of proxy CPU with the bound, 157 without), and for
/// bodies and tunnels forwarded in the kernel (`--splice sockmap`): their
/// bytes are sent by the psock's kernel worker, which takes the bound's
/// EAGAIN as "retry one jiffy later" (a 1 MiB tunnel on loopback took 3.4×
/// as long with it, and weft woke for each stall). One
/// setsockopt per change of kind on a connection, none while it stays the
/// same.
/// (Takes the client's fields apart so a caller may hold its input buffer.)
pub(crate) fn set_notsent_lowat(fd: &Option<Fd>, state: &mut bool, on: bool, cfg: &ProxyConfig) {
    if cfg.notsent_lowat == 0 || *state == on {
        return;
    }
    let Some(fd) = fd.as_ref() else { return };
    let bytes = if on { cfg.notsent_lowat } else { 0 };
    // 0 restores the kernel's default (net.ipv4.tcp_notsent_lowat).
    if sys::set_notsent_lowat(fd, bytes).is_ok() {
        *state = on;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notsent_lowat_follows_what_the_connection_sends() {
        let cfg = ProxyConfig::default();
        let l = sys::tcp_listener(&SocketAddr::from(([127, 0, 0, 1], 0)), false, 4).unwrap();
        let _peer = std::net::TcpStream::connect(sys::local_addr(&l).unwrap()).unwrap();
        let (fd, _) = sys::accept(&l).unwrap();
        let lowat = |c: &Client| sys::notsent_lowat(c.fd.as_ref().expect("open")).unwrap();
        let mut pool = crate::conn::ClientPool::default();
        let mut c = pool.lend(IdleClient::new(Some(fd), None, true, Interest::READ, Instant::now()));
        assert_eq!(lowat(&c), 0);
        set_notsent_lowat(&c.fd, &mut c.notsent_lowat, true, &cfg);
        assert_eq!(lowat(&c), cfg.notsent_lowat, "bounded while relaying");
        assert!(c.notsent_lowat);
        set_notsent_lowat(&c.fd, &mut c.notsent_lowat, false, &cfg);
        assert_eq!(lowat(&c), 0, "unbounded for a large hit");
        // `--notsent-lowat 0` never touches the socket.
        let off = ProxyConfig {
            notsent_lowat: 0,
            ..ProxyConfig::default()
        };
        set_notsent_lowat(&c.fd, &mut c.notsent_lowat, true, &off);
        assert_eq!(lowat(&c), 0);
    }
}
