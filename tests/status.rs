//! The admin endpoint's status page in a real browser, and the access log's
//! formats and SIGUSR1 reopen (issue 17 §3).
//!
//! The browser test runs headless Chromium (Debian's `chromium`) against
//! loopback only and skips, saying so, when it is not installed. It keeps a
//! screenshot at `target/status-page.png` (a CI artifact).

use crate::common;

use common::{fetch, path_str, site, wait_until, TempDir, Weft};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The flags every Chromium run gets: headless, no network of its own.
const CHROMIUM_FLAGS: [&str; 7] = [
    "--headless",
    "--disable-gpu",
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--no-proxy-server",
];

fn chromium() -> Option<&'static str> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| Path::new(p).exists())
}

/// `target/` (the directory of the weft binary's profile directory).
fn target_dir() -> PathBuf {
    let bin = Path::new(common::weft_bin());
    bin.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("target"))
}

/// Kill a child on drop (a load generator, a browser).
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Run Chromium with `args` for at most a minute; its stdout.
fn run_chromium(bin: &str, profile: &Path, args: &[&str]) -> String {
    let out_dir = TempDir::new("chromium-out");
    let out_path = out_dir.path.join("stdout");
    let out = std::fs::File::create(&out_path).unwrap();
    let mut child = Reaped(
        Command::new(bin)
            .args(CHROMIUM_FLAGS)
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromium"),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "chromium {args:?} ran over a minute");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::read_to_string(&out_path).unwrap_or_default()
}

/// The value of attribute `attr` in the first tag that contains `marker`.
fn attr<'a>(dom: &'a str, marker: &str, attr: &str) -> &'a str {
    let at = dom
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker} in the page:\n{dom}"));
    let tag = &dom[at..at + dom[at..].find('>').unwrap()];
    let key = format!("{attr}=\"");
    let from = tag.find(&key).unwrap_or_else(|| panic!("no {attr} in {tag}")) + key.len();
    &tag[from..from + tag[from..].find('"').unwrap()]
}

#[test]
fn status_page_draws_its_charts_in_chromium() {
    let w = Weft::serve(&["--workers", "1", "--admin", "127.0.0.1:0"]);
    let admin = w.admin.expect("admin address");
    // Every role serves the same page; serve's is the one drawn here.
    let page = fetch(&admin.to_string(), "/status");
    assert!(page.contains("<svg id=\"rate\""), "{page}");
    let Some(bin) = chromium() else {
        eprintln!("SKIPPED: chromium is not installed (apt-get install chromium)");
        return;
    };
    let url = format!("http://{}/", w.addr);
    let _load = Reaped(
        Command::new(common::weft_bin())
            .args(["load", &url, "--rate", "200", "--num-conns", "12000"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start weft load"),
    );
    // A few seconds of history for the charts (the server samples once a second).
    let history = || fetch(&admin.to_string(), "/history").matches('[').count();
    assert!(wait_until(Duration::from_secs(20), || history() >= 6), "no history");
    let profile = TempDir::new("chromium-profile");
    let status = format!("http://{admin}/status");
    let dom = run_chromium(
        bin,
        &profile.path,
        &["--virtual-time-budget=3000", "--dump-dom", &status],
    );
    for chart in ["rate", "latency"] {
        let points: usize = attr(&dom, &format!("<svg id=\"{chart}\""), "data-points")
            .parse()
            .unwrap();
        let max: f64 = attr(&dom, &format!("<svg id=\"{chart}\""), "data-max").parse().unwrap();
        let line = attr(&dom, &format!("<polyline id=\"{chart}-line\""), "points");
        assert!(points >= 3 && max > 0.0, "{chart}: {points} points, max {max}:\n{dom}");
        assert_eq!(line.split(' ').count(), points, "{line}");
    }
    assert!(dom.contains("weft_serve_requests_total"), "{dom}");
    let m = fetch(&admin.to_string(), "/metrics");
    let ok: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("weft_serve_status_total{class=\"2xx\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(
        ok > 0 && m.contains("weft_serve_status_total{class=\"5xx\"} 0\n"),
        "{m}"
    );
    let shot = target_dir().join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    let shot_arg = format!("--screenshot={}", shot.display());
    run_chromium(
        bin,
        &profile.path,
        &[
            "--virtual-time-budget=3000",
            "--window-size=1000,800",
            &shot_arg,
            &status,
        ],
    );
    let png = std::fs::read(&shot).unwrap_or_default();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 5_000,
        "screenshot {} is {} bytes",
        shot.display(),
        png.len()
    );
}

/// Lines of `path` (empty when absent).
fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// `weft serve` over [`site`] (with `more`) logging in `format` to
/// `access.log` in a scratch directory of its own.
struct LoggingServe {
    weft: Weft,
    log: PathBuf,
    dir: TempDir,
    _root: TempDir,
}

fn serve_logging(tag: &str, format: &str, more: &[&str]) -> LoggingServe {
    let root = site();
    let dir = TempDir::new(tag);
    let log = dir.path.join("access.log");
    let mut args = vec![
        path_str(&root.path),
        "--access-log",
        path_str(&log),
        "--access-log-format",
        format,
    ];
    args.extend_from_slice(more);
    let weft = Weft::serve(&args);
    LoggingServe {
        weft,
        log,
        dir,
        _root: root,
    }
}

#[test]
fn access_log_json_lines_and_reopen_on_sigusr1() {
    let s = serve_logging("status-log", "json", &["--workers", "1"]);
    let (w, log) = (&s.weft, &s.log);
    let addr = w.addr.to_string();
    fetch(&addr, "/hello.txt");
    assert!(
        wait_until(Duration::from_secs(10), || lines(log).len() == 1),
        "{:?}",
        lines(log)
    );
    let first: serde_json::Value = serde_json::from_str(&lines(log)[0]).unwrap();
    assert_eq!(first["request"], "GET /hello.txt HTTP/1.1");
    assert_eq!(first["status"], 200);
    assert!(first["request_time"].as_f64().is_some_and(|t| t >= 0.0), "{first}");
    assert_eq!(first["cache"], "HIT", "a small file is sent from memory");
    // logrotate: rename, then SIGUSR1; the next request lands in a new file.
    let rotated = s.dir.path.join("access.log.1");
    std::fs::rename(log, &rotated).unwrap();
    w.signal("USR1");
    assert!(
        wait_until(Duration::from_secs(10), || log.exists()),
        "not reopened: {}",
        w.stderr()
    );
    fetch(&addr, "/missing");
    assert!(
        wait_until(Duration::from_secs(10), || lines(log).len() == 1),
        "{}",
        w.stderr()
    );
    assert!(
        lines(log)[0].contains("\"request\":\"GET /missing HTTP/1.1\",\"status\":404"),
        "{:?}",
        lines(log)
    );
    assert_eq!(lines(&rotated).len(), 1);
    // Still serving: SIGUSR1 did not end the process.
    assert!(fetch(&addr, "/hello.txt").contains("200"));
}

#[test]
fn access_log_common_format_and_a_bad_format_name() {
    let s = serve_logging("status-clf", "clf", &[]);
    let log = &s.log;
    fetch(&s.weft.addr.to_string(), "/hello.txt");
    assert!(wait_until(Duration::from_secs(10), || lines(log).len() == 1));
    assert!(
        lines(log)[0].ends_with("\"GET /hello.txt HTTP/1.1\" 200 12"),
        "{:?}",
        lines(log)
    );
    let out = Command::new(common::weft_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--access-log-format", "xml"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("clf, combined or json"));
}

/// The requests total of the newest `/history` point of the admin at `admin`.
fn newest_requests(admin: &str) -> f64 {
    let body = fetch(admin, "/history");
    let doc = body.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let v: serde_json::Value = serde_json::from_str(doc).unwrap_or_default();
    v["points"]
        .as_array()
        .and_then(|p| p.last())
        .and_then(|p| p[1].as_f64())
        .unwrap_or(0.0)
}

/// The value of the series `series` (name and labels, as printed) in the
/// Prometheus text `text`.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn every_role_serves_the_same_page_and_its_history() {
    let root = site();
    let origin = Weft::serve(&["--workers", "1", "--admin", "127.0.0.1:0", path_str(&root.path)]);
    let o = origin.addr.to_string();
    let front = Weft::role("front", &["--backend", &o, "--admin", "127.0.0.1:0"]);
    let proxy = Weft::role("proxy", &["--workers", "1", "--admin", "127.0.0.1:0"]);
    let body = |w: &Weft| {
        let page = fetch(&w.admin.unwrap().to_string(), "/status");
        page.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default()
    };
    let page = body(&origin);
    assert!(page.contains("<polyline id=\"latency-line\""));
    for (role, w, target) in [
        ("front", &front, "/hello.txt".to_string()),
        ("proxy", &proxy, format!("http://{o}/hello.txt")),
    ] {
        assert_eq!(body(w), page, "{role}'s page differs");
        let admin = w.admin.unwrap().to_string();
        let got = wait_until(Duration::from_secs(15), || {
            assert!(fetch(&w.addr.to_string(), &target).contains(" 200 "), "{role}");
            newest_requests(&admin) > 0.0
        });
        assert!(got, "{role}: no requests in /history: {}", fetch(&admin, "/history"));
    }
    // Front's /metrics has the proxy engine's families under its own name,
    // as serve and proxy have theirs: status classes, the latency histogram
    // (so the status page's latency chart has points), body bytes and
    // system calls by kind.
    let big = common::get(&front, "/big.bin");
    assert_eq!((big.status, big.body.len()), (200, 3 * 1024 * 1024 + 17));
    let admin = front.admin.unwrap().to_string();
    let latency_charted = wait_until(Duration::from_secs(15), || {
        let h = fetch(&admin, "/history");
        let doc = h.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let v: serde_json::Value = serde_json::from_str(doc).unwrap_or_default();
        v["points"]
            .as_array()
            .and_then(|p| p.last())
            .is_some_and(|p| p[3].as_f64().is_some_and(|n| n > 0.0) && p[2].as_f64().is_some())
    });
    assert!(
        latency_charted,
        "front: no latency in /history: {}",
        fetch(&admin, "/history")
    );
    let m = fetch(&admin, "/metrics");
    let value = |series: &str| metric(&m, series).unwrap_or_else(|| panic!("no {series} in front's /metrics:\n{m}"));
    assert!(value("weft_front_status_total{class=\"2xx\"}") >= 2.0, "{m}");
    assert_eq!(value("weft_front_status_total{class=\"5xx\"}"), 0.0);
    // The histogram is published about once a second: at least the
    // response the history above saw.
    let timed = value("weft_front_response_seconds_count");
    assert!(timed >= 1.0, "{m}");
    assert_eq!(value("weft_front_response_seconds_bucket{le=\"+Inf\"}"), timed);
    let body_bytes = value("weft_front_bytes_spliced_total") + value("weft_front_bytes_copied_total");
    assert!(
        body_bytes >= (3 * 1024 * 1024) as f64,
        "big.bin's body moved: {body_bytes}"
    );
    assert!(m.contains("\nweft_front_syscalls_total{kind=\""), "{m}");
    assert!(value("weft_front_backend_requests_total") >= 2.0, "{m}");
    // Serve's cache hits and misses (the access log's HIT and MISS) are in
    // Prometheus too: hello.txt from memory, big.bin from its file.
    let m = fetch(&origin.admin.unwrap().to_string(), "/metrics");
    assert!(m.contains("# TYPE weft_serve_cache_hits_total counter\n"), "{m}");
    let hits = metric(&m, "weft_serve_cache_hits_total").unwrap_or(0.0);
    let misses = metric(&m, "weft_serve_cache_misses_total").unwrap_or(0.0);
    assert!(
        hits >= 2.0 && misses >= 1.0,
        "serve: {hits} hits, {misses} misses:\n{m}"
    );
}

/// A response its client has read is counted in the very next `/stats` and
/// `/metrics`: the admin endpoint waits out a worker's batch that has not
/// published its counters yet (`weft_core::metrics::PublishClock`), instead
/// of the reader having to poll. Many rounds against two workers each, for
/// serve, the proxy and the front; each round's count is exact.
#[test]
fn counters_include_every_response_already_read() {
    const ROUNDS: u64 = 150;
    let root = site();
    let admin_flag = ["--workers", "2", "--admin", "127.0.0.1:0"];
    let served = Weft::serve(&[&admin_flag[..], &[path_str(&root.path)]].concat());
    // The proxy's and the front's origin (the front's health checks reach
    // it too, so it is not the server counted).
    let origin = Weft::serve(&[path_str(&root.path)]);
    let o = origin.addr.to_string();
    let proxy = Weft::role("proxy", &admin_flag);
    let front = Weft::role("front", &[&admin_flag[..], &["--backend", &o]].concat());
    // The front's `/stats` is its decision state; its engine's requests
    // are in `/metrics`.
    let requests = |w: &Weft, role: &str| match role {
        "front" => {
            let m = fetch(&w.admin.unwrap().to_string(), "/metrics");
            metric(&m, "weft_front_requests_total").unwrap_or_else(|| panic!("{m}")) as u64
        }
        _ => common::admin_total(w, "requests"),
    };
    let checks = [
        ("serve", &served, "/hello.txt".to_string()),
        ("proxy", &proxy, format!("http://{o}/hello.txt")),
        ("front", &front, "/hello.txt".to_string()),
    ];
    for (role, w, target) in checks {
        let count = |w: &Weft| requests(w, role);
        let before = count(w);
        // Keep-alive, the body read by its length: with `Connection: close`
        // the end of stream would come after the batch (descriptors close
        // at its end) and hide the race.
        let mut r = common::Reader::new(w.connect());
        for i in 1..=ROUNDS {
            let got = common::get_on(&mut r, &target);
            assert_eq!(got.status, 200, "{role}");
            assert_eq!(count(w), before + i, "{role}: round {i}");
        }
    }
}
