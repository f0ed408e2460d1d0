//! Integration tests of `weft front` in relay mode: the real binary in front
//! of several `weft serve` back-ends, each serving its own version of every
//! file (so which back-end answered is visible in the body), and of a test
//! back-end that holds requests (to fill the admission limit S).

use crate::common;

use common::{
    fetch, front_args, get_on, get_target, pattern, per_backend, target_body, tcp_server, wait_until, who, Reader,
    TempDir, Weft,
};
use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// Bytes of the large file every back-end serves identically.
const BIG: usize = 300_000;
/// Targets `/t0.txt`..: each back-end answers `backend B target K`.
const TARGETS: usize = 12;

/// A back-end: `weft serve` over a root where every target names it.
fn backend(i: usize) -> (Weft, TempDir) {
    let d = TempDir::new("front-backend");
    for k in 0..TARGETS {
        d.write(&format!("t{k}.txt"), &target_body(i, k));
    }
    d.write("big.bin", &pattern(BIG));
    d.write("health", b"ok\n");
    let root = d.path.to_str().unwrap().to_string();
    let w = Weft::serve(&[&root, "--workers", "1"]);
    (w, d)
}

/// A front-end over `backends` ([`front_args`]).
fn front(event: &str, backends: &[SocketAddr], extra: &[&str]) -> Weft {
    let backends: Vec<String> = backends.iter().map(SocketAddr::to_string).collect();
    let mut args = front_args(event);
    for b in &backends {
        args.extend(["--backend", b]);
    }
    args.extend_from_slice(extra);
    Weft::start(&args)
}

// ---------------------------------------------------------------------------
// A back-end that holds every request until told to answer.

struct Holding {
    addr: SocketAddr,
    /// Requests received (health checks excluded).
    seen: Arc<AtomicUsize>,
    release: mpsc::Sender<()>,
}

fn holding_backend() -> Holding {
    let seen = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::channel::<()>();
    let gate = Mutex::new(rx);
    let counter = seen.clone();
    let addr = tcp_server(move |mut s| {
        let mut buf = Vec::new();
        let mut tmp = [0u8; 4096];
        loop {
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut tmp) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&tmp[..n]),
                }
            }
            let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            let health = buf.starts_with(b"GET /health ");
            buf.drain(..end);
            if !health {
                counter.fetch_add(1, Ordering::SeqCst);
                // Wait for one release per request.
                let _ = gate.lock().unwrap().recv();
            }
            if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
                .is_err()
            {
                return;
            }
        }
    });
    Holding {
        addr,
        seen,
        release: tx,
    }
}

/// A back-end that reads a request head and closes without answering.
fn dropping_backend() -> SocketAddr {
    tcp_server(|mut s| {
        let mut tmp = [0u8; 4096];
        let _ = s.read(&mut tmp);
    })
}

mod scenarios {
    use super::*;

    /// Byte-exact relays, and LARD's placement: a target always goes to the
    /// same back-end (on one persistent connection and across connections),
    /// while different targets on one connection are spread.
    pub fn places_by_target_and_relays_exactly(event: &str) {
        let bs: Vec<(Weft, TempDir)> = (0..3).map(backend).collect();
        let addrs: Vec<SocketAddr> = bs.iter().map(|b| b.0.addr).collect();
        let f = front(event, &addrs, &["--policy", "lard", "--health-path", "/health"]);
        let admin = f.admin.expect("admin address").to_string();
        let mut owner: [Option<usize>; TARGETS] = [None; TARGETS];
        let mut used = HashSet::new();
        for round in 0..3 {
            let mut r = Reader::new(f.connect());
            for (k, owner) in owner.iter_mut().enumerate() {
                used.insert(get_target(&mut r, k, owner, round));
            }
            let big = get_on(&mut r, "/big.bin");
            assert_eq!(big.status, 200);
            assert!(big.body == pattern(BIG), "big body differs (round {round})");
        }
        assert!(used.len() >= 2, "targets on one connection all went to {used:?}");
        let stats = fetch(&admin, "/stats");
        assert!(stats.contains("\"policy\":\"lard\""), "{stats}");
        assert!(stats.contains("\"target_map\":13"), "{stats}");
        let metrics = fetch(&admin, "/metrics");
        assert!(metrics.contains("weft_front_backend_requests_total"), "{metrics}");
    }

    /// A back-end killed mid-run: requests in flight get 502 or are retried
    /// elsewhere, then every request is answered by the others, and the dead
    /// one is marked down.
    pub fn backend_killed_mid_run(event: &str) {
        let mut bs: Vec<(Weft, TempDir)> = (0..3).map(backend).collect();
        let addrs: Vec<SocketAddr> = bs.iter().map(|b| b.0.addr).collect();
        let f = front(
            event,
            &addrs,
            &[
                "--policy",
                "lard",
                "--health-interval",
                "100ms",
                "--health-path",
                "/health",
            ],
        );
        let admin = f.admin.expect("admin address").to_string();
        // Find a target owned by back-end 0.
        let mut r = Reader::new(f.connect());
        let victim_target = (0..TARGETS)
            .find(|k| who(&get_on(&mut r, &format!("/t{k}.txt")).body) == 0)
            .expect("back-end 0 owns a target");
        // Clients keep asking while back-end 0 dies.
        let front_addr = f.addr;
        let stop = Arc::new(AtomicUsize::new(0));
        let mut clients = Vec::new();
        for c in 0..4 {
            let stop = stop.clone();
            clients.push(std::thread::spawn(move || {
                let mut statuses = Vec::new();
                while stop.load(Ordering::SeqCst) == 0 {
                    let Ok(s) = TcpStream::connect(front_addr) else {
                        continue;
                    };
                    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    let mut r = Reader::new(s);
                    for k in 0..TARGETS {
                        let k = (k + c) % TARGETS;
                        let req = format!("GET /t{k}.txt HTTP/1.1\r\nHost: cluster\r\n\r\n");
                        if r.stream.write_all(req.as_bytes()).is_err() {
                            break;
                        }
                        let resp = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| r.response(false)));
                        match resp {
                            Ok(resp) => {
                                statuses.push(resp.status);
                                if resp.status != 200 {
                                    break;
                                }
                            }
                            Err(_) => break, // closed mid-response: the front-end never fakes a short body
                        }
                    }
                }
                statuses
            }));
        }
        std::thread::sleep(Duration::from_millis(200));
        bs[0].0.kill_keeping_port();
        std::thread::sleep(Duration::from_millis(300));
        stop.store(1, Ordering::SeqCst);
        for c in clients {
            let statuses = c.join().unwrap();
            assert!(
                statuses.iter().all(|&s| s == 200 || s == 502),
                "only 200 or 502 while a back-end dies: {statuses:?}"
            );
        }
        // The victim's target now comes from a live back-end, every time.
        for _ in 0..5 {
            let mut r = Reader::new(f.connect());
            let resp = get_on(&mut r, &format!("/t{victim_target}.txt"));
            assert_eq!(resp.status, 200);
            assert_ne!(who(&resp.body), 0);
        }
        let stats = fetch(&admin, "/stats");
        assert!(
            stats.contains(&format!("\"addr\":\"{}\",\"state\":\"down\"", addrs[0])),
            "{stats}"
        );
    }

    /// With S = 1 (one back-end, T_low = T_high = 1) and a queue of 1: the
    /// first request is in flight, the second waits in order, the third gets
    /// 503; releasing the first lets the second through.
    pub fn queued_at_s_and_503_beyond(event: &str) {
        let h = holding_backend();
        let f = front(
            event,
            &[h.addr],
            &[
                "--t-low",
                "1",
                "--t-high",
                "1",
                "--queue-limit",
                "1",
                "--health-path",
                "/health",
            ],
        );
        let mut first = Reader::new(f.connect());
        first.send(b"GET /one HTTP/1.1\r\nHost: c\r\n\r\n");
        assert!(wait_until(Duration::from_secs(5), || h.seen.load(Ordering::SeqCst) == 1));
        let mut second = Reader::new(f.connect());
        second.send(b"GET /two HTTP/1.1\r\nHost: c\r\n\r\n");
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            h.seen.load(Ordering::SeqCst),
            1,
            "the second request waits at the front-end"
        );
        let mut third = Reader::new(f.connect());
        third.send(b"GET /three HTTP/1.1\r\nHost: c\r\n\r\n");
        let resp = third.response(false);
        assert_eq!(resp.status, 503, "beyond the queue");
        h.release.send(()).unwrap();
        assert_eq!(first.response(false).status, 200);
        assert!(wait_until(Duration::from_secs(5), || h.seen.load(Ordering::SeqCst) == 2));
        h.release.send(()).unwrap();
        let resp = second.response(false);
        assert_eq!(resp.status, 200);
        assert_eq!(resp.body, b"ok\n");
    }

    /// A back-end that drops requests unanswered: a GET goes to another
    /// back-end (nothing was sent to the client yet) and the dropper is
    /// marked down; a POST with a body, which may have reached it, gets 502.
    pub fn dropped_requests_go_elsewhere_or_502(event: &str) {
        let good = backend(0);
        let dropper = dropping_backend();
        let f = front(
            event,
            &[dropper, good.0.addr],
            &["--policy", "wrr", "--health-path", "/health", "--health-interval", "1h"],
        );
        let admin = f.admin.expect("admin address").to_string();
        let mut r = Reader::new(f.connect());
        for k in 0..6 {
            let resp = get_on(&mut r, &format!("/t{k}.txt"));
            assert_eq!(resp.status, 200, "target {k}");
            assert_eq!(who(&resp.body), 0);
        }
        let stats = fetch(&admin, "/stats");
        assert!(
            stats.contains(&format!("\"addr\":\"{dropper}\",\"state\":\"down\"")),
            "{stats}"
        );
        // Only the dropper: a POST is not sent twice.
        let f = front(
            event,
            &[dropper],
            &["--health-path", "/health", "--health-interval", "1h"],
        );
        let mut r = Reader::new(f.connect());
        r.send(b"POST /form HTTP/1.1\r\nHost: c\r\nContent-Length: 5\r\n\r\nhello");
        assert_eq!(r.response(false).status, 502);
    }

    /// A WebSocket upgrade through the relay: the back-end's 101, then a tunnel
    /// to it, byte-exact both ways. The back-end's admission slot is given back
    /// when the tunnel starts (a tunnel is not a request in flight): after it,
    /// nothing is left in flight.
    pub fn upgrade_is_relayed_as_a_tunnel(event: &str) {
        let ws = common::websocket_upstream(Arc::new(Mutex::new(Vec::new())));
        let f = front(event, &[ws], &[]);
        for round in 0..2 {
            let s = TcpStream::connect(f.addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut r = Reader::new(s);
            common::upgrade_and_echo(&mut r, b"early", &pattern(1 << 20), &format!("{event} round {round}"));
        }
        let admin = f.admin.expect("admin").to_string();
        wait_until(Duration::from_secs(5), || {
            fetch(&admin, "/stats").contains("\"in_flight\":0,")
        });
        let doc = fetch(&admin, "/stats");
        assert!(doc.contains("\"in_flight\":0,"), "{doc}");
    }
}

per_backend!(
    upgrade_is_relayed_as_a_tunnel,
    places_by_target_and_relays_exactly,
    backend_killed_mid_run,
    queued_at_s_and_503_beyond,
    dropped_requests_go_elsewhere_or_502
);

#[test]
fn handoff_mode_needs_a_socket_per_backend() {
    let out = std::process::Command::new(common::weft_bin())
        .args(["front", "--backend", "127.0.0.1:1", "--mode", "handoff"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--handoff PATH"));
}
