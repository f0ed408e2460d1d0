//! `weft proxy --splice sockmap`: CONNECT tunnels and non-cacheable response
//! bodies of known length forwarded in the kernel by the BPF sk_skb programs
//! (crate weft-sockmap). Needs root (or CAP_BPF + CAP_NET_ADMIN) and a build
//! with clang; elsewhere each test says why it skips its sockmap assertions.

use crate::common;

use common::{counter, is_root, pattern, stop_stats, ReadErr, Reader, Weft};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

/// Why sockmap cannot run here, if it cannot.
fn unavailable(p: &Weft) -> Option<String> {
    let err = p.stderr();
    err.lines()
        .find(|l| l.contains("--splice sockmap unavailable"))
        .map(str::to_string)
}

/// An upstream that answers each connection in `mode`: "echo" streams back
/// as it reads; "after" reads to the client's end of stream, then sends it
/// all back (so the upstream → client direction runs after a half-close);
/// "first" greets before the client says anything (bytes waiting on the
/// upstream socket when the tunnel joins the map), then echoes; "close"
/// sends 1 MiB and closes at once, before the client's end of stream.
fn upstream(mode: &'static str) -> SocketAddr {
    common::tcp_server(move |mut s| {
        if mode == "first" {
            let _ = s.write_all(b"hello from upstream\n");
        }
        if mode == "close" {
            let _ = s.write_all(&pattern(MIB));
        } else if mode == "echo" || mode == "first" {
            let mut r = s.try_clone().unwrap();
            let _ = std::io::copy(&mut r, &mut s);
        } else {
            let mut all = Vec::new();
            let _ = s.read_to_end(&mut all);
            let _ = s.write_all(&all);
        }
        let _ = s.shutdown(Shutdown::Write);
    })
}

fn proxy(up: SocketAddr) -> Weft {
    proxy_with(up, &[])
}

fn proxy_with(up: SocketAddr, more: &[&str]) -> Weft {
    let port = up.port().to_string();
    sockmap_proxy(&[&["--connect-ports", &port][..], more].concat())
}

/// `weft proxy --splice sockmap` with one worker that prints its counters
/// at exit, and `more`.
fn sockmap_proxy(more: &[&str]) -> Weft {
    let mut args = vec![
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "1",
        "--splice",
        "sockmap",
        "--stats-on-exit",
    ];
    args.extend_from_slice(more);
    Weft::start(&args)
}

/// Open a tunnel to `up` and read the 200 head; returns the stream.
fn connect(p: &Weft, up: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(format!("CONNECT {up} HTTP/1.1\r\nHost: {up}\r\n\r\n").as_bytes())
        .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).unwrap(), 1, "proxy closed during the CONNECT answer");
        head.push(b[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head));
    s
}

/// Send `data`, half-close, read everything back.
fn round_trip(s: TcpStream, data: Vec<u8>) -> Vec<u8> {
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        w.write_all(&data).unwrap();
        w.shutdown(Shutdown::Write).unwrap();
    });
    let mut got = Vec::new();
    let mut s = s;
    s.read_to_end(&mut got).unwrap();
    writer.join().unwrap();
    got
}

/// Where `got` first differs from `want`, and where in `want` the bytes
/// found there come from (a stream in the wrong order shows a later offset;
/// a byte forwarded twice, an earlier one).
fn first_difference(got: &[u8], want: &[u8]) -> String {
    let Some(at) = got.iter().zip(want).position(|(a, b)| a != b) else {
        return format!("no difference in the first {} bytes", got.len().min(want.len()));
    };
    let probe = &got[at..(at + 64).min(got.len())];
    let from = want.windows(probe.len()).position(|w| w == probe);
    let run = from.map(|f| got[at..].iter().zip(&want[f..]).take_while(|(a, b)| a == b).count());
    format!("first difference at byte {at}: the bytes there are want's from {from:?}, for {run:?} bytes")
}

/// One tunnel per length in `lens`, all at once, each sending its pattern
/// to the echo upstream and checking every byte that comes back.
fn echo_tunnels(p: &Weft, up: SocketAddr, lens: &[usize]) {
    let failed = echo_tunnels_failed(p, up, lens);
    assert!(failed.is_empty(), "{failed:?}; weft said: {}", p.stderr());
}

/// [`echo_tunnels`], returning each tunnel's failure.
fn echo_tunnels_failed(p: &Weft, up: SocketAddr, lens: &[usize]) -> Vec<String> {
    let tunnels: Vec<_> = lens
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            let s = connect(p, up);
            std::thread::spawn(move || {
                let data = pattern(len);
                let got = round_trip(s, data.clone());
                assert_eq!(got.len(), data.len(), "tunnel {i}");
                assert!(
                    got == data,
                    "tunnel {i}: bytes differ: {}",
                    first_difference(&got, &data)
                );
            })
        })
        .collect();
    tunnels
        .into_iter()
        .enumerate()
        .filter_map(|(i, t)| t.join().err().map(|e| format!("tunnel {i}: {}", panic_text(&*e))))
        .collect()
}

/// A thread's panic message.
fn panic_text(e: &(dyn std::any::Any + Send)) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Run `f` against a sockmap proxy, or say why sockmap is unavailable here.
fn with_sockmap(mode: &'static str, f: impl FnOnce(&Weft, SocketAddr)) -> Option<String> {
    let up = upstream(mode);
    let p = proxy(up);
    f(&p, up);
    if let Some(why) = unavailable(&p) {
        eprintln!("SKIP sockmap assertions: {why}");
        let _ = stop_stats(p);
        return None;
    }
    Some(stop_stats(p))
}

/// 1 MiB each way, the upstream answering only after the client's
/// half-close: byte-exact, and carried by the sockmap program (each
/// half-close waits for its end-of-stream marker).
#[test]
fn tunnel_half_close_1mib() {
    let stats = with_sockmap("after", |p, up| {
        for i in 0..3 {
            let data = pattern(MIB + i * 4097);
            let got = round_trip(connect(p, up), data.clone());
            assert_eq!(got.len(), data.len(), "tunnel {i}");
            assert!(got == data, "tunnel {i}: bytes differ");
        }
    });
    let Some(stats) = stats else { return };
    assert_eq!(counter(&stats, "tunnels"), 3, "{stats}");
    assert_eq!(counter(&stats, "sockmap_sessions"), 3, "{stats}");
    // The checks of each direction against the program's count agreed.
    assert_eq!(counter(&stats, "sockmap_mismatches"), 0, "{stats}");
    // Bytes that came before the join were copied by weft.
    let bytes = counter(&stats, "sockmap_bytes") + counter(&stats, "tunnel_bytes_copied");
    let want: u64 = (0..3).map(|i| 2 * (MIB + i * 4097) as u64).sum();
    assert_eq!(bytes, want, "{stats}");
    // Event-driven: a few waits per tunnel, not one per chunk or a spin.
    assert!(counter(&stats, "epoll_wait") < 200, "{stats}");
    assert_eq!(counter(&stats, "tunnel_bytes_spliced"), 0, "{stats}");
}

/// Full duplex: an echoing upstream, several tunnels at once.
#[test]
fn tunnel_echo_concurrent() {
    let stats = with_sockmap("echo", |p, up| {
        echo_tunnels(p, up, &(0..4).map(|i| MIB + 13 * i).collect::<Vec<_>>());
    });
    let Some(stats) = stats else { return };
    assert_eq!(counter(&stats, "sockmap_sessions"), 4, "{stats}");
    assert_eq!(counter(&stats, "sockmap_mismatches"), 0, "{stats}");
    let want: u64 = (0..4).map(|i| 2 * (MIB + 13 * i) as u64).sum();
    let bytes = counter(&stats, "sockmap_bytes") + counter(&stats, "tunnel_bytes_copied");
    assert_eq!(bytes, want, "{stats}");
}

/// The upstream speaks first (its greeting waits on the upstream socket
/// while the tunnel joins); small and large transfers after it.
#[test]
fn tunnel_upstream_speaks_first() {
    let stats = with_sockmap("first", |p, up| {
        for (i, n) in [1usize, 100, MIB].into_iter().enumerate() {
            let data = pattern(n);
            let got = round_trip(connect(p, up), data.clone());
            let want = [b"hello from upstream\n".as_slice(), &data].concat();
            assert_eq!(got.len(), want.len(), "tunnel {i}");
            assert!(got == want, "tunnel {i}: bytes differ");
        }
    });
    let Some(stats) = stats else { return };
    // A client that sends and ends within microseconds of the 200 can be
    // in CLOSE_WAIT before the join, which the sockmap refuses: that
    // tunnel splices (still byte-exact).
    let (sessions, declined) = (counter(&stats, "sockmap_sessions"), counter(&stats, "sockmap_declined"));
    assert_eq!(sessions + declined, 3, "{stats}");
    assert!(sessions >= 1, "{stats}");
}

/// The upstream closes first (1 MiB then FIN) while the client still
/// sends; then a client that aborts (RST) mid-tunnel: the proxy closes
/// both sides and keeps serving.
#[test]
fn tunnel_upstream_closes_first_and_client_aborts() {
    let stats = with_sockmap("close", |p, up| {
        let mut s = connect(p, up);
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        assert!(got == pattern(MIB), "bytes differ");
        s.write_all(b"late").unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        drop(s);
        // Abort: read a little, then reset the connection.
        let s = connect(p, up);
        let mut b = [0u8; 1000];
        (&s).read_exact(&mut b).unwrap();
        weft_io::sys::set_linger_zero(s.as_raw_fd()).unwrap();
        drop(s);
        // Still serving.
        let mut s = connect(p, up);
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        assert_eq!(got.len(), MIB);
    });
    let Some(stats) = stats else { return };
    let (sessions, declined) = (counter(&stats, "sockmap_sessions"), counter(&stats, "sockmap_declined"));
    assert_eq!(sessions + declined, 3, "{stats}");
    assert_eq!(counter(&stats, "open_connections"), 0, "{stats}");
}

/// A client that stops reading while the upstream keeps sending: the
/// redirect budget holds the upstream back and weft waits for the client
/// to drain, but the client acknowledges nothing, so the tunnel is idle and
/// closed at `--tunnel-timeout`, as a spliced one is, and what the kernel
/// queued for it is freed. The upstream sends about 13 MB/s, for at most
/// 15 s.
#[test]
fn tunnel_stalled_client_is_closed_when_idle() {
    let (tx, rx) = std::sync::mpsc::channel();
    let up = common::tcp_server(move |mut s| {
        let (start, chunk) = (Instant::now(), vec![7u8; 64 * 1024]);
        let mut sent = 0usize;
        let ended = loop {
            if start.elapsed() > Duration::from_secs(15) {
                break None;
            }
            if s.write_all(&chunk).is_err() {
                break Some(start.elapsed());
            }
            sent += chunk.len();
            std::thread::sleep(Duration::from_millis(5));
        };
        let _ = tx.send((ended, sent));
    });
    let p = proxy_with(up, &["--tunnel-timeout", "1s"]);
    let client = connect(&p, up);
    let (ended, sent) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    drop(client);
    let joined = unavailable(&p).is_none();
    let stats = stop_stats(p);
    let ended = ended.unwrap_or_else(|| panic!("the tunnel outlived 15 s ({sent} bytes sent): {stats}"));
    // Two looks of the idle timer: the first finds the 200 acknowledged.
    assert!(ended < Duration::from_secs(8), "closed after {ended:?}: {stats}");
    assert!(counter(&stats, "timeouts") >= 1, "{stats}");
    if joined {
        assert_eq!(counter(&stats, "sockmap_sessions"), 1, "{stats}");
        // Closed while the upstream still sent: the pair left with records
        // of skbs a verdict may still have been passing up; none stay.
        assert_eq!(counter(&stats, "sockmap_stamp_records"), 0, "{stats}");
    } else {
        eprintln!("SKIP sockmap assertions: the tunnel spliced");
    }
}

/// Transfers several redirect budgets long (4 MiB each, tunnel/kernel.rs),
/// both ways at once: each direction's budget is raised as its destination
/// keeps up, or taken over by weft and handed back to the kernel when it
/// does not; byte-exact, and the counts agree.
#[test]
fn tunnel_long_transfers_past_the_budget() {
    const LEN: usize = 13 * MIB + 5;
    let mut failed = Vec::new();
    let stats = with_sockmap("echo", |p, up| failed = echo_tunnels_failed(p, up, &[LEN, LEN + 1]));
    let Some(stats) = stats else { return };
    assert_eq!(counter(&stats, "sockmap_sessions"), 2, "{stats}");
    // Every record of a passed skb was read, or freed as its pair left.
    assert_eq!(counter(&stats, "sockmap_stamp_records"), 0, "{stats}");
    if counter(&stats, "sockmap_mismatches") > 0 {
        // The kernel handed bytes over twice (docs/proxy.md, "A kernel that
        // forwards a byte twice"; takeovers meet it about once in 400 runs
        // of this test): caught, that tunnel must end with a reset, never
        // with a stream that looks whole.
        eprintln!("the double-forwarding fault was caught: {failed:?}");
        assert!(
            !failed.is_empty() && failed.iter().all(|f| f.contains("reset")),
            "{failed:?}: {stats}"
        );
        return;
    }
    assert!(failed.is_empty(), "{failed:?}: {stats}");
    let want: u64 = (0..2).map(|i| 2 * (LEN + i) as u64).sum();
    let bytes = counter(&stats, "sockmap_bytes") + counter(&stats, "tunnel_bytes_copied");
    assert_eq!(bytes, want, "{stats}");
    // How they split between the kernel and weft depends on how the
    // threads here keep up (docs/proxy.md has measured figures).
    assert!(counter(&stats, "sockmap_bytes") > 0, "{stats}");
    assert_eq!(counter(&stats, "sockmap_unplaced"), 0, "{stats}");
    let reordered = counter(&stats, "sockmap_reordered");
    if reordered > 0 {
        // The kernel's race (docs/proxy.md): put right by the stamps.
        eprintln!("sockmap_reordered {reordered}");
    }
}

/// A client that stops reading while the upstream sends as fast as it can:
/// the upstream is held back within a few buffers (the redirect budget,
/// the sockets' buffers), not let to fill kernel memory; once the client
/// reads, every byte arrives in order.
#[test]
fn tunnel_stalled_client_bounds_the_upstream() {
    stalled_client(&[], 64 * MIB);
}

/// The same under the other backends that carry sockmap tunnels: the
/// takeover reads and writes under their own interest rules (level- and
/// edge-triggered, one-shot, completion-based).
#[test]
fn tunnel_stalled_client_every_backend() {
    for event in ["epoll-et", "epoll-once", "poll", "uring"] {
        stalled_client(&["--event", event], 48 * MIB);
    }
}

/// An upstream that sends `len` bytes as fast as it can to a client that
/// half-closes once the tunnel has joined and then reads nothing until the
/// upstream is held back; then it reads everything. `len` well above the
/// 40 MiB the test allows the upstream to write while held back (a bounded
/// tunnel held it at 8–19 MiB here).
fn stalled_client(more: &[&str], len: usize) {
    let written = Arc::new(AtomicUsize::new(0));
    let counted = written.clone();
    let up = common::tcp_server(move |mut s| {
        let data = pattern(len);
        for chunk in data.chunks(64 * 1024) {
            if s.write_all(chunk).is_err() {
                return;
            }
            counted.fetch_add(chunk.len(), Ordering::SeqCst);
        }
        let _ = s.shutdown(Shutdown::Write);
    });
    let p = proxy_with(up, more);
    let mut s = connect(&p, up);
    // The client's end of stream, once the tunnel has joined (a FIN before
    // the join makes it splice): the other direction goes on, bounded.
    std::thread::sleep(Duration::from_millis(100));
    s.shutdown(Shutdown::Write).unwrap();
    // The upstream writes until something holds it back: no progress for
    // 300 ms (one quiet 100 ms can be a busy host's scheduling).
    let (mut last, mut quiet) = (0, 0);
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(100));
        let now = written.load(Ordering::SeqCst);
        quiet = if now == last && now > 0 { quiet + 1 } else { 0 };
        if quiet == 3 {
            break;
        }
        last = now;
    }
    let held_back = written.load(Ordering::SeqCst);
    let mut got = Vec::with_capacity(len);
    let read = s.read_to_end(&mut got);
    let why = unavailable(&p);
    let said: Vec<String> = p
        .stderr()
        .lines()
        .filter(|l| l.contains("--splice sockmap:"))
        .map(str::to_string)
        .collect();
    let stats = stop_stats(p);
    let want = pattern(len);
    assert_eq!(counter(&stats, "sockmap_stamp_records"), 0, "{more:?}: {stats}");
    if counter(&stats, "sockmap_mismatches") > 0 {
        // The kernel handed bytes over twice (docs/proxy.md, "A kernel that
        // forwards a byte twice"; the takeover's reads meet it more often):
        // caught, the client must see a reset, never a clean end.
        eprintln!("{more:?}: the double-forwarding fault was caught: {said:?}");
        assert!(read.is_err(), "{more:?}: a caught fault ended cleanly: {stats}");
        return;
    }
    assert!(
        read.is_ok() && got == want,
        "{more:?}: {read:?}, got {} bytes, {} {said:?}: {stats}",
        got.len(),
        first_difference(&got, &want)
    );
    if let Some(why) = why {
        eprintln!("SKIP sockmap assertions: {why}");
        return;
    }
    // Unbounded, the upstream wrote all of it within a second (the psock
    // queue is charged to no socket); bounded, the budget and the sockets'
    // buffers (a few MiB each) hold it.
    assert!(
        held_back < 40 * MIB,
        "{more:?}: upstream wrote {held_back} bytes to a stalled client"
    );
    assert_eq!(counter(&stats, "sockmap_sessions"), 1, "{more:?}: {stats}");
    assert!(counter(&stats, "sockmap_takeovers") >= 1, "{more:?}: {stats}");
    let bytes = counter(&stats, "sockmap_bytes") + counter(&stats, "tunnel_bytes_copied");
    assert_eq!(bytes, len as u64, "{more:?}: {stats}");
}

/// A tunnel that keeps moving bytes (in the kernel, unseen by weft) for
/// longer than --idle-timeout stays open; one that goes quiet is closed.
#[test]
fn tunnel_idle_timeout_counts_kernel_bytes() {
    let up = upstream("echo");
    // 2 s, five times the gap between rounds: a loaded test host (the
    // stalled-client tests copy tens of MiB beside it) must not make a
    // round late enough to look idle.
    let p = proxy_with(up, &["--idle-timeout", "2s"]);
    let mut s = connect(&p, up);
    let mut b = [0u8; 100];
    for i in 0..8 {
        s.write_all(&pattern(100)).unwrap();
        s.read_exact(&mut b).unwrap();
        assert!(b[..] == pattern(100)[..], "round {i}");
        std::thread::sleep(Duration::from_millis(400));
    }
    if let Some(why) = unavailable(&p) {
        eprintln!("SKIP sockmap assertions: {why}");
        return;
    }
    // Quiet now: closed within a few idle periods.
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut rest = Vec::new();
    assert!(matches!(s.read_to_end(&mut rest), Ok(0)), "tunnel not closed when idle");
}

/// Without the privilege to load BPF (here: root dropped to `nobody` after
/// binding), weft says so once and splices; the tunnels stay byte-exact.
#[test]
fn without_bpf_privilege_tunnels_splice() {
    if !is_root() {
        eprintln!("SKIP: needs root to start and drop to nobody");
        return;
    }
    let up = upstream("after");
    let p = proxy_with(up, &["--user", "nobody"]);
    for i in 0..3 {
        let data = pattern(MIB + i);
        let got = round_trip(connect(&p, up), data.clone());
        assert!(got == data, "tunnel {i}: bytes differ");
    }
    let said = p.stderr().matches("--splice sockmap unavailable").count();
    let stats = stop_stats(p);
    assert_eq!(said, 1, "said once per process");
    assert_eq!(counter(&stats, "sockmap_sessions"), 0, "{stats}");
    assert_eq!(counter(&stats, "sockmap_declined"), 3, "{stats}");
}

/// Every event backend: those that report an error on a socket without
/// interest carry the tunnel in the kernel; select and the user-level
/// trackers say why not and splice. Byte-exact either way.
#[test]
fn tunnel_half_close_every_backend() {
    let up = upstream("after");
    for (event, kernel) in [
        ("epoll-et", true),
        ("epoll-once", true),
        ("poll", true),
        ("uring", true),
        ("select", false),
        ("tracked", false),
    ] {
        let p = proxy_with(up, &["--event", event]);
        let data = pattern(MIB + 7);
        let got = round_trip(connect(&p, up), data.clone());
        assert!(got == data, "{event}: bytes differ");
        let why = unavailable(&p);
        let stats = stop_stats(p);
        if why.is_some() {
            continue;
        }
        let sessions = counter(&stats, "sockmap_sessions") + counter(&stats, "sockmap_declined");
        assert_eq!(sessions, u64::from(kernel), "{event}: {stats}");
    }
}

// ---------------------------------------------------------------------------
// Response bodies (a non-cacheable response of known length) in the kernel.

/// A keep-alive HTTP/1.1 upstream for the body tests. Every answer is
/// `Cache-Control: no-store` with a Content-Length: `/body/N` sends N pattern
/// bytes; `/cut/N/M` announces N, sends M and closes; `/extra/N` announces
/// N and sends N + 7 (bytes past its length). Counts its connections.
struct BodyUpstream {
    addr: SocketAddr,
    conns: Arc<AtomicUsize>,
}

impl BodyUpstream {
    fn start() -> BodyUpstream {
        let conns = Arc::new(AtomicUsize::new(0));
        let counted = conns.clone();
        let addr = common::tcp_server(move |s| {
            counted.fetch_add(1, Ordering::SeqCst);
            serve_bodies(s);
        });
        BodyUpstream { addr, conns }
    }

    fn conns(&self) -> usize {
        self.conns.load(Ordering::SeqCst)
    }
}

fn serve_bodies(s: TcpStream) {
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h == "\r\n" {
                break;
            }
        }
        let n: Vec<usize> = path.split('/').filter_map(|x| x.parse().ok()).collect();
        let (announced, sent, close) = match (path.split('/').nth(1), n.as_slice()) {
            (Some("body"), [len]) => (*len, *len, false),
            (Some("cut"), [len, sent]) => (*len, *sent, true),
            (Some("extra"), [len]) => (*len, *len + 7, false),
            _ => (0, 0, true),
        };
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {announced}\r\nCache-Control: no-store\r\n\r\n");
        let mut body = pattern(announced);
        body.resize(sent, b'!');
        // The head and a little body first, the rest a moment later (as
        // over a network): the proxy joins the sockmap while most of the
        // body is still to come (what is waiting at the join is spliced).
        let first = body.len().min(8192);
        let sent_all = w
            .write_all(head.as_bytes())
            .and_then(|_| w.write_all(&body[..first]))
            .and_then(|_| {
                std::thread::sleep(Duration::from_millis(if first < body.len() { 40 } else { 0 }));
                w.write_all(&body[first..])
            });
        if sent_all.is_err() || close {
            return;
        }
    }
}

/// A reverse proxy in front of `up` with `--splice sockmap`, and `more`.
fn body_proxy(up: &BodyUpstream, more: &[&str]) -> Weft {
    let upstream = up.addr.to_string();
    sockmap_proxy(&[&["--upstream", &upstream][..], more].concat())
}

/// The counters at exit, or None (said) where sockmap bodies cannot run.
fn body_stats(p: Weft) -> Option<String> {
    let err = p.stderr();
    let why = err
        .lines()
        .find(|l| l.contains("--splice sockmap unavailable") || l.contains("cannot carry response bodies"));
    if let Some(why) = why {
        eprintln!("SKIP sockmap body assertions: {why}");
        let _ = stop_stats(p);
        return None;
    }
    Some(stop_stats(p))
}

/// One 100 KB body first, on the connection the test goes on with: the
/// worker loads the BPF programs at its first sockmap body, meanwhile the
/// upstream sends all of it, and that body is spliced (what waits at the
/// join is); the bodies a test counts come after. (On another client
/// connection the next request could reach the proxy before the marker of
/// this one, whose client has every byte by then, and take a second
/// upstream connection.)
fn warm_up(r: &mut Reader) {
    body_exact(r, 100_000, "warm-up body");
}

/// The body upstream, a sockmap proxy in front of it (with `more`), and a
/// client connection to the proxy.
fn body_setup(more: &[&str]) -> (BodyUpstream, Weft, Reader) {
    let up = BodyUpstream::start();
    let p = body_proxy(&up, more);
    let r = reader(&p);
    (up, p, r)
}

fn reader(p: &Weft) -> Reader {
    let s = p.connect();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    Reader::new(s)
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: bodies\r\n\r\n").into_bytes()
}

/// `GET /body/N` on `r`: the N pattern bytes, exactly (`what` names it in a failure).
fn body_exact(r: &mut Reader, n: usize, what: &str) {
    r.send(&get(&format!("/body/{n}")));
    let body = r.response(false).body;
    assert!(
        body.len() == n && body == pattern(n),
        "{what}: {n} bytes asked, {} differ",
        body.len()
    );
}

/// Bodies of several sizes, byte-exact, pipelined on one client connection
/// (a small one copied between them), then again one by one: the large ones
/// carried by the sockmap program (one whose bytes have all arrived before
/// the join, on a loaded machine, is spliced to its end), the client going
/// on with its next request after each, the one upstream connection back in
/// the pool.
#[test]
fn bodies_byte_exact_pipelined_upstream_reused() {
    let (up, p, mut r) = body_setup(&[]);
    warm_up(&mut r);
    let sizes = [30_000usize, 100, 100_000, (1 << 20) + 3, 4 << 20, 5000];
    let batch: Vec<u8> = sizes.iter().flat_map(|n| get(&format!("/body/{n}"))).collect();
    r.send(&batch);
    for n in sizes {
        let resp = r.response(false);
        assert_eq!(resp.status, 200, "{n}");
        assert_eq!(resp.body.len(), n, "{n}: length");
        assert!(resp.body == pattern(n), "{n}: bytes differ");
    }
    for n in [300_000usize, 40_000, 2 << 20] {
        body_exact(&mut r, n, "one by one");
    }
    drop(r);
    let Some(stats) = body_stats(p) else { return };
    // The warm-up and seven large ones; the 100 and 5000 bytes copied.
    let kernel_bodies = counter(&stats, "sockmap_bodies");
    assert_eq!(kernel_bodies + counter(&stats, "sessions_splice"), 8, "{stats}");
    assert!(kernel_bodies >= 4, "{stats}");
    assert_eq!(counter(&stats, "sockmap_declined"), 0, "{stats}");
    assert_eq!(counter(&stats, "sockmap_mismatches"), 0, "{stats}");
    assert_eq!(counter(&stats, "upstream_connects"), 1, "{stats}");
    assert_eq!(up.conns(), 1, "one upstream connection for every request");
    let big: u64 = [
        100_000u64,
        30_000,
        100_000,
        (1 << 20) + 3,
        4 << 20,
        300_000,
        40_000,
        2 << 20,
    ]
    .iter()
    .sum();
    let kernel = counter(&stats, "sockmap_body_bytes");
    // The bytes that came with each head were copied, those already waiting
    // at the join spliced; most went through the kernel.
    let before = counter(&stats, "bytes_spliced") + counter(&stats, "bytes_copied") - 100 - 5000;
    assert_eq!(kernel + before, big, "{stats}");
    assert!(kernel > big / 2, "{kernel} of {big}: {stats}");
    // Event-driven: a handful of wake-ups per body, not one per chunk.
    assert!(counter(&stats, "epoll_wait") < 200, "{stats}");
}

/// A client that resets its connection in the middle of a body: the
/// transfer ends, that upstream connection is closed (its body was not
/// drained), and the proxy goes on serving, byte-exact.
#[test]
fn body_client_aborts_mid_body() {
    let (up, p, mut r) = body_setup(&[]);
    // A small receive window, so that the body is still on its way when
    // the client resets: the proxy's socket to a client that reads at once
    // would take in the whole 6 MB (its unsent bytes are not bounded while
    // the kernel forwards, docs/proxy.md) before the reset.
    weft_io::sys::set_rcvbuf(&r.stream, 32 * 1024).unwrap();
    warm_up(&mut r);
    r.send(&get("/body/6000000"));
    while r.buf.len() < 200_000 {
        assert!(r.fill() > 0, "the body stopped early");
    }
    weft_io::sys::set_linger_zero(r.stream.as_raw_fd()).unwrap();
    drop(r);
    std::thread::sleep(Duration::from_millis(100));
    let mut r = reader(&p);
    body_exact(&mut r, 100_000, "served after the abort");
    drop(r);
    let Some(stats) = body_stats(p) else { return };
    assert_eq!(counter(&stats, "sessions_client_abort"), 1, "{stats}");
    assert!(counter(&stats, "sockmap_bodies") <= 2, "not the aborted one: {stats}");
    assert_eq!(counter(&stats, "open_connections"), 0, "{stats}");
    assert_eq!(up.conns(), 2, "the aborted body's upstream connection is not reused");
}

/// An upstream that closes in the middle of a body: the client's response
/// is cut (the connection closes before the announced length), never
/// relayed as complete; the proxy goes on serving.
#[test]
fn body_upstream_closes_mid_body() {
    let up = BodyUpstream::start();
    let p = body_proxy(&up, &[]);
    for (len, sent) in [(1_000_000, 300_000), (200_000, 100_000)] {
        let mut r = reader(&p);
        r.send(&get(&format!("/cut/{len}/{sent}")));
        match r.response_any(false) {
            Err(ReadErr::Truncated) => {}
            Ok(resp) => panic!("a cut body was relayed as complete ({} bytes)", resp.body.len()),
        }
    }
    let mut r = reader(&p);
    body_exact(&mut r, 100_000, "served after the cut");
    drop(r);
    let Some(stats) = body_stats(p) else { return };
    assert_eq!(counter(&stats, "sessions_upstream_abort"), 2, "{stats}");
    assert_eq!(counter(&stats, "open_connections"), 0, "{stats}");
}

/// An upstream that sends bytes past its Content-Length: the body the
/// client gets is exact, and that connection is not pooled (the next
/// request gets a fresh one and its own bytes).
#[test]
fn body_upstream_sends_past_its_length() {
    let (up, p, mut r) = body_setup(&[]);
    r.send(&get("/extra/100000"));
    assert!(r.response(false).body == pattern(100_000), "the announced body");
    std::thread::sleep(Duration::from_millis(50));
    r.send(&get("/body/50000"));
    assert!(
        r.response(false).body == pattern(50_000),
        "the next response is its own"
    );
    drop(r);
    let Some(stats) = body_stats(p) else { return };
    assert_eq!(up.conns(), 2, "the connection that overran its length was closed");
    // The excess is counted as seen by the program: no false alarm.
    assert_eq!(counter(&stats, "sockmap_mismatches"), 0, "{stats}");
}

/// A body in the kernel never wakes weft, so the send timeout looks at the
/// bytes the client acknowledged: a client that reads slowly for longer
/// than the timeout gets its whole body; one that stops reading is closed.
#[test]
fn body_slow_client_and_stalled_client() {
    let (_up, p, mut r) = body_setup(&["--send-timeout", "1s"]);
    warm_up(&mut r);
    let n = 3 << 20;
    r.send(&get(&format!("/body/{n}")));
    let t0 = Instant::now();
    let mut s = r.stream.try_clone().unwrap();
    let mut got = Vec::new();
    let mut chunk = vec![0u8; 48 * 1024];
    loop {
        let k = s.read(&mut chunk).unwrap();
        assert!(k > 0, "closed after {} bytes ({:?})", got.len(), t0.elapsed());
        got.extend_from_slice(&chunk[..k]);
        let head = got.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
        if head.is_some_and(|h| got.len() - h >= n) {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let h = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(got[h..] == pattern(n), "slow client: bytes differ");
    assert!(
        t0.elapsed() > Duration::from_millis(1200),
        "the read outlasted the send timeout"
    );
    // Stalled: the head, then nothing read for three seconds. The proxy
    // closes it (its FIN waits behind the bytes in flight): reading again,
    // the client gets those and the end of the connection, not the body.
    let mut stalled = reader(&p);
    let big = 50_000_000;
    stalled.send(&get(&format!("/body/{big}")));
    stalled.fill();
    std::thread::sleep(Duration::from_secs(3));
    let mut rest = Vec::new();
    let end = stalled.stream.read_to_end(&mut rest);
    assert!(end.is_ok(), "a stalled client is closed by the send timeout: {end:?}");
    assert!(rest.len() + stalled.buf.len() < big, "closed before the whole body");
    // Still serving (and the timed-out body's entries were taken back).
    let mut r = reader(&p);
    body_exact(&mut r, 100_000, "served after the stall");
    drop((r, stalled));
    let Some(stats) = body_stats(p) else { return };
    assert!(counter(&stats, "sockmap_bodies") >= 1, "{stats}");
    assert_eq!(counter(&stats, "timeouts"), 1, "{stats}");
}

/// Every event backend: those that report an error on a socket without
/// interest carry bodies in the kernel; select and the user-level trackers
/// say why not and splice. Byte-exact either way.
#[test]
fn bodies_every_backend() {
    let up = BodyUpstream::start();
    for (event, kernel) in [
        ("epoll", true),
        ("epoll-et", true),
        ("poll", true),
        ("uring", true),
        ("select", false),
        ("tracked", false),
    ] {
        let p = body_proxy(&up, &["--event", event]);
        let mut r = reader(&p);
        warm_up(&mut r);
        for n in [(1 << 20) + 11, 64 * 1024] {
            eprintln!("{event}: a body of {n} bytes");
            body_exact(&mut r, n, event);
        }
        drop(r);
        let Some(stats) = body_stats(p) else { continue };
        let bodies = counter(&stats, "sockmap_bodies");
        assert!(if kernel { bodies >= 1 } else { bodies == 0 }, "{event}: {stats}");
        assert_eq!(counter(&stats, "upstream_connects"), 1, "{event}: {stats}");
    }
}

/// Without the privilege to load BPF, bodies splice as tunnels do: said
/// once, byte-exact, counted as declined.
#[test]
fn without_bpf_privilege_bodies_splice() {
    if !is_root() {
        eprintln!("SKIP: needs root to start and drop to nobody");
        return;
    }
    let (_up, p, mut r) = body_setup(&["--user", "nobody"]);
    for n in [100_000usize, (1 << 20) + 1] {
        body_exact(&mut r, n, "sequential");
    }
    drop(r);
    let said = p.stderr().matches("--splice sockmap unavailable").count();
    let stats = stop_stats(p);
    assert_eq!(said, 1, "said once per process");
    assert_eq!(counter(&stats, "sockmap_bodies"), 0, "{stats}");
    assert_eq!(counter(&stats, "sockmap_declined"), 2, "{stats}");
    assert_eq!(counter(&stats, "sessions_splice"), 2, "{stats}");
}

/// Only bodies up to 8 MiB go to the kernel (a client that stops reading
/// pins its whole body there): a larger one splices, one below the limit
/// does not, both byte-exact on one connection.
#[test]
fn body_above_the_kernel_limit_splices() {
    let (_up, p, mut r) = body_setup(&[]);
    warm_up(&mut r);
    for n in [16 << 20, 6 << 20] {
        body_exact(&mut r, n, "sequential");
    }
    drop(r);
    let Some(stats) = body_stats(p) else { return };
    // The large one spliced (and the warm-up, or a body all there at the join).
    let (spliced, kernel) = (counter(&stats, "sessions_splice"), counter(&stats, "sockmap_bodies"));
    assert!(spliced >= 1 && spliced + kernel == 3, "{stats}");
    assert!(counter(&stats, "sockmap_body_bytes") < 7 << 20, "{stats}");
    assert!(counter(&stats, "bytes_spliced") > 15 << 20, "{stats}");
}
