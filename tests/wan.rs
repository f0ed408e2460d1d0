//! `weft wan`: accuracy against its own settings (an RTT probe, loss counted
//! over 10^5 packets, bulk TCP rate, a rate per flow), the `tcp` block of
//! `--stats` (data segments and ACKs per namespace), per-host sysctls read
//! back inside the namespaces, namespaces and TUN devices removed on exit and
//! after a SIGKILL, and one-line errors for bad topology files.
//!
//! Everything but the config errors needs root, /dev/net/tun, `ip` and
//! python3 (the far end's echo/source script runs inside the namespace);
//! where they are missing the test says so and passes. Ignored (measurements,
//! printed): `accuracy_table` (about three minutes, the table in
//! docs/results.md), `added_delay_by_rate`, `loss_at_low_rates`,
//! `kernel_shaper_table`.

#![allow(dead_code)]

use crate::common;

use common::*;
use std::io::Read;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Every `weft wan` sweeps the namespaces that runs now gone left behind.
/// A test that starts one holds this lock shared until its run is past the
/// sweep (ready, or done); the test that leaves a stale namespace on purpose
/// holds it exclusive from the kill to its own next start, so that the sweep
/// it asserts is its own and not a neighbour's. A file lock (flock), not a
/// lock in this process: another run of these tests on the same host sweeps
/// too. Each call opens the file anew, so threads of one process exclude
/// each other as processes do; the lock goes with the returned file.
fn starts_lock(exclusive: bool) -> std::fs::File {
    let path = std::env::temp_dir().join("weft-wan-tests.lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let locked = if exclusive { f.lock() } else { f.lock_shared() };
    locked.unwrap_or_else(|e| panic!("flock {}: {e}", path.display()));
    f
}

fn starting() -> std::fs::File {
    starts_lock(false)
}

/// The far end, run inside the client namespace: UDP 9000 echoes `e...`
/// datagrams and counts the others, answering `quit` with the count (until
/// `done`); TCP
/// 9001 sends zeros to whoever connects, TCP 9002 sends 4 MiB of zeros
/// and closes.
const FAR_END: &str = r#"
import socket, threading
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.setsockopt(socket.SOL_SOCKET, 33, 32 << 20)
u.bind(("0.0.0.0", 9000))
def listen(port):
    t = socket.socket()
    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    t.bind(("0.0.0.0", port))
    t.listen(4)
    return t
def serve(c, chunks):
    z = b"\0" * 65536
    try:
        while chunks != 0:
            c.sendall(z)
            chunks -= 1
    except Exception:
        pass
    c.close()
def accept(t, chunks):
    while True:
        c, _ = t.accept()
        threading.Thread(target=serve, args=(c, chunks), daemon=True).start()
threading.Thread(target=accept, args=(listen(9001), -1), daemon=True).start()
threading.Thread(target=accept, args=(listen(9002), 64), daemon=True).start()
n = 0
while True:
    d, a = u.recvfrom(2048)
    if d == b"quit":
        break
    if d[:1] == b"e":
        u.sendto(d, a)
    else:
        n += 1
# Answer until the test says `done`: an answer may wait behind queued data
# (a kernel shaper's queue goes with the namespace when this exits).
u.settimeout(30)
while d != b"done":
    if d == b"quit":
        u.sendto(str(n).encode(), a)
    try:
        d, a = u.recvfrom(2048)
    except OSError:
        break
"#;

/// Why these tests cannot run here, if they cannot.
fn unavailable() -> Option<String> {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.to_string()))
        .unwrap_or_default();
    if uid.split_whitespace().nth(1) != Some("0") {
        return Some("not root".into());
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun".into());
    }
    for (prog, arg) in [("ip", "-V"), ("python3", "--version")] {
        if missing(prog, arg) {
            return Some(format!("`{prog}` is not installed"));
        }
    }
    None
}

/// Is `prog` missing (`prog arg` does not run and succeed)?
fn missing(prog: &str, arg: &str) -> bool {
    Command::new(prog)
        .arg(arg)
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
}

macro_rules! need_netns {
    () => {
        if let Some(why) = unavailable() {
            eprintln!("skipping: weft wan needs root, /dev/net/tun, ip and python3 ({why})");
            return;
        }
    };
}

/// Skip the test, saying `why`, where `prog arg` does not run and succeed.
macro_rules! need_tool {
    ($prog:literal, $arg:literal, $why:literal) => {
        if missing($prog, $arg) {
            eprintln!(concat!("skipping: ", $why));
            return;
        }
    };
}

/// The far end runs real-time (below the router) where `chrt` exists: on a
/// loaded machine a normal process wakes milliseconds late, and the RTT
/// probe would measure the far end's scheduling instead of the emulator.
fn far_end_prefix() -> Vec<&'static str> {
    if !missing("chrt", "--version") {
        vec!["chrt", "-f", "3"]
    } else {
        Vec::new()
    }
}

/// A running `weft wan` with the far end in its client namespace.
struct Wan {
    child: Child,
    dir: TempDir,
    /// The client namespace's address.
    client: String,
    ns: String,
}

impl Wan {
    /// `weft wan ARGS -- python3 -c FAR_END`, waiting until it is ready; the
    /// far end real-time (see `far_end_prefix`).
    fn start(args: &[&str]) -> Wan {
        Wan::start_far_end(args, far_end_prefix())
    }

    /// The same with the far end at normal priority: where it moves many
    /// packets, real time would share the kernel's RT limit (95 % of each
    /// second per CPU) with the router and stall both.
    fn start_normal(args: &[&str]) -> Wan {
        Wan::start_far_end(args, Vec::new())
    }

    fn start_far_end(args: &[&str], prefix: Vec<&str>) -> Wan {
        let dir = TempDir::new("wan");
        let ready = dir.path.join("ready.json");
        let stats = dir.path.join("stats.json");
        let start = starting();
        let child = Command::new(weft_bin())
            .arg("wan")
            .args(args)
            .args([
                "--quiet",
                "--seed",
                "1",
                "--ready",
                path_str(&ready),
                "--stats",
                path_str(&stats),
            ])
            .arg("--")
            .args(prefix)
            .args(["python3", "-c", FAR_END])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        assert!(
            wait_until(Duration::from_secs(20), || ready.exists()),
            "weft wan did not become ready"
        );
        drop(start);
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&ready).unwrap()).unwrap();
        let client = v["hosts"]["client"]["addr"].as_str().unwrap().to_string();
        let ns = v["hosts"]["client"]["ns"].as_str().unwrap_or_default().to_string();
        let w = Wan { child, dir, client, ns };
        // The far end is up once it echoes.
        let s = w.udp();
        assert!(
            wait_until(Duration::from_secs(10), || w.echo(&s, 0).is_some()),
            "far end does not echo"
        );
        w
    }

    fn udp(&self) -> UdpSocket {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        s.connect(format!("{}:9000", self.client)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        s
    }

    /// One echo round trip.
    fn echo(&self, s: &UdpSocket, i: u32) -> Option<Duration> {
        let msg = format!("e{i}");
        let t = Instant::now();
        s.send(msg.as_bytes()).ok()?;
        let mut b = [0u8; 64];
        loop {
            let n = s.recv(&mut b).ok()?;
            if &b[..n] == msg.as_bytes() {
                return Some(t.elapsed());
            }
        }
    }

    /// Stop the far end (it answers the count of non-echo datagrams), then
    /// weft wan; returns (count, router stats).
    fn finish(mut self) -> (u64, serde_json::Value) {
        let s = self.udp();
        s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        let mut count = None;
        for _ in 0..50 {
            let _ = s.send(b"quit");
            let mut b = [0u8; 64];
            if let Ok(n) = s.recv(&mut b) {
                count = std::str::from_utf8(&b[..n]).ok().and_then(|t| t.parse().ok());
                break;
            }
        }
        for _ in 0..3 {
            let _ = s.send(b"done");
        }
        let st = self.child.wait().unwrap();
        assert!(st.success(), "weft wan exited with {st}");
        let stats = std::fs::read_to_string(self.dir.path.join("stats.json")).unwrap();
        (
            count.expect("far end answered quit"),
            serde_json::from_str(&stats).unwrap(),
        )
    }
}

impl Drop for Wan {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill").arg(self.child.id().to_string()).status();
            let _ = self.child.wait();
        }
    }
}

/// Median round trip of `n` probes through `weft wan --delay D` (ms).
fn measure_rtt(delay: &str, n: u32) -> f64 {
    measure_rtt_paused(delay, n, Duration::ZERO)
}

/// The same with `pause` before each probe: both ends then wake from idle
/// for each probe, as they do behind a delay.
fn measure_rtt_paused(delay: &str, n: u32, pause: Duration) -> f64 {
    let w = Wan::start(&["--delay", delay]);
    let s = w.udp();
    let mut rtts: Vec<f64> = realtime(|| {
        (1..=n)
            .filter_map(|i| {
                std::thread::sleep(pause);
                w.echo(&s, i)
            })
            .map(|d| d.as_secs_f64() * 1e3)
            .collect()
    });
    rtts.sort_by(f64::total_cmp);
    w.finish();
    rtts[rtts.len() / 2]
}

/// Send `n` datagrams towards the client with `args` (loss flags) at about
/// `pps` per second; returns (fraction lost end to end, router's count).
fn measure_loss(args: &[&str], n: u64, pps: u64) -> (f64, f64) {
    let w = Wan::start(args);
    let s = w.udp();
    blast(&s, n, pps);
    std::thread::sleep(Duration::from_millis(300));
    let (got, stats) = w.finish();
    let dir = towards_client(&stats);
    let router = dir["lost"].as_f64().unwrap() / dir["packets"].as_f64().unwrap();
    (1.0 - got as f64 / n as f64, router)
}

/// The router's counters of the direction towards the client.
fn towards_client(stats: &serde_json::Value) -> serde_json::Value {
    stats["dirs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["to"] == "client")
        .unwrap()
        .clone()
}

/// Bulk TCP from the client namespace through `--up-rate RATE`: the wire
/// rate in bit/s over seconds 1..secs (payload scaled by 1500/1448).
fn measure_rate(rate: &str, secs: u64, extra: &[&str]) -> f64 {
    let mut args = vec!["--up-rate", rate, "--delay", "1ms"];
    args.extend_from_slice(extra);
    let w = Wan::start(&args);
    let r = bulk_rates(&w, 1, secs)[0];
    w.finish();
    r
}

/// `streams` bulk TCP connections from the far end (client namespace) at
/// once: each one's wire rate in bit/s over seconds 1..secs (payload scaled
/// by 1500/1448).
fn bulk_rates(w: &Wan, streams: usize, secs: u64) -> Vec<f64> {
    let addr: SocketAddr = format!("{}:9001", w.client).parse().unwrap();
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..streams)
            .map(|_| {
                sc.spawn(move || {
                    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
                    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    let mut buf = vec![0u8; 1 << 16];
                    let start = Instant::now();
                    let (mut bytes, mut t0) = (0u64, None);
                    while start.elapsed() < Duration::from_secs(secs) {
                        let n = c.read(&mut buf).unwrap();
                        if t0.is_some() {
                            bytes += n as u64;
                        } else if start.elapsed() >= Duration::from_secs(1) {
                            // The window opens once what arrived before it
                            // is read: bytes a descheduled reader left in
                            // its buffer came at the rate, but before the
                            // window, and counted in it they made the rate
                            // look 6 % faster than the setting (a test run
                            // with eight threads beside it).
                            c.set_nonblocking(true).unwrap();
                            while c.read(&mut buf).is_ok_and(|n| n > 0) {}
                            c.set_nonblocking(false).unwrap();
                            t0 = Some(Instant::now());
                        }
                    }
                    let el = t0.map(|t| t.elapsed().as_secs_f64()).unwrap_or(1.0);
                    // What TCP itself saw of the path (TCP_INFO: per connection, unlike nstat).
                    if let Ok(i) = weft_io::sys::tcp_info(&c) {
                        eprintln!(
                            "receiver's TCP: rtt {} us (min {}), {} segments in, {} with data",
                            i.rtt_us, i.min_rtt_us, i.segs_in, i.data_segs_in
                        );
                    }
                    bytes as f64 * 8.0 / el * 1500.0 / 1448.0
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// A timed figure of the emulator against its setting. The setting is a limit
/// the emulator must never beat (a shorter delay or a faster rate is a bug);
/// falling short of it means the emulator's thread did not get the CPU in
/// time, which on this shared 2-core machine (tests and CI beside it) is the
/// machine, not the emulator: that side is only bounded loosely here, and its
/// accuracy on a quiet machine is measured (not asserted) by the ignored
/// `accuracy_table` in docs/results.md.
fn assert_near_limit(what: &str, measured: f64, limit: f64, never_beats: Side) {
    let ratio = measured / limit;
    let (beat, short) = match never_beats {
        Side::Below => (ratio < 0.97, ratio > 1.5),
        Side::Above => (ratio > 1.05, ratio < 0.6),
    };
    assert!(!beat, "{what}: {measured} beats the setting {limit}");
    assert!(!short, "{what}: {measured} is far from the setting {limit}");
}

/// Which side of its setting a figure must never cross.
#[derive(Clone, Copy)]
enum Side {
    /// A delay: never shorter than set.
    Below,
    /// A rate: never faster than set.
    Above,
}

#[test]
fn rtt_matches_the_delay() {
    need_netns!();
    let rtt = measure_rtt("25ms", 60);
    eprintln!("--delay 25ms: median RTT {rtt:.2} ms (expected 50)");
    assert_near_limit("median RTT (ms)", rtt, 50.0, Side::Below);
}

#[test]
fn counted_loss_over_100k_packets() {
    need_netns!();
    let (e2e, router) = measure_loss(&["--loss", "2%"], 100_000, 25_000);
    eprintln!(
        "--loss 2%: lost {:.3} % end to end, router {:.3} %",
        e2e * 100.0,
        router * 100.0
    );
    assert!((e2e / 0.02 - 1.0).abs() < 0.05, "Bernoulli lost {e2e}");
    let (e2e, router) = measure_loss(&["--loss", "1%", "--loss-after-loss", "40%"], 100_000, 25_000);
    let mean = 0.01 / (1.0 - 0.4 + 0.01);
    eprintln!(
        "--loss 1% --loss-after-loss 40%: lost {:.3} % end to end, router {:.3} % (model {:.3} %)",
        e2e * 100.0,
        router * 100.0,
        mean * 100.0
    );
    assert!((e2e / mean - 1.0).abs() < 0.05, "GE lost {e2e}");
}

#[test]
fn bulk_tcp_rate_matches_the_limit() {
    need_netns!();
    let r = measure_rate("10mbit", 5, &[]);
    eprintln!("--up-rate 10mbit: bulk TCP {:.3} Mbit/s on the wire", r / 1e6);
    assert_near_limit("bulk TCP rate", r, 10e6, Side::Above);
}

/// `--rate-per flow` (001's modems, a line each): two connections at once
/// each get the whole rate; `--rate-per host` shares it.
#[test]
fn rate_per_flow_gives_each_connection_the_rate() {
    need_netns!();
    for (per, want) in [("flow", 2e6), ("host", 1e6)] {
        let w = Wan::start(&["--up-rate", "2mbit", "--rate-per", per, "--delay", "1ms"]);
        let rates = bulk_rates(&w, 2, 4);
        w.finish();
        eprintln!(
            "--up-rate 2mbit --rate-per {per}: {:.3} and {:.3} Mbit/s",
            rates[0] / 1e6,
            rates[1] / 1e6
        );
        if per == "flow" {
            for r in &rates {
                assert_near_limit("per flow", *r, want, Side::Above);
            }
        } else {
            let sum: f64 = rates.iter().sum();
            assert_near_limit("per host, both connections", sum, 2e6, Side::Above);
            // Sharing, not one connection starving the other.
            assert!(rates.iter().all(|r| *r > 0.2e6), "per host: {rates:?}");
        }
    }
}

/// The `tcp` block of `--stats`: the client namespace's counters for the
/// run, with data segments and ACKs apart (001 Fig. 6), checked against the
/// packets the router itself carried.
#[test]
fn tcp_block_counts_data_segments_and_acks() {
    need_netns!();
    need_tool!("nstat", "-V", "the tcp block needs `nstat` (iproute2)");
    // The counts are compared only in a run without loss: on a loaded
    // machine (CI runs the suite on two cores) the user-space router can be
    // starved long enough for a retransmission timeout, which adds segments
    // and says nothing of the counting. Such a run is repeated, twice at most.
    let mut attempts = 0;
    let st = loop {
        attempts += 1;
        let st = transfer_4mib_through_the_router();
        let tcp = &st["tcp"]["client"];
        let lost = ["TcpRetransSegs", "TcpExtTCPTimeouts"]
            .iter()
            .any(|k| tcp[*k].as_u64() != Some(0));
        if !lost {
            break st;
        }
        assert!(attempts < 3, "loss in {attempts} runs: {tcp}");
        eprintln!("a run with loss, again: {tcp}");
    };
    let tcp = &st["tcp"]["client"];
    let n = |k: &str| {
        tcp[k]
            .as_u64()
            .unwrap_or_else(|| panic!("tcp.client.{k} missing: {tcp}"))
    };
    let dir = |to: &str| {
        st["dirs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["to"] == to)
            .map(|d| d["packets"].as_u64().unwrap())
            .unwrap()
    };
    let (up, down) = (dir("host"), dir("client"));
    let (data, acks_out, acks_in) = (n("data_segs_out"), n("acks_out"), n("acks_in"));
    eprintln!("tcp block {tcp}; router: {up} packets out of the client, {down} into it");
    assert!(st["tcp"].get("host").is_none(), "the caller's namespace has no block");
    // 4 MiB in full-sized segments (and the FIN), every one out through the router.
    assert!((2897..2920).contains(&data), "{data} data segments for 4 MiB");
    // Sent without data: the SYN-ACK (and a FIN or a window update).
    assert!((1..=4).contains(&acks_out), "{acks_out}");
    // Every TCP segment out crossed the router (with a few UDP echoes).
    assert!(
        data + acks_out <= up && up <= data + acks_out + 60,
        "{data} + {acks_out} vs {up}"
    );
    // Every segment in but the handshake's last ACK and the FIN was an ACK
    // (those the socket's backlog merged counted too).
    let segs_in = n("TcpInSegs");
    assert!(
        acks_in <= segs_in && segs_in <= acks_in + 4,
        "{acks_in} ACKs of {segs_in} segments in"
    );
    assert!(
        segs_in <= down && down <= segs_in + 60,
        "{segs_in} segments in vs {down} packets"
    );
    // A receiver ACKs every segment at most (quick ACKs), usually every
    // other one or fewer (stretch ACKs when its reader lags); plus its FIN.
    eprintln!("data per ACK {:.2}", data as f64 / acks_in as f64);
    assert!(acks_in > 0 && acks_in <= data + 2, "{acks_in} ACKs for {data} segments");
}

/// 4 MiB from the host to the client through a `--delay 1ms` network, read
/// to the end (a reader that closed early would be answered by a reset for
/// every segment still in flight: segments in, but no ACKs); the
/// emulator's `--stats`.
fn transfer_4mib_through_the_router() -> serde_json::Value {
    let w = Wan::start(&["--delay", "1ms"]);
    let addr: SocketAddr = format!("{}:9002", w.client).parse().unwrap();
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let mut got = 0usize;
    loop {
        match c.read(&mut buf).unwrap() {
            0 => break,
            n => got += n,
        }
    }
    assert_eq!(got, 4 << 20);
    drop(c);
    std::thread::sleep(Duration::from_millis(200));
    w.finish().1
}

/// Per-host settings are applied inside each namespace: read back with
/// `ip netns exec NS cat /proc/sys/...` while the network holds.
#[test]
fn host_sysctls_apply_inside_their_namespaces() {
    need_netns!();
    let dir = TempDir::new("wansysctl");
    let cfg = dir.write(
        "wan.toml",
        br#"[[host]]
name = "client"
sack = false
congestion = "reno"
sysctl = { "net.ipv4.tcp_timestamps" = "0" }

[[host]]
name = "server"
sack = true

[[link]]
a = "client"
b = "server"
delay = "1ms"
"#,
    );
    let ready = dir.path.join("ready.json");
    let start = starting();
    let mut child = Command::new(weft_bin())
        .args([
            "wan",
            "-c",
            path_str(&cfg),
            "--hold",
            "--quiet",
            "--ready",
            path_str(&ready),
        ])
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(20), || ready.exists()), "not ready");
    drop(start);
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&ready).unwrap()).unwrap();
    let read = |host: &str, key: &str| {
        let ns = v["hosts"][host]["ns"].as_str().unwrap();
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "cat", &format!("/proc/sys/net/ipv4/{key}")])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let got = [
        read("client", "tcp_sack"),
        read("client", "tcp_congestion_control"),
        read("client", "tcp_timestamps"),
        read("server", "tcp_sack"),
        read("server", "tcp_timestamps"),
    ];
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    assert!(child.wait().unwrap().success());
    assert_eq!(got, ["0", "reno", "0", "1", "1"].map(String::from));
    // --sack off: the command's namespace.
    let _start = starting();
    let out = Command::new(weft_bin())
        .args([
            "wan",
            "--sack",
            "off",
            "--quiet",
            "--",
            "cat",
            "/proc/sys/net/ipv4/tcp_sack",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0");
}

/// `--shaper kernel`: the same limit enforced by an HTB class on the
/// sending namespace's TUN device instead of the router; the device takes
/// one segment per packet (HTB charging whole GSO super-packets sent
/// bursts seconds apart at 56 kbit/s).
#[test]
fn kernel_shaper_rate_matches_the_limit() {
    need_netns!();
    need_tool!("tc", "-V", "--shaper kernel needs `tc` (iproute2)");
    let w = Wan::start(&["--up-rate", "10mbit", "--delay", "1ms", "--shaper", "kernel"]);
    let link = Command::new("ip")
        .args(["-n", &w.ns, "-d", "link", "show"])
        .output()
        .unwrap();
    let link = String::from_utf8_lossy(&link.stdout).to_string();
    // 10 Mbit/s: one segment per GSO packet (2 ms at the rate).
    assert!(link.contains("gso_max_segs 1 "), "{link}");
    let r = bulk_rates(&w, 1, 5)[0];
    w.finish();
    eprintln!(
        "--up-rate 10mbit --shaper kernel: bulk TCP {:.3} Mbit/s on the wire",
        r / 1e6
    );
    assert_near_limit("bulk TCP rate", r, 10e6, Side::Above);
}

/// Namespaces (`ip netns list`) and TUN devices (`ww<pid>t<i>`, in the
/// caller's namespace or a host's) whose names start with `prefix`.
fn leftovers(pid: u32, nss: &[&str]) -> Vec<String> {
    // `ww<pid>` then `-`, `t` or `v`: not another run whose pid starts alike.
    let prefix = format!("ww{pid}");
    let ours = |n: &str| n.strip_prefix(&prefix).is_some_and(|r| r.starts_with(['-', 't', 'v']));
    let text =
        |args: &[&str]| String::from_utf8_lossy(&Command::new("ip").args(args).output().unwrap().stdout).to_string();
    let mut left: Vec<String> = text(&["netns", "list"])
        .split_whitespace()
        .filter(|n| ours(n))
        .map(|n| format!("namespace {n}"))
        .collect();
    let devices = |t: String| -> Vec<String> {
        t.lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|d| d.split('@').next().unwrap_or(d).to_string())
            .filter(|d| ours(d))
            .map(|d| format!("device {d}"))
            .collect()
    };
    left.extend(devices(text(&["-o", "link"])));
    for ns in nss {
        left.extend(devices(text(&["-n", ns, "-o", "link"])));
    }
    left
}

#[test]
fn namespaces_and_tun_devices_removed_on_exit_and_after_sigkill() {
    need_netns!();
    // A normal exit removes everything at once.
    let dir = TempDir::new("wanexit");
    let ready = dir.path.join("ready.json");
    let start = starting();
    let out = Command::new(weft_bin())
        .args([
            "wan",
            "--delay",
            "1ms",
            "--quiet",
            "--ready",
            path_str(&ready),
            "--",
            "true",
        ])
        .output()
        .unwrap();
    drop(start);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&ready).unwrap()).unwrap();
    let pid = v["pid"].as_u64().unwrap() as u32;
    assert_eq!(leftovers(pid, &[]), Vec::<String>::new());
    assert!(!Path::new(&format!("/run/weft-wan/{pid}")).exists());

    // SIGKILL: the TUN devices vanish with the descriptors; the namespace
    // (a bind mount) and the command inside it stay until the next start.
    let w = Wan::start(&["--delay", "1ms"]);
    let (ns, pid) = (w.ns.clone(), w.child.id());
    let mut w = w;
    // No other test's `weft wan` may start (and sweep) until ours has.
    let _sole = starts_lock(true);
    w.child.kill().unwrap();
    w.child.wait().unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || leftovers(pid, &[&ns])
            == vec![format!("namespace {ns}")]),
        "after SIGKILL: {:?}",
        leftovers(pid, &[&ns])
    );
    let inside = || {
        String::from_utf8_lossy(&Command::new("ip").args(["netns", "pids", &ns]).output().unwrap().stdout).to_string()
    };
    assert!(!inside().trim().is_empty(), "the far end still runs in {ns}");
    let out = Command::new(weft_bin())
        .args(["wan", "--quiet", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains(&format!("removed stale namespace {ns}")), "{err}");
    assert_eq!(leftovers(pid, &[]), Vec::<String>::new());
    assert!(!Path::new(&format!("/run/weft-wan/{pid}")).exists());
}

#[test]
fn bad_topology_is_one_line_naming_the_link_and_key() {
    let dir = TempDir::new("wanbad");
    let cases = [
        (
            "[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\n[[link]]\na = \"a\"\nb = \"b\"\ndelay = \"9y\"\n",
            "link a-b: key `delay`: invalid duration",
        ),
        ("[[host]]\nname = \"a\"\n[[link]]\na = \"a\"\nb = \"zz\"\n", "link #1: key `b`: no host named `zz`"),
        ("[[host]]\nname = \"a\"\nsak = false\n", "host a: key `sak`: unknown key"),
        (
            "[wan]\nshaper = \"kernel\"\n[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\n[[link]]\na = \"a\"\nb = \"b\"\nrate = \"1mbit\"\nrate_per = \"flow\"\n",
            "link a-b: key `rate_per`: shaper = \"kernel\" limits per host",
        ),
        ("[wan]\nshaper = \"tc\"\n[[host]]\nname = \"a\"\n", "key `wan.shaper`: `tc` (expected router or kernel)"),
        ("[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\n[[link]]\na = \"a\"\nb = \"b\"\nup = { rate = \"fast\" }\n", "link a-b: up: key `rate`: bad rate"),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let p = dir.write(&format!("t{i}.toml"), text.as_bytes());
        let out = Command::new(weft_bin())
            .args(["wan", "-c", path_str(&p), "--", "true"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(want), "want `{want}` in: {err}");
    }
    let out = Command::new(weft_bin())
        .args(["wan", "--loss", "200%", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// The accuracy table of docs/wan.md (about two minutes): `cargo test --test
/// integration wan::accuracy_table -- --ignored --nocapture`.
#[test]
#[ignore]
fn accuracy_table() {
    need_netns!();
    let hot = measure_rtt("0ms", 40);
    let base = measure_rtt_paused("0ms", 40, Duration::from_millis(1));
    println!("| no delay: the path's own RTT (TUN both ways, echo), back to back / after 1 ms idle | {hot:.3} / {base:.3} ms | |");
    for d in [1.0, 10.0, 50.0, 100.0, 200.0] {
        let rtt = measure_rtt(&format!("{d}ms"), 40);
        println!(
            "| delay {d} ms | RTT {:.3} ms | {:+.2} % (less the path's own: {:+.2} %) |",
            rtt,
            (rtt / (2.0 * d) - 1.0) * 100.0,
            ((rtt - base) / (2.0 * d) - 1.0) * 100.0
        );
    }
    for p in [0.0005, 0.001, 0.01, 0.05] {
        let arg = format!("{}%", p * 100.0);
        let (e2e, r) = measure_loss(&["--loss", &arg], 100_000, 25_000);
        println!(
            "| Bernoulli {arg} | {:.4} % (router {:.4} %) | {:+.1} % |",
            e2e * 100.0,
            r * 100.0,
            (e2e / p - 1.0) * 100.0
        );
    }
    for p in [0.001, 0.01, 0.02] {
        let arg = format!("{}%", p * 100.0);
        let mean = p / (1.0 - 0.4 + p);
        let (e2e, r) = measure_loss(&["--loss", &arg, "--loss-after-loss", "40%"], 100_000, 25_000);
        println!(
            "| GE {arg}/40 % (mean {:.4} %) | {:.4} % (router {:.4} %) | {:+.1} % |",
            mean * 100.0,
            e2e * 100.0,
            r * 100.0,
            (e2e / mean - 1.0) * 100.0
        );
    }
    let (p50, p99, pps, _) = added_delay(100_000, 3, true, &[]);
    println!("| own added delay at {pps:.0} packets/s | p50 {p50:.1} us, p99 {p99:.1} us | |");
    rate_rows(
        "router",
        &[("56kbit", 56e3), ("1mbit", 1e6), ("100mbit", 100e6), ("1gbit", 1e9)],
    );
}

/// Rate rows of the accuracy table through `--shaper S`.
fn rate_rows(shaper: &str, rates: &[(&str, f64)]) {
    for &(rate, bits) in rates {
        let secs = if bits < 1e6 { 12 } else { 5 };
        let r = measure_rate(rate, secs, &["--shaper", shaper]);
        println!(
            "| rate {rate} ({shaper}) | {:.4} Mbit/s | {:+.2} % |",
            r / 1e6,
            (r / bits - 1.0) * 100.0
        );
    }
}

/// The limiter alone, without TCP: datagrams of 1,472 bytes (1,500 on the
/// wire) offered towards the client at 1.2× the rate for 3 s through
/// `--down-rate R`; the far end counts what arrives, and the rate is that
/// count's wire bytes over the time from the first datagram sent to the
/// last one's departure. Bulk TCP (the table above) measures what TCP makes
/// of the link on this machine as well as the limiter:
/// `cargo test --test integration wan::udp_rate_table -- --ignored --nocapture`.
#[test]
#[ignore]
fn udp_rate_table() {
    need_netns!();
    let rates: [(&str, f64, u64); 6] = [
        ("10mbit", 10e6, 150_000),
        ("100mbit", 100e6, 150_000),
        ("500mbit", 500e6, 150_000),
        ("1gbit", 1e9, 150_000),
        ("500mbit", 500e6, 2_000_000),
        ("1gbit", 1e9, 2_000_000),
    ];
    for (rate, bits, queue) in rates {
        let w = Wan::start_normal(&["--down-rate", rate, "--queue", &queue.to_string()]);
        let s = w.udp();
        let pps = (bits * 1.2 / 8.0 / 1500.0) as u64;
        let n = pps * 3;
        let payload = [7u8; 1472];
        let start = Instant::now();
        let offered = blast_payload(&s, n, pps, &payload);
        // The queue drains at the rate after the last send.
        let drain = (queue as f64 * 8.0 / bits).min(1.0);
        let elapsed = start.elapsed().as_secs_f64();
        std::thread::sleep(Duration::from_millis(300));
        let (got, st) = w.finish();
        let dir = towards_client(&st);
        let measured = got as f64 * 1500.0 * 8.0 / (elapsed + drain);
        println!(
            "| udp rate {rate}, queue {queue} B | offered {:.1} Mbit/s, delivered {:.2} Mbit/s | {:+.2} % | router: {} packets, {} queue drops |",
            offered * 1500.0 * 8.0 / 1e6,
            measured / 1e6,
            (measured / bits - 1.0) * 100.0,
            dir["packets"],
            dir["queue_drops"]
        );
    }
}

/// The accuracy table's rate rows alone (bulk TCP through the router's
/// limiter): `cargo test --test integration wan::router_rate_table -- --ignored --nocapture`.
#[test]
#[ignore]
fn router_rate_table() {
    need_netns!();
    rate_rows(
        "router",
        &[("56kbit", 56e3), ("1mbit", 1e6), ("100mbit", 100e6), ("1gbit", 1e9)],
    );
}

/// The rate rows with the kernel's HTB instead of the router's limiter:
/// `cargo test --test integration wan::kernel_shaper_table -- --ignored --nocapture`.
/// (56 kbit/s stalled past the 5 s read timeout until the shaped devices
/// got `gso_max_segs 1`: see crates/weft-wan/src/shaper.rs.)
#[test]
#[ignore]
fn kernel_shaper_table() {
    need_netns!();
    rate_rows(
        "kernel",
        &[("56kbit", 56e3), ("1mbit", 1e6), ("100mbit", 100e6), ("1gbit", 1e9)],
    );
}

/// The router's own added delay (p50, p99 in µs) while `pps` datagrams per
/// second cross it for `secs` seconds, and the rate reached; `even`: one
/// datagram every 1/pps (spin-paced, no catch-up bursts), else bursts of 50.
fn added_delay(pps: u64, secs: u64, even: bool, extra: &[&str]) -> (f64, f64, f64, f64) {
    let mut args = vec!["--delay", "1ms"];
    args.extend_from_slice(extra);
    let w = Wan::start(&args);
    let s = w.udp();
    let n = pps * secs;
    let rate = if even {
        blast_even(&s, n, pps)
    } else {
        realtime(|| blast(&s, n, pps))
    };
    let (_, st) = w.finish();
    let l = &st["lateness_us"];
    let per_write = st["write_ns"].as_f64().unwrap_or(0.0) / 1e3 / st["delivered"].as_f64().unwrap_or(1.0).max(1.0);
    eprintln!(
        "router: {} reads, {} sleeps, {} spins, lateness {}",
        st["reads"], st["sleeps"], st["spins"], st["lateness_us"]
    );
    (l["p50"].as_f64().unwrap(), l["p99"].as_f64().unwrap(), rate, per_write)
}

/// The emulator's own added delay at 10,000 and 100,000 packets/s (printed,
/// not asserted: speed is measured, never asserted): `cargo test --test integration
/// wan::added_delay_by_rate -- --ignored --nocapture`. Evenly spaced datagrams
/// measure the router; bursts of 50 at the sender's full speed add the
/// queueing of a burst behind the router's per-packet cost (a TUN write runs
/// the receiving host's stack). `WEFT_WAN_PPS` picks the rates (e.g.
/// `10000`), `WEFT_WAN_EXTRA` adds flags (e.g. `--spin 0`, `--realtime
/// off`, `--router-cpu 1 --mlock`).
#[test]
#[ignore]
fn added_delay_by_rate() {
    need_netns!();
    let extra = std::env::var("WEFT_WAN_EXTRA").unwrap_or_default();
    let extra: Vec<&str> = extra.split_whitespace().collect();
    let rates = std::env::var("WEFT_WAN_PPS").unwrap_or_else(|_| "10000,100000".into());
    for pps in rates.split(',').filter_map(|r| r.trim().parse::<u64>().ok()) {
        // Three seconds, and at least 100,000 packets for the tail.
        let secs = (100_000 / pps).max(3);
        for even in [true, false] {
            let (p50, p99, rate, w) = added_delay(pps, secs, even, &extra);
            let how = if even { "evenly spaced" } else { "bursts of 50" };
            println!(
                "own added delay at {rate:.0} packets/s ({how}, {secs} s): p50 {p50:.1} us, p99 {p99:.1} us; {w:.2} us per TUN write"
            );
        }
    }
}

/// Loss counted end to end at 001's and PolyMix-4's low rates (0.05 % and
/// 0.1 %, Bernoulli and two-state with 40 % after a loss) over
/// `WEFT_WAN_LOSS_PACKETS` datagrams each (default 2·10^6, about 50 s each at
/// 40,000/s): at 10^5 packets these rates give 50–170 losses, too few to
/// count within 5 %. `cargo test --test integration wan::loss_at_low_rates -- --ignored --nocapture`.
#[test]
#[ignore]
fn loss_at_low_rates() {
    need_netns!();
    let n: u64 = std::env::var("WEFT_WAN_LOSS_PACKETS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    for (first, after) in [(0.0005, None), (0.001, None), (0.0005, Some(0.4)), (0.001, Some(0.4))] {
        let loss = format!("{}%", first * 100.0);
        let mut args = vec!["--loss", loss.as_str()];
        let (mean, what) = match after {
            Some(a) => {
                args.extend(["--loss-after-loss", "40%"]);
                (first / (1.0 - a + first), format!("GE {loss} / 40 %"))
            }
            None => (first, format!("Bernoulli {loss}")),
        };
        let (e2e, router) = measure_loss(&args, n, 40_000);
        // One standard deviation of the count's relative error (binomial).
        let sigma = ((1.0 - mean) / (mean * n as f64)).sqrt();
        println!(
            "| {what} (mean {:.4} %) | {:.4} % end to end, router {:.4} % ({:.0} losses of {n}) | {:+.1} % (1σ {:.1} %) |",
            mean * 100.0,
            e2e * 100.0,
            router * 100.0,
            e2e * n as f64,
            (e2e / mean - 1.0) * 100.0,
            sigma * 100.0
        );
    }
}

/// Send `n` one-byte datagrams at `pps` on average, spinning until each is due;
/// a sender more than 50 µs behind (preempted) moves its schedule instead of
/// catching up in a burst. Returns the rate reached.
fn blast_even(s: &UdpSocket, n: u64, pps: u64) -> f64 {
    realtime(|| blast_even_now(s, n, pps))
}

/// Run `f` on a real-time thread (below the router's priority), so that a
/// loaded machine does not turn the sender's own preemptions into catch-up
/// bursts or gaps (normal priority where that is not allowed).
fn realtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let _ = weft_io::sys::tun::set_realtime(5);
            f()
        })
        .join()
        .unwrap()
    })
}

fn blast_even_now(s: &UdpSocket, n: u64, pps: u64) -> f64 {
    // 9 ms of sending at 10/9 the rate, then 1 ms of rest: a real-time
    // thread busy past 95 % of a second is stopped for 50 ms by the kernel's
    // RT throttling (and the router with it, were it on the same core).
    let gap = Duration::from_secs_f64(0.9 / pps as f64);
    let burst = (pps / 100).max(1) * 9 / 10;
    let start = Instant::now();
    let mut due = start;
    for i in 0..n {
        if i % burst == burst - 1 {
            due += Duration::from_millis(1);
        }
        let mut t = Instant::now();
        while t < due {
            std::hint::spin_loop();
            t = Instant::now();
        }
        if t - due > Duration::from_micros(50) {
            due = t;
        }
        let _ = s.send(b"c");
        due += gap;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// Send `n` datagrams of `payload` at about `pps` per second (paced every
/// 50); returns the rate reached.
fn blast_payload(s: &UdpSocket, n: u64, pps: u64, payload: &[u8]) -> f64 {
    let start = Instant::now();
    for i in 0..n {
        let _ = s.send(payload);
        if i % 50 == 49 {
            let due = Duration::from_secs_f64((i + 1) as f64 / pps as f64);
            if let Some(d) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(d);
            }
        }
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// Send `n` one-byte datagrams at about `pps` per second (paced every 50);
/// returns the rate reached.
fn blast(s: &UdpSocket, n: u64, pps: u64) -> f64 {
    blast_payload(s, n, pps, b"c")
}

/// `weft serve --send-buffer 64KiB`: the accepted connection's send buffer
/// is the kernel's doubled 128 KiB (`ss -m`'s `tb`), not the autotuned one.
#[test]
fn serve_send_buffer_reaches_accepted_connections() {
    need_tool!("ss", "-V", "`ss` (iproute2) is not installed");
    let site = site();
    let w = Weft::serve(&[path_str(&site.path), "--workers", "1", "--send-buffer", "64KiB"]);
    let c = w.connect();
    let tb = || {
        let out = Command::new("ss")
            .args([
                "-tmnH",
                "state",
                "established",
                "sport",
                "=",
                &format!(":{}", w.addr.port()),
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.split([',', '(', ')'])
            .find_map(|f| f.strip_prefix("tb").and_then(|v| v.parse::<u64>().ok()))
    };
    assert!(
        wait_until(Duration::from_secs(5), || tb().is_some()),
        "no established socket"
    );
    assert_eq!(tb(), Some(2 * 65536));
    drop(c);
    let out = Command::new(weft_bin())
        .args(["serve", "--send-buffer", "12", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--send-buffer"));
}

/// `weft wan --veth`: the command's namespace has a veth at MTU 1500 with
/// GSO, GRO and TSO off (real packet sizes), and the far namespace answers
/// over it.
#[test]
fn veth_pair_has_mtu_1500_and_offloads_off() {
    if let Some(why) = unavailable() {
        eprintln!("skipping: weft wan --veth needs root, network namespaces, ip and python3 ({why})");
        return;
    }
    if !weft_wan::veth::have_ethtool() {
        eprintln!("skipping: weft wan --veth turns offloads off with ethtool, which is not installed (apt-get install -y ethtool)");
        return;
    }
    let script = r#"for d in /sys/class/net/ww*; do n=${d##*/}; echo "mtu $(cat $d/mtu)"; ethtool -k $n | grep -E '^(generic-segmentation|generic-receive|tcp-segmentation)-offload:'; done"#;
    let start = starting();
    let out = Command::new(weft_bin())
        .args(["wan", "--veth", "--quiet", "--", "sh", "-c", script])
        .output()
        .unwrap();
    drop(start);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let mtus: Vec<&str> = text.lines().filter(|l| l.starts_with("mtu")).collect();
    assert!(!mtus.is_empty() && mtus.iter().all(|l| *l == "mtu 1500"), "{text}");
    let offloads: Vec<&str> = text.lines().filter(|l| l.contains("-offload:")).collect();
    assert_eq!(offloads.len(), 3, "{text}");
    assert!(offloads.iter().all(|l| l.contains(": off")), "{text}");
}
