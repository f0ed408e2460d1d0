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
//! - errors (EPOLLERR/EPOLLHUP on either socket).
//!
//! Loading needs CAP_BPF + CAP_NET_ADMIN (root). [`Forwarder::load`] says
//! why it cannot, and the proxy splices instead.

#![forbid(unsafe_code)]

use aya::maps::{HashMap, MapData, SockMap};
use aya::programs::SkSkb;
use aya::Ebpf;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::Duration;
use weft_io::sys;

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sockmap.bpf.o"));

/// Tunnels one forwarder holds at once (the maps hold 65536 sockets).
pub const MAX_PAIRS: u32 = 32 * 1024 - 1;

/// How long the load-time self-test waits for each step.
const SELF_TEST_WAIT: Duration = Duration::from_secs(1);

/// `socks` index of the marker socket (past every pair's).
const INJECTOR: u32 = 2 * MAX_PAIRS + 1;

/// A loaded verdict program with its maps and marker socket.
pub struct Forwarder {
    socks: SockMap<MapData>,
    targets: SockMap<MapData>,
    peers: HashMap<MapData, u64, [u64; 2]>,
    counts: HashMap<MapData, u64, u64>,
    /// A UDP socket connected to itself, in `socks`: what it sends itself
    /// is a marker (see [`Forwarder::mark`]).
    injector: UdpSocket,
    free: Vec<u32>,
    next: u32,
    // Keeps the programs (and their attachments) alive.
    _ebpf: Ebpf,
}

/// One tunnel's two sockets in the maps; side 0 and side 1 as given to
/// [`Forwarder::join`].
#[derive(Debug)]
pub struct Pair {
    slot: u32,
    cookies: [u64; 2],
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
        let mut ebpf = Ebpf::load(OBJECT).map_err(|e| err("creating the sockmap maps (needs root or CAP_BPF)", e))?;
        let socks: SockMap<MapData> = map(&mut ebpf, "socks")?;
        let targets: SockMap<MapData> = map(&mut ebpf, "targets")?;
        let peers = map(&mut ebpf, "peers")?;
        let counts = map(&mut ebpf, "counts")?;
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
        let injector = injector().map_err(|e| err("the marker socket", e))?;
        let cookie = sys::bpf::socket_cookie(injector.as_fd()).map_err(|e| err("SO_COOKIE", e))?;
        injectors.insert(cookie, 1, 0).map_err(|e| err("injectors", e))?;
        let mut f = Forwarder {
            socks,
            targets,
            peers,
            counts,
            injector,
            free: Vec::new(),
            next: 0,
            _ebpf: ebpf,
        };
        f.socks
            .set(INJECTOR, &f.injector.as_raw_fd(), 0)
            .map_err(|e| err("sockmap insert (marker socket)", e))?;
        f.self_test()?;
        Ok(f)
    }

    /// Put `a` and `b` in the maps, each redirecting to the other. Bytes
    /// either received before it joined (still in its receive queue: the
    /// caller read until EAGAIN first) are redirected too, in order.
    pub fn join(&mut self, a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> Result<Pair, Unavailable> {
        let slot = match self.free.pop() {
            Some(s) => s,
            None if self.next < MAX_PAIRS => {
                self.next += 1;
                self.next - 1
            }
            None => return Err(Unavailable("sockmap full".into())),
        };
        let ca = sys::bpf::socket_cookie(a).map_err(|e| err("SO_COOKIE", e))?;
        let cb = sys::bpf::socket_cookie(b).map_err(|e| err("SO_COOKIE", e))?;
        let pair = Pair {
            slot,
            cookies: [ca, cb],
        };
        let r = self.link(&pair, a, b);
        match r {
            Ok(()) => Ok(pair),
            Err(e) => {
                self.leave(pair);
                Err(e)
            }
        }
    }

    /// The join's map updates. Order matters: both sockets are redirect
    /// targets (`targets`, no program) and have their peers
    /// before either gets the verdict program (`socks`), so no skb ever
    /// finds its destination missing (it would stay on the source, behind
    /// bytes redirected later).
    fn link(&mut self, pair: &Pair, a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> Result<(), Unavailable> {
        let [ia, ib] = [2 * pair.slot, 2 * pair.slot + 1];
        let [ca, cb] = pair.cookies;
        for (i, fd) in [(ia, a), (ib, b)] {
            self.targets
                .set(i, &fd.as_raw_fd(), 0)
                .map_err(|e| err("sockmap insert", e))?;
        }
        for c in [ca, cb] {
            self.counts.insert(c, 0, 0).map_err(|e| err("counts", e))?;
        }
        self.peers
            .insert(ca, [u64::from(ib), cb], 0)
            .map_err(|e| err("peers", e))?;
        self.peers
            .insert(cb, [u64::from(ia), ca], 0)
            .map_err(|e| err("peers", e))?;
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
        let source = pair.cookies[(to & 1) ^ 1];
        let sent = self.injector.send(&source.to_ne_bytes())?;
        if sent != 8 {
            return Err(std::io::Error::other("short marker"));
        }
        Ok(())
    }

    /// Bytes the program has redirected from side `from` so far (all of
    /// them once its end of stream was seen, as for [`Forwarder::mark`]).
    pub fn forwarded(&self, pair: &Pair, from: usize) -> u64 {
        self.counts.get(&pair.cookies[from & 1], 0).unwrap_or(0)
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
        let pair = self.join(b.as_fd(), c.as_fd())?;
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
            sys::wait_ready(c.as_fd(), false, SELF_TEST_WAIT).map_err(e("self-test"))?;
            match sys::take_socket_error(c.as_fd()) {
                Ok(Some(x)) if Self::is_marker(&x) => Ok(()),
                other => Err(Unavailable(format!(
                    "this kernel does not report the end-of-stream marker as EPIPE ({other:?})"
                ))),
            }
        })();
        self.leave(pair);
        r
    }

    /// Take both sockets out of the maps. Bytes still queued on either
    /// socket's psock are dropped by the kernel: call once both are drained,
    /// or when the tunnel failed.
    pub fn leave(&mut self, pair: Pair) {
        let _ = self.socks.clear_index(&(2 * pair.slot));
        let _ = self.socks.clear_index(&(2 * pair.slot + 1));
        let _ = self.targets.clear_index(&(2 * pair.slot));
        let _ = self.targets.clear_index(&(2 * pair.slot + 1));
        for c in pair.cookies {
            let _ = self.peers.remove(&c);
            let _ = self.counts.remove(&c);
        }
        self.free.push(pair.slot);
    }
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
