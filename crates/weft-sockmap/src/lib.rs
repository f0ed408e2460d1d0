//! In-kernel forwarding for `weft proxy --splice sockmap`.
//!
//! An sk_skb stream-verdict program (bpf/sockmap.bpf.c, compiled by build.rs
//! with clang) on a sockmap redirects every skb a tunnel socket receives to
//! its peer's send side; the kernel's psock worker sends it. A tunnel's two
//! sockets [`Forwarder::join`] the maps; from then on weft wakes only for:
//!
//! - an end of stream on a source socket (its own EPOLLRDHUP: the psock
//!   replaces `sk_data_ready`, not `sk_state_change`);
//! - the end-of-stream marker ([`Forwarder::mark`]) reaching the
//!   destination: its psock worker reports it as EPIPE (EPOLLERR, whatever
//!   the interest), once every byte redirected before the source's FIN has
//!   been sent, so the destination may be half-closed;
//! - errors (EPOLLERR/EPOLLHUP on either socket);
//! - the ring ([`Forwarder::ring_fd`]): a tunnel source halfway through its
//!   redirect budget, or past it and passing its bytes up
//!   ([`Forwarder::grant`], [`Flow`]; bpf/sockmap.bpf.c has the protocol,
//!   weft-proxy's tunnel/kernel.rs the use). A redirected skb is charged to
//!   no socket, so this budget is what bounds the kernel memory a tunnel
//!   whose destination stops reading can pin. Each skb passed up past the
//!   budget is stamped with its place, and [`Forwarder::take_passed`] reads
//!   them back in stream order (stamp.rs: the kernel's pass path can
//!   reorder them).
//!
//! A response body of known length ([`Forwarder::join_body`]) moves one way,
//! upstream → client: the upstream socket joins a second sockmap whose
//! verdict redirects each skb to the client while the body's budget (the
//! `spans` map) lasts. When the last byte has been redirected it posts the
//! body's token to a BPF ring buffer ([`Forwarder::ring_fd`], which the
//! worker polls; [`Forwarder::take_done`] reads it). weft then takes the
//! upstream back ([`Forwarder::release_upstream`]: no redirect after it),
//! queues the marker behind the body ([`Forwarder::mark_body`]), and at its
//! EPIPE on the client, every body byte sent, takes the client back
//! ([`Forwarder::leave_body`]) for its next request. The verdict sees whole
//! skbs: weft drains the upstream socket to EAGAIN before the join. A
//! redirected skb is charged to no socket until sent, so a slow client can
//! pin a whole body in kernel memory: weft gives the kernel bodies up to a
//! size only (bpf/sockmap.bpf.c says why, and why a socket cannot leave the
//! map while its bytes still flow).
//!
//! Loading needs CAP_BPF + CAP_NET_ADMIN (root). [`Forwarder::load`] says
//! why it cannot, and the proxy splices instead; a kernel whose stream
//! verdict does not behave as the body path needs (checked once at load)
//! splices bodies and still forwards tunnels.

#![forbid(unsafe_code)]

mod stamp;
pub use stamp::{Stamp, StampMap, Stamped, Unplaced, Unstamper, STAMP, STAMP_SLOTS};

use aya::maps::{HashMap, IterableMap, MapData, RingBuf, SockMap};
use aya::programs::SkSkb;
use aya::Ebpf;
use std::io::{Read, Write};
use std::mem::size_of;
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;
use weft_io::sys;

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sockmap.bpf.o"));

/// Tunnels one forwarder holds at once (the maps hold 65536 sockets).
pub const MAX_PAIRS: u32 = 32 * 1024 - 1;

/// How long the load-time self-test waits for each step.
const SELF_TEST_WAIT: Duration = Duration::from_secs(1);

/// `socks` index of the marker socket (past every pair's).
const INJECTOR: u32 = 2 * MAX_PAIRS + 1;

/// The body path's maps (see the module documentation).
struct BodyMaps {
    /// Upstream sockets of bodies in flight (the body verdict).
    socks: SockMap<MapData>,
    /// Each body's budget, by upstream cookie: [redirect, token, index, excess, passed].
    spans: HashMap<MapData, u64, [u64; 5]>,
}

/// A loaded verdict program with its maps and marker socket.
pub struct Forwarder {
    socks: SockMap<MapData>,
    targets: SockMap<MapData>,
    /// By source cookie: `struct peer` ([`Peer`]).
    peers: HashMap<MapData, u64, Peer>,
    /// By tunnel source cookie: [budget, resume_at, notify_at] (`struct grant`).
    grants: HashMap<MapData, u64, [u64; 3]>,
    /// By [source cookie, slot]: [offset, seq | len << 32, first bytes]
    /// (`struct stamp`, [`Stamp`]).
    stamps: HashMap<MapData, [u64; 2], [u64; 3]>,
    /// Bodies whose last byte was redirected and tunnel sources that began
    /// passing up: [token, socket cookie].
    done: RingBuf<MapData>,
    /// A UDP socket connected to itself, in `socks`: what it sends itself
    /// is a marker (see [`Forwarder::mark`]).
    injector: UdpSocket,
    /// The body path, or why this kernel cannot carry it.
    bodies: Result<BodyMaps, String>,
    free: Vec<u32>,
    next: u32,
    // Keeps the programs (and their attachments) alive.
    _ebpf: Ebpf,
}

/// A `peers` value: [destination's index in `targets` (low 32 bits; the
/// high 32 are `passing`), its cookie, bytes the verdict redirected from the
/// source, bytes it passed up past the grant, the tunnel's token, passed
/// skbs stamped, of those short ones, whether one went up unstamped].
type Peer = [u64; 8];

/// Where one direction of a tunnel is, as the verdict has judged it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flow {
    /// Bytes redirected to the destination.
    pub redirected: u64,
    /// Bytes passed up to weft past the grant (read them from the source
    /// with [`Forwarder::take_passed`]).
    pub passed: u64,
    /// The passed skbs stamped so far.
    pub stamped: Stamped,
    /// A passed skb could not be stamped: its bytes cannot be placed, and
    /// the tunnel must be reset.
    pub broken: bool,
}

/// One tunnel's two sockets in the maps; side 0 and side 1 as given to
/// [`Forwarder::join`].
#[derive(Debug)]
pub struct Pair {
    slot: u32,
    cookies: [u64; 2],
    /// Each source's passed bytes, put back in order.
    unstamp: [Unstamper; 2],
    /// Each source's stamped skbs once its end of stream was seen (no
    /// verdict runs after it): [`Forwarder::leave`] then needs no lookup.
    stamped_at_end: [Option<u64>; 2],
}

/// A response body in the maps: its upstream socket in `bodies`, its
/// client in `targets`.
#[derive(Debug)]
pub struct Body {
    slot: u32,
    upstream: u64,
    client: u64,
}

impl Body {
    /// The upstream socket's cookie (what [`Forwarder::take_done`] reports).
    pub fn upstream_cookie(&self) -> u64 {
        self.upstream
    }
}

/// Where a body is, as the verdict has redirected it so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BodyProgress {
    /// Body bytes not yet redirected to the client.
    pub redirect_left: u64,
    /// Bytes the upstream sent past the body (dropped).
    pub excess: u64,
    /// The body's last bytes, passed up to weft at the head of an skb that
    /// also held bytes past the body: weft reads them from the upstream
    /// socket before [`Forwarder::release_upstream`] (which drops them).
    pub passed: u64,
}

/// Why sockmap forwarding is unavailable.
#[derive(Debug)]
pub struct Unavailable(pub String);

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn err(what: &str, e: impl std::fmt::Display + std::fmt::Debug) -> Unavailable {
    Unavailable(format!("{what}: {e} ({e:?})"))
}

/// A self-test's last look: within [`SELF_TEST_WAIT`], `fd`'s pending error
/// is the end-of-stream marker ([`Forwarder::is_marker`]). A wait that fails
/// is refused as `test` failing; any other outcome as `missing`, with what
/// was seen instead.
fn marker_arrives(fd: BorrowedFd<'_>, test: &str, missing: &str) -> Result<(), Unavailable> {
    sys::wait_ready(fd, false, SELF_TEST_WAIT).map_err(|x| err(test, x))?;
    match sys::take_socket_error(fd) {
        Ok(Some(x)) if Forwarder::is_marker(&x) => Ok(()),
        other => Err(Unavailable(format!("{missing} ({other:?})"))),
    }
}

fn map<T: TryFrom<aya::maps::Map>>(ebpf: &mut Ebpf, name: &str) -> Result<T, Unavailable>
where
    T::Error: std::fmt::Display + std::fmt::Debug,
{
    let m = ebpf
        .take_map(name)
        .ok_or_else(|| Unavailable(format!("no map {name}")))?;
    T::try_from(m).map_err(|e| err(name, e))
}

impl Forwarder {
    /// Whether this build carries the BPF programs (clang was present).
    pub fn built() -> bool {
        !OBJECT.is_empty()
    }

    /// Load the programs, create the maps and attach both programs.
    pub fn load() -> Result<Forwarder, Unavailable> {
        if !Self::built() {
            return Err(Unavailable(
                "weft was built without clang, so without the sockmap program".into(),
            ));
        }
        // The programs need no relocation against the kernel's types: not
        // reading its BTF (5 MiB, 0.4 s here) keeps the first tunnel or body
        // from waiting for it.
        let mut ebpf = aya::EbpfLoader::new()
            .btf(None)
            .load(OBJECT)
            .map_err(|e| err("creating the sockmap maps (needs root or CAP_BPF)", e))?;
        let socks: SockMap<MapData> = map(&mut ebpf, "socks")?;
        let targets: SockMap<MapData> = map(&mut ebpf, "targets")?;
        let peers = map(&mut ebpf, "peers")?;
        let grants = map(&mut ebpf, "grants")?;
        let stamps = map(&mut ebpf, "stamps")?;
        let done = map(&mut ebpf, "done")?;
        let mut injectors: HashMap<MapData, u64, u32> = map(&mut ebpf, "injectors")?;
        let verdict: &mut SkSkb = ebpf
            .program_mut("weft_verdict")
            .ok_or_else(|| Unavailable("no program weft_verdict".into()))?
            .try_into()
            .map_err(|e| err("program type", e))?;
        verdict
            .load()
            .map_err(|e| err("loading the verdict program (needs root or CAP_BPF)", e))?;
        verdict
            .attach(socks.fd())
            .map_err(|e| err("attaching the verdict program", e))?;
        let bodies = load_bodies(&mut ebpf);
        let injector = injector().map_err(|e| err("the marker socket", e))?;
        let cookie = sys::bpf::socket_cookie(injector.as_fd()).map_err(|e| err("SO_COOKIE", e))?;
        injectors.insert(cookie, 1, 0).map_err(|e| err("injectors", e))?;
        let mut f = Forwarder {
            socks,
            targets,
            peers,
            grants,
            stamps,
            done,
            injector,
            bodies,
            free: Vec::new(),
            next: 0,
            _ebpf: ebpf,
        };
        f.socks
            .set(INJECTOR, &f.injector.as_raw_fd(), 0)
            .map_err(|e| err("sockmap insert (marker socket)", e))?;
        f.self_test()?;
        if f.bodies.is_ok() {
            if let Err(e) = f.body_self_test() {
                f.bodies = Err(e.0);
            }
        }
        Ok(f)
    }

    /// Whether response bodies may be forwarded; the reason when not.
    pub fn bodies(&self) -> Result<(), &str> {
        self.bodies.as_ref().map(drop).map_err(String::as_str)
    }

    fn slot(&mut self) -> Result<u32, Unavailable> {
        match self.free.pop() {
            Some(s) => Ok(s),
            None if self.next < MAX_PAIRS => {
                self.next += 1;
                Ok(self.next - 1)
            }
            None => Err(Unavailable("sockmap full".into())),
        }
    }

    /// Put `a` and `b` in the maps, each redirecting to the other. Bytes
    /// either received before it joined (still in its receive queue: the
    /// caller read until EAGAIN first) are redirected too, in order. With a
    /// `budget` (and the `notify_at` of [`Forwarder::grant`]), each
    /// direction redirects that many bytes, then passes the rest up and
    /// posts `token` to the ring ([`Forwarder::grant`] renews it); without,
    /// it redirects without bound.
    pub fn join(
        &mut self,
        a: BorrowedFd<'_>,
        b: BorrowedFd<'_>,
        token: u64,
        budget: Option<(u64, u64)>,
    ) -> Result<Pair, Unavailable> {
        let slot = self.slot()?;
        let ca = sys::bpf::socket_cookie(a).map_err(|e| err("SO_COOKIE", e))?;
        let cb = sys::bpf::socket_cookie(b).map_err(|e| err("SO_COOKIE", e))?;
        let pair = Pair {
            slot,
            cookies: [ca, cb],
            unstamp: Default::default(),
            stamped_at_end: [None; 2],
        };
        let r = self.link(&pair, a, b, token, budget);
        match r {
            Ok(()) => Ok(pair),
            Err(e) => {
                self.leave(pair, Some([a, b]));
                Err(e)
            }
        }
    }

    /// The join's map updates. Order matters: both sockets are redirect
    /// targets (`targets`, no program) and have their peers
    /// before either gets the verdict program (`socks`), so no skb ever
    /// finds its destination missing (it would stay on the source, behind
    /// bytes redirected later).
    fn link(
        &mut self,
        pair: &Pair,
        a: BorrowedFd<'_>,
        b: BorrowedFd<'_>,
        token: u64,
        budget: Option<(u64, u64)>,
    ) -> Result<(), Unavailable> {
        let [ia, ib] = [2 * pair.slot, 2 * pair.slot + 1];
        let [ca, cb] = pair.cookies;
        for (i, fd) in [(ia, a), (ib, b)] {
            self.targets
                .set(i, &fd.as_raw_fd(), 0)
                .map_err(|e| err("sockmap insert", e))?;
        }
        // Both routes (and their byte counts, at 0) in one system call
        // instead of two, and none for counts of their own (the verdict
        // counts in the peer entry): four fewer per tunnel.
        let (mut kb, mut vb) = ([0; WORDS], [0; WORDS]);
        let keys = words(&[ca, cb], &mut kb);
        let values = words(
            &[
                u64::from(ib),
                cb,
                0,
                0,
                token,
                0,
                0,
                0,
                u64::from(ia),
                ca,
                0,
                0,
                token,
                0,
                0,
                0,
            ],
            &mut vb,
        );
        sys::bpf::map_update_batch(self.peers.map().fd(), 8, keys, size_of::<Peer>(), values)
            .map_err(|e| err("peers", e))?;
        // The bound, before the program may judge a byte.
        if let Some((b, n)) = budget {
            let mut gb = [0; WORDS];
            let grants = words(&[b, 0, n, b, 0, n], &mut gb);
            sys::bpf::map_update_batch(self.grants.map().fd(), 8, keys, 24, grants).map_err(|e| err("grants", e))?;
        }
        for (i, fd) in [(ia, a), (ib, b)] {
            self.socks
                .set(i, &fd.as_raw_fd(), 0)
                .map_err(|e| err("sockmap insert", e))?;
            // Bytes that arrived before the verdict program was attached
            // wait in the receive queue until the next segment: setting
            // SO_RCVLOWAT calls sk_data_ready, which runs the program on them.
            sys::set_rcvlowat(fd, 1).map_err(|e| err("SO_RCVLOWAT", e))?;
        }
        Ok(())
    }

    /// Side `to`'s source (the other side) has ended: queue the marker
    /// behind the bytes redirected to `to`. Call after a system call on the
    /// source that takes its lock (TCP_INFO does): by then every skb before
    /// its FIN has been redirected, so the marker comes after them.
    pub fn mark(&mut self, pair: &Pair, to: usize) -> std::io::Result<()> {
        self.send_marker(pair.cookies[(to & 1) ^ 1])
    }

    /// Queue the marker of `source`'s bytes on its destination's psock.
    fn send_marker(&mut self, source: u64) -> std::io::Result<()> {
        let sent = self.injector.send(&source.to_ne_bytes())?;
        if sent != 8 {
            return Err(std::io::Error::other("short marker"));
        }
        Ok(())
    }

    /// Bytes the program has redirected from side `from` so far (all of
    /// them once its end of stream was seen, as for [`Forwarder::mark`]).
    pub fn forwarded(&self, pair: &Pair, from: usize) -> u64 {
        self.flow(pair, from).redirected
    }

    /// Bytes the program has redirected from side `from` and passed up.
    pub fn flow(&self, pair: &Pair, from: usize) -> Flow {
        self.peers
            .get(&pair.cookies[from & 1], 0)
            .map_or(Flow::default(), |p| Flow {
                redirected: p[2],
                passed: p[3],
                stamped: Stamped {
                    count: p[5],
                    tiny: p[6],
                },
                broken: p[7] != 0,
            })
    }

    /// Read `input`, bytes just taken from side `from` (a source passing
    /// up), and append what is now in stream order to `out`, stamps undone
    /// (see [`Unstamper`]). `flow` is [`Forwarder::flow`] read after the
    /// bytes were taken; `complete` says they were the last passed so far.
    /// Returns the skbs that came before an earlier one and were put back.
    pub fn take_passed(
        &mut self,
        pair: &mut Pair,
        from: usize,
        input: &[u8],
        flow: Flow,
        complete: bool,
        out: &mut Vec<u8>,
    ) -> Result<u64, Unplaced> {
        if flow.broken {
            return Err(Unplaced::NoStamp);
        }
        let mut map = SourceStamps {
            stamps: &mut self.stamps,
            cookie: pair.cookies[from & 1],
        };
        let u = &mut pair.unstamp[from & 1];
        let before = u.reordered();
        u.feed(input, flow.stamped, complete, &mut map, out)?;
        if complete && !u.at_rest() {
            return Err(Unplaced::Gap);
        }
        Ok(u.reordered() - before)
    }

    /// Renew side `from`'s grant: redirect until `budget` bytes in all, and
    /// again once weft has taken `resume_at` passed bytes (all of them: the
    /// program goes on passing while it has passed more); post the token
    /// when the bytes redirected cross `notify_at`. After a takeover, check
    /// [`Forwarder::flow`] after a TCP_INFO on the source: a verdict that
    /// read the old grant may have passed one more skb.
    pub fn grant(
        &mut self,
        pair: &Pair,
        from: usize,
        budget: u64,
        resume_at: u64,
        notify_at: u64,
    ) -> std::io::Result<()> {
        self.grants
            .insert(pair.cookies[from & 1], [budget, resume_at, notify_at], 0)
            .map_err(std::io::Error::other)
    }

    /// Whether `e`, the pending error of a destination whose marker was
    /// sent (SO_ERROR), is that marker.
    pub fn is_marker(e: &std::io::Error) -> bool {
        e.kind() == std::io::ErrorKind::BrokenPipe
    }

    /// Check once that this kernel reports a marker as the module says: a
    /// loopback pair joined, one byte forwarded, an end of stream marked,
    /// EPIPE on the destination within a second. A kernel that did not
    /// would leave tunnels waiting for ever; weft splices instead.
    fn self_test(&mut self) -> Result<(), Unavailable> {
        let e = |what: &'static str| move |x: std::io::Error| err(what, x);
        let (mut a, b) = loopback_pair().map_err(e("self-test sockets"))?;
        let (c, mut d) = loopback_pair().map_err(e("self-test sockets"))?;
        let pair = self.join(b.as_fd(), c.as_fd(), 0, None)?;
        let r = (|| {
            a.write_all(b"x").map_err(e("self-test write"))?;
            a.shutdown(std::net::Shutdown::Write).map_err(e("self-test shutdown"))?;
            let mut got = [0u8; 1];
            d.set_read_timeout(Some(SELF_TEST_WAIT)).map_err(e("self-test"))?;
            d.read_exact(&mut got)
                .map_err(e("self-test: the byte was not forwarded"))?;
            while !sys::bpf::fin_received(b.as_fd()).map_err(e("TCP_INFO"))? {
                sys::wait_ready(b.as_fd(), false, SELF_TEST_WAIT).map_err(e("self-test"))?;
            }
            self.mark(&pair, 1).map_err(e("self-test marker"))?;
            marker_arrives(
                c.as_fd(),
                "self-test",
                "this kernel does not report the end-of-stream marker as EPIPE",
            )
        })();
        self.leave(pair, Some([b.as_fd(), c.as_fd()]));
        r
    }

    /// Take both sockets out of the maps. `socks` are the pair's sockets
    /// in the order [`Forwarder::join`] was given them, still open (None
    /// only if one is not: then a verdict still running on it may leave a
    /// record behind). Bytes still queued on either socket's psock are
    /// dropped by the kernel: call once both are drained, or when the
    /// tunnel failed.
    pub fn leave(&mut self, pair: Pair, socks: Option<[BorrowedFd<'_>; 2]>) {
        let _ = self.socks.clear_index(&(2 * pair.slot));
        let _ = self.socks.clear_index(&(2 * pair.slot + 1));
        let _ = self.targets.clear_index(&(2 * pair.slot));
        let _ = self.targets.clear_index(&(2 * pair.slot + 1));
        // Records of passed skbs never read (a tunnel that failed), counted
        // once the verdict no longer runs on either socket.
        for (d, u) in pair.unstamp.iter().enumerate() {
            // A source that ended was counted then; only a tunnel that
            // failed before both ends costs a lookup here.
            let count = pair.stamped_at_end[d].unwrap_or_else(|| {
                // Out of the map, the source runs no new verdict; one that
                // began before may still be stamping an skb (softirq on the
                // other CPU, or a backlog). TCP_INFO takes the socket's
                // lock, which waits it out: counted after it, no record is
                // written behind the count and kept forever (its cookie is
                // never seen again).
                if let Some(socks) = socks {
                    let _ = sys::tcp_info(socks[d]);
                }
                self.flow(&pair, d).stamped.count
            });
            let mut map = SourceStamps {
                stamps: &mut self.stamps,
                cookie: pair.cookies[d],
            };
            for seq in u.unread(count) {
                map.forget(seq);
            }
        }
        // Both routes in one system call; one at a time if that fails (a
        // join that failed part way: the batch stops at a missing key).
        let mut kb = [0; WORDS];
        if sys::bpf::map_delete_batch(self.peers.map().fd(), 8, words(&pair.cookies, &mut kb)).is_err() {
            for c in pair.cookies {
                let _ = self.peers.remove(&c);
            }
        }
        // Unbounded pairs have none (the batch fails at the first).
        if sys::bpf::map_delete_batch(self.grants.map().fd(), 8, words(&pair.cookies, &mut kb)).is_err() {
            for c in pair.cookies {
                let _ = self.grants.remove(&c);
            }
        }
        self.free.push(pair.slot);
    }
}

/// One source's records in the `stamps` map.
struct SourceStamps<'a> {
    stamps: &'a mut HashMap<MapData, [u64; 2], [u64; 3]>,
    cookie: u64,
}

impl StampMap for SourceStamps<'_> {
    fn get(&mut self, seq: u64) -> Option<Stamp> {
        let w = self.stamps.get(&[self.cookie, seq % STAMP_SLOTS], 0).ok()?;
        Some(Stamp {
            offset: w[0],
            seq: w[1] as u32,
            len: (w[1] >> 32) as u32,
            first: (w[2] as u32).to_ne_bytes(),
        })
    }

    fn forget(&mut self, seq: u64) {
        let _ = self.stamps.remove(&[self.cookie, seq % STAMP_SLOTS]);
    }
}

impl Forwarder {
    /// Forward the next `len` bytes `up` receives to `client` in the kernel.
    /// weft must have read `up` to EAGAIN (the verdict redirects whole skbs,
    /// also one weft has half read) and written everything it owes `client`
    /// (the body goes out behind what is queued there). `token` is what
    /// [`Forwarder::take_done`] reports when the last byte has been
    /// redirected.
    pub fn join_body(
        &mut self,
        client: BorrowedFd<'_>,
        up: BorrowedFd<'_>,
        len: u64,
        token: u64,
    ) -> Result<Body, Unavailable> {
        if let Err(e) = &self.bodies {
            return Err(Unavailable(e.clone()));
        }
        let slot = self.slot()?;
        let body = Body {
            slot,
            upstream: sys::bpf::socket_cookie(up).map_err(|e| err("SO_COOKIE", e))?,
            client: sys::bpf::socket_cookie(client).map_err(|e| err("SO_COOKIE", e))?,
        };
        match self.link_body(&body, client, up, len, token) {
            Ok(()) => Ok(body),
            Err(e) => {
                self.leave_body(body);
                Err(e)
            }
        }
    }

    /// The join's map updates, the client first (a redirect target before
    /// the upstream's program may redirect to it), the upstream last.
    fn link_body(
        &mut self,
        body: &Body,
        client: BorrowedFd<'_>,
        up: BorrowedFd<'_>,
        len: u64,
        token: u64,
    ) -> Result<(), Unavailable> {
        let (ci, ui) = (2 * body.slot, 2 * body.slot + 1);
        self.targets
            .set(ci, &client.as_raw_fd(), 0)
            .map_err(|e| err("sockmap insert", e))?;
        // The marker's route: from the upstream's cookie to the client.
        self.peers
            .insert(body.upstream, [u64::from(ci), body.client, 0, 0, 0, 0, 0, 0], 0)
            .map_err(|e| err("peers", e))?;
        let maps = self.bodies.as_mut().map_err(|e| Unavailable(e.clone()))?;
        maps.spans
            .insert(body.upstream, [len, token, u64::from(ci), 0, 0], 0)
            .map_err(|e| err("spans", e))?;
        maps.socks
            .set(ui, &up.as_raw_fd(), 0)
            .map_err(|e| err("sockmap insert", e))?;
        // Bytes that arrived since weft's EAGAIN wait for the next arrival;
        // this calls sk_data_ready now (as for tunnels).
        sys::set_rcvlowat(up, 1).map_err(|e| err("SO_RCVLOWAT", e))
    }

    /// How far the verdict has redirected the body (None once it left the maps).
    pub fn body_progress(&self, body: &Body) -> Option<BodyProgress> {
        let maps = self.bodies.as_ref().ok()?;
        let [redirect_left, _, _, excess, passed] = maps.spans.get(&body.upstream, 0).ok()?;
        Some(BodyProgress {
            redirect_left,
            excess,
            passed,
        })
    }

    /// Once the body's last byte has been redirected (or the body failed):
    /// take the upstream socket out of the body map. No skb is redirected
    /// after this returns (a TCP_INFO call on `up` takes its lock, which
    /// waits out a verdict still running). Not while body bytes still
    /// arrive: one whose data_ready began before the psock left is dropped.
    /// The body's progress as it leaves.
    pub fn release_upstream(&mut self, body: &Body, up: BorrowedFd<'_>) -> std::io::Result<BodyProgress> {
        if let Ok(maps) = self.bodies.as_mut() {
            let _ = maps.socks.clear_index(&(2 * body.slot + 1));
        }
        sys::bpf::fin_received(up)?;
        self.body_progress(body)
            .ok_or_else(|| std::io::Error::other("the body's span is gone"))
    }

    /// Records in the `stamps` map, counted up to `at_most`: passed skbs
    /// weft has not read yet. Near zero whenever no takeover is under way;
    /// a number that stays up means records are left behind (each one a
    /// map slot until the process exits). One system call per record.
    pub fn stamp_records(&self, at_most: usize) -> usize {
        self.stamps.keys().take(at_most).count()
    }

    /// The ring buffer the verdicts post to: readable when
    /// [`Forwarder::take_done`] has something (the worker polls it).
    pub fn ring_fd(&self) -> RawFd {
        self.done.as_raw_fd()
    }

    /// Append the (token, socket cookie) of every body whose last byte has
    /// been redirected (the upstream's cookie) and every tunnel source that
    /// began passing up past its grant (the source's cookie) since the last
    /// call.
    pub fn take_done(&mut self, out: &mut Vec<(u64, u64)>) {
        while let Some(item) = self.done.next() {
            if let (Some(t), Some(c)) = (word(&item, 0), word(&item, 1)) {
                out.push((t, c));
            }
        }
    }

    /// After [`Forwarder::release_upstream`]: queue the marker behind the
    /// last redirected skb on the client's psock. Its EPIPE on the client
    /// ([`Forwarder::is_marker`]) says every redirected byte was sent.
    pub fn mark_body(&mut self, body: &Body) -> std::io::Result<()> {
        self.send_marker(body.upstream)
    }

    /// Take both sockets out of the maps (the upstream first, if
    /// [`Forwarder::release_upstream`] has not). Bytes still queued on the
    /// client's psock are dropped: call after the marker's EPIPE, or when
    /// the body failed.
    pub fn leave_body(&mut self, body: Body) {
        if let Ok(maps) = self.bodies.as_mut() {
            let _ = maps.socks.clear_index(&(2 * body.slot + 1));
            let _ = maps.spans.remove(&body.upstream);
        }
        let _ = self.targets.clear_index(&(2 * body.slot));
        let _ = self.peers.remove(&body.upstream);
        self.free.push(body.slot);
    }

    /// Check once that this kernel carries a body as the module says: the
    /// head and the first body bytes read by "weft" (to EAGAIN), the rest
    /// (several segments) redirected, the ring's report, the marker's EPIPE
    /// on the client; then both connections go on outside the maps (the
    /// upstream's next bytes read as usual, the client's reach it), byte for
    /// byte.
    fn body_self_test(&mut self) -> Result<(), Unavailable> {
        let e = |what: &'static str| move |x: std::io::Error| err(what, x);
        let (mut a, b) = loopback_pair().map_err(e("body self-test sockets"))?;
        let (c, mut d) = loopback_pair().map_err(e("body self-test sockets"))?;
        for s in [&a, &c] {
            s.set_read_timeout(Some(SELF_TEST_WAIT)).map_err(e("body self-test"))?;
        }
        let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let early = 1000;
        d.write_all(b"HEAD").map_err(e("body self-test write"))?;
        d.write_all(&body[..early]).map_err(e("body self-test write"))?;
        // "weft" reads the head and what came with it, to EAGAIN.
        let mut got = vec![0u8; 4 + early];
        (&c).read_exact(&mut got).map_err(e("body self-test read"))?;
        (&b).write_all(&got[4..]).map_err(e("body self-test write"))?;
        const TOKEN: u64 = 0x5eed;
        let len = (body.len() - early) as u64;
        let joined = self.join_body(b.as_fd(), c.as_fd(), len, TOKEN)?;
        let r = (|| {
            d.write_all(&body[early..]).map_err(e("body self-test write"))?;
            let mut done = Vec::new();
            let ring = self.ring_fd();
            while done.is_empty() {
                if !sys::wait_ready(ring, false, SELF_TEST_WAIT).map_err(e("body self-test"))? {
                    break;
                }
                self.take_done(&mut done);
            }
            if done != [(TOKEN, joined.upstream)] {
                return Err(Unavailable(format!("body self-test: the ring reported {done:?}")));
            }
            let progress = self.release_upstream(&joined, c.as_fd()).map_err(e("TCP_INFO"))?;
            if progress.redirect_left != 0 || progress.excess != 0 {
                return Err(Unavailable(format!("body self-test: the verdict left {progress:?}")));
            }
            self.mark_body(&joined).map_err(e("body self-test marker"))?;
            marker_arrives(
                b.as_fd(),
                "body self-test",
                "body self-test: no marker EPIPE on the client",
            )
        })();
        self.leave_body(joined);
        r?;
        // Both connections go on outside the maps: the upstream's next
        // response reads as usual (tcp copied_seq kept up), the client's
        // next bytes follow the body.
        d.write_all(b"NEXT").map_err(e("body self-test write"))?;
        let mut next = [0u8; 4];
        (&c).read_exact(&mut next)
            .map_err(e("body self-test: after the body"))?;
        if &next != b"NEXT" {
            return Err(Unavailable(format!("body self-test: the upstream then read {next:?}")));
        }
        (&b).write_all(b"MORE").map_err(e("body self-test write"))?;
        drop(b);
        let mut all = Vec::new();
        a.read_to_end(&mut all)
            .map_err(e("body self-test: the client's bytes"))?;
        let n = body.len();
        if all.len() != n + 4 || all[..n] != body[..] || &all[n..] != b"MORE" {
            return Err(Unavailable(format!(
                "body self-test: bytes differ (client got {} of {})",
                all.len(),
                n + 4
            )));
        }
        Ok(())
    }
}

/// Bytes of the buffer [`words`] fills: two `peers` values.
const WORDS: usize = 8 * 2 * 8;

/// `w` as the bytes of a map's keys or values (native order, as the kernel
/// reads them), in `buf` (up to sixteen words).
fn words<'a>(w: &[u64], buf: &'a mut [u8; WORDS]) -> &'a [u8] {
    for (out, x) in buf.chunks_exact_mut(8).zip(w) {
        out.copy_from_slice(&x.to_ne_bytes());
    }
    &buf[..8 * w.len().min(WORDS / 8)]
}

/// The `i`th little-endian u64 of a ring record.
fn word(item: &[u8], i: usize) -> Option<u64> {
    let b = item.get(8 * i..8 * i + 8)?;
    Some(u64::from_ne_bytes(b.try_into().ok()?))
}

/// Load the body verdict and attach it to `bodies`; the reason when this
/// kernel cannot.
fn load_bodies(ebpf: &mut Ebpf) -> Result<BodyMaps, String> {
    let socks: SockMap<MapData> = map(ebpf, "bodies").map_err(|e| e.0)?;
    let spans = map(ebpf, "spans").map_err(|e| e.0)?;
    let verdict: &mut SkSkb = ebpf
        .program_mut("weft_body_verdict")
        .ok_or("no program weft_body_verdict")?
        .try_into()
        .map_err(|e| format!("program type: {e}"))?;
    verdict
        .load()
        .map_err(|e| format!("loading the body verdict: {e} ({e:?})"))?;
    verdict
        .attach(socks.fd())
        .map_err(|e| format!("attaching the body verdict: {e}"))?;
    Ok(BodyMaps { socks, spans })
}

impl Pair {
    /// The side (0 or 1) whose cookie is `cookie`.
    pub fn side_of(&self, cookie: u64) -> Option<usize> {
        self.cookies.iter().position(|&c| c == cookie)
    }

    /// The two sockets' cookies.
    pub fn cookies(&self) -> [u64; 2] {
        self.cookies
    }

    /// Side `from`'s end of stream has been seen (after a call that took
    /// its lock, so no verdict still runs on it) and `flow` read since:
    /// its stamp count is final.
    pub fn source_ended(&mut self, from: usize, flow: &Flow) {
        self.stamped_at_end[from & 1] = Some(flow.stamped.count);
    }
}

/// A non-blocking UDP socket on loopback connected to itself.
fn injector() -> std::io::Result<UdpSocket> {
    let s = UdpSocket::bind("127.0.0.1:0")?;
    s.connect(s.local_addr()?)?;
    s.set_nonblocking(true)?;
    Ok(s)
}

/// A connected loopback TCP pair (for the self-test).
fn loopback_pair() -> std::io::Result<(TcpStream, TcpStream)> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let a = TcpStream::connect(l.local_addr()?)?;
    let (b, _) = l.accept()?;
    Ok((a, b))
}
