//! Integration tests of `weft front --mode handoff`: the real binary in front
//! of several `weft serve --handoff-socket` back-ends on this host, each
//! serving its own version of every file (so which back-end answered is
//! visible in the body). The front-end hands each client connection over
//! with the bytes it read; the back-end answers the client directly and
//! keeps the connection.

use crate::common;

use common::{
    fetch, front_args, get_from, get_on, get_target, pattern, per_backend, target_body, wait_until, who, Reader,
    TempDir, Weft,
};
use std::io::Read;
use std::time::Duration;

/// Bytes of the large file every back-end serves identically.
const BIG: usize = 300_000;
/// Targets `/t0.txt`..: each back-end answers `backend B target K`.
const TARGETS: usize = 12;

/// A back-end: `weft serve --handoff-socket` over a root where every target
/// names it. The socket lives in the root's directory.
struct Backend {
    weft: Weft,
    socket: String,
    _root: TempDir,
}

fn backend(i: usize) -> Backend {
    let d = TempDir::new("handoff-backend");
    for k in 0..TARGETS {
        d.write(&format!("root/t{k}.txt"), &target_body(i, k));
    }
    d.write("root/big.bin", &pattern(BIG));
    d.write("root/health", b"ok\n");
    let root = d.path.join("root");
    let socket = d.path.join("handoff.sock").to_str().unwrap().to_string();
    let weft = Weft::serve(&[root.to_str().unwrap(), "--workers", "1", "--handoff-socket", &socket]);
    Backend { weft, socket, _root: d }
}

/// A handoff front-end over `backends` ([`front_args`]).
fn front(event: &str, backends: &[&Backend], extra: &[&str]) -> Weft {
    let addrs: Vec<String> = backends.iter().map(|b| b.weft.addr.to_string()).collect();
    let mut args = front_args(event);
    args.extend(["--mode", "handoff", "--health-path", "/health"]);
    for (b, addr) in backends.iter().zip(&addrs) {
        args.extend(["--backend", addr, "--handoff", &b.socket]);
    }
    args.extend_from_slice(extra);
    Weft::start(&args)
}

/// The admin document's `"in_flight":N`.
fn in_flight(admin: &str) -> String {
    let s = fetch(admin, "/stats");
    let i = s.find("\"in_flight\":").expect("in_flight");
    s[i..].split(',').next().unwrap().to_string()
}

mod scenarios {
    use super::*;

    /// Placement by target (LARD: a target's first request always goes to
    /// one back-end), byte-exact answers sent by the back-ends themselves
    /// (the front-end counts no response byte), and a persistent connection
    /// whose later requests are answered by the back-end it was handed to.
    pub fn places_by_target_and_never_carries_responses(event: &str) {
        let bs: Vec<Backend> = (0..3).map(backend).collect();
        let f = front(event, &bs.iter().collect::<Vec<_>>(), &["--policy", "lard"]);
        let admin = f.admin.expect("admin address").to_string();
        let mut owner: [Option<usize>; TARGETS] = [None; TARGETS];
        let mut handed = 0;
        for round in 0..2 {
            for (k, owner) in owner.iter_mut().enumerate() {
                let mut r = Reader::new(f.connect());
                get_target(&mut r, k, owner, round);
                handed += 1;
            }
        }
        let used: std::collections::HashSet<_> = owner.iter().flatten().collect();
        assert!(used.len() >= 2, "every target went to {used:?}");
        // A persistent connection: several requests, pipelined too, all
        // answered by the back-end its first request was placed on.
        let mut r = Reader::new(f.connect());
        handed += 1;
        let first = get_on(&mut r, "/t0.txt");
        let b = who(&first.body);
        assert_eq!(Some(b), owner[0]);
        for k in 1..TARGETS {
            get_from(&mut r, k, b);
        }
        r.send(b"GET /big.bin HTTP/1.1\r\nHost: c\r\n\r\nGET /t3.txt HTTP/1.1\r\nHost: c\r\n\r\n");
        assert!(r.response(false).body == pattern(BIG), "big body differs");
        assert_eq!(r.response(false).body, target_body(b, 3));
        // The first request arrives with bytes after it (pipelined): the
        // back-end gets them all.
        let mut p = Reader::new(f.connect());
        handed += 1;
        p.send(b"GET /t5.txt HTTP/1.1\r\nHost: c\r\n\r\nGET /big.bin HTTP/1.1\r\nHost: c\r\n\r\n");
        let five = p.response(false);
        let b5 = who(&five.body);
        assert_eq!(Some(b5), owner[5]);
        assert!(p.response(false).body == pattern(BIG));
        assert_handoffs(&admin, handed);
        let stats = fetch(&admin, "/stats");
        assert!(stats.contains("\"mode\":\"handoff\""), "{stats}");
        assert_eq!(
            stats.matches("\"bytes\":0,").count(),
            3,
            "no response byte crossed the front-end: {stats}"
        );
        // Closed connections are reported back: no load is left.
        drop((r, p));
        assert!(
            wait_until(Duration::from_secs(5), || in_flight(&admin) == "\"in_flight\":0"),
            "{}",
            fetch(&admin, "/stats")
        );
    }

    /// A back-end killed while it holds a handed-over connection: its
    /// channel ends, what it held counts as finished (no load is left), it
    /// is marked down, and its targets are answered by the others.
    pub fn backend_killed_releases_its_connections(event: &str) {
        let mut bs: Vec<Backend> = (0..3).map(backend).collect();
        let f = front(
            event,
            &bs.iter().collect::<Vec<_>>(),
            &["--policy", "lard", "--health-interval", "100ms"],
        );
        let admin = f.admin.expect("admin address").to_string();
        let victim = (0..TARGETS)
            .find(|k| who(&get_on(&mut Reader::new(f.connect()), &format!("/t{k}.txt")).body) == 0)
            .expect("back-end 0 owns a target");
        // Held open on back-end 0.
        let mut held = Reader::new(f.connect());
        assert_eq!(who(&get_on(&mut held, &format!("/t{victim}.txt")).body), 0);
        assert!(wait_until(Duration::from_secs(5), || in_flight(&admin) == "\"in_flight\":1"));
        bs[0].weft.kill_keeping_port();
        let down = format!("\"addr\":\"{}\",\"state\":\"down\"", bs[0].weft.addr);
        assert!(
            wait_until(Duration::from_secs(5), || {
                let s = fetch(&admin, "/stats");
                s.contains(&down) && s.contains("\"in_flight\":0")
            }),
            "{}",
            fetch(&admin, "/stats")
        );
        assert!(held.closed(), "the dead back-end's connection is gone");
        for _ in 0..5 {
            let resp = get_on(&mut Reader::new(f.connect()), &format!("/t{victim}.txt"));
            assert_eq!(resp.status, 200);
            assert_ne!(who(&resp.body), 0);
        }
    }

    /// `--handoff-next return`: the back-end gives the connection back after
    /// each response, so every request of a persistent connection is placed
    /// on its own (each target answered by its owner), and an idle
    /// connection holds no load.
    pub fn returned_connections_are_placed_per_request(event: &str) {
        let (_bs, admin, f) = lard_front(event, 3, "return");
        let owner = owners(&f);
        let mut r = Reader::new(f.connect());
        let mut used = std::collections::HashSet::new();
        for _ in 0..2 {
            for (k, &o) in owner.iter().enumerate() {
                get_from(&mut r, k, o);
                used.insert(o);
            }
        }
        assert!(used.len() >= 2, "one connection's requests went to {used:?}");
        // Pipelined: the second request comes back with the connection.
        r.send(b"GET /big.bin HTTP/1.1\r\nHost: c\r\n\r\nGET /t4.txt HTTP/1.1\r\nHost: c\r\n\r\n");
        assert!(r.response(false).body == pattern(BIG));
        assert_eq!(who(&r.response(false).body), owner[4]);
        // Idle between requests: no load held.
        assert!(
            wait_until(Duration::from_secs(5), || in_flight(&admin) == "\"in_flight\":0"),
            "{}",
            fetch(&admin, "/stats")
        );
        assert_eq!(who(&get_on(&mut r, "/t7.txt").body), owner[7], "still usable");
    }

    /// With S = 1 (one back-end, T_low = T_high = 1) and a queue of 1: a
    /// handed-over connection holds the slot while it is open; a second
    /// connection's request waits at the front-end, a third gets 503; when
    /// the first closes, the second is handed over and answered.
    pub fn admission_counts_open_connections(event: &str) {
        let b = backend(0);
        let f = front(event, &[&b], &["--t-low", "1", "--t-high", "1", "--queue-limit", "1"]);
        let mut first = Reader::new(f.connect());
        assert_eq!(get_on(&mut first, "/t1.txt").status, 200);
        let mut second = Reader::new(f.connect());
        second
            .stream
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        second.send(b"GET /t2.txt HTTP/1.1\r\nHost: c\r\n\r\n");
        let mut byte = [0u8; 1];
        assert!(
            second.stream.read(&mut byte).is_err(),
            "the second connection waits while the first is open"
        );
        let mut third = Reader::new(f.connect());
        assert_eq!(get_on(&mut third, "/t3.txt").status, 503, "beyond the queue");
        drop(first);
        second.stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let resp = second.response(false);
        assert_eq!(resp.status, 200);
        assert_eq!(resp.body, b"backend 0 target 2\n");
    }
}

// The back-ends run the default backend.
per_backend!(
    places_by_target_and_never_carries_responses,
    backend_killed_releases_its_connections,
    admission_counts_open_connections,
    returned_connections_are_placed_per_request
);

/// The admin document's counter `"name":N`.
fn counter(admin: &str, name: &str) -> u64 {
    let s = fetch(admin, "/stats");
    let key = format!("\"{name}\":");
    let i = s.find(&key).unwrap_or_else(|| panic!("{name} in {s}")) + key.len();
    s[i..].split([',', '}']).next().unwrap().parse().unwrap()
}

/// Wait until the front-end has counted `want` handoffs. A client can read
/// its answer before the front-end's thread counts the handoff that led to
/// it (the count follows the send), so a test that has read a response
/// waits for the count rather than reading it once.
fn assert_handoffs(admin: &str, want: u64) {
    let ok = wait_until(Duration::from_secs(5), || counter(admin, "handoffs") == want);
    assert!(ok, "handoffs: want {want}: {}", fetch(admin, "/stats"));
}

/// `n` back-ends behind a LARD front-end with `--handoff-next rule` and an
/// admin port: the back-ends (alive as long as the caller keeps them), the
/// admin address and the front-end.
fn lard_front(event: &str, n: usize, rule: &str) -> (Vec<Backend>, String, Weft) {
    let bs: Vec<Backend> = (0..n).map(backend).collect();
    let f = front(
        event,
        &bs.iter().collect::<Vec<_>>(),
        &["--policy", "lard", "--handoff-next", rule],
    );
    let admin = f.admin.expect("admin address").to_string();
    (bs, admin, f)
}

/// Each target's owner under LARD, learned one connection per target.
fn owners(f: &Weft) -> Vec<usize> {
    (0..TARGETS)
        .map(|k| who(&get_on(&mut Reader::new(f.connect()), &format!("/t{k}.txt")).body))
        .collect()
}

/// The next-request rules beyond `keep` and `return` (`--handoff-next owner|close`).
mod next_rules {
    use super::*;

    pub mod scenarios {
        use super::*;

        /// `--handoff-next owner`: a persistent connection's later request is
        /// answered by the back-end holding the connection when it owns the
        /// target in the front-end's map, and the connection comes back (with
        /// the bytes read) otherwise: every answer comes from the target's
        /// owner, and the front-end sees exactly one hand-back per change of
        /// owner, sequential or pipelined.
        pub fn owner_answers_its_targets_and_hands_back_the_others(event: &str) {
            let (_bs, admin, f) = lard_front(event, 3, "owner");
            let owner = owners(&f);
            let mut used = std::collections::HashSet::new();
            let mut changes = 0;
            let mut at: Option<usize> = None;
            let mut r = Reader::new(f.connect());
            for _ in 0..2 {
                for (k, &o) in owner.iter().enumerate() {
                    get_from(&mut r, k, o);
                    changes += usize::from(at.is_some_and(|a| a != o));
                    at = Some(o);
                    used.insert(o);
                }
            }
            assert!(used.len() >= 2, "one connection's requests went to {used:?}");
            assert!(changes >= 2);
            assert_eq!(counter(&admin, "handed_back"), changes as u64);
            // Pipelined across owners: two targets of the back-end holding the
            // connection, answered there, then one of another, handed back with
            // the bytes read and answered by its owner, then the big file.
            let here = at.unwrap();
            let mine: Vec<usize> = (0..TARGETS).filter(|&k| owner[k] == here).collect();
            let other = (0..TARGETS).find(|&k| owner[k] != here).unwrap();
            let (a, b) = (mine[0], mine[mine.len() - 1]);
            r.send(
                format!(
                    "GET /t{a}.txt HTTP/1.1\r\nHost: c\r\n\r\nGET /t{b}.txt HTTP/1.1\r\nHost: c\r\n\r\n\
                 GET /t{other}.txt HTTP/1.1\r\nHost: c\r\n\r\nGET /big.bin HTTP/1.1\r\nHost: c\r\n\r\n"
                )
                .as_bytes(),
            );
            assert_eq!(r.response(false).body, target_body(here, a));
            assert_eq!(r.response(false).body, target_body(here, b));
            assert_eq!(r.response(false).body, target_body(owner[other], other));
            assert!(r.response(false).body == pattern(BIG), "big body differs");
            let back = counter(&admin, "handed_back");
            assert!(
                back == changes as u64 + 1 || back == changes as u64 + 2,
                "one hand-back for the other owner's target (and one for big.bin's if it is elsewhere): {back}"
            );
            // Every hand-back is handed over again; no byte crosses the front-end.
            assert_handoffs(&admin, TARGETS as u64 + 1 + back);
            let stats = fetch(&admin, "/stats");
            assert_eq!(stats.matches("\"bytes\":0,").count(), 3, "{stats}");
            // The connection holds one load unit while it waits at a back-end,
            // none once closed.
            drop(r);
            assert!(
                wait_until(Duration::from_secs(5), || in_flight(&admin) == "\"in_flight\":0"),
                "{}",
                fetch(&admin, "/stats")
            );
        }

        /// `--handoff-next close`: the back-end answers the request it was
        /// handed with `Connection: close` and closes; nothing comes back.
        pub fn close_answers_once_and_closes(event: &str) {
            let (_bs, admin, f) = lard_front(event, 2, "close");
            let owner = owners(&f);
            let mut r = Reader::new(f.connect());
            r.send(b"GET /big.bin HTTP/1.1\r\nHost: c\r\n\r\nGET /t1.txt HTTP/1.1\r\nHost: c\r\n\r\n");
            let resp = r.response(false);
            assert!(resp.body == pattern(BIG), "big body differs");
            assert_eq!(resp.header("connection"), Some("close"));
            assert!(r.closed(), "closed after the response");
            // The client closes too, as a browser would: the back-end, which
            // lingers over the unread second request, then ends at once
            // rather than after its linger time.
            drop(r);
            let mut r = Reader::new(f.connect());
            let resp = get_on(&mut r, "/t3.txt");
            assert_eq!(resp.body, target_body(owner[3], 3));
            assert!(r.closed());
            assert_eq!(counter(&admin, "handed_back"), 0);
            assert_handoffs(&admin, TARGETS as u64 + 2);
            assert!(
                wait_until(Duration::from_secs(10), || in_flight(&admin) == "\"in_flight\":0"),
                "{event}: connections still counted: {}",
                fetch(&admin, "/stats")
            );
        }
    }

    per_backend!(
        owner_answers_its_targets_and_hands_back_the_others,
        close_answers_once_and_closes
    );
}
