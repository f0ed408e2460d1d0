//! The proxy's and the front-end's access logs (formats of weft serve, with
//! the cache status and request time; reopened on SIGUSR1) and the proxy's
//! status-class counters; serve's cache field.

use crate::common;

use common::{path_str, TempDir, Weft};
use std::time::Duration;

/// The status of `GET path` on a fresh connection.
fn status(addr: &str, path: &str) -> u16 {
    let s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = common::Reader::new(s);
    r.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
    r.response(false).status
}

fn lines(path: &std::path::Path, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    let found = common::wait_until(Duration::from_secs(10), || {
        out = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        out.len() >= n
    });
    assert!(found, "{n} lines expected in {}: {out:?}", path.display());
    out
}

/// Logrotate's way: rename `log`, send SIGUSR1; the next request (`path`)
/// lands in a new file at the old path, and the renamed one keeps its
/// `before` lines and gets no more.
fn rotate(w: &Weft, log: &std::path::Path, path: &str, before: usize) {
    let rotated = log.with_extension("1");
    std::fs::rename(log, &rotated).unwrap();
    w.signal("USR1");
    let addr = w.addr.to_string();
    let reopened = common::wait_until(Duration::from_secs(10), || {
        assert_eq!(status(&addr, path), 200);
        std::fs::read_to_string(log).is_ok_and(|s| s.contains(path))
    });
    assert!(reopened, "not reopened: {}", w.stderr());
    assert!(w.stderr().contains("reopened log"), "{}", w.stderr());
    let old = std::fs::read_to_string(&rotated).unwrap();
    assert_eq!(old.lines().count(), before, "{old}");
    assert!(!old.contains(path), "{old}");
}

#[test]
fn proxy_logs_cache_status_and_counts_status_classes() {
    let origin = Weft::role("origin", &[]);
    let dir = TempDir::new("proxy-log");
    let log = dir.path.join("access.json");
    let upstream = origin.addr.to_string();
    let proxy = Weft::role(
        "proxy",
        &[
            "--workers",
            "1",
            "--upstream",
            &upstream,
            "--admin",
            "127.0.0.1:0",
            "--access-log",
            path_str(&log),
            "--access-log-format",
            "json",
        ],
    );
    let addr = proxy.addr.to_string();
    assert_eq!(status(&addr, "/size/300/c60/a.bin"), 200);
    assert_eq!(status(&addr, "/size/300/c60/a.bin"), 200);
    assert_eq!(status(&addr, "/bad%00"), 400);
    let got = lines(&log, 3);
    assert!(
        got[0].contains("\"status\":200") && got[0].contains("\"cache\":\"MISS\""),
        "{}",
        got[0]
    );
    assert!(
        got[0].contains("\"bytes\":300") && got[0].contains("\"request_time\":"),
        "{}",
        got[0]
    );
    assert!(got[1].contains("\"cache\":\"HIT\""), "{}", got[1]);
    assert!(
        got[2].contains("\"status\":400") && got[2].contains("\"cache\":\"-\""),
        "{}",
        got[2]
    );
    rotate(&proxy, &log, "/size/10/c60/b.bin", 3);
    let m = common::fetch(&proxy.admin.unwrap().to_string(), "/metrics");
    let class = |c: &str| {
        m.lines()
            .find_map(|l| l.strip_prefix(&format!("weft_proxy_status_total{{class=\"{c}\"}} ")))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    assert!(class("2xx").unwrap_or(0) >= 3, "{m}");
    assert_eq!(class("4xx"), Some(1), "{m}");
}

#[test]
fn serve_fills_the_cache_field() {
    let site = common::site();
    let dir = TempDir::new("serve-log");
    let log = dir.path.join("access.json");
    let w = Weft::serve(&[
        "--workers",
        "1",
        "--access-log",
        path_str(&log),
        "--access-log-format",
        "json",
        path_str(&site.path),
    ]);
    let addr = w.addr.to_string();
    assert_eq!(status(&addr, "/hello.txt"), 200);
    assert_eq!(status(&addr, "/big.bin"), 200);
    assert_eq!(status(&addr, "/none"), 404);
    // The worker writes its buffer within a second.
    let got = lines(&log, 3);
    assert!(
        got[0].contains("\"cache\":\"HIT\""),
        "a small file from memory: {}",
        got[0]
    );
    assert!(
        got[1].contains("\"cache\":\"MISS\""),
        "a large file sent from the file: {}",
        got[1]
    );
    assert!(got[2].contains("\"cache\":\"-\""), "{}", got[2]);
}

#[test]
fn front_logs_its_requests_and_reopens_on_sigusr1() {
    let origin = Weft::role("origin", &[]);
    let dir = TempDir::new("front-log");
    let log = dir.path.join("access.log");
    let json = dir.path.join("access.json");
    let backend = origin.addr.to_string();
    let front = |log: &std::path::Path, format: &str| {
        Weft::role(
            "front",
            &[
                "--workers",
                "1",
                "--backend",
                &backend,
                "--access-log",
                path_str(log),
                "--access-log-format",
                format,
            ],
        )
    };
    // Combined Log Format (the default's layout), one line per request.
    let f = front(&log, "combined");
    let addr = f.addr.to_string();
    assert_eq!(status(&addr, "/size/300/a.bin"), 200);
    assert_eq!(status(&addr, "/size/20/b.bin"), 200);
    let got = lines(&log, 2);
    assert!(
        got[0].starts_with("127.0.0.1 - - [")
            && got[0].contains("] \"GET /size/300/a.bin HTTP/1.1\" 200 300 \"-\" \"-\""),
        "{}",
        got[0]
    );
    assert!(got[1].contains("\"GET /size/20/b.bin HTTP/1.1\" 200 20 "), "{}", got[1]);
    rotate(&f, &log, "/size/10/c.bin", 2);
    // JSON lines: the front-end has no cache, so every forwarded answer is
    // a BYPASS, with its request time.
    let f = front(&json, "json");
    assert_eq!(status(&f.addr.to_string(), "/size/300/a.bin"), 200);
    let got = lines(&json, 1);
    let v: serde_json::Value = serde_json::from_str(&got[0]).unwrap();
    assert_eq!(v["request"], "GET /size/300/a.bin HTTP/1.1");
    assert_eq!((v["status"].as_u64(), v["bytes"].as_u64()), (Some(200), Some(300)));
    assert_eq!(v["cache"], "BYPASS", "{v}");
    assert!(v["request_time"].as_f64().is_some_and(|t| t >= 0.0), "{v}");
}

/// `/big`'s length: under `--splice sockmap` a non-cacheable body this size
/// (at most 8 MiB) is forwarded in the kernel, and a client that leaves cuts
/// it there. Larger than what the client reads and the sockets can hold
/// when it leaves (its 64 KiB receive buffer, the proxy's send buffer of at
/// most 4 MiB here).
const BIG: usize = 8_000_000;

/// An origin on a port of its own answering, on any connection: `/chunked`
/// in two chunks, `/close` as 3,000 bytes ended by its close, `/len` with a
/// Content-Length, and `/big` as [`BIG`] bytes it writes while the reader
/// takes them; none of them storable.
fn framing_origin() -> std::net::SocketAddr {
    use std::io::Write;
    common::tcp_server(|mut s| {
        let mut buf = Vec::new();
        while let Some(head) = common::next_head(&mut s, &mut buf) {
            let path = head.split(' ').nth(1).unwrap_or("");
            let h = "HTTP/1.1 200 OK\r\nCache-Control: no-store\r\n";
            let r = match path {
                "/chunked" => s.write_all(
                    format!("{h}Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n").as_bytes(),
                ),
                "/close" => {
                    let _ = s.write_all(format!("{h}Connection: close\r\n\r\n{}", "x".repeat(3000)).as_bytes());
                    return;
                }
                "/big" => {
                    let _ = s.write_all(format!("{h}Content-Length: {BIG}\r\n\r\n").as_bytes());
                    let block = [b'b'; 65536];
                    let mut left = BIG;
                    while left > 0 && s.write_all(&block[..left.min(block.len())]).is_ok() {
                        left -= left.min(block.len());
                    }
                    return;
                }
                _ => s.write_all(format!("{h}Content-Length: 7\r\n\r\nseven!!").as_bytes()),
            };
            if r.is_err() {
                return;
            }
        }
    })
}

/// GET `path` on a connection the proxy closes after its answer; the body
/// bytes as they came on the wire (framing included).
fn wire_body(addr: &str, path: &str) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes())
        .unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let end = all.windows(4).position(|w| w == b"\r\n\r\n").expect("a head") + 4;
    all.split_off(end)
}

/// A response relayed from the origin is logged at the end of its
/// transaction, as nginx logs: `bytes` is the body the client was given,
/// chunk framing included, whatever the origin's framing (not 0 for a
/// length the head did not know), and fewer than announced when the client
/// left mid-body. On every path a body takes to the client, each counting
/// its own way (`OutChain::handed`): copied through the output chain,
/// spliced from the relay's pipe, redirected in the kernel by sockmap (or
/// spliced where BPF is refused: the count holds either way), moved by uring
/// chains (`--uring-linked`: the close-delimited body's client must see its
/// FIN after the last chain; `LinkRing::new` says why it once did not).
#[test]
fn relayed_lines_count_the_body_the_client_was_given() {
    let origin = framing_origin().to_string();
    let paths: [&[&str]; 4] = [
        &["--splice", "off"],
        &["--splice", "on"],
        &["--splice", "sockmap"],
        &["--splice", "on", "--event", "uring", "--uring-linked"],
    ];
    for path in paths {
        eprintln!("relay path {path:?}");
        relayed_lines_on(&origin, path);
    }
}

fn relayed_lines_on(origin: &str, path: &[&str]) {
    let dir = TempDir::new("proxy-log-bytes");
    let log = dir.path.join("access.json");
    let mut args = vec![
        "--workers",
        "1",
        "--upstream",
        origin,
        "--access-log",
        path_str(&log),
        "--access-log-format",
        "json",
    ];
    args.extend_from_slice(path);
    let proxy = Weft::role("proxy", &args);
    let addr = proxy.addr.to_string();
    let chunked = wire_body(&addr, "/chunked");
    assert!(
        chunked.ends_with(b"0\r\n\r\n"),
        "{:?}",
        String::from_utf8_lossy(&chunked)
    );
    let closed = wire_body(&addr, "/close");
    assert_eq!(closed.len(), 3000);
    assert_eq!(wire_body(&addr, "/len"), b"seven!!");
    // A client that reads a megabyte of the 8 MB and leaves (a small
    // receive buffer: the sockets must not hold the rest of the body).
    {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        weft_io::sys::set_rcvbuf(&s, 64 * 1024).unwrap();
        s.write_all(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let mut got = 0;
        let mut buf = vec![0u8; 65536];
        while got < 1 << 20 {
            got += s.read(&mut buf).unwrap();
        }
    }
    let got = lines(&log, 4);
    let bytes = |line: &str| -> u64 {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        v["bytes"].as_u64().unwrap_or_else(|| panic!("{line}"))
    };
    assert!(
        got[0].contains("GET /chunked") && got[0].contains("\"status\":200"),
        "{}",
        got[0]
    );
    assert_eq!(bytes(&got[0]), chunked.len() as u64, "{path:?}: {}", got[0]);
    assert!(got[1].contains("GET /close"), "{path:?}: {}", got[1]);
    assert_eq!(bytes(&got[1]), 3000, "{path:?}: {}", got[1]);
    assert!(got[2].contains("GET /len"), "{path:?}: {}", got[2]);
    assert_eq!(bytes(&got[2]), 7, "{path:?}: {}", got[2]);
    assert!(
        got[3].contains("GET /big") && got[3].contains("\"status\":200"),
        "{}",
        got[3]
    );
    // At least what the client read (a body cut in the kernel counts what
    // the kernel wrote for it), and fewer than announced: a splice or a
    // write waits for room in the socket, so the rest of the body was never
    // handed to it. The sockmap verdict's redirect does not wait for room:
    // it can queue the whole body on the client's socket before the client
    // leaves (seen: 8,000,000), and those bytes were given.
    let big = bytes(&got[3]);
    let most = if path.contains(&"sockmap") {
        BIG as u64
    } else {
        BIG as u64 - 1
    };
    assert!((1 << 20..=most).contains(&big), "{path:?}: {}", got[3]);
}
