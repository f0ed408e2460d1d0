//! The HTTP correctness rules of issue 17 §1, through the real binaries:
//! empty field values, the upstream's Age, targeted cache control (RFC 9213),
//! interim responses, `no-cache="field"`, Host validation, forwarding hygiene
//! (Content-Length, chunk sizes, dot-segments, malformed targets) and unknown
//! methods. The origin is a scripted one written here: it records each
//! request head byte for byte and answers by path.

use crate::common;

use common::{per_backend, raw, raw_response, tcp_server, Reader, Weft};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// A scripted origin: one thread per connection, keep-alive, every request
/// head (and body) recorded as received.
struct Origin {
    addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
    /// `/hints` holds its final response until this is set.
    release: Arc<AtomicBool>,
}

fn http_date(t: SystemTime) -> String {
    String::from_utf8(weft_http::fmt_http_date(t).to_vec()).unwrap()
}

/// The response to a request (its head as received), by path.
fn answer(head: &str, s: &mut TcpStream, release: &AtomicBool) {
    let path = head.split(' ').nth(1).unwrap_or("");
    let now = SystemTime::now();
    let ahead = http_date(now + Duration::from_secs(3600));
    let ahead_expires = http_date(now + Duration::from_secs(3600 + 600));
    let fields = match path {
        "/empty" => "X-Empty:\r\nVary:\r\nVary: *\r\nCache-Control: max-age=60\r\n".to_string(),
        "/old" => "Cache-Control: max-age=3600\r\nAge: 7200\r\n".into(),
        "/young" => "Cache-Control: max-age=3600\r\nAge: 100\r\n".into(),
        "/skew-stale" => format!("Date: {ahead}\r\nExpires: {ahead_expires}\r\nAge: 700\r\n"),
        "/skew-fresh" => format!("Date: {ahead}\r\nExpires: {ahead_expires}\r\n"),
        "/cdn" => "Cache-Control: no-store\r\nCDN-Cache-Control: max-age=60\r\n".into(),
        "/weft" => {
            "Cache-Control: max-age=60\r\nCDN-Cache-Control: max-age=60\r\nWeft-Cache-Control: no-store\r\n".into()
        }
        "/cookie" => "Cache-Control: max-age=60, no-cache=\"Set-Cookie\"\r\nSet-Cookie: a=1\r\n".into(),
        "/vary-ae" => "Cache-Control: max-age=60\r\nVary: Accept-Encoding\r\n".into(),
        "/hints" => {
            let _ = s.write_all(b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n");
            let _ = s.write_all(b"HTTP/1.1 102 Processing\r\n\r\n");
            while !release.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
            "Cache-Control: max-age=60\r\n".into()
        }
        _ => "Cache-Control: max-age=60\r\n".into(),
    };
    // The body: the request head as received.
    let resp = format!(
        "HTTP/1.1 200 OK\r\n{fields}Content-Length: {}\r\n\r\n{head}",
        head.len()
    );
    let _ = s.write_all(resp.as_bytes());
}

impl Origin {
    fn start() -> Origin {
        let log = Arc::new(Mutex::new(Vec::new()));
        let release = Arc::new(AtomicBool::new(false));
        let (log2, release2) = (log.clone(), release.clone());
        let addr = tcp_server(move |mut s| {
            let mut buf = Vec::new();
            let mut tmp = [0u8; 8192];
            while let Some(head) = common::next_head(&mut s, &mut buf) {
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("Content-Length: "))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                while buf.len() < len {
                    match s.read(&mut tmp) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&tmp[..n]),
                    }
                }
                buf.drain(..len);
                log2.lock().unwrap().push(head.clone());
                answer(&head, &mut s, &release2);
            }
        });
        Origin { addr, log, release }
    }

    /// Requests received whose request line is `line` (e.g. `GET /x`).
    fn count(&self, line: &str) -> usize {
        let want = format!("{line} HTTP/1.1\r\n");
        self.log.lock().unwrap().iter().filter(|h| h.starts_with(&want)).count()
    }

    fn heads(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

fn reverse(o: &Origin, extra: &[&str]) -> Weft {
    let up = o.addr.to_string();
    let mut args = vec!["proxy", "--listen", "127.0.0.1:0", "--workers", "1", "--upstream", &up];
    args.extend_from_slice(extra);
    Weft::start(&args)
}

/// A scripted origin and a reverse proxy in front of it (with `extra`).
fn origin_and_reverse(extra: &[&str]) -> (Origin, Weft) {
    let o = Origin::start();
    let p = reverse(&o, extra);
    (o, p)
}

/// One request on a fresh connection, its response.
fn exchange(w: &Weft, req: &str) -> common::Response {
    let mut r = Reader::new(w.connect());
    r.send(req.as_bytes());
    r.response(req.starts_with("HEAD"))
}

fn get(w: &Weft, path: &str) -> common::Response {
    exchange(w, &format!("GET {path} HTTP/1.1\r\nHost: o.example\r\n\r\n"))
}

/// `GET path` twice through `w` (the first may store it): the second response.
fn get_twice(w: &Weft, path: &str) -> common::Response {
    get(w, path);
    get(w, path)
}

/// Every byte the server sends for `req` until it closes.
fn raw_bytes(w: &Weft, req: &[u8]) -> Vec<u8> {
    let mut s = w.connect();
    s.write_all(req).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

#[test]
fn empty_field_values_keep_their_colon_both_ways() {
    let (o, p) = origin_and_reverse(&[]);
    let out = raw_bytes(
        &p,
        b"GET /empty HTTP/1.1\r\nHost: o.example\r\nX-Req-Empty:\r\nX-B: b\r\nConnection: close\r\n\r\n",
    );
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    assert!(text.contains("\r\nX-Empty:\r\nVary:\r\nVary: *\r\n"), "{text}");
    let heads = o.heads();
    assert!(heads[0].contains("\r\nX-Req-Empty:\r\nX-B: b\r\n"), "{}", heads[0]);
    // weft serve takes an empty value as it is.
    let s = Weft::serve(&[]);
    let r = raw_response(&s, b"GET / HTTP/1.1\r\nHost: t\r\nX-Empty:\r\nX-Tab:\t\r\n\r\n");
    assert_eq!(r.status, 200);
}

#[test]
fn the_upstream_age_counts() {
    let (o, p) = origin_and_reverse(&[]);
    // max-age=3600 arriving with Age: 7200 is stale: never a hit.
    let r = get_twice(&p, "/old");
    assert_eq!(o.count("GET /old"), 2, "served stale from the cache");
    assert!(r.header("age").unwrap().parse::<u64>().unwrap() >= 7200);
    // A younger one is a hit whose Age is at least the one received.
    get(&p, "/young");
    std::thread::sleep(Duration::from_millis(1100));
    let r = get(&p, "/young");
    assert_eq!(o.count("GET /young"), 1);
    let ages: Vec<&str> = r
        .headers
        .iter()
        .filter(|(n, _)| n == "Age")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(ages.len(), 1, "one Age field: {:?}", r.headers);
    assert!(ages[0].parse::<u64>().unwrap() >= 101, "{ages:?}");
    // Expires with the origin's Date an hour ahead: the lifetime is
    // Expires − Date (600 s), and the Age received (700 s) exceeds it.
    get_twice(&p, "/skew-stale");
    assert_eq!(o.count("GET /skew-stale"), 2);
    get_twice(&p, "/skew-fresh");
    assert_eq!(
        o.count("GET /skew-fresh"),
        1,
        "a skewed Date does not shorten Expires − Date"
    );
}

/// `weft proxy --listen 127.0.0.1:0 ARGS` run to its exit (a refused configuration).
fn weft_out(args: &[&str]) -> std::process::Output {
    std::process::Command::new(common::weft_bin())
        .args(["proxy", "--listen", "127.0.0.1:0"])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn targeted_cache_control_in_a_surrogate_only() {
    // Reverse mode: CDN-Cache-Control: max-age=60 beats Cache-Control: no-store.
    let (o, p) = origin_and_reverse(&[]);
    let r = get_twice(&p, "/cdn");
    assert_eq!(o.count("GET /cdn"), 1);
    assert_eq!(
        r.header("cdn-cache-control"),
        Some("max-age=60"),
        "passed on downstream"
    );
    // A configured field beats CDN-Cache-Control.
    get_twice(&p, "/weft");
    assert_eq!(
        o.count("GET /weft"),
        1,
        "without the configured name, CDN-Cache-Control rules"
    );
    drop(p);
    let p = reverse(&o, &["--targeted-cache-control", "Weft-Cache-Control"]);
    get_twice(&p, "/weft");
    assert_eq!(o.count("GET /weft"), 3, "Weft-Cache-Control: no-store rules");
    // Forward mode ignores them: Cache-Control: no-store.
    let f = Weft::role("proxy", &["--workers", "1"]);
    let url = format!("http://{}/cdn", o.addr);
    for _ in 0..2 {
        exchange(&f, &format!("GET {url} HTTP/1.1\r\nHost: {}\r\n\r\n", o.addr));
    }
    assert_eq!(o.count("GET /cdn"), 3);
    // A bad name is a one-line error naming the key.
    let out = std::process::Command::new(common::weft_bin())
        .args([
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--targeted-cache-control",
            "Bad Name",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let first = err.lines().next().unwrap_or("");
    assert!(
        first.starts_with("weft: ") && first.contains("--targeted-cache-control"),
        "{err}"
    );
    // And in the config file, the key.
    let d = common::TempDir::new("targeted");
    let cfg = d.write("weft.toml", b"[proxy]\ntargeted-cache-control = \"Weft-Cache\"\n");
    let out = weft_out(&["--config", common::path_str(&cfg)]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("proxy.targeted-cache-control"), "{err}");
}

/// Scenarios run under every event backend the proxy takes.
mod scenarios {
    use super::*;

    /// 103 and 102 reach the client while the origin still holds the final
    /// response; the stored answer has none.
    pub fn interim_responses_are_relayed_first_and_never_cached(event: &str) {
        let (o, p) = origin_and_reverse(&["--event", event]);
        let mut r = Reader::new(p.connect());
        r.send(b"GET /hints HTTP/1.1\r\nHost: o.example\r\n\r\n");
        // Both interim heads arrive while the origin still holds the final one.
        let hints = r.response(false);
        assert_eq!(hints.status, 103);
        assert_eq!(hints.header("link"), Some("</s.css>; rel=preload"));
        assert_eq!(r.response(false).status, 102);
        o.release.store(true, Ordering::SeqCst);
        let fin = r.response(false);
        assert_eq!(fin.status, 200);
        // The hit has no interim response.
        r.send(b"GET /hints HTTP/1.1\r\nHost: o.example\r\n\r\n");
        let hit = r.response(false);
        assert_eq!(hit.status, 200);
        assert!(hit.header("age").is_some());
        assert_eq!(o.count("GET /hints"), 1);
    }
}

per_backend!(untracked: interim_responses_are_relayed_first_and_never_cached);

#[test]
fn accept_encoding_variants_are_keyed_by_what_they_accept() {
    let (o, p) = origin_and_reverse(&[]);
    let ask = |ae: Option<&str>| {
        let field = ae.map(|v| format!("Accept-Encoding: {v}\r\n")).unwrap_or_default();
        exchange(&p, &format!("GET /vary-ae HTTP/1.1\r\nHost: o.example\r\n{field}\r\n"))
    };
    // Browsers listing the same codings in another order, case or weight
    // order share one stored variant.
    ask(Some("gzip, deflate, br"));
    for same in [
        "br, gzip, deflate",
        "GZIP,Deflate , BR",
        "br;q=1.0, gzip;q=0.8, deflate;q=0.1",
    ] {
        let r = ask(Some(same));
        assert!(r.header("age").is_some(), "{same:?}: a hit");
    }
    assert_eq!(o.count("GET /vary-ae"), 1);
    // Another set of codings, an empty field (identity only) and no field
    // (any coding) are variants of their own.
    for other in [
        Some("gzip, deflate, br, zstd"),
        Some("gzip;q=0, br, deflate"),
        Some(""),
        None,
    ] {
        let before = o.count("GET /vary-ae");
        assert_eq!(ask(other).header("age"), None, "{other:?}: a miss");
        assert_eq!(o.count("GET /vary-ae"), before + 1);
        assert!(ask(other).header("age").is_some(), "{other:?}: then stored");
    }
}

#[test]
fn no_cache_with_field_names_reuses_without_them() {
    let (o, p) = origin_and_reverse(&[]);
    let first = get(&p, "/cookie");
    assert_eq!(first.header("set-cookie"), Some("a=1"));
    let hit = get(&p, "/cookie");
    assert_eq!(o.count("GET /cookie"), 1, "reused");
    assert!(hit.header("age").is_some());
    assert_eq!(hit.header("set-cookie"), None, "the named field is withheld");
}

#[test]
fn invalid_hosts_get_400_and_close_in_serve_and_proxy() {
    let (o, p) = origin_and_reverse(&[]);
    let s = Weft::serve(&[]);
    for req in [
        &b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: user@o.example\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: o.example:x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET http://user@o.example/ HTTP/1.1\r\nHost: o.example\r\n\r\n",
    ] {
        for w in [&p, &s] {
            let (r, closed) = raw(w, req);
            assert_eq!(r.status, 400, "{:?}", String::from_utf8_lossy(req));
            assert!(closed, "{:?}", String::from_utf8_lossy(req));
        }
    }
    assert!(o.heads().is_empty(), "nothing forwarded: {:?}", o.heads());
}

#[test]
fn forwarding_hygiene() {
    let (o, p) = origin_and_reverse(&[]);
    // Identical Content-Length fields go out as one.
    let r = exchange(
        &p,
        "POST /post HTTP/1.1\r\nHost: o.example\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
    );
    assert_eq!(r.status, 200);
    let head = &o.heads()[0];
    assert_eq!(head.matches("Content-Length").count(), 1, "{head}");
    assert!(head.contains("Content-Length: 3\r\n"), "{head}");
    // Differing ones, a chunk size followed by whitespace, a path above the
    // root, a NUL: 400 and close, nothing forwarded.
    for req in [
        &b"POST /d HTTP/1.1\r\nHost: o.example\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"[..],
        b"POST /c HTTP/1.1\r\nHost: o.example\r\nTransfer-Encoding: chunked\r\n\r\n3 \r\nabc\r\n0\r\n\r\n",
        b"GET /../etc/passwd HTTP/1.1\r\nHost: o.example\r\n\r\n",
        b"GET /a/%2e%2e/%2e%2e/x HTTP/1.1\r\nHost: o.example\r\n\r\n",
        b"GET /a%00b HTTP/1.1\r\nHost: o.example\r\n\r\n",
    ] {
        let (r, closed) = raw(&p, req);
        assert_eq!(r.status, 400, "{:?}", String::from_utf8_lossy(req));
        assert!(closed, "{:?}", String::from_utf8_lossy(req));
    }
    assert_eq!(o.heads().len(), 1, "{:?}", o.heads());
    // Dot-segments are removed before forwarding (and keying).
    get(&p, "/a/./b/../c");
    assert_eq!(o.count("GET /a/c"), 1, "{:?}", o.heads());
    get(&p, "/a/c");
    assert_eq!(o.count("GET /a/c"), 1, "the same cache entry");
    // weft serve: a 400 for a malformed target closes too.
    let s = Weft::serve(&[]);
    for req in [
        &b"GET /a%00b HTTP/1.1\r\nHost: t\r\n\r\n"[..],
        b"GET /a%zz HTTP/1.1\r\nHost: t\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3 \r\nabc\r\n0\r\n\r\n",
    ] {
        let (r, closed) = raw(&s, req);
        assert_eq!(r.status, 400);
        assert!(closed, "{:?}", String::from_utf8_lossy(req));
    }
}

#[test]
fn unknown_methods_are_forwarded_and_invalidate() {
    let (o, p) = origin_and_reverse(&[]);
    get_twice(&p, "/x");
    assert_eq!(o.count("GET /x"), 1);
    let r = exchange(&p, "PURGE /x HTTP/1.1\r\nHost: o.example\r\nX-Empty:\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(o.count("PURGE /x"), 1);
    get(&p, "/x");
    assert_eq!(o.count("GET /x"), 2, "the unknown method invalidated the stored entry");
    drop(p);
    let p = reverse(&o, &["--forward-unknown-methods", "false"]);
    let r = raw_response(&p, b"PURGE /x HTTP/1.1\r\nHost: o.example\r\n\r\n");
    assert_eq!(r.status, 501);
    assert_eq!(o.count("PURGE /x"), 1);
}

/// Cache poisoning through the Host field (docs/security.md): in forward
/// mode the upstream Host comes from the absolute target, never from the
/// client's Host or X-Forwarded-Host, so a lying Host cannot put a response
/// under another site's key; in reverse mode each Host value is its own key.
#[test]
fn a_lying_host_cannot_poison_another_key() {
    let o = Origin::start();
    let up = o.addr.to_string();
    let fwd = Weft::role("proxy", &["--workers", "1"]);
    let req =
        format!("GET http://{up}/poison HTTP/1.1\r\nHost: evil.example\r\nX-Forwarded-Host: evil.example\r\n\r\n");
    let r = exchange(&fwd, &req);
    assert_eq!(r.status, 200);
    let seen = String::from_utf8_lossy(&r.body).into_owned();
    assert!(seen.contains(&format!("\r\nHost: {up}\r\n")), "{seen}");
    assert!(!seen.contains("\r\nHost: evil.example"), "{seen}");
    let rev = reverse(&o, &[]);
    for host in ["a.example", "b.example", "a.example"] {
        let r = exchange(&rev, &format!("GET /keyed HTTP/1.1\r\nHost: {host}\r\n\r\n"));
        assert_eq!(r.status, 200);
        assert!(
            String::from_utf8_lossy(&r.body).contains(&format!("Host: {host}\r\n")),
            "{host}"
        );
    }
    assert_eq!(o.count("GET /keyed"), 2, "one fetch per Host value, the third a hit");
}

/// An origin for `stale-if-error`: `mode` 0 answers `200 v1` with a
/// Cache-Control chosen by path (all stale at once: `max-age=0`), 1 answers
/// `503 down`, 2 closes the connection without answering.
fn failing_origin(mode: Arc<std::sync::atomic::AtomicUsize>) -> SocketAddr {
    tcp_server(move |mut s| {
        let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
        let mut buf = Vec::new();
        while let Some(head) = common::next_head(&mut s, &mut buf) {
            let path = head.split(' ').nth(1).unwrap_or("/").to_string();
            let answer = match mode.load(Ordering::SeqCst) {
                0 => {
                    let cc = match path.as_str() {
                        "/sie" => "max-age=0, stale-if-error=60\r\nETag: \"e\"",
                        "/sie-no-validators" => "max-age=0, stale-if-error=60",
                        "/must" => "max-age=0, must-revalidate, stale-if-error=60",
                        _ => "max-age=0",
                    };
                    format!("HTTP/1.1 200 OK\r\nCache-Control: {cc}\r\nContent-Length: 2\r\n\r\nv1")
                }
                1 => "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\ndown".to_string(),
                _ => return,
            };
            if s.write_all(answer.as_bytes()).is_err() {
                return;
            }
        }
    })
}

/// RFC 5861 `stale-if-error`: when the origin answers 5xx, or cannot be
/// reached, a stale stored response stands in where the response, the
/// request or the operator (`--stale-if-error`) allows it, and never where
/// `must-revalidate` forbids; the client's connection goes on.
#[test]
fn stale_if_error_stands_in_for_a_failing_origin() {
    let mode = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let o = failing_origin(mode.clone()).to_string();
    let proxy = |extra: &[&str]| {
        let mut args = vec!["proxy", "--listen", "127.0.0.1:0", "--upstream", &o, "--stats-on-exit"];
        args.extend_from_slice(extra);
        Weft::start(&args)
    };
    let get = |r: &mut Reader, path: &str, extra: &str| {
        r.send(format!("GET {path} HTTP/1.1\r\nHost: h\r\n{extra}\r\n").as_bytes());
        r.response_any(false).unwrap()
    };
    let connect = |p: &Weft| {
        let s = TcpStream::connect(p.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Reader::new(s)
    };
    let paths = ["/sie", "/sie-no-validators", "/must", "/plain"];
    let p = proxy(&[]);
    let mut r = connect(&p);
    mode.store(0, Ordering::SeqCst);
    for path in paths {
        assert_eq!(get(&mut r, path, "").body, b"v1", "{path}");
    }
    // 503 from the origin, then no answer at all (502).
    for (m, error) in [(1, 503), (2, 502)] {
        mode.store(m, Ordering::SeqCst);
        for path in ["/sie", "/sie-no-validators"] {
            let resp = get(&mut r, path, "");
            assert_eq!((resp.status, &resp.body[..]), (200, &b"v1"[..]), "{path} mode {m}");
            assert!(resp.header("age").is_some(), "{path}: a stored response has its Age");
        }
        assert_eq!(get(&mut r, "/must", "").status, error, "must-revalidate forbids it");
        assert_eq!(get(&mut r, "/plain", "").status, error, "not asked for");
        // The client may ask for it itself.
        let asked = get(&mut r, "/plain", "Cache-Control: stale-if-error=60\r\n");
        assert_eq!((asked.status, &asked.body[..]), (200, &b"v1"[..]), "mode {m}");
        // A stale answer is not a refreshed one: the origin is asked again.
        mode.store(0, Ordering::SeqCst);
        assert_eq!(get(&mut r, "/plain", "").status, 200);
        mode.store(m, Ordering::SeqCst);
    }
    drop(r);
    let stats = common::stop_stats(p);
    assert_eq!(common::counter(&stats, "stale_if_error"), 6, "{stats}");
    // The operator's default covers responses that do not say.
    let p = proxy(&["--stale-if-error", "1m"]);
    let mut r = connect(&p);
    mode.store(0, Ordering::SeqCst);
    assert_eq!(get(&mut r, "/plain", "").body, b"v1");
    assert_eq!(get(&mut r, "/must", "").body, b"v1");
    mode.store(1, Ordering::SeqCst);
    let resp = get(&mut r, "/plain", "");
    assert_eq!((resp.status, &resp.body[..]), (200, &b"v1"[..]));
    assert_eq!(get(&mut r, "/must", "").status, 503);
    // A client that asks for a validated response gets the error.
    assert_eq!(get(&mut r, "/plain", "Cache-Control: no-cache\r\n").status, 503);
}

/// An origin for `stale-while-revalidate`: it answers `v{version}` with
/// ETag `"v{version}"` (a 304 to an If-None-Match naming it) and a
/// Cache-Control chosen by path (all stale at once: `max-age=0`); while
/// `hold` is set it answers nothing (up to 20 s), so a client that waited
/// for it would time out. Every request head is recorded.
struct SwrOrigin {
    addr: SocketAddr,
    version: Arc<std::sync::atomic::AtomicUsize>,
    hold: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<String>>>,
}

fn swr_origin() -> SwrOrigin {
    let version = Arc::new(std::sync::atomic::AtomicUsize::new(1));
    let hold = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Vec::new()));
    let (v, h, l) = (version.clone(), hold.clone(), log.clone());
    let addr = tcp_server(move |mut s| {
        let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
        let mut buf = Vec::new();
        while let Some(head) = common::next_head(&mut s, &mut buf) {
            l.lock().unwrap().push(head.clone());
            for _ in 0..2000 {
                if !h.load(Ordering::SeqCst) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let path = head.split(' ').nth(1).unwrap_or("/").to_string();
            let cc = match path.as_str() {
                "/swr" => "max-age=0, stale-while-revalidate=60",
                "/swr-must" => "max-age=0, must-revalidate, stale-while-revalidate=60",
                p if p.starts_with("/fresh") => "max-age=3600",
                _ => "max-age=0",
            };
            let tag = format!("\"v{}\"", v.load(Ordering::SeqCst));
            let matched = head.lines().any(|line| {
                let lower = line.to_ascii_lowercase();
                lower.starts_with("if-none-match:") && line.contains(&tag)
            });
            let answer = if matched {
                format!("HTTP/1.1 304 Not Modified\r\nCache-Control: {cc}\r\nETag: {tag}\r\n\r\n")
            } else if path == "/big" {
                // 300,000 bytes of the version's digit, chunked.
                let digit = tag.trim_matches('"').trim_start_matches('v').to_string();
                let chunk = digit.repeat(100_000);
                let mut a = format!(
                    "HTTP/1.1 200 OK\r\nCache-Control: {cc}\r\nETag: {tag}\r\nTransfer-Encoding: chunked\r\n\r\n"
                );
                for _ in 0..3 {
                    a.push_str(&format!("{:x}\r\n{chunk}\r\n", chunk.len()));
                }
                a.push_str("0\r\n\r\n");
                a
            } else {
                let body = tag.trim_matches('"');
                format!(
                    "HTTP/1.1 200 OK\r\nCache-Control: {cc}\r\nETag: {tag}\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
            };
            if s.write_all(answer.as_bytes()).is_err() {
                return;
            }
        }
    });
    SwrOrigin {
        addr,
        version,
        hold,
        log,
    }
}

/// RFC 5861 `stale-while-revalidate`: a stale stored response within its
/// window answers at once (the origin is held: a client that waited for it
/// would time out) while one background request per object revalidates it;
/// the next requests get what that stored (a 200's new body, or the object
/// a 304 refreshed). `must-revalidate`, a client's `no-cache` and responses
/// that do not ask (unless `--stale-while-revalidate` says so) are
/// revalidated in the foreground as before.
#[test]
fn stale_while_revalidate_answers_at_once_and_refreshes_in_the_background() {
    let o = swr_origin();
    let upstream = o.addr.to_string();
    let proxy = |extra: &[&str]| {
        let mut args = vec![
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &upstream,
            "--stats-on-exit",
        ];
        args.extend_from_slice(extra);
        Weft::start(&args)
    };
    let connect = |p: &Weft| {
        let s = TcpStream::connect(p.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Reader::new(s)
    };
    let get = |r: &mut Reader, path: &str, extra: &str| {
        r.send(format!("GET {path} HTTP/1.1\r\nHost: h\r\n{extra}\r\n").as_bytes());
        r.response_any(false).unwrap()
    };
    let origin_requests = |path: &str| {
        let line = format!("GET {path} ");
        o.log.lock().unwrap().iter().filter(|h| h.starts_with(&line)).count()
    };
    // Poll (bounded) until the proxy serves `want` for `path`.
    let until_body = |r: &mut Reader, path: &str, want: &[u8]| {
        for _ in 0..200 {
            if get(r, path, "").body == want {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("{path} never became {}", String::from_utf8_lossy(want));
    };

    let p = proxy(&[]);
    let mut r = connect(&p);
    for path in ["/swr", "/swr-must", "/plain"] {
        assert_eq!(get(&mut r, path, "").body, b"v1", "{path}");
    }
    // The object changes at the origin, which is slow to answer now.
    o.version.store(2, Ordering::SeqCst);
    o.hold.store(true, Ordering::SeqCst);
    let stale = get(&mut r, "/swr", "Range: bytes=0-0\r\nIf-None-Match: \"x\"\r\n");
    assert_eq!(
        (stale.status, &stale.body[..]),
        (206, &b"v"[..]),
        "answered from the stale object"
    );
    assert!(stale.header("age").is_some());
    for _ in 0..3 {
        let again = get(&mut r, "/swr", "");
        assert_eq!((again.status, &again.body[..]), (200, &b"v1"[..]));
    }
    // only-if-cached may have it too: the response permits stale answers.
    let cached_only = get(&mut r, "/swr", "Cache-Control: only-if-cached\r\n");
    assert_eq!((cached_only.status, &cached_only.body[..]), (200, &b"v1"[..]));
    assert_eq!(
        get(&mut r, "/swr-must", "Cache-Control: only-if-cached\r\n").status,
        504
    );
    o.hold.store(false, Ordering::SeqCst);
    until_body(&mut r, "/swr", b"v2");
    // One background request for the five stale answers, with the stored
    // validator and none of the client's conditionals.
    let background: Vec<String> = {
        let log = o.log.lock().unwrap();
        log.iter()
            .filter(|h| h.starts_with("GET /swr "))
            .skip(1)
            .take(1)
            .cloned()
            .collect()
    };
    let bg = background[0].to_ascii_lowercase();
    assert!(bg.contains("if-none-match: \"v1\""), "{bg}");
    assert!(!bg.contains("range:") && !bg.contains("\"x\""), "{bg}");
    // A 304 refreshes the object (the version did not change).
    let before = origin_requests("/swr");
    assert_eq!(get(&mut r, "/swr", "").body, b"v2");
    for _ in 0..200 {
        if origin_requests("/swr") > before {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // must-revalidate, and a client that asks for a validated response:
    // the foreground, where the new version shows at once.
    assert_eq!(get(&mut r, "/swr-must", "").body, b"v2");
    assert_eq!(get(&mut r, "/plain", "").body, b"v2", "the response did not ask");
    o.version.store(3, Ordering::SeqCst);
    assert_eq!(get(&mut r, "/swr", "Cache-Control: no-cache\r\n").body, b"v3");
    drop(r);
    let stats = common::stop_stats(p);
    assert!(common::counter(&stats, "stale_while_revalidate") >= 6, "{stats}");
    let started = common::counter(&stats, "background_revalidations");
    assert!(
        started < common::counter(&stats, "stale_while_revalidate"),
        "one at a time: {stats}"
    );
    assert!(started >= 2, "{stats}");
    assert!(
        common::counter(&stats, "revalidated") >= 1,
        "a 304 refreshed it: {stats}"
    );
    assert_eq!(common::counter(&stats, "sessions_client_abort"), 0, "{stats}");

    // The operator's default covers responses that do not say; a large
    // chunked body is read into the cache by the background request under
    // every splice mode (nothing is sent, so it is copied).
    for splice in ["auto", "on", "sockmap"] {
        let p = proxy(&["--stale-while-revalidate", "1m", "--splice", splice]);
        let mut r = connect(&p);
        let version = o.version.load(Ordering::SeqCst);
        let digit = |v: usize| v.to_string().repeat(300_000).into_bytes();
        assert_eq!(get(&mut r, "/plain", "").body, format!("v{version}").as_bytes());
        assert_eq!(get(&mut r, "/big", "").body, digit(version));
        o.version.store(version + 1, Ordering::SeqCst);
        o.hold.store(true, Ordering::SeqCst);
        assert_eq!(
            get(&mut r, "/plain", "").body,
            format!("v{version}").as_bytes(),
            "stale, at once"
        );
        assert_eq!(get(&mut r, "/big", "").body, digit(version), "stale, at once");
        o.hold.store(false, Ordering::SeqCst);
        until_body(&mut r, "/plain", format!("v{}", version + 1).as_bytes());
        until_body(&mut r, "/big", &digit(version + 1));
        drop(r);
        let stats = common::stop_stats(p);
        assert_eq!(common::counter(&stats, "sessions_client_abort"), 0, "{splice}: {stats}");
        assert_eq!(common::counter(&stats, "open_connections"), 0, "{splice}: {stats}");
    }
}

/// The admin endpoint's purge: `POST /purge/URL` removes one URL's stored
/// responses, `POST /purge-prefix/URL` every URL under it, in memory and on
/// disk (a restart on the cache directory does not bring them back); the
/// others stay hits.
#[test]
fn purge_removes_stored_responses_from_both_tiers() {
    let o = swr_origin();
    let upstream = o.addr.to_string();
    let dir = common::TempDir::new("purge");
    let cache_dir = dir.path.to_str().unwrap().to_string();
    // Two workers: the second GET of a path may reach the other one, and
    // finds the object, stored before the first GET's last byte left.
    let proxy = || {
        let args = ["proxy", "--listen", "127.0.0.1:0", "--upstream", &upstream];
        let mut args = args.to_vec();
        args.extend(["--workers", "2", "--admin", "127.0.0.1:0"]);
        args.extend(["--cache-dir", &cache_dir, "--stats-on-exit"]);
        Weft::start(&args)
    };
    let get = |p: &Weft, path: &str| {
        let mut r = Reader::new(TcpStream::connect(p.addr).unwrap());
        r.send(format!("GET {path} HTTP/1.1\r\nHost: h\r\n\r\n").as_bytes());
        let resp = r.response_any(false).unwrap();
        assert_eq!(resp.status, 200, "{path}");
    };
    let asked = |path: &str| {
        let line = format!("GET {path} ");
        o.log.lock().unwrap().iter().filter(|h| h.starts_with(&line)).count()
    };
    let post = |p: &Weft, path: &str| {
        let admin = p.admin.expect("admin").to_string();
        let request = format!("POST {path} HTTP/1.1\r\nHost: admin\r\nContent-Length: 0\r\n\r\n");
        let out = common::exchange_until_close(&admin, &request);
        out.split("\r\n\r\n").nth(1).unwrap_or("").trim().to_string()
    };
    let paths = ["/fresh/1", "/fresh/2", "/fresh/x/3", "/fresh-kept", "/stale/4"];
    let p = proxy();
    for path in paths.iter().chain(&paths) {
        get(&p, path);
    }
    // /stale/4 is max-age=0: revalidated each time; the others were hits.
    assert_eq!(paths[..4].iter().map(|p| asked(p)).collect::<Vec<_>>(), [1, 1, 1, 1]);
    assert_eq!(post(&p, "/purge/http://H:80/fresh/1"), "{\"purged\":1}");
    get(&p, "/fresh/1");
    get(&p, "/fresh/2");
    assert_eq!(
        (asked("/fresh/1"), asked("/fresh/2")),
        (2, 1),
        "only /fresh/1 was purged"
    );
    assert_eq!(post(&p, "/purge-prefix/http://h/fresh/"), "{\"purged\":3,\"keys\":3}");
    assert!(post(&p, "/purge/ftp://h/x").contains("error"));
    // Written to disk before the purge (the writer runs behind): wait for
    // the stop, which finishes queued writes, then restart on the directory.
    let stats = common::stop_stats(p);
    assert!(stats.contains("\"disk\""), "{stats}");
    let p = proxy();
    // The index is built while the proxy already listens: wait for it.
    let scanned = || p.stderr().contains(" indexed in ");
    assert!(common::wait_until(Duration::from_secs(10), scanned), "{}", p.stderr());
    get(&p, "/fresh/2");
    get(&p, "/fresh/x/3");
    assert_eq!((asked("/fresh/2"), asked("/fresh/x/3")), (2, 2), "not back from disk");
    get(&p, "/fresh-kept");
    assert_eq!(
        asked("/fresh-kept"),
        1,
        "what was not purged comes back from disk: {}\n{}",
        common::fetch(&p.admin.expect("admin").to_string(), "/stats"),
        p.stderr()
    );
}

/// `--cache-status` (RFC 9211): each answer says what the cache did, under
/// the `--via-name`; without the flag nothing is added.
#[test]
fn cache_status_says_what_the_cache_did() {
    let o = swr_origin();
    let upstream = o.addr.to_string();
    let proxy = |extra: &[&str]| {
        let mut args = vec!["proxy", "--listen", "127.0.0.1:0", "--upstream", &upstream];
        args.extend_from_slice(extra);
        Weft::start(&args)
    };
    let p = proxy(&[
        "--cache-status",
        "--via-name",
        "edge-1",
        "--stale-while-revalidate",
        "1m",
    ]);
    let mut r = Reader::new(TcpStream::connect(p.addr).unwrap());
    let mut status = |method: &str, path: &str| {
        let body = if method == "POST" { "Content-Length: 0\r\n" } else { "" };
        r.send(format!("{method} {path} HTTP/1.1\r\nHost: h\r\n{body}\r\n").as_bytes());
        let resp = r.response_any(false).unwrap();
        resp.header("cache-status").unwrap_or("(none)").to_string()
    };
    assert_eq!(
        status("GET", "/fresh/cs"),
        "\"edge-1\"; fwd=miss; fwd-status=200; stored"
    );
    let hit = status("GET", "/fresh/cs");
    assert!(hit.starts_with("\"edge-1\"; hit; ttl=3"), "{hit}");
    // Stale (max-age=0): answered while revalidated in the background.
    assert_eq!(status("GET", "/plain"), "\"edge-1\"; fwd=miss; fwd-status=200; stored");
    let stale = status("GET", "/plain");
    assert!(stale.ends_with("; detail=stale-while-revalidate"), "{stale}");
    assert!(
        stale.starts_with("\"edge-1\"; hit; ttl=-") || stale.contains("ttl=0"),
        "{stale}"
    );
    // must-revalidate: revalidated in the foreground, a 304 refreshed it.
    assert_eq!(
        status("GET", "/swr-must"),
        "\"edge-1\"; fwd=miss; fwd-status=200; stored"
    );
    assert_eq!(
        status("GET", "/swr-must"),
        "\"edge-1\"; fwd=stale; fwd-status=304; stored"
    );
    assert_eq!(status("POST", "/fresh/cs"), "\"edge-1\"; fwd=bypass; fwd-status=200");
    let p = proxy(&[]);
    let mut r = Reader::new(TcpStream::connect(p.addr).unwrap());
    r.send(b"GET /fresh/cs HTTP/1.1\r\nHost: h\r\n\r\n");
    assert!(r.response_any(false).unwrap().header("cache-status").is_none());
}
