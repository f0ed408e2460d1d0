//! Issue 27: every event backend in every role. `weft origin`, `weft proxy`
//! (copied and spliced bodies, misses then hits, pipelined requests) and
//! `weft load` all run under the same backend, `tracked` ones included, and
//! every body is checked byte for byte (`--verify` against the origin's
//! deterministic content). The proxy's own data-path scenarios (CONNECT with
//! half-close, client aborts, KeepCopy) run per backend in tests/proxy.rs,
//! the front-end's in tests/front.rs and tests/handoff.rs.

mod common;

use common::{per_backend, weft_bin, TempDir, Weft};
use serde_json::Value;
use std::process::Command;

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

mod scenarios {
    use super::*;

    /// Origin, proxy and client on `event`: small, copied and spliced bodies,
    /// each fetched as a miss and then as hits,
    /// four requests per connection, pipelined three deep on half the runs.
    pub fn every_role(event: &str) {
        let o = Weft::start(&["origin", "--listen", "127.0.0.1:0", "--event", event]);
        let dir = TempDir::new("events-urls");
        let urls: Vec<String> = ["/size/100/a", "/size/70000/b", "/size/300000/c", "/size/1000000/d"]
            .iter()
            .map(|p| format!("http://{}{p}", o.addr))
            .collect();
        let list = dir.write("urls", urls.join("\n").as_bytes());
        for splice in ["on", "off"] {
            let p = Weft::start(&[
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--event",
                event,
                "--splice",
                splice,
                "--workers",
                "1",
                "--stats-on-exit",
            ]);
            let proxy = p.addr.to_string();
            for pipeline in ["1", "3"] {
                let v = load(&[
                    &urls[0],
                    "--proxy",
                    &proxy,
                    "--urls",
                    common::path_str(&list),
                    "--event",
                    event,
                    "--clients",
                    "4",
                    "--calls",
                    "4",
                    "--num-conns",
                    "16",
                    "--pipeline",
                    pipeline,
                    "--verify",
                ]);
                let what = format!("{event}, splice {splice}, pipeline {pipeline}");
                assert_eq!(n(&v, "error_details.total"), 0, "{what}: {}", v["errors"]);
                assert_eq!(n(&v, "replies.2xx"), 64, "{what}");
                assert_eq!(n(&v, "verified"), 64, "{what}");
            }
            let stats = exit_stats(p);
            // Four objects: after the first round of misses, hits.
            assert!(stats["total"]["hits"].as_u64().unwrap_or(0) >= 64, "{event}: {stats}");
        }
    }
}

per_backend!(every_role);
