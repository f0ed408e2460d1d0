//! Integration tests of `weft front --mode booster` (issue 26): the real
//! binary in front of `weft serve` origins (or a raw test origin that
//! records what reaches it), byte for byte.

use crate::common;

use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// An origin: `weft serve` over a small site, with its admin (load report).
fn origin(listen: &str, root: &TempDir) -> (Weft, String) {
    let w = Weft::start(&[
        "serve",
        root.path.to_str().unwrap(),
        "--listen",
        listen,
        "--admin",
        "127.0.0.1:0",
        "--workers",
        "1",
    ]);
    let admin = w.admin.expect("admin").to_string();
    (w, admin)
}

fn files() -> TempDir {
    let d = TempDir::new("booster-site");
    for k in 0..8 {
        d.write(&format!("f{k}.bin"), &pattern(1000 + k * 3001));
    }
    d
}

fn booster(sites: &[String], extra: &[&str]) -> (Weft, String) {
    let mut args = vec![
        "front",
        "--mode",
        "booster",
        "--listen",
        "127.0.0.1:0",
        "--admin",
        "127.0.0.1:0",
    ];
    for s in sites {
        args.extend(["--site", s]);
    }
    args.extend_from_slice(extra);
    let w = Weft::start(&args);
    let admin = w.admin.expect("admin").to_string();
    (w, admin)
}

/// A booster that sends every host (`*`) to the origin at `origin`.
fn booster_for_all(origin: impl std::fmt::Display, extra: &[&str]) -> (Weft, String) {
    booster(&[format!("*={origin}")], extra)
}

/// The number at `"key":` in the `/stats` document at `admin`, after the
/// first `within` (empty: anywhere).
fn stat(admin: &str, within: &str, key: &str) -> u64 {
    let doc = fetch(admin, "/stats");
    let t = &doc[doc.find(within).unwrap_or_else(|| panic!("{within} in {doc}"))..];
    let pat = format!("\"{key}\":");
    let at = t.find(&pat).unwrap_or_else(|| panic!("{key} in {doc}")) + pat.len();
    t[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .unwrap()
}

/// A counter of the booster's `/stats`.
fn counter(admin: &str, key: &str) -> u64 {
    stat(admin, "", key)
}

/// `n` clients at once, each on a keep-alive connection of its own to
/// `addr`, running `each(client, reader)`; their threads, to join.
fn clients<F>(addr: SocketAddr, n: usize, each: F) -> Vec<JoinHandle<()>>
where
    F: Fn(usize, &mut Reader) + Send + Sync + 'static,
{
    let each = Arc::new(each);
    (0..n)
        .map(|c| {
            let each = each.clone();
            std::thread::spawn(move || {
                let s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                each(c, &mut Reader::new(s));
            })
        })
        .collect()
}

#[test]
fn many_clients_multiplexed_over_two_connections_byte_exact() {
    let d = files();
    let (o, _) = origin("127.0.0.1:0", &d);
    let (b, admin) = booster_for_all(o.addr, &["--upstream-conns", "2"]);
    let threads = clients(b.addr, 24, |c, r| {
        for i in 0..12 {
            let k = (c + i) % 8;
            let resp = get_on(r, &format!("/f{k}.bin"));
            assert_eq!(resp.status, 200);
            assert_eq!(resp.body, pattern(1000 + k * 3001), "client {c} request {i}");
        }
    });
    for t in threads {
        t.join().unwrap();
    }
    // Counted when the relay ends, just after the last byte went out.
    let responses = || counter(&admin, "upstream_responses");
    assert!(
        wait_until(Duration::from_secs(5), || responses() == 24 * 12),
        "{}",
        responses()
    );
    let doc = fetch(&admin, "/stats");
    assert_eq!(counter(&admin, "upstream_connects"), 2, "{doc}");
    // 24 clients over 2 connections: requests of different clients shared
    // a connection, pipelined, and each still got its own bytes in order.
    assert!(counter(&admin, "pipelined") > 0, "{doc}");
}

#[test]
fn a_post_among_pipelined_gets_gets_a_connection_to_itself() {
    let d = files();
    let (o, _) = origin("127.0.0.1:0", &d);
    let (b, admin) = booster_for_all(o.addr, &["--upstream-conns", "1"]);
    let (n, each) = (6, 300);
    let done = Arc::new(AtomicUsize::new(0));
    let counted = done.clone();
    let gets = clients(b.addr, n, move |c, r| {
        for i in 0..each {
            assert_eq!(get_on(r, &format!("/f{}.bin", (c + i) % 8)).status, 200);
            counted.fetch_add(1, Ordering::Relaxed);
        }
    });
    assert!(wait_until(Duration::from_secs(10), || counter(&admin, "pipelined") > 0));
    // The origin's own answer (a static server refuses POST), not the
    // booster's 502/503, and while the GETs still stream (not starved).
    let mut r = Reader::new(b.connect());
    r.send(b"POST /f1.bin HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc");
    let status = r.response(false).status;
    let at = done.load(Ordering::Relaxed);
    assert!(status != 502 && status != 503, "{status}");
    assert!(at < n * each, "answered only after the GETs ({at})");
    for t in gets {
        t.join().unwrap();
    }
}

#[test]
fn pipelined_requests_answered_in_order() {
    let d = files();
    let (o, _) = origin("127.0.0.1:0", &d);
    let (b, _) = booster_for_all(o.addr, &["--upstream-conns", "2", "--pipeline-depth", "4"]);
    let mut r = Reader::new(b.connect());
    let order: Vec<usize> = (0..30).map(|i| (i * 5) % 8).collect();
    let mut batch = Vec::new();
    for k in &order {
        batch.extend_from_slice(format!("GET /f{k}.bin HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
    }
    r.send(&batch);
    for k in order {
        let resp = r.response(false);
        assert_eq!(resp.status, 200);
        assert_eq!(resp.body, pattern(1000 + k * 3001));
    }
}

#[test]
fn origin_killed_and_restarted_mid_run_loses_no_get() {
    let d = files();
    // The port the kernel gave the first origin is the one its successor
    // takes: no window between picking a free port and binding it.
    let (o, _) = origin("127.0.0.1:0", &d);
    let listen = o.addr.to_string();
    let (b, admin) = booster_for_all(&listen, &["--upstream-conns", "2"]);
    let done = Arc::new(AtomicUsize::new(0));
    let counted = done.clone();
    let threads = clients(b.addr, 6, move |c, r| {
        for i in 0..150 {
            let k = (c + i) % 8;
            let resp = get_on(r, &format!("/f{k}.bin"));
            assert_eq!(resp.status, 200, "client {c} request {i}");
            assert_eq!(resp.body, pattern(1000 + k * 3001));
            counted.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    assert!(wait_until(Duration::from_secs(10), || done.load(Ordering::Relaxed) > 100));
    // Its port held closed while it is down: another test's bind(0) could
    // take a merely freed port, and this origin could not start again.
    let down = ClosedPort::on(o.addr);
    drop(o);
    std::thread::sleep(Duration::from_millis(300));
    drop(down);
    let (_o2, _) = origin(&listen, &d);
    for t in threads {
        t.join().unwrap();
    }
    assert!(counter(&admin, "upstream_connects") > 2);
}

/// A raw origin: records what reaches it; `answer` says whether it replies
/// (200 "ok" to every request head) or reads and then closes without a reply;
/// `stall`: it reads and never replies; it closes a connection after
/// `per_conn` replies (dropping the requests pipelined behind them).
struct RawOrigin {
    addr: String,
    seen: Arc<Mutex<Vec<u8>>>,
    conns: Arc<AtomicUsize>,
}

fn raw_origin(answer: bool, stall: bool, per_conn: usize) -> RawOrigin {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let conns = Arc::new(AtomicUsize::new(0));
    let (s2, c2) = (seen.clone(), conns.clone());
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            c2.fetch_add(1, Ordering::SeqCst);
            let s3 = s2.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                let mut replies = 0;
                loop {
                    let n = match c.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    s3.lock().unwrap().extend_from_slice(&buf[..n]);
                    if stall {
                        continue;
                    }
                    if !answer {
                        return;
                    }
                    let heads = buf[..n].windows(4).filter(|w| w == b"\r\n\r\n").count();
                    for _ in 0..heads {
                        if replies == per_conn {
                            return;
                        }
                        replies += 1;
                        let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
                    }
                }
            });
        }
    });
    RawOrigin { addr, seen, conns }
}

#[test]
fn garbage_is_answered_and_closed_without_reaching_the_origin() {
    let o = raw_origin(true, false, usize::MAX);
    let (b, admin) = booster_for_all(&o.addr, &[]);
    for junk in [
        &b"BLAH\x01 / HTTP/1.1\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
    ] {
        let (resp, closed) = raw(&b, junk);
        assert!(
            (400..500).contains(&resp.status) || resp.status == 501,
            "{}",
            resp.status
        );
        assert!(closed);
    }
    assert_eq!(o.conns.load(Ordering::SeqCst), 0);
    // The workers publish their counters after each event batch.
    let bad = || stat(&admin, "\"proxy\":", "bad_requests");
    assert!(wait_until(Duration::from_secs(5), || bad() == 2), "{}", bad());
    // A good request carries the parsed target in the booster's header, and a
    // client's own copy of that header is dropped.
    let resp = raw_response(&b, b"GET /x?y=1 HTTP/1.1\r\nHost: t\r\nX-Weft-Target: /spoof\r\n\r\n");
    assert_eq!(resp.body, b"ok");
    let seen = String::from_utf8_lossy(&o.seen.lock().unwrap()).to_string();
    assert!(seen.contains("X-Weft-Target: /x?y=1\r\n"), "{seen}");
    assert!(!seen.contains("/spoof"), "{seen}");
}

/// The booster's lanes are shared and pipelined, so none can become one
/// client's tunnel: an upgrade request reaches the origin without its
/// Upgrade and gets the origin's HTTP answer, on a connection that goes on.
#[test]
fn an_upgrade_through_the_booster_is_answered_in_http() {
    let heads = Arc::new(Mutex::new(Vec::new()));
    let ws = websocket_upstream(heads.clone());
    let (b, _) = booster_for_all(ws, &["--boost", "always"]);
    let s = TcpStream::connect(b.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut r = Reader::new(s);
    for _ in 0..2 {
        r.send(upgrade_request("/chat").as_bytes());
        let resp = r.response_any(false).unwrap();
        assert_eq!((resp.status, &resp.body[..]), (426, &b"nope"[..]));
    }
    let heads = heads.lock().unwrap();
    assert!(heads.iter().any(|h| h.starts_with("GET /chat ")), "{heads:?}");
    assert!(
        heads.iter().all(|h| !h.to_ascii_lowercase().contains("upgrade")),
        "{heads:?}"
    );
}

#[test]
fn past_max_queue_is_503() {
    let o = raw_origin(false, true, 0);
    let (b, admin) = booster_for_all(&o.addr, &["--upstream-conns", "1", "--max-queue", "2"]);
    // Two requests are held (the origin never answers) ...
    let mut held = Vec::new();
    for i in 0..2 {
        let mut s = b.connect();
        s.write_all(format!("GET /h{i} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
            .unwrap();
        held.push(s);
    }
    assert!(wait_until(Duration::from_secs(5), || o.seen.lock().unwrap().len() > 40));
    // ... the third is refused at once.
    let resp = raw_response(&b, b"GET /third HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(resp.status, 503);
    assert_eq!(counter(&admin, "refused_queue"), 1);
}

#[test]
fn dead_origin_connection_post_is_502_not_resent() {
    let o = raw_origin(false, false, 0);
    let (b, admin) = booster_for_all(&o.addr, &[]);
    let resp = raw_response(&b, b"POST /form HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc");
    assert_eq!(resp.status, 502);
    let seen = String::from_utf8_lossy(&o.seen.lock().unwrap()).to_string();
    assert_eq!(seen.matches("POST /form").count(), 1, "{seen}");
    // A GET is re-sent on a new connection (and fails only after a few tries).
    let resp = raw_response(&b, b"GET /again HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(resp.status, 502);
    let seen = String::from_utf8_lossy(&o.seen.lock().unwrap()).to_string();
    assert!(seen.matches("GET /again").count() > 1, "{seen}");
    assert!(counter(&admin, "resent") >= 1);
}

#[test]
fn connection_dying_mid_pipeline_resends_the_unanswered_gets() {
    // Each origin connection answers three requests and closes with the
    // rest of its pipeline unanswered.
    let o = raw_origin(true, false, 3);
    let (b, admin) = booster_for_all(&o.addr, &["--upstream-conns", "2", "--pipeline-depth", "6"]);
    let threads = clients(b.addr, 12, |c, r| {
        for i in 0..10 {
            let resp = get_on(r, &format!("/c{c}/r{i}"));
            assert_eq!(
                (resp.status, &resp.body[..]),
                (200, &b"ok"[..]),
                "client {c} request {i}"
            );
        }
    });
    for t in threads {
        t.join().unwrap();
    }
    let doc = fetch(&admin, "/stats");
    assert!(counter(&admin, "pipelined") > 0, "{doc}");
    assert!(counter(&admin, "resent") > 0, "{doc}");
    assert_eq!(counter(&admin, "failed_upstream"), 0, "{doc}");
}

#[test]
fn switched_in_and_out_under_load_for_two_sites_with_no_failed_request() {
    let (da, db) = (files(), files());
    let (oa, admin_a) = origin("127.0.0.1:0", &da);
    let (ob, admin_b) = origin("127.0.0.1:0", &db);
    let sites = [
        format!("a.test={}@{admin_a}", oa.addr),
        format!("b.test={}@{admin_b}", ob.addr),
    ];
    let (b, admin) = booster(
        &sites,
        &[
            "--boost",
            "auto",
            "--boost-on-conns",
            "6",
            "--boost-hold",
            "2",
            "--load-interval",
            "100ms",
        ],
    );
    let url = format!("http://{}/f3.bin", b.addr);
    // Site b: light load throughout (never boosted); site a: light (one
    // client thinking 5 ms between requests), with a burst of 16 clients
    // without think time (switched in) and light again after it (switched out).
    let (u1, u2) = (url.clone(), url.clone());
    let light = std::thread::spawn(move || load_failures_host(u1, "b.test", 1, 5, "5ms"));
    let light_a = std::thread::spawn(move || load_failures_host(u2, "a.test", 1, 5, "5ms"));
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(load_failures_host(url.clone(), "a.test", 16, 2, "0s"), 0);
    assert_eq!(light.join().unwrap(), 0);
    assert_eq!(light_a.join().unwrap(), 0);
    // Switched out after the burst: `--boost-hold 2` readings 100 ms apart
    // below half the burst's rate. On a loaded machine the burst can end
    // as late as the light load, so the readings may still be due.
    let switched_out = wait_until(Duration::from_secs(3), || counter(&admin, "switches") >= 2);
    let doc = fetch(&admin, "/stats");
    assert!(switched_out, "{doc}");
    assert!(counter(&admin, "boosted") > 0 && counter(&admin, "direct") > 0, "{doc}");
    // Only a was loaded: a was boosted, b stayed straight through.
    assert!(site_stat(&admin, "a.test", "boosted") > 0, "{doc}");
    assert_eq!(site_stat(&admin, "b.test", "boosted"), 0, "{doc}");
    assert!(site_stat(&admin, "b.test", "direct") > 0, "{doc}");
    // Both loaded at once: both boosted, still no failed request.
    let (ua, ub) = (url.clone(), url.clone());
    let burst_b = std::thread::spawn(move || load_failures_host(ub, "b.test", 16, 2, "0s"));
    assert_eq!(load_failures_host(ua, "a.test", 16, 2, "0s"), 0);
    assert_eq!(burst_b.join().unwrap(), 0);
    let doc = fetch(&admin, "/stats");
    assert!(site_stat(&admin, "b.test", "boosted") > 0, "{doc}");
}

/// A number of site `host` in the booster's `/stats` (`sites`).
fn site_stat(admin: &str, host: &str, key: &str) -> u64 {
    let doc = fetch(admin, "/stats");
    let body = &doc[doc.find("\r\n\r\n").map_or(0, |i| i + 4)..];
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {doc}"));
    let site = v["sites"].as_array().and_then(|s| s.iter().find(|s| s["host"] == host));
    site.and_then(|s| s[key].as_u64())
        .unwrap_or_else(|| panic!("{host} {key} in {doc}"))
}

/// `POST path` to an admin endpoint: the status line's code.
fn post(admin: &str, path: &str) -> u16 {
    let out = exchange_until_close(
        admin,
        &format!("POST {path} HTTP/1.1\r\nHost: admin\r\nContent-Length: 0\r\n\r\n"),
    );
    out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// `GET path` with Host `host` on a persistent connection.
fn get_host(r: &mut Reader, host: &str, path: &str) -> Response {
    r.send(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes());
    r.response(false)
}

#[test]
fn two_sites_on_one_origin_keep_their_own_queue_and_boost_state() {
    let d = files();
    let (o, _) = origin("127.0.0.1:0", &d);
    let sites = [format!("a.test={}", o.addr), format!("b.test={}", o.addr)];
    let (b, admin) = booster(&sites, &["--boost", "never", "--max-queue", "4"]);
    // Many more of b's requests than its queue holds, one after another:
    // each one's end frees its place (none leaks to a's count).
    let mut r = Reader::new(b.connect());
    for i in 0..20 {
        assert_eq!(get_host(&mut r, "b.test", "/f1.bin").status, 200, "request {i}");
    }
    // Switch a in by hand: a's requests take the lane, b's stay straight
    // through (only lane connections count upstream_responses).
    assert_eq!(post(&admin, "/boost/a.test/on"), 200);
    assert_eq!(post(&admin, "/boost/nosuch.test/on"), 404);
    let mut ra = Reader::new(b.connect());
    for _ in 0..5 {
        assert_eq!(get_host(&mut ra, "a.test", "/f2.bin").body, pattern(1000 + 2 * 3001));
        assert_eq!(get_host(&mut r, "b.test", "/f2.bin").body, pattern(1000 + 2 * 3001));
    }
    let doc = fetch(&admin, "/stats");
    assert!(
        wait_until(Duration::from_secs(5), || counter(&admin, "upstream_responses") == 5),
        "{doc}"
    );
    assert_eq!(site_stat(&admin, "a.test", "boosted"), 5, "{doc}");
    assert_eq!(site_stat(&admin, "b.test", "boosted"), 0, "{doc}");
    assert_eq!(site_stat(&admin, "b.test", "direct"), 25, "{doc}");
    assert!(wait_until(Duration::from_secs(5), || site_stat(
        &admin, "b.test", "held"
    ) == 0));
    // The lane connection's TCP_INFO, sampled about once a second: the
    // segments the origin received and sent for those requests.
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(get_host(&mut ra, "a.test", "/f2.bin").status, 200);
    let sampled = || counter(&admin, "sampled_responses");
    assert!(
        wait_until(Duration::from_secs(5), || sampled() >= 5),
        "{}",
        fetch(&admin, "/stats")
    );
    let doc = fetch(&admin, "/stats");
    assert!(counter(&admin, "origin_segs_received") >= 5, "{doc}");
    assert!(counter(&admin, "origin_segs_sent") >= 5, "{doc}");
}

#[test]
fn origin_takes_the_boosters_target_only_from_booster_addresses() {
    let d = files();
    let root = d.path.to_str().unwrap().to_string();
    let o = Weft::serve(&[&root, "--workers", "1", "--booster-from", "127.0.0.1"]);
    let req = b"GET /f1.bin HTTP/1.1\r\nHost: t\r\nX-Weft-Target: /f2.bin\r\n\r\n";
    // From the booster's address: the header's target.
    let resp = raw_response(&o, req);
    assert_eq!(resp.body, pattern(1000 + 2 * 3001));
    // From anyone else (here 127.0.0.1 to an origin that trusts only
    // 127.0.0.2 and 10.9.9.9): the header is ignored.
    let other = Weft::serve(&[&root, "--workers", "1", "--booster-from", "127.0.0.2,10.9.9.9"]);
    assert_eq!(raw_response(&other, req).body, pattern(1000 + 3001));
    // Without --booster-from nobody is trusted.
    let plain = Weft::serve(&[&root, "--workers", "1"]);
    assert_eq!(raw_response(&plain, req).body, pattern(1000 + 3001));
    // Behind the booster, the target it sends is the request's.
    let (b, _) = booster_for_all(o.addr, &[]);
    let mut r = Reader::new(b.connect());
    assert_eq!(get_on(&mut r, "/f3.bin").body, pattern(1000 + 3 * 3001));
}

/// `weft load` closed loop (persistent connections) against `url` with Host
/// `host` for `secs`; its failed requests.
fn load_failures_host(url: String, host: &str, clients: usize, secs: u32, think: &str) -> u64 {
    let dir = TempDir::new("booster-load");
    let json = dir.path.join("out.json");
    let st = Command::new(weft_bin())
        .args([
            "load",
            &url,
            "--clients",
            &clients.to_string(),
            "--calls",
            "0",
            "--host",
            host,
            "--think",
            think,
        ])
        .args([
            "--duration",
            &format!("{secs}s"),
            "--quiet",
            "--json",
            json.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let doc = std::fs::read_to_string(&json).unwrap();
    let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
    v["error_details"]["total"].as_u64().unwrap_or_else(|| panic!("{doc}"))
}

/// A number in a `/stats` document's `total`.
fn total(admin: &str, key: &str) -> u64 {
    stat(admin, "\"total\":", key)
}

#[test]
fn accelerator_behind_the_booster_serves_ready_responses_and_sees_file_changes() {
    let d = files();
    let root = d.path.to_str().unwrap().to_string();
    let o = Weft::serve(&[&root, "--admin", "127.0.0.1:0", "--workers", "1", "--accelerator"]);
    let admin = o.admin.expect("admin").to_string();
    let (b, _) = booster_for_all(o.addr, &["--upstream-conns", "1"]);
    let mut r = Reader::new(b.connect());
    for _ in 0..5 {
        assert_eq!(get_on(&mut r, "/f2.bin").body, pattern(1000 + 2 * 3001));
    }
    assert!(total(&admin, "object_hits") >= 3, "{}", fetch(&admin, "/stats"));
    // The file changes: the next response is the new one, never the cached.
    std::thread::sleep(Duration::from_millis(20));
    d.write("f2.bin", b"changed\n");
    assert!(wait_until(Duration::from_secs(5), || get_on(&mut r, "/f2.bin").body
        == b"changed\n"));
    assert!(
        total(&admin, "object_invalidations") >= 1,
        "{}",
        fetch(&admin, "/stats")
    );
}
