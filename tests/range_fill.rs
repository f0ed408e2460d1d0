//! Range misses fill the proxy's cache (`--range-fill`, weft-proxy
//! `background.rs`): the client gets the origin's 206 at once; a 206 with a
//! part starts one background GET of the whole representation, a 206 with
//! all of it is stored as its 200, and later ranges are hits. The origin is
//! `weft serve`, whose access log shows what it was asked.

use crate::common;

use common::{pattern, Reader, Response, TempDir, Weft};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

const BIG: usize = 300_000;
const SMALL: usize = 20_000;

/// A site with `big.bin` and `small.bin`, old enough for a heuristic
/// lifetime of hours (10 % of a day).
fn site() -> TempDir {
    let d = TempDir::new("range-fill");
    let old = SystemTime::now() - Duration::from_secs(86_400);
    for (name, len) in [("big.bin", BIG), ("small.bin", SMALL)] {
        let p = d.write(&format!("www/{name}"), &pattern(len));
        std::fs::File::options()
            .write(true)
            .open(p)
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    d
}

fn get(r: &mut Reader, path: &str, extra: &str) -> Response {
    r.send(format!("GET {path} HTTP/1.1\r\nHost: h\r\n{extra}\r\n").as_bytes());
    r.response(false)
}

fn connect(p: &Weft) -> Reader {
    let s = p.connect();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    Reader::new(s)
}

/// Lines of the origin's access log (after it stopped) with `what`.
fn origin_lines(site: &TempDir, what: &str) -> usize {
    let log = std::fs::read_to_string(site.path.join("origin.log")).unwrap();
    log.lines().filter(|l| l.contains(what)).count()
}

fn start_origin(site: &TempDir) -> Weft {
    let root = site.path.join("www");
    let log = site.path.join("origin.log");
    let _ = std::fs::remove_file(&log);
    Weft::serve(&[common::path_str(&root), "--access-log", common::path_str(&log)])
}

/// `weft proxy` in front of `upstream`, one worker, counters at exit.
fn proxy_to(upstream: &str, extra: &[&str]) -> Weft {
    let mut args = vec!["--workers", "1", "--upstream", upstream, "--stats-on-exit"];
    args.extend_from_slice(extra);
    Weft::role("proxy", &args)
}

fn stop(mut w: Weft) {
    w.terminate();
    assert_eq!(w.wait_exit(Duration::from_secs(15)), Some(0), "{}", w.stderr());
}

#[test]
fn range_misses_fill_the_cache() {
    let site = site();
    let big = pattern(BIG);
    let small = pattern(SMALL);
    // The client's part is spliced (200 KB, above the threshold) or forwarded
    // in the kernel, while the background GET copies the whole into the cache.
    for splice in ["auto", "sockmap"] {
        let origin = start_origin(&site);
        let upstream = origin.addr.to_string();
        let p = proxy_to(&upstream, &["--splice", splice]);
        let mut r = connect(&p);
        // A part: the origin's 206, at once and byte-exact.
        let part = get(&mut r, "/big.bin", "Range: bytes=1000-200999\r\n");
        assert_eq!(part.status, 206, "{splice}");
        assert_eq!(part.header("content-range"), Some("bytes 1000-200999/300000"));
        assert!(part.body == big[1000..201_000], "{splice}: the part");
        assert_eq!(part.header("age"), None, "a miss");
        // The background GET fills the cache: other ranges become hits.
        let mut hit = None;
        for _ in 0..250 {
            let r2 = get(&mut r, "/big.bin", "Range: bytes=250000-250099\r\n");
            assert_eq!(r2.status, 206);
            assert!(r2.body == big[250_000..250_100], "{splice}: another part");
            if r2.header("age").is_some() {
                hit = Some(r2);
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(hit.is_some(), "{splice}: the range fill never stored big.bin");
        let whole = get(&mut r, "/big.bin", "");
        assert_eq!(whole.status, 200);
        assert!(whole.header("age").is_some(), "a hit");
        assert!(whole.body == big, "{splice}: the stored body");
        // A 206 that carries everything is stored as its 200 at once.
        let all = get(&mut r, "/small.bin", "Range: bytes=0-\r\n");
        assert_eq!(all.status, 206);
        assert!(all.body == small);
        let next = get(&mut r, "/small.bin", "Range: bytes=10-19\r\n");
        assert_eq!((next.status, &next.body[..]), (206, &small[10..20]));
        assert!(next.header("age").is_some(), "{splice}: stored from the whole 206");
        let full = get(&mut r, "/small.bin", "");
        assert_eq!(full.status, 200);
        assert_eq!(full.header("content-range"), None);
        assert!(full.body == small);
        drop(r);
        let stats = common::stop_stats(p);
        // A second may start when a range that missed while the first was
        // under way is answered after the first stored the object; that
        // one is a hit in the cache and asks the origin nothing (below).
        assert!(common::counter(&stats, "range_fills") >= 1, "{stats}");
        assert_eq!(common::counter(&stats, "sessions_client_abort"), 0, "{stats}");
        assert_eq!(common::counter(&stats, "open_connections"), 0, "{stats}");
        stop(origin);
        // One background GET of the whole, sent without the Range; no
        // second request for small.bin.
        assert_eq!(origin_lines(&site, "\"GET /big.bin HTTP/1.1\" 200 300000"), 1);
        assert_eq!(origin_lines(&site, "GET /small.bin"), 1);
    }
}

#[test]
fn range_misses_only_forward_when_told_or_too_large() {
    let site = site();
    let origin = start_origin(&site);
    let upstream = origin.addr.to_string();
    for extra in [&["--range-fill", "false"][..], &["--max-object-size", "100KiB"]] {
        let p = proxy_to(&upstream, extra);
        let mut r = connect(&p);
        let path = if extra[0] == "--range-fill" {
            "/small.bin"
        } else {
            "/big.bin"
        };
        // The whole in a 206, and a part.
        for range in ["0-", "5-9", "0-", "5-9"] {
            let part = get(&mut r, path, &format!("Range: bytes={range}\r\n"));
            assert_eq!(part.status, 206);
            assert_eq!(part.header("age"), None, "{extra:?}: never stored");
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(r);
        let stats = common::stop_stats(p);
        assert_eq!(common::counter(&stats, "range_fills"), 0, "{stats}");
        assert_eq!(common::counter(&stats, "stored"), 0, "{stats}");
    }
    stop(origin);
    assert_eq!(origin_lines(&site, "\" 200 "), 0, "no background GET");
}

/// A scripted origin of one 100,000-byte object: a request with `Range:
/// bytes=A-B` gets its 206 at once; a plain GET is held until `release`
/// is set (10 s at most), then gets the 200. Every head is kept in `heads`.
fn held_origin(release: Arc<AtomicBool>, heads: Arc<Mutex<Vec<String>>>) -> std::net::SocketAddr {
    common::tcp_server(move |mut s| {
        let mut buf = Vec::new();
        while let Some(head) = common::next_head(&mut s, &mut buf) {
            heads.lock().unwrap().push(head.clone());
            let body = pattern(100_000);
            let range = head
                .lines()
                .find_map(|l| l.strip_prefix("Range: bytes="))
                .and_then(|r| r.split_once('-'))
                .map(|(a, b)| (a.parse::<usize>().unwrap(), b.parse::<usize>().unwrap()));
            let (status, extra, part) = match range {
                Some((a, b)) => (
                    "206 Partial Content",
                    format!("Content-Range: bytes {a}-{b}/100000\r\n"),
                    &body[a..=b],
                ),
                None => {
                    common::wait_until(Duration::from_secs(10), || release.load(Ordering::SeqCst));
                    ("200 OK", String::new(), &body[..])
                }
            };
            let reply = format!(
                "HTTP/1.1 {status}\r\nCache-Control: max-age=600\r\n{extra}Content-Length: {}\r\n\r\n",
                part.len()
            );
            if s.write_all(reply.as_bytes()).is_err() || s.write_all(part).is_err() {
                return;
            }
        }
    })
}

#[test]
fn with_collapse_a_range_does_not_wait_for_a_fill() {
    let release = Arc::new(AtomicBool::new(false));
    let heads = Arc::new(Mutex::new(Vec::new()));
    let o = held_origin(release.clone(), heads.clone());
    let upstream = o.to_string();
    let p = proxy_to(&upstream, &["--collapse"]);
    // A plain GET leads the fill; the origin holds it.
    let mut leader = connect(&p);
    leader.send(b"GET /obj HTTP/1.1\r\nHost: h\r\n\r\n");
    assert!(common::wait_until(Duration::from_secs(10), || heads
        .lock()
        .unwrap()
        .iter()
        .any(|h| !h.contains("Range:"))));
    // Ranges meanwhile are forwarded and answered, not parked behind it.
    let mut r = connect(&p);
    let body = pattern(100_000);
    for (a, b) in [(10, 19), (50_000, 59_999)] {
        let part = get(&mut r, "/obj", &format!("Range: bytes={a}-{b}\r\n"));
        assert_eq!(part.status, 206);
        assert!(part.body == body[a..=b]);
        assert_eq!(part.header("age"), None, "from the origin");
    }
    release.store(true, Ordering::SeqCst);
    let whole = leader.response(false);
    assert_eq!(whole.status, 200);
    assert!(whole.body == body);
    // Stored by the leader: a range is now a hit.
    let hit = get(&mut r, "/obj", "Range: bytes=0-9\r\n");
    assert_eq!((hit.status, &hit.body[..]), (206, &body[..10]));
    assert!(hit.header("age").is_some(), "a hit");
    drop((r, leader));
    let stats = common::stop_stats(p);
    // The first range started a range fill, whose plain GET waited for the
    // leader's fill (the one that waited) and found the object; the second
    // range found that range fill under way.
    assert_eq!(common::counter(&stats, "range_fills"), 1, "{stats}");
    assert_eq!(common::counter(&stats, "collapsed"), 1, "{stats}");
    let plain = heads.lock().unwrap().iter().filter(|h| !h.contains("Range:")).count();
    assert_eq!(plain, 1, "the origin sent the whole once");
}

/// A 206 whose Content-Range says it is the whole representation but whose
/// length disagrees is relayed, and not stored as a 200.
#[test]
fn a_whole_part_with_another_length_is_not_stored() {
    let heads = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = heads.clone();
    let o = common::tcp_server(move |mut s| {
        let mut buf = Vec::new();
        while let Some(head) = common::next_head(&mut s, &mut buf) {
            seen.lock().unwrap().push(head);
            let reply = "HTTP/1.1 206 Partial Content\r\nCache-Control: max-age=600\r\n\
                         Content-Range: bytes 0-9/10\r\nContent-Length: 20\r\n\r\n0123456789abcdefghij";
            if s.write_all(reply.as_bytes()).is_err() {
                return;
            }
        }
    });
    let p = proxy_to(&o.to_string(), &[]);
    let mut r = connect(&p);
    for _ in 0..2 {
        let part = get(&mut r, "/liar", "Range: bytes=0-\r\n");
        assert_eq!(part.status, 206);
        assert_eq!(part.header("age"), None, "never stored");
    }
    drop(r);
    let stats = common::stop_stats(p);
    assert_eq!(common::counter(&stats, "stored"), 0, "{stats}");
    assert_eq!(
        common::counter(&stats, "range_fills"),
        0,
        "nothing more to fetch: {stats}"
    );
    assert_eq!(heads.lock().unwrap().len(), 2);
}
