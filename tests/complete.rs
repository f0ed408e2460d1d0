//! Issue 22: a port another process holds is refused (serve, proxy, origin)
//! unless `--reuse-port` asks to share it; and every response weft writes
//! itself is complete: `Date` and `Server`, a short text body on a 4xx/5xx
//! (not to HEAD), `Age` only on answers from a stored response, and 304s with
//! only the fields RFC 9110 §15.4.5 lists. Heads are read byte for byte over
//! raw sockets. The rules live in the shared head writer, not in a backend:
//! these run on the default one.

use crate::common;

use common::*;
use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

// ----------------------------------------------------------------------
// The port

/// Start `weft <role> --listen addr <extra>` expecting it to fail at once:
/// its exit code and stderr.
fn refused(role: &str, addr: &str, extra: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(weft_bin())
        .args([role, "--listen", addr])
        .args(extra)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            return (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("weft {role} on a held port {addr} kept running");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn start_role(role: &str, extra: &[&str]) -> Weft {
    let mut args = vec![role, "--listen", "127.0.0.1:0", "--workers", "2"];
    args.extend_from_slice(extra);
    Weft::start(&args)
}

#[test]
fn a_second_process_on_a_bound_port_is_refused() {
    for role in ["serve", "proxy", "origin"] {
        let first = start_role(role, &[]);
        let addr = first.addr.to_string();
        // The same role, and the others, are refused with one line and status 1
        // (a start-up failure, as `cannot listen on` always was).
        for second in ["serve", "proxy", "origin"] {
            let (code, err) = refused(second, &addr, &[]);
            assert_eq!(code, Some(1), "{second} on {role}'s port: {err}");
            assert_eq!(
                err,
                format!("weft: address already in use: {addr}\n"),
                "{second} on {role}'s port"
            );
        }
        // The first one still answers alone.
        let mut c = Reader::new(first.connect());
        c.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n");
        let _ = c.response(false);
    }
    // A port held by another program (a listener without SO_REUSEPORT).
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = other.local_addr().unwrap().to_string();
    for role in ["serve", "proxy", "origin"] {
        let (code, err) = refused(role, &addr, &["--reuse-port"]);
        assert_eq!(code, Some(1), "{role}: {err}");
        assert_eq!(err, format!("weft: address already in use: {addr}\n"));
    }
}

#[test]
fn reuse_port_lets_several_processes_share_a_port() {
    for role in ["serve", "proxy", "origin"] {
        let first = start_role(role, &[]);
        let addr = first.addr.to_string();
        let second = Weft::start(&[role, "--listen", &addr, "--reuse-port", "--workers", "2"]);
        assert_eq!(second.addr, first.addr);
        let third = Weft::start(&[role, "--listen", &addr, "--reuse-port=true"]);
        assert_eq!(third.addr, first.addr);
        // Still refused to one that does not ask.
        assert_eq!(refused(role, &addr, &[]).0, Some(1));
    }
    // The config key.
    let dir = TempDir::new("reuse-port");
    let first = start_role("serve", &[]);
    let cfg = dir.write("weft.toml", b"[serve]\nreuse-port = true\n");
    let addr = first.addr.to_string();
    let second = Weft::start(&["serve", "--listen", &addr, "--config", path_str(&cfg)]);
    assert_eq!(second.addr, first.addr);
}

// ----------------------------------------------------------------------
// Responses weft writes itself

/// The fields a 304 may carry: RFC 9110 §15.4.5's list, Last-Modified
/// without an ETag, the response's own metadata (Server, a proxy's Via),
/// Age from a cache, and the connection's.
fn check_304(r: &Response, what: &str) {
    assert_eq!(r.status, 304, "{what}");
    let has_etag = r.header("etag").is_some();
    for (name, _) in &r.headers {
        let n = name.to_ascii_lowercase();
        let listed = [
            "cache-control",
            "content-location",
            "date",
            "etag",
            "expires",
            "vary",
            "server",
            "via",
            "age",
            "connection",
        ]
        .contains(&n.as_str());
        assert!(
            listed || (n == "last-modified" && !has_etag),
            "{what}: a 304 carries {name}: {:?}",
            r.headers
        );
    }
    assert!(
        r.header("date").is_some() && r.header("server").is_some(),
        "{what}: {:?}",
        r.headers
    );
}

/// A response weft generated: `status`, Date and Server, no Age, and for a
/// 4xx/5xx a short text body saying what was wrong (`head`: the request was
/// a HEAD, whose answer has none; the reader did not read one).
fn check_generated(r: &Response, status: u16, head: bool, what: &str) {
    assert_eq!(r.status, status, "{what}: {:?}", r.headers);
    assert!(r.header("date").is_some(), "{what}: no Date: {:?}", r.headers);
    assert!(r.header("server").is_some(), "{what}: no Server: {:?}", r.headers);
    assert_eq!(r.header("age"), None, "{what}: a generated answer has no Age");
    if status >= 400 {
        assert!(
            r.header("content-type").is_some_and(|t| t.starts_with("text/plain")),
            "{what}: {:?}",
            r.headers
        );
        let len: usize = r.header("content-length").unwrap().parse().unwrap();
        assert!(len > 0, "{what}: the length of the text is announced");
        if !head {
            let text = String::from_utf8_lossy(&r.body);
            assert!(!text.is_empty(), "{what}: no body");
            if r.header("server") == Some("weft") {
                // "404 Not Found\n", "400 Bad Request: <what was wrong>\n"
                assert!(text.starts_with(&status.to_string()), "{what}: body {text:?}");
            }
        }
    }
}

/// `request` on a fresh connection; the response, read as the answer to a
/// HEAD when `head`.
fn exchange(addr: std::net::SocketAddr, request: &str, head: bool) -> Response {
    ask(addr, request.as_bytes(), head).1
}

/// [`exchange`], and whether the connection then closed with nothing more
/// (a HEAD answer whose body had been sent would show here). Waits up to
/// 5 s for the close: only for answers that must close.
fn exchange_closed(addr: std::net::SocketAddr, request: &str, head: bool) -> (Response, bool) {
    let (mut r, resp) = ask(addr, request.as_bytes(), head);
    (resp, r.closed())
}

/// A HEAD on a kept-alive connection, then a GET on the same connection: the
/// GET's answer parses only if the HEAD's had no body.
fn head_then_get(addr: std::net::SocketAddr, head: &str, get: &str) -> (Response, Response) {
    let s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut r = Reader::new(s);
    r.send(head.as_bytes());
    let h = r.response(true);
    r.send(get.as_bytes());
    (h, r.response(false))
}

#[test]
fn serve_generated_responses_are_complete() {
    let site = site();
    let w = Weft::serve(&[path_str(&site.path), "--workers", "1"]);
    let get = |extra: &str| {
        let mut c = Reader::new(w.connect());
        c.send(format!("GET /hello.txt HTTP/1.1\r\nHost: t\r\n{extra}\r\n").as_bytes());
        c.response(false)
    };
    let ok = get("");
    let etag = ok.header("etag").unwrap().to_string();
    let lm = ok.header("last-modified").unwrap().to_string();
    // 304: only the listed fields (no Content-Type, no Last-Modified beside the ETag).
    let r = get(&format!("If-None-Match: {etag}\r\n"));
    check_304(&r, "serve 304 (If-None-Match)");
    assert_eq!(r.header("content-type"), None);
    assert_eq!(r.header("last-modified"), None);
    check_304(
        &get(&format!("If-Modified-Since: {lm}\r\n")),
        "serve 304 (If-Modified-Since)",
    );
    check_generated(&get("If-Match: \"nope\"\r\n"), 412, false, "serve 412");
    let r = get("Range: bytes=100-200\r\n");
    check_generated(&r, 416, false, "serve 416");
    assert_eq!(r.header("content-range"), Some("bytes */12"));
    let w_addr = w.addr;
    let long = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(9000));
    let many: String = (0..120).map(|i| format!("X-{i}: v\r\n")).collect();
    for (request, status, what) in [
        ("GET /nope HTTP/1.1\r\nHost: t\r\n\r\n".to_string(), 404, "404"),
        ("GET /noindex/ HTTP/1.1\r\nHost: t\r\n\r\n".to_string(), 403, "403"),
        (
            "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n".to_string(),
            405,
            "405",
        ),
        ("GET / HTTP/1.1\r\nBad Header\r\n\r\n".to_string(), 400, "400"),
        (long, 414, "414"),
        (format!("GET / HTTP/1.1\r\nHost: t\r\n{many}\r\n"), 431, "431"),
        ("FROB / HTTP/1.1\r\nHost: t\r\n\r\n".to_string(), 501, "501"),
    ] {
        let r = exchange(w_addr, &request, false);
        check_generated(&r, status, false, &format!("serve {what}"));
    }
    // To HEAD: the same heads, no body (the next answer on the connection parses).
    let next = "GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n";
    for (head, status) in [
        ("HEAD /nope HTTP/1.1\r\nHost: t\r\n\r\n".to_string(), 404),
        ("HEAD /noindex/ HTTP/1.1\r\nHost: t\r\n\r\n".to_string(), 403),
        (
            "HEAD /hello.txt HTTP/1.1\r\nHost: t\r\nIf-Match: \"nope\"\r\n\r\n".to_string(),
            412,
        ),
    ] {
        let (h, after) = head_then_get(w_addr, &head, next);
        check_generated(&h, status, true, &format!("serve HEAD {status}"));
        assert_eq!((after.status, &after.body[..]), (200, &b"hello, weft\n"[..]));
    }
    let (h, after) = head_then_get(
        w_addr,
        &format!("HEAD /hello.txt HTTP/1.1\r\nHost: t\r\nIf-None-Match: {etag}\r\n\r\n"),
        next,
    );
    check_304(&h, "serve HEAD 304");
    assert_eq!(after.status, 200);
}

/// A proxy in front of `weft origin`, and the origin.
fn proxy_and_origin() -> (Weft, Weft) {
    let origin = Weft::role("origin", &[]);
    let proxy = Weft::role("proxy", &["--workers", "1"]);
    (proxy, origin)
}

fn via_proxy(p: &Weft, method: &str, url: &str, extra: &str) -> Response {
    let mut c = Reader::new(p.connect());
    c.send(format!("{method} {url} HTTP/1.1\r\nHost: x\r\n{extra}\r\n").as_bytes());
    c.response(method == "HEAD")
}

#[test]
fn proxy_answers_from_the_cache_are_complete() {
    let (p, o) = proxy_and_origin();
    let url = format!("http://{}/size/1000/c600/a.gif", o.addr);
    // Miss: relayed, stored.
    let miss = via_proxy(&p, "GET", &url, "");
    assert_eq!(miss.status, 200);
    assert_eq!(miss.header("age"), None);
    let etag = miss.header("etag").unwrap().to_string();
    // Hits: Age on the 200, 206 and 304 derived from the stored response.
    let hit = via_proxy(&p, "GET", &url, "");
    assert_eq!(hit.status, 200);
    assert!(hit.header("age").is_some(), "{:?}", hit.headers);
    let part = via_proxy(&p, "GET", &url, "Range: bytes=0-9\r\n");
    assert_eq!(part.status, 206);
    assert!(part.header("age").is_some());
    let r = via_proxy(&p, "GET", &url, &format!("If-None-Match: {etag}\r\n"));
    check_304(&r, "proxy 304 from the cache");
    assert!(r.header("age").is_some(), "{:?}", r.headers);
    assert_eq!(r.header("content-type"), None);
    assert_eq!(r.header("last-modified"), None, "beside an ETag");
    let r = via_proxy(&p, "HEAD", &url, &format!("If-None-Match: {etag}\r\n"));
    check_304(&r, "proxy 304 to HEAD");
    // 416 from the cache: generated, so Date, Server, a body, no Age.
    let r = via_proxy(&p, "GET", &url, "Range: bytes=5000-\r\n");
    check_generated(&r, 416, false, "proxy 416 from the cache");
    assert_eq!(r.header("content-range"), Some("bytes */1000"));
    assert_eq!(r.header("server"), Some("weft"));
    // If-Match / If-Unmodified-Since are the origin's to evaluate (RFC 9111
    // §4.3.2): forwarded, so the 412 is the origin's, and a match is a fresh
    // 200 from it (no Age), not a hit.
    let r = via_proxy(&p, "GET", &url, "If-Match: \"nope\"\r\n");
    check_generated(&r, 412, false, "412 to If-Match through the proxy");
    assert_eq!(r.header("server"), Some("weft-origin"), "answered by the origin");
    let r = via_proxy(&p, "GET", &url, &format!("If-Match: {etag}\r\n"));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("age"), None, "forwarded, not a hit: {:?}", r.headers);
    let r = via_proxy(
        &p,
        "GET",
        &url,
        "If-Unmodified-Since: Sat, 01 Jan 2000 00:00:00 GMT\r\n",
    );
    assert_eq!(r.status, 412);
    assert_eq!(r.header("server"), Some("weft-origin"));
    assert_eq!(r.header("age"), None);
    // The entry is still served from the cache afterwards.
    assert!(via_proxy(&p, "GET", &url, "").header("age").is_some());
    // The origin's own 304 follows the same rule.
    let mut c = Reader::new(o.connect());
    c.send(format!("GET /size/1000/c600/a.gif HTTP/1.1\r\nHost: t\r\nIf-None-Match: {etag}\r\n\r\n").as_bytes());
    check_304(&c.response(false), "origin 304");
}

#[test]
fn proxy_errors_are_complete() {
    let (p, o) = proxy_and_origin();
    let down_port = ClosedPort::new();
    let down = down_port.addr;
    let long = format!("GET http://{}/{} HTTP/1.1\r\nHost: x\r\n\r\n", o.addr, "a".repeat(9000));
    let many: String = (0..120).map(|i| format!("X-{i}: v\r\n")).collect();
    for (request, status, what) in [
        (
            "GET /x HTTP/1.1\r\nHost: x\r\n\r\n".to_string(),
            400,
            "origin-form to a forward proxy",
        ),
        ("GET / HTTP/1.1\r\nBad Header\r\n\r\n".to_string(), 400, "malformed"),
        (
            format!("CONNECT {}:25 HTTP/1.1\r\nHost: x\r\n\r\n", o.addr.ip()),
            403,
            "CONNECT port",
        ),
        (long, 414, "414"),
        (
            format!("GET http://{}/ HTTP/1.1\r\nHost: x\r\n{many}\r\n", o.addr),
            431,
            "431",
        ),
        // (Unknown methods are forwarded: an unknown transfer coding is 501.)
        (
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n".to_string(),
            501,
            "501",
        ),
        (
            format!("GET http://{down}/x HTTP/1.1\r\nHost: x\r\n\r\n"),
            502,
            "origin down",
        ),
        (
            format!(
                "GET http://{}/size/10/x HTTP/1.1\r\nHost: x\r\nCache-Control: only-if-cached\r\n\r\n",
                o.addr
            ),
            504,
            "only-if-cached",
        ),
    ] {
        let r = exchange(p.addr, &request, false);
        check_generated(&r, status, false, &format!("proxy {what}"));
        assert_eq!(r.header("server"), Some("weft"), "proxy {what}");
    }
    // To HEAD: no body. A refusal closes the connection right after its head;
    // the others keep it, and the next answer parses. (An only-if-cached
    // miss is an answer, not a refusal: its connection stays open.)
    let (h, closed) = exchange_closed(p.addr, "HEAD /x HTTP/1.1\r\nHost: x\r\n\r\n", true);
    check_generated(&h, 400, true, "proxy HEAD 400");
    assert!(closed, "nothing follows the head");
    let next = format!("GET http://{}/size/10/x HTTP/1.1\r\nHost: x\r\n\r\n", o.addr);
    let (h, after) = head_then_get(
        p.addr,
        &format!(
            "HEAD http://{}/size/11/x HTTP/1.1\r\nHost: x\r\nCache-Control: only-if-cached\r\n\r\n",
            o.addr
        ),
        &next,
    );
    check_generated(&h, 504, true, "proxy HEAD 504");
    assert_eq!(after.status, 200);
    assert_eq!(after.body.len(), 10);
    let (h, after) = head_then_get(
        p.addr,
        &format!("HEAD http://{down}/x HTTP/1.1\r\nHost: x\r\n\r\n"),
        &next,
    );
    check_generated(&h, 502, true, "proxy HEAD 502");
    assert_eq!(after.status, 200);
    assert_eq!(after.body.len(), 10);
    // Reverse mode: CONNECT is 405.
    let reverse_to = |up: String| Weft::role("proxy", &["--workers", "1", "--upstream", &up]);
    let rev = reverse_to(o.addr.to_string());
    let r = exchange(rev.addr, "CONNECT example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n", false);
    check_generated(&r, 405, false, "proxy 405");
    // The origin down in reverse mode: 502 with Date, Server and a body.
    let dead = reverse_to(down.to_string());
    let r = exchange(dead.addr, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n", false);
    check_generated(&r, 502, false, "reverse proxy, origin down");
}
