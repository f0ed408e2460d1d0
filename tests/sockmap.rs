//! `weft proxy --splice sockmap`: CONNECT tunnels forwarded in the kernel by
//! the BPF sk_skb verdict program (crate weft-sockmap). Needs root (or
//! CAP_BPF + CAP_NET_ADMIN) and a build with clang; elsewhere each test says
//! why it skips.

mod common;

use common::{counter, pattern, stop_stats, Weft};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

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
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
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
            });
        }
    });
    a
}

fn proxy(up: SocketAddr) -> Weft {
    proxy_with(up, &[])
}

fn proxy_with(up: SocketAddr, more: &[&str]) -> Weft {
    let port = up.port().to_string();
    let mut args = vec![
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "1",
        "--splice",
        "sockmap",
        "--connect-ports",
        &port,
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
        let tunnels: Vec<_> = (0..4)
            .map(|i| {
                let s = connect(p, up);
                std::thread::spawn(move || {
                    let data = pattern(MIB + 13 * i);
                    let got = round_trip(s, data.clone());
                    assert!(got == data, "tunnel {i}: bytes differ");
                })
            })
            .collect();
        for t in tunnels {
            t.join().unwrap();
        }
    });
    let Some(stats) = stats else { return };
    assert_eq!(counter(&stats, "sockmap_sessions"), 4, "{stats}");
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

/// A tunnel that keeps moving bytes (in the kernel, unseen by weft) for
/// longer than --idle-timeout stays open; one that goes quiet is closed.
#[test]
fn tunnel_idle_timeout_counts_kernel_bytes() {
    let up = upstream("echo");
    let p = proxy_with(up, &["--idle-timeout", "1s"]);
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
    if !nix_is_root() {
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

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
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
