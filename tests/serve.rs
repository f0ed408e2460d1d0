//! Integration tests of `weft serve`: the real binary on port 0, raw sockets and
//! curl as clients. Every scenario runs once per event backend (`per_backend!`),
//! so a backend can never silently break the server.

use crate::common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Each scenario takes the backend name.
mod scenarios {
    use super::*;

    /// `weft serve ROOT --event EVENT --workers 1 ARGS`.
    fn one_worker(root: &TempDir, event: &str, args: &[&str]) -> Weft {
        let mut all = vec![path_str(&root.path), "--event", event, "--workers", "1"];
        all.extend(args);
        Weft::serve(&all)
    }

    /// A client that half-closes right after its pipelined requests (the FIN
    /// arrives with them): every response is still delivered, and the server
    /// closes as soon as it has answered, not at the idle timeout
    /// (edge-triggered backends report that FIN only once).
    pub fn half_close_after_pipelining(event: &str) {
        let site = site();
        let w = one_worker(&site, event, &["--idle-timeout", "60s"]);
        let mut c = Reader::new(w.connect());
        c.stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        // Once the server has accepted and found nothing to read, the requests
        // and the FIN arrive in one segment: one event.
        std::thread::sleep(Duration::from_millis(50));
        send_with_fin(
            &mut c.stream,
            b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n",
        );
        let t0 = Instant::now();
        assert_eq!(c.response(false).body, b"hello, weft\n");
        let last = c.response(false);
        assert_eq!(last.status, 200);
        assert!(last.body == pattern(3 * 1024 * 1024 + 17), "the last response is whole");
        assert!(c.closed(), "{event}: the server closes after answering");
        let took = t0.elapsed();
        assert!(
            took < Duration::from_secs(10),
            "{event}: closed after {took:?}, not promptly"
        );
    }

    pub fn get_and_head(event: &str) {
        let site = site();
        let w = Weft::serve(&[path_str(&site.path), "--event", event, "--workers", "1"]);
        let r = get(&w, "/hello.txt");
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"hello, weft\n");
        assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
        assert_eq!(r.header("content-length"), Some("12"));
        assert!(r.header("etag").unwrap().starts_with('"'));
        assert!(r.header("last-modified").unwrap().ends_with("GMT"));
        assert!(r.header("date").unwrap().ends_with("GMT"));
        let mut c = Reader::new(w.connect());
        c.send(b"HEAD /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        let h = c.response(true);
        assert_eq!(h.status, 200);
        assert_eq!(h.header("content-length"), Some("12"));
        // The connection is still usable and no body bytes were sent for HEAD.
        c.send(b"GET /one.bin HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(c.response(false).body, b"x");
        let r = get(&w, "/");
        assert_eq!(r.body, b"<h1>home</h1>\n");
        assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
        let r = get(&w, "/empty.bin");
        assert_eq!(r.status, 200);
        assert!(r.body.is_empty());
    }

    pub fn keepalive_and_pipelining(event: &str) {
        keepalive_and_pipelining_with(event, &[]);
    }

    pub fn keepalive_and_pipelining_with(event: &str, extra: &[&str]) {
        let site = site();
        let w = Weft::serve(&[&[path_str(&site.path), "--event", event, "--workers", "1"], extra].concat());
        let mut c = Reader::new(w.connect());
        let mut batch = Vec::new();
        for i in 0..100 {
            let path = match i % 3 {
                0 => "/hello.txt",
                1 => "/one.bin",
                _ => "/sub/page.css",
            };
            batch.extend_from_slice(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        }
        c.send(&batch);
        for i in 0..100 {
            let r = c.response(false);
            assert_eq!(r.status, 200, "response {i}");
            let want: &[u8] = match i % 3 {
                0 => b"hello, weft\n",
                1 => b"x",
                _ => b"body{}\n",
            };
            assert_eq!(r.body, want, "responses come in request order ({i})");
        }
        // A backlog larger than one pass's budget (REQUESTS_PER_PASS) is
        // answered in slices, whole and in order, under every backend (an
        // edge-triggered one sees no new event for input already read).
        let mut batch = Vec::new();
        for i in 0..500 {
            batch.extend_from_slice(format!("GET /one.bin?{i} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        }
        c.send(&batch);
        for i in 0..500 {
            let r = c.response(false);
            assert_eq!(
                (r.status, &r.body[..]),
                (200, &b"x"[..]),
                "{event}: backlog response {i}"
            );
        }
        // Pipelining with a large (non-memory) body in the middle.
        c.send(b"GET /one.bin HTTP/1.1\r\nHost: t\r\n\r\nGET /big.bin HTTP/1.1\r\nHost: t\r\n\r\nGET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(c.response(false).body, b"x");
        assert_eq!(c.response(false).body, pattern(3 * 1024 * 1024 + 17));
        assert_eq!(c.response(false).body, b"hello, weft\n");
        // HTTP/1.0: closed unless keep-alive is asked for.
        let mut c = Reader::new(w.connect());
        c.send(b"GET /one.bin HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
        let r = c.response(false);
        assert_eq!(r.header("connection"), Some("keep-alive"));
        c.send(b"GET /one.bin HTTP/1.0\r\n\r\n");
        let r = c.response(false);
        assert_eq!(r.header("connection"), Some("close"));
        assert!(c.closed());
        // Connection: close on 1.1.
        let (r, closed) = raw(&w, b"GET /one.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        assert_eq!(r.status, 200);
        assert!(closed);
    }

    pub fn max_requests_per_connection(event: &str) {
        let site = site();
        let w = one_worker(&site, event, &["--max-requests", "3"]);
        let mut c = Reader::new(w.connect());
        c.send(&b"GET /one.bin HTTP/1.1\r\nHost: t\r\n\r\n".repeat(3));
        assert_eq!(c.response(false).header("connection"), None);
        assert_eq!(c.response(false).header("connection"), None);
        assert_eq!(c.response(false).header("connection"), Some("close"));
        assert!(c.closed());
    }

    pub fn conditional_and_range(event: &str) {
        let site = site();
        let w = Weft::serve(&[path_str(&site.path), "--event", event, "--workers", "1"]);
        let r = get(&w, "/hello.txt");
        let etag = r.header("etag").unwrap().to_string();
        let lm = r.header("last-modified").unwrap().to_string();
        let ask = |extra: &str| {
            let mut c = Reader::new(w.connect());
            c.send(format!("GET /hello.txt HTTP/1.1\r\nHost: t\r\n{extra}\r\n").as_bytes());
            c.response(false)
        };
        let r = ask(&format!("If-None-Match: {etag}\r\n"));
        assert_eq!(r.status, 304);
        assert_eq!(r.header("etag"), Some(etag.as_str()));
        assert_eq!(ask("If-None-Match: \"other\"\r\n").status, 200);
        assert_eq!(ask(&format!("If-Modified-Since: {lm}\r\n")).status, 304);
        assert_eq!(ask("If-Modified-Since: Sat, 01 Jan 2000 00:00:00 GMT\r\n").status, 200);
        assert_eq!(ask("If-Match: \"nope\"\r\n").status, 412);
        assert_eq!(ask(&format!("If-Match: {etag}\r\n")).status, 200);
        assert_eq!(
            ask("If-Unmodified-Since: Sat, 01 Jan 2000 00:00:00 GMT\r\n").status,
            412
        );
        let r = ask("Range: bytes=0-4\r\n");
        assert_eq!(r.status, 206);
        assert_eq!(r.body, b"hello");
        assert_eq!(r.header("content-range"), Some("bytes 0-4/12"));
        let r = ask("Range: bytes=-5\r\n");
        assert_eq!(r.body, b"weft\n");
        let r = ask("Range: bytes=7-\r\n");
        assert_eq!(r.body, b"weft\n");
        let r = ask("Range: bytes=100-200\r\n");
        assert_eq!(r.status, 416);
        assert_eq!(r.header("content-range"), Some("bytes */12"));
        let r = ask("Range: bytes=0-1,4-5\r\n");
        assert_eq!(r.status, 200, "multiple ranges are answered with the whole body");
        assert_eq!(r.body, b"hello, weft\n");
        let r = ask(&format!("Range: bytes=0-4\r\nIf-Range: {etag}\r\n"));
        assert_eq!(r.status, 206);
        let r = ask("Range: bytes=0-4\r\nIf-Range: \"stale\"\r\n");
        assert_eq!(r.status, 200);
        // A range of the large file goes through the file path, not memory.
        let mut c = Reader::new(w.connect());
        c.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=1000000-1000099\r\n\r\n");
        let r = c.response(false);
        assert_eq!(r.status, 206);
        assert_eq!(r.body, &pattern(3 * 1024 * 1024 + 17)[1_000_000..1_000_100]);
    }

    pub fn error_statuses(event: &str) {
        let site = site();
        std::fs::write(site.path.join("secret.txt"), b"no").unwrap();
        let mut perms = std::fs::metadata(site.path.join("secret.txt")).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o000);
        std::fs::set_permissions(site.path.join("secret.txt"), perms).unwrap();
        let w = Weft::serve(&[path_str(&site.path), "--event", event, "--workers", "1"]);
        assert_eq!(get(&w, "/missing.html").status, 404);
        assert_eq!(get(&w, "/noindex/").status, 403, "no index and no autoindex");
        // Root can read anything; only check 403 when we are not root.
        if unsafe_is_root() {
            // skip
        } else {
            assert_eq!(get(&w, "/secret.txt").status, 403);
        }
        let (r, closed) = raw(
            &w,
            b"POST /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc",
        );
        assert_eq!(r.status, 405);
        assert_eq!(r.header("allow"), Some("GET, HEAD, OPTIONS"));
        assert!(!closed || r.header("connection") == Some("close"));
        let (r, closed) = raw(&w, b"BREW /pot HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(r.status, 501);
        assert!(closed);
        let mut c = Reader::new(w.connect());
        c.send(b"OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n");
        let r = c.response(false);
        assert_eq!(r.status, 204);
        assert_eq!(r.header("allow"), Some("GET, HEAD, OPTIONS"));
        // Directory without slash: redirect.
        let r = get(&w, "/sub?x=1");
        assert_eq!(r.status, 301);
        assert_eq!(r.header("location"), Some("/sub/?x=1"));
        assert_eq!(get(&w, "/sub/").body, b"<p>sub</p>\n");
        assert_eq!(get(&w, "/hello.txt/").status, 404);
    }

    pub fn malformed_requests(event: &str) {
        let site = site();
        let w = Weft::serve(&[path_str(&site.path), "--event", event, "--workers", "1"]);
        let long_line = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(9000));
        let many = format!("GET / HTTP/1.1\r\nHost: t\r\n{}\r\n", "X-A: b\r\n".repeat(101));
        let huge = format!("GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n", "b".repeat(70_000));
        let cases: Vec<(&str, Vec<u8>, u16)> = vec![
            (
                "CL and TE",
                b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
                400,
            ),
            (
                "differing CL",
                b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd".to_vec(),
                400,
            ),
            (
                "bad chunk size",
                b"GET / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n".to_vec(),
                400,
            ),
            (
                "obs-fold",
                b"GET / HTTP/1.1\r\nHost: t\r\nX-A: b\r\n  folded\r\n\r\n".to_vec(),
                400,
            ),
            ("bare CR", b"GET / HTTP/1.1\r\nHost: t\rX-A: b\r\n\r\n".to_vec(), 400),
            ("NUL in target", b"GET /a\0b HTTP/1.1\r\nHost: t\r\n\r\n".to_vec(), 400),
            (
                "bad field name",
                b"GET / HTTP/1.1\r\nHost: t\r\nBad Name: x\r\n\r\n".to_vec(),
                400,
            ),
            ("HTTP/0.9", b"GET /\r\n\r\n".to_vec(), 400),
            (
                "not origin-form",
                b"GET hello.txt HTTP/1.1\r\nHost: t\r\n\r\n".to_vec(),
                400,
            ),
            (
                "star without OPTIONS",
                b"GET * HTTP/1.1\r\nHost: t\r\n\r\n".to_vec(),
                400,
            ),
            ("no Host in 1.1", b"GET / HTTP/1.1\r\n\r\n".to_vec(), 400),
            ("request line too long", long_line.into_bytes(), 414),
            ("too many fields", many.into_bytes(), 431),
            ("head too large", huge.into_bytes(), 431),
            ("unknown method", b"FROB / HTTP/1.1\r\nHost: t\r\n\r\n".to_vec(), 501),
        ];
        for (name, req, status) in cases {
            let mut c = Reader::new(w.connect());
            c.stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            // Large requests may be cut short by the server's answer: ignore write errors.
            let _ = c.stream.write_all(&req);
            let r = c.response(false);
            assert_eq!(r.status, status, "{name}");
            assert_eq!(r.header("connection"), Some("close"), "{name}");
            assert!(c.closed(), "{name}: connection must be closed");
        }
        // The server is unharmed.
        assert_eq!(get(&w, "/hello.txt").status, 200);
    }

    pub fn path_traversal(event: &str) {
        let outer = TempDir::new("outer");
        outer.write("secret.txt", b"top secret\n");
        let root = outer.path.join("www");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("ok.txt"), b"ok\n").unwrap();
        std::os::unix::fs::symlink(outer.path.join("secret.txt"), root.join("link-out")).unwrap();
        std::os::unix::fs::symlink("ok.txt", root.join("link-in")).unwrap();
        let w = Weft::serve(&[path_str(&root), "--event", event, "--workers", "1"]);
        for p in [
            "/../secret.txt",
            "/%2e%2e/secret.txt",
            "/%2E%2e%2fsecret.txt",
            "/a/../../secret.txt",
            "/..%2fsecret.txt",
            "/link-out",
            "/./../secret.txt",
            "/%00",
        ] {
            let mut c = Reader::new(w.connect());
            c.send(format!("GET {p} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
            let r = c.response(false);
            assert!(
                r.status == 400 || r.status == 403 || r.status == 404,
                "{p}: status {}",
                r.status
            );
            assert!(!r.body.windows(6).any(|w| w == b"secret"), "{p} leaked the file");
        }
        assert_eq!(get(&w, "/link-in").body, b"ok\n", "symlinks inside the root work");
        assert_eq!(get(&w, "/%6fk.txt").body, b"ok\n", "percent-decoding once");
        assert_eq!(get(&w, "//ok.txt").status, 200);
        drop(w);
        let w = Weft::serve(&[path_str(&root), "--event", event, "--workers", "1", "--follow-symlinks"]);
        assert_eq!(
            get(&w, "/link-out").body,
            b"top secret\n",
            "--follow-symlinks allows it"
        );
        assert_ne!(get(&w, "/../secret.txt").status, 200, "but never `..`");
    }

    pub fn slow_header_timeout(event: &str) {
        let site = site();
        let w = one_worker(&site, event, &["--header-timeout", "1s"]);
        let mut c = Reader::new(w.connect());
        c.stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let t0 = Instant::now();
        c.send(b"GET /hello.txt HTTP/1.1\r\nHost:");
        let r = c.response(false);
        assert_eq!(r.status, 408);
        assert!(c.closed());
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(5),
            "{took:?}"
        );
        // Other connections were unaffected.
        assert_eq!(get(&w, "/hello.txt").status, 200);
    }

    pub fn many_connections(event: &str) {
        many_connections_with(event, &[]);
    }

    pub fn many_connections_with(event: &str, extra: &[&str]) {
        let site = site();
        let w = Weft::serve(&[&[path_str(&site.path), "--event", event, "--workers", "1"], extra].concat());
        // select can hold fewer than 1024 descriptors: stay well below for it.
        let n = if event == "select" { 900 } else { 1000 };
        let mut conns: Vec<Reader> = (0..n).map(|_| Reader::new(w.connect())).collect();
        for c in conns.iter_mut() {
            c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        }
        for c in conns.iter_mut() {
            assert_eq!(c.response(false).body, b"hello, weft\n");
        }
        // And again on the same connections (all kept alive).
        for c in conns.iter_mut() {
            c.send(b"GET /one.bin HTTP/1.1\r\nHost: t\r\n\r\n");
        }
        for c in conns.iter_mut() {
            assert_eq!(c.response(false).body, b"x");
        }
    }

    pub fn byte_exact_bodies(event: &str) {
        let d = TempDir::new("sizes");
        let sizes: [usize; 9] = [0, 1, 100, 4095, 4096, 16 * 1024, 16 * 1024 + 1, 1 << 20, 16 << 20];
        for s in sizes {
            d.write(&format!("f{s}"), &pattern(s));
        }
        for mode in ["sendfile", "copy", "auto"] {
            let w = Weft::serve(&[path_str(&d.path), "--event", event, "--workers", "1", "--send", mode]);
            let mut c = Reader::new(w.connect());
            for s in sizes {
                c.send(format!("GET /f{s} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
                let r = c.response(false);
                assert_eq!(r.status, 200);
                assert_eq!(r.body.len(), s, "{mode} size {s}");
                assert!(r.body == pattern(s), "{mode}: body of {s} bytes differs");
            }
        }
    }

    /// The server ends a connection (`--max-requests 1`) with a response
    /// too long for the socket's buffers, and the client's next request
    /// arrives while it is sent: the server closes lingering, so the client
    /// reads the whole response and then the end of stream. (A close with
    /// unread bytes makes the kernel reset the connection, and the reset
    /// throws away what the client has not read yet: a cut response.)
    pub fn close_with_bytes_unread_lingers(event: &str) {
        let site = site();
        let len = 16 << 20;
        site.write("huge.bin", &pattern(len));
        let w = one_worker(&site, event, &["--max-requests", "1"]);
        let mut c = Reader::new(w.connect());
        c.send(b"GET /huge.bin HTTP/1.1\r\nHost: t\r\n\r\n");
        // The server fills the socket and waits; then the next request comes.
        std::thread::sleep(Duration::from_millis(100));
        c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        std::thread::sleep(Duration::from_millis(50));
        let r = c.response(false);
        assert_eq!(r.header("connection"), Some("close"));
        assert!(r.body == pattern(len), "{event}: the response is whole");
        assert!(c.closed(), "{event}: then the end of stream");
    }

    pub fn graceful_shutdown(event: &str) {
        let d = TempDir::new("grace");
        let size = 16 << 20;
        d.write("big", &pattern(size));
        let mut w = one_worker(&d, event, &["--grace", "10s", "--send", "copy"]);
        let idle = w.connect();
        let mut s = w.connect();
        s.write_all(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        // The server stops while the response is in flight; the slow
        // reader still gets every byte.
        let body = body_across_stop(&mut s, || w.terminate());
        assert_eq!(body.len(), size, "the in-flight response completed");
        assert!(body == pattern(size));
        assert_eq!(
            w.wait_exit(Duration::from_secs(10)),
            Some(0),
            "clean exit after draining"
        );
        // The idle connection was closed, and nothing listens any more.
        let mut idle = idle;
        idle.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut b = [0u8; 1];
        assert!(matches!(idle.read(&mut b), Ok(0) | Err(_)));
        assert!(TcpStream::connect(w.addr).is_err());
    }

    pub fn access_log(event: &str) {
        let site = site();
        let logd = TempDir::new("log");
        let log = logd.path.join("access.log");
        let mut w = one_worker(&site, event, &["--access-log", path_str(&log)]);
        let mut c = Reader::new(w.connect());
        c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nUser-Agent: tester/1.0\r\nReferer: http://x/\r\n\r\n");
        c.response(false);
        c.send(b"GET /missing HTTP/1.1\r\nHost: t\r\n\r\n");
        c.response(false);
        drop(c);
        w.terminate();
        assert_eq!(w.wait_exit(Duration::from_secs(10)), Some(0));
        let text = std::fs::read_to_string(&log).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].starts_with("127.0.0.1 - - ["), "{}", lines[0]);
        assert!(
            lines[0].contains("] \"GET /hello.txt HTTP/1.1\" 200 12 \"http://x/\" \"tester/1.0\""),
            "{}",
            lines[0]
        );
        assert!(lines[1].contains("\"GET /missing HTTP/1.1\" 404 "), "{}", lines[1]);
    }

    pub fn demo_site(event: &str) {
        let w = Weft::serve(&["--event", event, "--workers", "1"]);
        let r = get(&w, "/");
        assert_eq!(r.status, 200);
        assert!(String::from_utf8_lossy(&r.body).contains("weft"));
        assert_eq!(get(&w, "/nope").status, 404);
    }
}

fn unsafe_is_root() -> bool {
    // The effective uid, from /proc (no libc call needed in tests).
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// Wake-up batching changes when the loop wakes, never what it answers:
/// keep-alive, pipelining and many connections under uring and tracked.
#[test]
fn wake_interval_serves_every_request() {
    for event in ["uring", "tracked"] {
        scenarios::keepalive_and_pipelining_with(event, &["--wake-interval", "200us"]);
        scenarios::many_connections_with(event, &["--wake-interval", "200us"]);
    }
}

per_backend!(
    half_close_after_pipelining,
    get_and_head,
    keepalive_and_pipelining,
    max_requests_per_connection,
    conditional_and_range,
    error_statuses,
    malformed_requests,
    path_traversal,
    slow_header_timeout,
    many_connections,
    byte_exact_bodies,
    close_with_bytes_unread_lingers,
    graceful_shutdown,
    access_log,
    demo_site,
);

/// select must refuse descriptors at or above FD_SETSIZE without harming the
/// connections it holds.
#[test]
fn select_refuses_descriptors_above_fd_setsize() {
    let site = site();
    let w = Weft::serve(&[path_str(&site.path), "--event", "select", "--workers", "1"]);
    let mut first = Reader::new(w.connect());
    first.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(first.response(false).status, 200);
    // Open enough connections that the server's descriptors pass 1024.
    let mut extra: Vec<TcpStream> = Vec::new();
    for _ in 0..1100 {
        extra.push(w.connect());
    }
    // Ask on every one; the refused ones are closed by the server.
    let mut refused = 0;
    let mut served = 0;
    for s in extra.iter_mut() {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        if s.write_all(b"GET /one.bin HTTP/1.1\r\nHost: t\r\n\r\n").is_err() {
            refused += 1;
            continue;
        }
        let mut b = [0u8; 512];
        match s.read(&mut b) {
            Ok(n) if n > 0 && b.starts_with(b"HTTP/1.1 200") => served += 1,
            _ => refused += 1,
        }
    }
    assert!(refused > 0, "some descriptors were above FD_SETSIZE");
    assert!(served > 900, "the others were served ({served})");
    // The first connection still works.
    first.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(first.response(false).body, b"hello, weft\n");
    drop(extra);
    std::thread::sleep(Duration::from_millis(300));
    // And new connections work again once descriptors are free.
    assert_eq!(get(&w, "/hello.txt").status, 200);
    assert!(
        w.stderr().contains("FD_SETSIZE") || w.stderr().contains("limit"),
        "{}",
        w.stderr()
    );
}

#[test]
fn curl_fetches_files() {
    let site = site();
    let w = Weft::serve(&[path_str(&site.path), "--workers", "1"]);
    let out = std::process::Command::new("curl")
        .args(["-sS", "--fail", "--max-time", "10", "-o", "-"])
        .arg(format!("http://{}/big.bin", w.addr))
        .output();
    let Ok(out) = out else {
        panic!("curl is required for this test (scripts/test installs it)");
    };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout == pattern(3 * 1024 * 1024 + 17));
    // Range and conditional through curl too.
    let out = std::process::Command::new("curl")
        .args(["-sS", "-r", "0-4", "-o", "-"])
        .arg(format!("http://{}/hello.txt", w.addr))
        .output()
        .unwrap();
    assert_eq!(out.stdout, b"hello");
}

#[test]
fn workers_share_the_port() {
    let site = site();
    let w = Weft::serve(&[path_str(&site.path), "--workers", "2"]);
    for _ in 0..20 {
        assert_eq!(get(&w, "/hello.txt").status, 200);
    }
}

/// `weft serve SITE --workers 1 ARGS --stats-on-exit`: one worker, whose
/// counters [`stats_at_exit`] reads.
fn serve_counting(site: &TempDir, args: &[&str]) -> Weft {
    let mut all = vec![path_str(&site.path), "--workers", "1"];
    all.extend(args);
    all.push("--stats-on-exit");
    Weft::serve(&all)
}

/// Stop a server started with `--stats-on-exit` gracefully (it exits 0)
/// and return the JSON line it printed.
fn stats_at_exit(w: &mut Weft) -> String {
    w.terminate();
    assert_eq!(w.wait_exit(Duration::from_secs(10)), Some(0));
    let err = w.stderr();
    err.lines()
        .find(|l| l.starts_with('{'))
        .expect("stats line")
        .to_string()
}

#[test]
fn stats_on_exit_counts_paths_and_syscalls() {
    let site = site();
    let mut w = serve_counting(&site, &["--send", "sendfile"]);
    get(&w, "/big.bin");
    let json = stats_at_exit(&mut w);
    assert!(
        json.contains(&format!("\"bytes_sendfile\":{}", 3 * 1024 * 1024 + 17)),
        "{json}"
    );
    assert!(json.contains("\"sendfile\":"), "{json}");
    assert!(json.contains("\"epoll_wait\":"), "{json}");
}

/// Under `tracked`, a listener the accept limit left unfinished stays ready in
/// the user-level table and is served again without asking the kernel; the
/// counters say so.
#[test]
fn tracked_serves_known_ready_descriptors_without_the_kernel() {
    let site = site();
    let mut w = serve_counting(&site, &["--event", "tracked", "--accept-limit", "1"]);
    let mut conns: Vec<Reader> = (0..20).map(|_| Reader::new(w.connect())).collect();
    for c in conns.iter_mut() {
        c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    }
    for c in conns.iter_mut() {
        assert_eq!(c.response(false).body, b"hello, weft\n");
    }
    drop(conns);
    let json = stats_at_exit(&mut w);
    let field = |name: &str| -> u64 {
        let at = json
            .find(&format!("\"{name}\":"))
            .unwrap_or_else(|| panic!("{name} in {json}"));
        json[at + name.len() + 3..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect::<String>()
            .parse()
            .unwrap()
    };
    assert_eq!(field("requests"), 20, "{json}");
    assert!(field("user_passes") >= 1, "{json}");
    assert!(field("kernel_polls") >= 1, "{json}");
}
