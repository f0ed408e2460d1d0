//! The user-space router: one thread, one ppoll(2) over every host's TUN
//! device and a stop eventfd. A packet read from host A's device for host
//! B's address goes through the A→B [`Direction`] and waits in a heap
//! ordered by departure time; ppoll's nanosecond timeout wakes the thread
//! when the earliest is due, or, when it is closer than the spin time, the
//! thread looks at the devices without sleeping until it is ([`Tuning`]).
//! Each packet's lateness (how long after its departure
//! time it was actually written) is recorded: that is the emulator's own
//! added delay.

use crate::model::{DirStats, Direction, Verdict};
use crate::tuning::{Budget, Tuning};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::net::Ipv4Addr;
use std::time::Instant;
use weft_io::sys::tun::{poll_in, ppoll, PollFd};
use weft_io::sys::{self, Fd};

/// Largest packet read from a TUN device (its MTU is 1500).
const BUF: usize = 2048;
/// Packets waiting in the delay line at most (beyond: dropped, counted).
const MAX_PENDING: usize = 1 << 20;
/// Packets read from one device per wake-up before the others get a turn.
const BURST: usize = 64;
/// How long a stopping router keeps delivering packets already in flight.
const DRAIN_NS: u64 = 2_000_000_000;

struct Pending {
    at: u64,
    seq: u64,
    dst: usize,
    len: usize,
    buf: Box<[u8; BUF]>,
}

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    // Reversed: BinaryHeap is a max-heap, the earliest departure must come first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// What the router counted, per direction and in total.
#[derive(Clone, Debug, Default)]
pub struct RouterStats {
    /// (from host, to host, counters).
    pub dirs: Vec<(usize, usize, DirStats)>,
    /// Packets written to their destination.
    pub delivered: u64,
    /// Packets for an address no link reaches, or not IPv4.
    pub unroutable: u64,
    /// Packets dropped because the delay line was full or a write failed.
    pub overflow: u64,
    /// Packets read from the devices.
    pub reads: u64,
    /// Time spent in writes to the devices (each runs the receiving host's
    /// stack): divided by `delivered`, the router's service time per packet.
    pub write_ns: u64,
    /// Waits that slept (ppoll with a timeout or none).
    pub sleeps: u64,
    /// Waits that only looked (spinning before a near departure).
    pub spins: u64,
    /// Lateness of delivered packets in ns: sorted sample (up to 1,000,000).
    pub lateness: Vec<u64>,
}

impl RouterStats {
    /// Lateness quantile `q` (0..=1) in microseconds.
    pub fn lateness_us(&self, q: f64) -> f64 {
        if self.lateness.is_empty() {
            return 0.0;
        }
        let i = ((self.lateness.len() - 1) as f64 * q).round() as usize;
        self.lateness[i] as f64 / 1000.0
    }
}

/// The router: hosts' devices and addresses, and the directions between them.
pub struct Router {
    tuns: Vec<Fd>,
    addrs: HashMap<u32, usize>,
    dirs: Vec<Direction>,
    /// (src, dst) -> index in dirs.
    route: HashMap<(usize, usize), usize>,
    ends: Vec<(usize, usize)>,
    /// Arrival order, the heap's tie-break.
    seq: u64,
}

impl Router {
    /// A router over `tuns[i]` (host i, address `addrs[i]`).
    pub fn new(tuns: Vec<Fd>, addrs: &[Ipv4Addr]) -> Router {
        Router {
            tuns,
            addrs: addrs.iter().enumerate().map(|(i, a)| (u32::from(*a), i)).collect(),
            dirs: Vec::new(),
            route: HashMap::new(),
            ends: Vec::new(),
            seq: 0,
        }
    }

    /// Add the direction `src` → `dst`.
    pub fn add(&mut self, src: usize, dst: usize, d: Direction) {
        self.route.insert((src, dst), self.dirs.len());
        self.ends.push((src, dst));
        self.dirs.push(d);
    }

    /// Route until `stop` (an eventfd) is signalled, waiting as `tuning` says.
    pub fn run(mut self, stop: &Fd, tuning: &Tuning) -> io::Result<RouterStats> {
        let epoch = Instant::now();
        let now = || epoch.elapsed().as_nanos() as u64;
        let mut heap: BinaryHeap<Pending> = BinaryHeap::new();
        let mut free: Vec<Box<[u8; BUF]>> = Vec::new();
        let mut st = RouterStats::default();
        let mut fds: Vec<PollFd> = self.tuns.iter().map(poll_in).collect();
        fds.push(poll_in(stop));
        let n = self.tuns.len();
        let spin = tuning.spin.as_nanos() as u64;
        let mut budget = Budget::default();
        let mut draining: Option<u64> = None;
        loop {
            self.deliver(&mut heap, &mut free, &mut st, &now);
            // Checked before sleeping: with nothing left to wait for, poll
            // would block until some unrelated packet came.
            if draining.is_some_and(|d| heap.is_empty() || now() >= d) {
                break;
            }
            let next = heap.peek().map(|p| draining.map_or(p.at, |d| p.at.min(d)));
            let t = now();
            // Near departures are waited for by looking without sleeping (no
            // timer round trip), within the spin budget; for the others the
            // thread sleeps until `spin` before them (a wake-up comes tens of
            // µs late on a busy VM), then spins.
            let wait = next.map(|at| at.saturating_sub(t));
            let may_spin = spin > 0 && budget.may_spin(t);
            let spinning = may_spin && wait.is_some_and(|w| w <= spin);
            let timeout = match wait {
                _ if spinning => Some(0),
                Some(w) if may_spin => Some(w - spin),
                w => w,
            };
            for f in fds.iter_mut() {
                f.revents = 0;
            }
            match ppoll(&mut fds, timeout.map(std::time::Duration::from_nanos)) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            if spinning {
                st.spins += 1;
            } else {
                st.sleeps += 1;
                budget.slept(now().saturating_sub(t));
            }
            if fds[n].revents != 0 {
                // Stop: deliver what is in flight first (a reply in the delay
                // line when the command exits), for at most DRAIN.
                sys::eventfd_drain(stop);
                draining.get_or_insert(now() + DRAIN_NS);
            }
            for (src, f) in fds[..n].iter().enumerate() {
                if f.revents != 0 {
                    self.read_burst(src, &mut heap, &mut free, &mut st, &now);
                }
            }
        }
        st.dirs = self
            .ends
            .iter()
            .zip(&self.dirs)
            .map(|(&(a, b), d)| (a, b, d.stats))
            .collect();
        st.lateness.sort_unstable();
        Ok(st)
    }

    /// Read up to BURST packets from host `src`'s device into the delay line.
    #[allow(clippy::vec_box)]
    fn read_burst(
        &mut self,
        src: usize,
        heap: &mut BinaryHeap<Pending>,
        free: &mut Vec<Box<[u8; BUF]>>,
        st: &mut RouterStats,
        now: &dyn Fn() -> u64,
    ) {
        for i in 0..BURST {
            if i % 8 == 7 {
                // Long bursts must not hold back packets already due.
                self.deliver(heap, free, st, now);
            }
            let mut buf = free.pop().unwrap_or_else(|| Box::new([0u8; BUF]));
            let len = match sys::read(&self.tuns[src], &mut buf[..]) {
                Ok(len) if len > 0 => len,
                _ => {
                    free.push(buf);
                    break;
                }
            };
            st.reads += 1;
            let Some((dst, flow)) = self.classify(&buf[..len]) else {
                st.unroutable += 1;
                free.push(buf);
                continue;
            };
            let Some(&di) = self.route.get(&(src, dst)) else {
                st.unroutable += 1;
                free.push(buf);
                continue;
            };
            match self.dirs[di].offer(now(), len, flow) {
                Verdict::At(at) if heap.len() < MAX_PENDING => {
                    self.seq += 1;
                    heap.push(Pending {
                        at,
                        seq: self.seq,
                        dst,
                        len,
                        buf,
                    });
                }
                Verdict::At(_) => {
                    st.overflow += 1;
                    free.push(buf);
                }
                Verdict::Lost | Verdict::QueueFull => free.push(buf),
            }
        }
    }

    /// Write every packet whose departure time has come.
    // Boxed buffers on purpose: a packet moves into the heap and back to the
    // free list as a pointer, not as 2 KiB.
    #[allow(clippy::vec_box)]
    fn deliver(
        &self,
        heap: &mut BinaryHeap<Pending>,
        free: &mut Vec<Box<[u8; BUF]>>,
        st: &mut RouterStats,
        now: &dyn Fn() -> u64,
    ) {
        let t = now();
        while heap.peek().is_some_and(|p| p.at <= t) {
            let p = heap.pop().expect("peeked");
            // Lateness up to the write: the write itself runs the receiving
            // host's stack (TCP input) in this thread.
            let late = now().saturating_sub(p.at);
            let w = sys::write(&self.tuns[p.dst], &p.buf[..p.len]);
            st.write_ns += now().saturating_sub(p.at + late);
            match w {
                Ok(_) => {
                    st.delivered += 1;
                    if st.lateness.len() < 1_000_000 {
                        st.lateness.push(late);
                    }
                }
                Err(_) => st.overflow += 1,
            }
            free.push(p.buf);
        }
    }

    /// Destination host and flow key of an IPv4 packet.
    fn classify(&self, p: &[u8]) -> Option<(usize, u64)> {
        if p.len() < 20 || p[0] >> 4 != 4 {
            return None;
        }
        let dst = u32::from_be_bytes([p[16], p[17], p[18], p[19]]);
        let host = *self.addrs.get(&dst)?;
        Some((host, flow_key(p)))
    }
}

/// A flow: addresses, protocol and (TCP/UDP) ports, mixed into 64 bits.
pub fn flow_key(p: &[u8]) -> u64 {
    let ihl = ((p[0] & 0x0f) as usize) * 4;
    let proto = p[9];
    let mut k = u64::from(proto);
    for &b in &p[12..20] {
        k = k.wrapping_mul(0x100_0000_01b3) ^ u64::from(b);
    }
    if (proto == 6 || proto == 17) && p.len() >= ihl + 4 {
        for &b in &p[ihl..ihl + 4] {
            k = k.wrapping_mul(0x100_0000_01b3) ^ u64::from(b);
        }
    }
    k
}
