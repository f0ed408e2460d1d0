//! Issue 27: every event backend in every role. `weft origin`, `weft proxy`
//! (copied and spliced bodies, misses then hits, pipelined requests) and
//! `weft load` all run under the same backend, `tracked` ones included, and
//! every body is checked byte for byte (`--verify` against the origin's
//! deterministic content). The proxy's own data-path scenarios (CONNECT with
//! half-close, client aborts, KeepCopy) run per backend in tests/proxy.rs,
//! the front-end's in tests/front.rs and tests/handoff.rs.

use crate::common;

use common::{per_backend, weft_bin, Reader, TempDir, Weft};
use serde_json::Value;
use std::io::Read;
use std::process::Command;
use std::time::Duration;

/// `weft load ARGS --json F --quiet`; the report (the run must succeed).
fn load(args: &[&str]) -> Value {
    let dir = TempDir::new("events-load");
    let json = dir.path.join("out.json");
    let out = Command::new(weft_bin())
        .arg("load")
        .args(args)
        .args(["--timeout", "10s", "--json", &json.display().to_string(), "--quiet"])
        .output()
        .expect("run weft load");
    assert!(
        out.status.success(),
        "weft load {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(&json).expect("a JSON report")).expect("valid JSON")
}

fn n(v: &Value, path: &str) -> u64 {
    let cur = path.split('.').fold(v, |cur, k| &cur[k]);
    cur.as_u64().unwrap_or_else(|| panic!("{path} is not a count: {cur}"))
}

/// Stop `w` with SIGTERM and return its `--stats-on-exit` JSON.
fn exit_stats(mut w: Weft) -> Value {
    w.terminate();
    assert_eq!(
        w.wait_exit(std::time::Duration::from_secs(10)),
        Some(0),
        "{}",
        w.stderr()
    );
    let err = w.stderr();
    let line = err.lines().rev().find(|l| l.starts_with('{')).expect("stats on exit");
    serde_json::from_str(line).expect("stats JSON")
}

/// `weft load` through `proxy` over the URL list `list` (`first` its first
/// URL), 4 clients, `conns` connections of `calls` requests each, pipelined
/// `pipeline` deep: every reply a verified 2xx.
fn load_verified(
    first: &str,
    proxy: &str,
    list: &std::path::Path,
    event: &str,
    (calls, conns): (u64, u64),
    pipeline: &str,
    what: &str,
) {
    let (calls_s, conns_s) = (calls.to_string(), conns.to_string());
    let v = load(&[
        first,
        "--proxy",
        proxy,
        "--urls",
        common::path_str(list),
        "--event",
        event,
        "--clients",
        "4",
        "--calls",
        &calls_s,
        "--num-conns",
        &conns_s,
        "--pipeline",
        pipeline,
        "--verify",
    ]);
    assert_eq!(n(&v, "error_details.total"), 0, "{what}: {}", v["errors"]);
    assert_eq!(n(&v, "replies.2xx"), calls * conns, "{what}");
    assert_eq!(n(&v, "verified"), calls * conns, "{what}");
}

/// `weft proxy` on `event`, one worker, counters at exit, with `extra`.
fn start_proxy(event: &str, extra: &[&str]) -> Weft {
    let mut args = vec![
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--event",
        event,
        "--workers",
        "1",
        "--stats-on-exit",
    ];
    args.extend_from_slice(extra);
    Weft::start(&args)
}

mod scenarios {
    use super::*;

    /// Origin, proxy and client on `event`: small, copied and spliced bodies,
    /// each fetched as a miss and then as hits,
    /// four requests per connection, pipelined three deep on half the runs.
    pub fn every_role(event: &str) {
        let o = Weft::role("origin", &["--event", event]);
        let dir = TempDir::new("events-urls");
        let urls: Vec<String> = ["/size/100/a", "/size/70000/b", "/size/300000/c", "/size/1000000/d"]
            .iter()
            .map(|p| format!("http://{}{p}", o.addr))
            .collect();
        let list = dir.write("urls", urls.join("\n").as_bytes());
        for splice in ["on", "off"] {
            let p = start_proxy(event, &["--splice", splice]);
            let proxy = p.addr.to_string();
            for pipeline in ["1", "3"] {
                let what = format!("{event}, splice {splice}, pipeline {pipeline}");
                load_verified(&urls[0], &proxy, &list, event, (4, 16), pipeline, &what);
            }
            let stats = exit_stats(p);
            // Four objects: after the first round of misses, hits.
            assert!(stats["total"]["hits"].as_u64().unwrap_or(0) >= 64, "{event}: {stats}");
        }
    }

    /// A client that sends its request, half-closes and never reads the
    /// answer is closed at the send timeout by serve and origin, and costs
    /// no CPU while it waits. (Under epoll-once, which reports such a client
    /// at every wait, a flush that sent nothing once counted as progress:
    /// the connection was held for good. The origin kept asking to read
    /// while its flush was blocked, so every level-triggered backend
    /// reported the client's FIN at every wait: a core spun until the
    /// timeout, or for good under epoll-once and plain epoll.)
    pub fn stuck_half_closed_client_is_closed(event: &str) {
        let site = TempDir::new("events-stuck");
        // Larger than the socket buffers can take (4 MiB at most here):
        // the flush stays blocked. Sparse.
        let big = site.write("big", b"");
        std::fs::File::options()
            .write(true)
            .open(&big)
            .unwrap()
            .set_len(24 << 20)
            .unwrap();
        let root = common::path_str(&site.path).to_string();
        let servers = [
            (
                Weft::serve(&["--event", event, "--workers", "1", "--send-timeout", "3s", &root]),
                "/big",
            ),
            (
                Weft::role("origin", &["--event", event, "--idle-timeout", "3s"]),
                "/size/25165824/x",
            ),
        ];
        for (w, path) in &servers {
            let pid = w.child.id();
            let before = common::open_sockets(pid);
            let mut s = w.connect();
            weft_io::sys::set_rcvbuf(&s, 4096).unwrap();
            std::io::Write::write_all(&mut s, format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes()).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            assert!(
                common::wait_until(Duration::from_secs(5), || common::open_sockets(pid) > before),
                "{event} {path}: never accepted"
            );
            // Waiting for a reader costs nothing, except under epoll-once,
            // which reports writable and half-closed sockets at every wait
            // by design (the µserver study's epoll2). A spin is 100 ticks a
            // second.
            std::thread::sleep(Duration::from_millis(300));
            let t0 = common::cpu_ticks_with_children(pid);
            std::thread::sleep(Duration::from_millis(1500));
            let spent = common::cpu_ticks_with_children(pid) - t0;
            assert!(
                event == "epoll-once" || spent < 50,
                "{event} {path}: {spent} ticks in 1.5 s waiting for a client that does not read"
            );
            assert!(
                common::wait_until(Duration::from_secs(15), || common::open_sockets(pid) == before),
                "{event} {path}: a stuck client was never closed"
            );
        }
    }

    /// A think time waits for its timer, not the client: one that pipelines
    /// its next request, or half-closes, during a 3 s think time costs the
    /// origin no CPU. (Before, it kept read interest with those bytes
    /// unread, and level-triggered backends reported them at every wait: a
    /// core spun until the think time ended.)
    pub fn think_time_waits_quietly(event: &str) {
        for then in [&b"GET /size/10 HTTP/1.1\r\nHost: t\r\n\r\n"[..], b""] {
            let o = Weft::role("origin", &["--event", event, "--workers", "1", "--think", "3s"]);
            let mut s = o.connect();
            std::io::Write::write_all(&mut s, b"GET /size/10 HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
            std::thread::sleep(Duration::from_millis(300));
            if then.is_empty() {
                s.shutdown(std::net::Shutdown::Write).unwrap();
            } else {
                std::io::Write::write_all(&mut s, then).unwrap();
            }
            std::thread::sleep(Duration::from_millis(200));
            let pid = o.child.id();
            let t0 = common::cpu_ticks_with_children(pid);
            std::thread::sleep(Duration::from_millis(1500));
            let spent = common::cpu_ticks_with_children(pid) - t0;
            let what = if then.is_empty() { "half-closed" } else { "pipelined" };
            assert!(
                event == "epoll-once" || spent < 50,
                "{event}, {what}: {spent} ticks in 1.5 s of a think time"
            );
        }
    }

    /// uring linked chains (`--uring-linked`,
    /// crates/weft-proxy/src/relay/linked.rs): the proxy's spliced misses,
    /// KeepCopy fills, hits from what the chains filled, and pipelined
    /// requests behind linked bodies, byte for byte, with the head in the
    /// chain and without. The chain has a ring of its own, so it runs under
    /// every event loop.
    pub fn linked_bodies(event: &str) {
        if weft_io_refused() {
            return;
        }
        let o = Weft::role("origin", &["--event", event]);
        let dir = TempDir::new("linked-urls");
        // Misses (no-store), and cacheable objects: misses filled by the
        // chain's tee, then hits.
        let urls: Vec<String> = [
            "/size/70000/nc/a",
            "/size/300000/nc/b",
            "/size/1000000/c/c",
            "/size/65536/c/d",
            "/size/100/c/e",
        ]
        .iter()
        .map(|p| format!("http://{}{p}", o.addr))
        .collect();
        let list = dir.write("urls", urls.join("\n").as_bytes());
        for head in ["false", "true"] {
            let p = linked_proxy(event, head, &[]);
            let proxy = p.addr.to_string();
            for pipeline in ["1", "3"] {
                let what = format!("{event}, head {head}, pipeline {pipeline}");
                load_verified(&urls[0], &proxy, &list, event, (5, 20), pipeline, &what);
            }
            let stats = exit_stats(p);
            let t = &stats["total"];
            let what = format!("{event}, head {head}: {stats}");
            assert!(n(t, "calls_linked") > 0, "{what}");
            assert!(
                n(t, "bytes_linked") > 0 && n(t, "bytes_linked") <= n(t, "bytes_spliced"),
                "{what}"
            );
            assert!(n(t, "bytes_teed") > 0, "{what}");
            assert!(n(t, "hits") > 0, "{what}");
            assert_eq!(n(t, "sessions_fallback"), 0, "{what}");
            // Pooled upstreams are reused: a stale wake-up (uring's multishot
            // polls) does not close them (at most 4 requests are in flight).
            assert!(n(t, "upstream_connects") <= 12, "{what}");
        }
    }

    /// A client that hangs up in the middle of a linked KeepCopy: the object
    /// is completed from the intake, and the hit that follows is exact.
    pub fn linked_keep_copy_client_abort(event: &str) {
        if weft_io_refused() {
            return;
        }
        let o = Weft::role("origin", &["--event", event]);
        let p = linked_proxy(event, "true", &["--keep-copy"]);
        let len = 8_000_000;
        let url = format!("http://{}/size/{len}/c600/abort", o.addr);
        {
            let mut s = p.connect();
            std::io::Write::write_all(&mut s, format!("GET {url} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).unwrap();
            let mut got = vec![0u8; 100_000];
            s.read_exact(&mut got).unwrap();
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        let mut cached = None;
        let found = common::wait_until(Duration::from_secs(30), || {
            let mut r = Reader::new(p.connect());
            r.send(format!("GET {url} HTTP/1.1\r\nHost: x\r\nCache-Control: only-if-cached\r\n\r\n").as_bytes());
            let resp = r.response(false);
            let ok = resp.status == 200;
            if ok {
                cached = Some(resp.body);
            }
            ok
        });
        assert!(found, "the object was never completed after the abort");
        // The origin's bytes, fetched directly.
        let mut r = Reader::new(o.connect());
        r.send(format!("GET /size/{len}/c600/abort HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        let want = r.response(false).body;
        assert_eq!(want.len(), len);
        assert!(cached.as_deref() == Some(&want[..]), "the filled object is exact");
        let stats = exit_stats(p);
        let t = &stats["total"];
        assert_eq!(n(t, "sessions_orphan_fill"), 1, "{stats}");
        assert!(n(t, "calls_linked") > 0, "{stats}");
    }
}

per_backend!(
    every_role,
    linked_bodies,
    linked_keep_copy_client_abort,
    stuck_half_closed_client_is_closed,
    think_time_waits_quietly
);

/// The proxy with linked chains (`--splice on --uring-linked`), the head in the chain or not.
fn linked_proxy(event: &str, head: &str, extra: &[&str]) -> Weft {
    let mut args = vec!["--splice", "on", "--uring-linked", "--uring-linked-head", head];
    args.extend_from_slice(extra);
    start_proxy(event, &args)
}

/// io_uring refused here (seccomp, sysctl): the chains cannot run.
fn weft_io_refused() -> bool {
    let out = Command::new(weft_bin())
        .arg("backends")
        .output()
        .expect("weft backends");
    let text = String::from_utf8_lossy(&out.stdout);
    let refused = !text
        .lines()
        .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["uring", "works"]);
    if refused {
        eprintln!("skipped: io_uring is not available here ({text})");
    }
    refused
}

/// `--event epoll-once` is the µserver study's epoll2 in the proxy too: each
/// socket is registered once, for both directions, and never modified, so
/// the proxy's `epoll_ctl` calls are its registrations (one per accepted
/// client and opened upstream, plus four of the worker's own: the listener,
/// the shutdown waker, the helpers' mailbox, and the listener's removal at
/// stop), however many requests they carry. Plain epoll, on the same exchange,
/// modifies interest as requests start and end. (Until Nov 29 the proxy
/// re-registered under `epoll-once` as under plain epoll.)
#[test]
fn proxy_epoll_once_registers_each_socket_once() {
    let o = Weft::role("origin", &[]);
    let dir = TempDir::new("once-urls");
    let urls: Vec<String> = ["/size/100/nc/a", "/size/300000/nc/b"]
        .iter()
        .map(|p| format!("http://{}{p}", o.addr))
        .collect();
    let list = dir.write("urls", urls.join("\n").as_bytes());
    let mut ctl = Vec::new();
    for event in ["epoll-once", "epoll"] {
        let p = start_proxy(event, &["--splice", "on"]);
        let proxy = p.addr.to_string();
        load_verified(&urls[0], &proxy, &list, "epoll", (8, 8), "1", event);
        let stats = exit_stats(p);
        let t = &stats["total"];
        let sockets = n(t, "accepted") + n(t, "upstream_connects") + 4;
        let calls = t["syscalls"]["epoll_ctl"].as_u64().unwrap_or(0);
        ctl.push((event, calls, sockets));
    }
    let (_, once, sockets) = ctl[0];
    assert!(once <= sockets, "epoll-once: {once} epoll_ctl for {sockets} sockets");
    let (_, level, sockets) = ctl[1];
    assert!(
        level > sockets,
        "plain epoll modifies interest: {level} epoll_ctl for {sockets} sockets"
    );
}
