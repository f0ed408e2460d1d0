//! Connection state: client connections, upstream connections, and the
//! transaction a client connection has in flight.
//!
//! Each socket has its own slot (and token) in the worker's slab. An upstream
//! connection is either attached to one client's transaction (`owner`) or idle
//! in the pool. Readiness is tracked per socket in user space (`may_read`,
//! `may_write`): set by events, cleared by EAGAIN, so the code never issues a
//! call it knows would block and edge-triggered backends lose no event.

use crate::background::Claim;
use crate::disk::LoadedObjects;
use crate::relay::Relay;
use crate::store::Object;
use crate::tunnel::Tunnel;
use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use weft_http::{CacheControl, ChunkedDecoder, Method, RequestHead};
use weft_io::{Fd, InputBuf, Interest, OutChain, Slab, Token};

/// Size of the input buffers a worker lends its connections (a request
/// head, or a response head's first read, fits in one).
pub const INPUT_BUF: usize = 4096;
/// Idle input buffers a worker keeps for reuse.
pub const INPUT_BUFS_KEPT: usize = 256;

/// A slab slot.
pub enum Entry {
    /// A client connection with a request in flight (or about to be read).
    Client(Box<Client>),
    /// A keep-alive client between requests: only what outlives a request,
    /// inline in the slot. Its [`Client`] went back to the worker's
    /// [`ClientPool`] and is lent again when the connection wakes
    /// (`Worker::wake_client`): issue 21, an idle connection holds no
    /// buffer and no request state.
    Idle(IdleClient),
    /// An upstream connection.
    Upstream(Box<Upstream>),
}

/// The client in slot `t`, unless it is idle (`Worker::wake_client` lends
/// it its record first) or not a client.
pub(crate) fn client_of(slab: &mut Slab<Entry>, t: Token) -> Option<&mut Client> {
    match slab.get_mut(t)? {
        Entry::Client(c) => Some(&mut **c),
        Entry::Idle(_) | Entry::Upstream(_) => None,
    }
}

pub(crate) fn upstream_of(slab: &mut Slab<Entry>, t: Token) -> Option<&mut Upstream> {
    match slab.get_mut(t)? {
        Entry::Upstream(u) => Some(&mut **u),
        Entry::Client(_) | Entry::Idle(_) => None,
    }
}

pub(crate) fn pair(slab: &mut Slab<Entry>, ct: Token, ut: Token) -> Option<(&mut Client, &mut Upstream)> {
    match slab.get2_mut(ct, ut)? {
        (Entry::Client(c), Entry::Upstream(u)) => Some((&mut **c, &mut **u)),
        _ => None,
    }
}

/// What an idle keep-alive client keeps between requests: its socket, its
/// peer and the state that spans requests (readiness, interest, counters,
/// timers). Everything else a [`Client`] holds is empty while it is idle
/// (see [`Client::sleep`]), so none of it is kept.
pub struct IdleClient {
    fd: Option<Fd>,
    peer: Option<SocketAddr>,
    requests: u64,
    discard: u64,
    last_activity: Instant,
    pub deadline: Option<Instant>,
    pub timer_at: Option<Instant>,
    interest: Interest,
    want: Interest,
    allowed: bool,
    pub may_read: bool,
    pub may_write: bool,
    pub read_closed: bool,
    eof: bool,
    close_after: bool,
    linger_on_close: bool,
    notsent_lowat: bool,
}

impl IdleClient {
    /// A connection not yet driven: accepted (or handed back), or a
    /// socketless background request (`fd` None).
    pub fn new(
        fd: Option<Fd>,
        peer: Option<SocketAddr>,
        allowed: bool,
        interest: Interest,
        now: Instant,
    ) -> IdleClient {
        IdleClient {
            fd,
            peer,
            requests: 0,
            discard: 0,
            last_activity: now,
            deadline: None,
            timer_at: None,
            interest,
            want: Interest::NONE,
            allowed,
            may_read: true,
            may_write: true,
            read_closed: false,
            eof: false,
            close_after: false,
            linger_on_close: false,
            notsent_lowat: false,
        }
    }

    pub fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        self.fd.as_ref().map(Fd::raw)
    }

    pub fn last_activity(&self) -> Instant {
        self.last_activity
    }
}

/// [`Client`] records not in use, each with the capacity its request state
/// grew to (head table, head copy, cache key, a transaction): lent to a
/// connection when it wakes or is accepted, given back when it falls idle
/// or closes, so neither allocates in the steady state.
#[derive(Default)]
pub struct ClientPool {
    // Boxed on purpose: a record moves between the pool and a slot
    // (`Entry::Client`) as the same allocation, never copied.
    #[allow(clippy::vec_box)]
    kept: Vec<Box<Client>>,
}

impl ClientPool {
    /// A client record for `conn` (a reused one when the pool has any).
    pub fn lend(&mut self, conn: IdleClient) -> Box<Client> {
        let mut c = match self.kept.pop() {
            Some(c) => c,
            None => Box::new(Client::blank(conn.last_activity)),
        };
        c.wake(conn);
        c
    }

    /// Take back a record whose connection fell idle or closed (its socket
    /// already taken): cleared, kept while the pool holds fewer than `keep`.
    pub fn give_back(&mut self, mut c: Box<Client>, keep: usize) {
        if self.kept.len() < keep {
            c.recycle();
            self.kept.push(c);
        }
    }

    pub fn len(&self) -> usize {
        self.kept.len()
    }

    /// Halve the pool, down to `floor` (after a burst).
    pub fn decay(&mut self, floor: usize) {
        self.kept.truncate((self.kept.len() / 2).max(floor));
    }
}

/// A client connection.
pub struct Client {
    /// The socket; None once closed while an orphaned cache fill finishes.
    pub fd: Option<Fd>,
    pub peer: Option<SocketAddr>,
    /// Passed access control.
    pub allowed: bool,
    /// Bytes received and not handled yet (storage lent from the worker's
    /// pool while there are any).
    pub input: InputBuf,
    pub may_read: bool,
    pub may_write: bool,
    /// The client's FIN has been seen by the event backend (RDHUP): a short
    /// read no longer means "drained", since one more read returns EOF and an
    /// edge-triggered backend will not report it again.
    pub read_closed: bool,
    /// A read returned end-of-file: no more requests; those already received
    /// are still answered (a half-closed client may be reading).
    pub eof: bool,
    pub out: OutChain,
    /// Registered interest (level-triggered backends).
    pub interest: Interest,
    /// What the last step waits for.
    pub want: Interest,
    pub requests: u64,
    pub close_after: bool,
    /// Request body bytes still to read and drop before the next request
    /// head: the rest of a body that the upstream's response overtook (the
    /// upstream got part of it and is not reused; the client keeps its
    /// connection, as with `weft serve`). At most
    /// [`weft_http::MAX_BODY_DISCARD`]; a larger rest closes the client.
    pub discard: u64,
    pub linger_on_close: bool,
    pub lingering: bool,
    /// TCP_NOTSENT_LOWAT is set on the socket: it is while upstream bodies
    /// and tunnels are relayed to it, and not while large cache hits are
    /// written from memory (see `Worker::set_notsent_lowat`).
    pub notsent_lowat: bool,
    pub head_started: Option<Instant>,
    pub last_activity: Instant,
    pub deadline: Option<Instant>,
    pub timer_at: Option<Instant>,
    /// The request being forwarded (one at a time; pipelined requests wait).
    pub txn: Option<Box<Txn>>,
    /// A finished transaction kept for its buffers' capacity.
    pub spare: Option<Box<Txn>>,
    /// A CONNECT tunnel and its upstream.
    pub tunnel: Option<(Box<Tunnel>, Token)>,
    /// The request head being handled (spans into `req_data` during a txn,
    /// into `buf[start..]` while answering from the cache).
    pub req: RequestHead,
    /// A copy of the forwarded request's head (the input buffer moves on).
    pub req_data: Vec<u8>,
    /// The primary cache key of the request being handled.
    pub key: Vec<u8>,
    /// Parked until the disk store has read this key's objects (the park's
    /// number: a finished load wakes only the request that asked for it).
    pub disk_wait: Option<u64>,
    /// The request at the front of the buffer has been through the disk
    /// store already (answered again after a load: not counted twice, not
    /// loaded twice).
    pub disk_checked: bool,
    /// What the disk store read for that request (looked in when the memory
    /// store has evicted it again before the request is answered).
    pub disk_loaded: Option<LoadedObjects>,
    /// Parked until the fill of its key another request leads has ended
    /// (collapsed forwarding, `fill.rs`; the park's number).
    pub fill_wait: Option<u64>,
    /// The request at the front has waited for a fill already: answered
    /// again, it does not wait twice (nor is it counted twice).
    pub fill_checked: bool,
    /// The fill it waited for can be followed now (woken by its stream,
    /// `fill.rs`): it joins once more, to follow it or wait for the end.
    pub fill_follow: bool,
    /// Answering from another request's fill as it arrives (collapsed
    /// forwarding's stream, `fill.rs`): the head is queued, the body follows.
    pub follow: Option<Box<Follow>>,
    /// Requests whose response time has been recorded.
    pub timed: u64,
    /// When the head of the oldest request not yet timed began.
    pub began: Option<Instant>,
    /// The current request's head, kept for its access-log line (only
    /// with `--access-log`).
    pub log_head: Vec<u8>,
    /// A background request (`background.rs`: a `stale-while-revalidate`
    /// revalidation or a range fill): no socket, one request, and its claim.
    pub background: Option<Claim>,
}

/// A response whose body follows a fill under way (`fill.rs`).
pub struct Follow {
    /// The fill's stream.
    pub stream: Arc<crate::fill::Stream>,
    /// The next body byte to queue (from a range's first).
    pub at: u64,
    /// Where the answer's body ends (exclusive): the stream's length, or a
    /// range's last byte + 1; `u64::MAX` when `open`.
    pub end: u64,
    /// A stream of unknown length (chunked or close-delimited at the
    /// origin): the answer ends with the stream, each part a chunk.
    pub open: Option<OpenEnd>,
    /// Waiting for the next part: the park number its wake-up carries.
    pub park: Option<u64>,
}

/// How a follower's answer of unknown length ends (`Follow::open`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenEnd {
    /// Each part goes out as a chunk, and the last chunk at the end
    /// (HTTP/1.1).
    Chunked,
    /// The parts go out as they are, and the connection closes at the end
    /// (HTTP/1.0).
    Close,
}

/// The request state a [`Client`] record keeps when it goes back to the
/// pool: the capacity that a request grew (head table, head copy, cache
/// key, a finished transaction, the access log's head copy).
struct RequestState {
    req: RequestHead,
    req_data: Vec<u8>,
    key: Vec<u8>,
    spare: Option<Box<Txn>>,
    log_head: Vec<u8>,
}

impl Client {
    /// A record with no connection yet, its request state made (the pool
    /// had none to reuse).
    fn blank(now: Instant) -> Client {
        let state = RequestState {
            req: RequestHead::new(),
            req_data: Vec::new(),
            key: Vec::with_capacity(128),
            spare: None,
            log_head: Vec::new(),
        };
        Client::with_state(now, state)
    }

    fn with_state(now: Instant, state: RequestState) -> Client {
        let RequestState {
            req,
            req_data,
            key,
            spare,
            log_head,
        } = state;
        Client {
            fd: None,
            peer: None,
            allowed: false,
            input: InputBuf::new(),
            may_read: true,
            may_write: true,
            read_closed: false,
            eof: false,
            out: OutChain::new(),
            interest: Interest::NONE,
            want: Interest::NONE,
            requests: 0,
            close_after: false,
            discard: 0,
            linger_on_close: false,
            lingering: false,
            notsent_lowat: false,
            head_started: None,
            last_activity: now,
            deadline: None,
            timer_at: None,
            txn: None,
            spare,
            tunnel: None,
            req,
            req_data,
            key,
            disk_wait: None,
            disk_checked: false,
            disk_loaded: None,
            fill_wait: None,
            fill_checked: false,
            fill_follow: false,
            follow: None,
            timed: 0,
            began: None,
            log_head,
            background: None,
        }
    }

    /// Back to a blank record, keeping the capacity of its request state;
    /// whatever else it still held (objects, a claim) is dropped here.
    fn recycle(&mut self) {
        let mut state = RequestState {
            req: std::mem::replace(&mut self.req, RequestHead::empty()),
            req_data: std::mem::take(&mut self.req_data),
            key: std::mem::take(&mut self.key),
            spare: self.spare.take(),
            log_head: std::mem::take(&mut self.log_head),
        };
        state.req.clear();
        state.req_data.clear();
        state.key.clear();
        state.log_head.clear();
        *self = Client::with_state(self.last_activity, state);
    }

    /// Take on the connection `conn` (a blank record: see [`ClientPool`]).
    fn wake(&mut self, conn: IdleClient) {
        let IdleClient {
            fd,
            peer,
            requests,
            discard,
            last_activity,
            deadline,
            timer_at,
            interest,
            want,
            allowed,
            may_read,
            may_write,
            read_closed,
            eof,
            close_after,
            linger_on_close,
            notsent_lowat,
        } = conn;
        (self.fd, self.peer, self.allowed) = (fd, peer, allowed);
        // Every request of an idle connection has had its time recorded
        // (`Worker::after_drive` does it before it puts one to sleep).
        (self.requests, self.timed, self.discard) = (requests, requests, discard);
        (self.last_activity, self.deadline, self.timer_at) = (last_activity, deadline, timer_at);
        (self.interest, self.want) = (interest, want);
        (self.may_read, self.may_write, self.read_closed, self.eof) = (may_read, may_write, read_closed, eof);
        (self.close_after, self.linger_on_close, self.notsent_lowat) = (close_after, linger_on_close, notsent_lowat);
    }

    /// Is there nothing here but what an [`IdleClient`] keeps? Idle (no
    /// output, transaction, tunnel or partial request), not lingering, no
    /// wait on the disk store or a fill, every response timed, a socket.
    pub fn may_sleep(&self) -> bool {
        self.is_idle()
            && !self.lingering
            && self.fd.is_some()
            && self.disk_wait.is_none()
            && self.fill_wait.is_none()
            && self.background.is_none()
            && self.timed == self.requests
    }

    /// The connection's idle record; the rest of the record is left for
    /// [`ClientPool::give_back`]. Only when [`Client::may_sleep`], its
    /// buffers given back first (`pools::release_idle`).
    pub fn sleep(&mut self) -> IdleClient {
        debug_assert!(self.may_sleep());
        IdleClient {
            fd: self.fd.take(),
            peer: self.peer.take(),
            requests: self.requests,
            discard: self.discard,
            last_activity: self.last_activity,
            deadline: self.deadline,
            timer_at: self.timer_at,
            interest: self.interest,
            want: self.want,
            allowed: self.allowed,
            may_read: self.may_read,
            may_write: self.may_write,
            read_closed: self.read_closed,
            eof: self.eof,
            close_after: self.close_after,
            linger_on_close: self.linger_on_close,
            notsent_lowat: self.notsent_lowat,
        }
    }

    /// Nothing in flight: no output, no transaction, no partial request.
    pub fn is_idle(&self) -> bool {
        self.follow.is_none()
            && self.out.is_empty()
            && self.txn.is_none()
            && self.tunnel.is_none()
            && self.input.is_empty()
            && self.head_started.is_none()
    }

    /// The input may take more bytes without passing `max`.
    pub fn has_room(&self, max: usize) -> bool {
        self.input.len() < max.max(self.input.capacity())
    }
}

/// An upstream connection.
pub struct Upstream {
    pub fd: Fd,
    pub addr: SocketAddr,
    /// The client whose transaction uses it (None: idle in the pool).
    pub owner: Option<Token>,
    pub connecting: bool,
    /// Response bytes received and not relayed yet. Its storage is lent
    /// from the worker's pool and given back when the connection is pooled
    /// (the pool keeps a few grown buffers, so a buffer grown for a chunked
    /// body is not allocated again for the next response).
    pub buf: InputBuf,
    /// Request bytes to send.
    pub out: OutChain,
    pub may_read: bool,
    pub may_write: bool,
    pub interest: Interest,
    pub want: Interest,
    /// Has carried an earlier request (a failure before any response byte
    /// may be a keep-alive race: retry once).
    pub reused: bool,
    pub last_activity: Instant,
    pub deadline: Option<Instant>,
    pub timer_at: Option<Instant>,
}

/// Where a transaction is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the resolver.
    Resolve,
    /// Connecting (or about to pick a pooled connection).
    Connect,
    /// Sending the request (and its body), reading the response head.
    Exchange,
    /// Relaying the response body.
    Body,
}

/// The request body still to forward.
pub enum ReqBody {
    None,
    Length(u64),
    Chunked(ChunkedDecoder),
}

/// What a stored response needs once its body is complete.
pub struct StorePlan {
    pub head: Bytes,
    pub vary_key: Vec<u8>,
    pub response_time: u64,
}

/// One forwarded request.
pub struct Txn {
    pub phase: Phase,
    pub method: Method,
    pub connect: bool,
    /// The client asked to switch protocols (Upgrade, e.g. WebSocket) and
    /// the request is forwarded with its Upgrade: a 101 turns the exchange
    /// into a tunnel (`txn.rs`, `switch_protocols`).
    pub upgrade: bool,
    pub http10: bool,
    pub client_keep_alive: bool,
    /// Upstream host (lowercased, no brackets) and port.
    pub host: String,
    pub port: u16,
    /// Candidate addresses, tried in order on connection errors.
    pub addrs: Vec<SocketAddr>,
    pub addr_index: usize,
    /// origin-form target and Host value to send.
    pub path: Vec<u8>,
    pub host_value: Vec<u8>,
    pub up: Option<Token>,
    pub req_cc: CacheControl,
    /// GET/HEAD with the cache on: responses may be stored.
    pub cacheable: bool,
    /// A stored response being revalidated.
    pub stored: Option<(u64, Arc<Object>)>,
    /// This request leads the fill of its key (collapsed forwarding,
    /// `fill.rs`): others wait for it until it ends (`Worker::end_fill`).
    pub fill: bool,
    /// The leader's end of the stream its fill publishes to waiters
    /// (`fill.rs`; dropped unfinished, the stream fails).
    pub feed: Option<crate::fill::Feed>,
    /// The stale stored response this request went upstream for (with
    /// validators or not): it may stand in if the origin fails
    /// (`stale-if-error`, `hit.rs`).
    pub stale: Option<Arc<Object>>,
    pub body: ReqBody,
    /// The pipe of a request body being spliced (`relay/request_body.rs`).
    pub req_pipe: Option<crate::relay::BodyPipe>,
    /// The request came with a body (it cannot be sent again).
    pub had_body: bool,
    pub request_time: u64,
    pub retried: bool,
    /// Response bytes (head) have been queued for the client.
    pub responded: bool,
    /// The access-log line of the response being relayed, written when the
    /// transaction ends (`accesslog::relayed`).
    pub log_line: Option<crate::accesslog::RelayedLine>,
    /// The upstream may be reused after this exchange.
    pub up_keep_alive: bool,
    /// Close the client connection after this response.
    pub client_close: bool,
    pub relay: Option<Relay>,
    pub plan: Option<StorePlan>,
    pub status: u16,
    /// `weft front --mode booster`: the request's site (an index into the
    /// booster's sites) and whether it was boosted when it was placed. Its
    /// held count and its path (lane or straight through) follow this, not
    /// the origin's address: several sites may share one origin.
    pub booster_site: Option<(usize, bool)>,
}

impl Txn {
    pub fn new() -> Txn {
        Txn {
            phase: Phase::Resolve,
            method: Method::Get,
            connect: false,
            upgrade: false,
            http10: false,
            client_keep_alive: true,
            host: String::new(),
            port: 0,
            addrs: Vec::new(),
            addr_index: 0,
            path: Vec::new(),
            host_value: Vec::new(),
            up: None,
            req_cc: CacheControl::default(),
            cacheable: false,
            stored: None,
            stale: None,
            fill: false,
            feed: None,
            body: ReqBody::None,
            req_pipe: None,
            had_body: false,
            request_time: 0,
            retried: false,
            responded: false,
            log_line: None,
            up_keep_alive: false,
            client_close: false,
            relay: None,
            plan: None,
            status: 0,
            booster_site: None,
        }
    }

    /// Reset for reuse, keeping the buffers' capacity.
    pub fn reset(&mut self) {
        let mut host = std::mem::take(&mut self.host);
        let mut addrs = std::mem::take(&mut self.addrs);
        let mut path = std::mem::take(&mut self.path);
        let mut host_value = std::mem::take(&mut self.host_value);
        host.clear();
        addrs.clear();
        path.clear();
        host_value.clear();
        *self = Txn {
            host,
            addrs,
            path,
            host_value,
            ..Txn::new()
        };
    }

    /// May the request be sent again on a fresh connection after a pooled one
    /// failed before any response byte?
    pub fn retryable(&self) -> bool {
        let idempotent = self.method.is_safe() || matches!(self.method, Method::Put | Method::Delete);
        !self.retried && !self.responded && !self.had_body && idempotent && !self.connect
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_state_stays_small() {
        // An idle client's whole cost is its slab entry (`Entry::Idle`):
        // its record (`Client`), buffers and request state are lent only
        // while it is not idle (issue 21). A pooled upstream holds no
        // buffer either.
        let client = std::mem::size_of::<Client>();
        let upstream = std::mem::size_of::<Upstream>();
        let entry = std::mem::size_of::<Entry>();
        println!("size_of::<proxy::Client>() = {client}, size_of::<proxy::Upstream>() = {upstream}, size_of::<Entry>() = {entry}");
        // 632 before `OutChain` counted the bytes a socket was handed.
        assert!(client <= 640, "Client grew to {client} bytes");
        assert!(upstream <= 320, "Upstream grew to {upstream} bytes");
        assert!(entry <= 120, "Entry (an idle client's record) grew to {entry} bytes");
    }

    #[test]
    fn an_idle_client_holds_only_its_idle_record() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let fd = Fd::from(std::os::fd::OwnedFd::from(a));
        let raw = fd.raw();
        let mut pool = ClientPool::default();
        let now = Instant::now();
        let mut c = pool.lend(IdleClient::new(Some(fd), None, true, Interest::READ, now));
        assert!(c.key.capacity() >= 128 && c.fd.as_ref().map(Fd::raw) == Some(raw));
        c.key.extend_from_slice(b"http://x/");
        c.requests = 3;
        c.timed = 3;
        c.discard = 7;
        c.disk_checked = true;
        assert!(c.may_sleep());
        let idle = c.sleep();
        assert!(c.fd.is_none() && idle.raw_fd() == Some(raw));
        let record: *const Client = &*c;
        pool.give_back(c, 4);
        assert_eq!(pool.len(), 1);
        let c = pool.lend(idle);
        assert!(pool.len() == 0 && std::ptr::eq(record, &*c), "the record is reused");
        assert!(
            c.key.is_empty() && c.key.capacity() >= 128,
            "its key cleared, its capacity kept"
        );
        assert_eq!(
            (c.requests, c.timed, c.discard),
            (3, 3, 7),
            "what spans requests comes back"
        );
        assert!(!c.disk_checked && c.fd.as_ref().map(Fd::raw) == Some(raw));
        // A record given back to a full pool is dropped.
        pool.give_back(c, 0);
        assert_eq!(pool.len(), 0);
    }

    #[test]
    fn a_client_with_anything_in_flight_stays_awake() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut pool = ClientPool::default();
        let now = Instant::now();
        let mut c = pool.lend(IdleClient::new(
            Some(Fd::from(std::os::fd::OwnedFd::from(a))),
            None,
            true,
            Interest::READ,
            now,
        ));
        assert!(c.may_sleep());
        c.head_started = Some(now);
        assert!(!c.may_sleep(), "a partial request");
        c.head_started = None;
        c.requests = 1;
        assert!(!c.may_sleep(), "a response not yet timed");
        c.timed = 1;
        c.disk_wait = Some(1);
        assert!(!c.may_sleep(), "a wait on the disk store");
        c.disk_wait = None;
        c.lingering = true;
        assert!(!c.may_sleep(), "lingering");
        c.lingering = false;
        let socketless = pool.lend(IdleClient::new(None, None, true, Interest::NONE, now));
        assert!(!socketless.may_sleep(), "a background request has no socket");
    }
}
