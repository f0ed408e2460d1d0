//! The proxy's access log (formats of weft serve, with the cache status and
//! request time; reopened on SIGUSR1) and its status-class counters; serve's
//! cache field.

mod common;

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

#[test]
fn proxy_logs_cache_status_and_counts_status_classes() {
    let origin = Weft::start(&["origin", "--listen", "127.0.0.1:0"]);
    let dir = TempDir::new("proxy-log");
    let log = dir.path.join("access.json");
    let upstream = origin.addr.to_string();
    let proxy = Weft::start(&[
        "proxy",
        "--listen",
        "127.0.0.1:0",
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
    ]);
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
    // Logrotate: rename, SIGUSR1, and the next line lands in a new file.
    let rotated = dir.path.join("access.json.1");
    std::fs::rename(&log, &rotated).unwrap();
    let _ = std::process::Command::new("kill")
        .args(["-USR1", &proxy.child.id().to_string()])
        .status();
    assert!(common::wait_until(Duration::from_secs(5), || {
        let _ = status(&addr, "/size/10/c60/b.bin");
        log.exists()
            && std::fs::read_to_string(&log)
                .map(|s| s.contains("b.bin"))
                .unwrap_or(false)
    }));
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
