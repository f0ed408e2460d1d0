//! In-kernel forwarding for `weft proxy --splice sockmap`.
//!
//! An sk_skb stream-verdict program (bpf/sockmap.bpf.c, compiled by build.rs
//! with clang) is attached to a sockmap. A CONNECT tunnel puts its two
//! sockets in the map and their cookies in `peers`: from then on every skb a
//! socket receives is redirected by the kernel to its peer's send queue, in
//! softirq/workqueue context, without waking weft per chunk. weft still sees
//! the end of stream (a read returning 0 on the receiving socket) and
//! forwards it as a half-close once the redirected bytes have all reached the
//! peer (see [`Pair::delivered`]), then takes both sockets out of the map.
//!
//! Loading needs CAP_BPF / CAP_NET_ADMIN (root). [`Forwarder::load`] says why
//! it cannot, and the proxy splices instead.

use aya::maps::{HashMap, MapData, SockMap};
use aya::programs::SkSkb;
use aya::Ebpf;
use std::os::fd::{AsRawFd, BorrowedFd};
use weft_io::sys::bpf::{socket_cookie, tcp_bytes};

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sockmap.bpf.o"));

/// Tunnels one forwarder holds at once (the maps' max_entries is 65536 sockets).
pub const MAX_PAIRS: u32 = 32 * 1024;

/// A loaded verdict program with its two maps.
pub struct Forwarder {
    socks: SockMap<MapData>,
    peers: HashMap<MapData, u64, u32>,
    free: Vec<u32>,
    next: u32,
    // Keeps the program (and its attachment to `socks`) alive.
    _ebpf: Ebpf,
}

/// One tunnel's two sockets in the map.
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

fn err(what: &str, e: impl std::fmt::Display) -> Unavailable {
    Unavailable(format!("{what}: {e}"))
}

impl Forwarder {
    /// Whether this build carries the BPF program (clang was present).
    pub fn built() -> bool {
        !OBJECT.is_empty()
    }

    /// Load the program, create the maps and attach the verdict program.
    pub fn load() -> Result<Forwarder, Unavailable> {
        if !Self::built() {
            return Err(Unavailable(
                "weft was built without clang, so without the sockmap program".into(),
            ));
        }
        let mut ebpf = Ebpf::load(OBJECT).map_err(|e| err("loading the sockmap maps (needs root or CAP_BPF)", e))?;
        let socks: SockMap<MapData> = SockMap::try_from(
            ebpf.take_map("socks")
                .ok_or_else(|| Unavailable("no map socks".into()))?,
        )
        .map_err(|e| err("map socks", e))?;
        let peers: HashMap<MapData, u64, u32> = HashMap::try_from(
            ebpf.take_map("peers")
                .ok_or_else(|| Unavailable("no map peers".into()))?,
        )
        .map_err(|e| err("map peers", e))?;
        let prog: &mut SkSkb = ebpf
            .program_mut("weft_verdict")
            .ok_or_else(|| Unavailable("no program weft_verdict".into()))?
            .try_into()
            .map_err(|e| err("program type", e))?;
        prog.load()
            .map_err(|e| err("loading the verdict program (needs root or CAP_BPF)", e))?;
        prog.attach(socks.fd())
            .map_err(|e| err("attaching the verdict program", e))?;
        Ok(Forwarder {
            socks,
            peers,
            free: Vec::new(),
            next: 0,
            _ebpf: ebpf,
        })
    }

    /// Put `a` and `b` in the map, each redirecting to the other. From here
    /// on bytes either receives go to the other's send queue.
    pub fn join(&mut self, a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> Result<Pair, Unavailable> {
        let slot = match self.free.pop() {
            Some(s) => s,
            None if self.next < MAX_PAIRS => {
                self.next += 1;
                self.next - 1
            }
            None => return Err(Unavailable("sockmap full".into())),
        };
        let ca = socket_cookie(a).map_err(|e| err("SO_COOKIE", e))?;
        let cb = socket_cookie(b).map_err(|e| err("SO_COOKIE", e))?;
        let pair = Pair {
            slot,
            cookies: [ca, cb],
        };
        let r = (|| {
            self.peers.insert(ca, 2 * slot + 1, 0).map_err(|e| err("peers", e))?;
            self.peers.insert(cb, 2 * slot, 0).map_err(|e| err("peers", e))?;
            self.socks
                .set(2 * slot, &a.as_raw_fd(), 0)
                .map_err(|e| err("sockmap insert", e))?;
            self.socks
                .set(2 * slot + 1, &b.as_raw_fd(), 0)
                .map_err(|e| err("sockmap insert", e))
        })();
        match r {
            Ok(()) => Ok(pair),
            Err(e) => {
                self.leave(pair);
                Err(e)
            }
        }
    }

    /// Stop redirecting one side: its later bytes stay in its own receive
    /// queue (the other side keeps forwarding).
    pub fn stop(&mut self, pair: &Pair, side: usize) {
        let _ = self.peers.remove(&pair.cookies[side & 1]);
    }

    /// Take both sockets out of the map.
    pub fn leave(&mut self, pair: Pair) {
        for c in pair.cookies {
            let _ = self.peers.remove(&c);
        }
        let _ = self.socks.clear_index(&(2 * pair.slot));
        let _ = self.socks.clear_index(&(2 * pair.slot + 1));
        self.free.push(pair.slot);
    }
}

impl Pair {
    /// Whether every byte `from` has received since `base_received` has been
    /// written to `to` (beyond `base_written`): then `to` may be half-closed
    /// without overtaking redirected data. Returns (received, written) deltas.
    pub fn delivered(
        from: BorrowedFd<'_>,
        to: BorrowedFd<'_>,
        base_received: u64,
        base_written: u64,
    ) -> Option<(u64, u64)> {
        let f = tcp_bytes(from).ok()?;
        let t = tcp_bytes(to).ok()?;
        let r = f.received.saturating_sub(base_received);
        let w = t.written().saturating_sub(base_written);
        Some((r, w))
    }
}
