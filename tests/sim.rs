//! `weft sim`: the binary on a tiny access log (plain and gzip), checking the
//! JSON report against what the cost model gives by hand, and its one-line
//! errors for bad flags and unreadable traces.

#![allow(dead_code)]

use crate::common;

use common::*;
use serde_json::Value;
use std::process::Command;

fn weft(args: &[&str]) -> std::process::Output {
    Command::new(weft_bin()).args(args).output().unwrap()
}

/// Two requests for one 8 KB file, one for a 100-byte file, a POST and a malformed line.
const LOG: &str = "\
10.0.0.1 - - [01/Jun/1998:00:00:00 +0000] \"GET /a.html HTTP/1.0\" 200 8192\n\
10.0.0.2 - - [01/Jun/1998:00:00:01 +0000] \"GET /a.html HTTP/1.0\" 200 8192 \"-\" \"agent\"\n\
10.0.0.1 - - [01/Jun/1998:00:00:02 +0000] \"POST /form HTTP/1.0\" 200 10\n\
this line is not a log line\n\
10.0.0.3 - - [01/Jun/1998:00:00:03 +0000] \"GET /b.gif HTTP/1.0\" 200 100\n";

fn read_json(path: &std::path::Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// `weft sim ARGS --json DIR/out.json`, which must succeed: its output and
/// the JSON document it wrote.
fn sim(dir: &TempDir, args: &[&str]) -> (std::process::Output, Value) {
    let json = dir.path.join("out.json");
    let mut all = vec!["sim"];
    all.extend(args);
    all.extend(["--json", path_str(&json)]);
    let out = weft(&all);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (out, read_json(&json))
}

#[test]
fn a_tiny_log_gives_the_hand_computed_report() {
    let dir = TempDir::new("sim");
    let log = dir.write("access.log", LOG.as_bytes());
    let (out, v) = sim(
        &dir,
        &[
            path_str(&log),
            "--nodes",
            "1,2",
            "--policy",
            "wrr,lard",
            "--clients",
            "1",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("policy"), "{stdout}");
    assert_eq!(stdout.lines().count(), 5, "a heading and four runs: {stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("1 of 5 lines malformed") && stderr.contains("line 4"),
        "{stderr}"
    );

    assert_eq!(v["trace"]["kind"], "log");
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    let one_node_wrr = &runs[0];
    assert_eq!(
        (one_node_wrr["policy"].as_str(), one_node_wrr["nodes"].as_u64()),
        (Some("wrr"), Some(1))
    );
    assert_eq!(one_node_wrr["requests"], 3);
    assert_eq!(one_node_wrr["disk_reads"], 2);
    assert_eq!(one_node_wrr["trace"]["malformed"], 1);
    assert_eq!(one_node_wrr["trace"]["skipped"], 1);
    // /a miss (145 + 28,820 + 640 + 145 µs), /a hit (930 µs), /b miss
    // (145 + 28,410 + 7.8 + 145 µs).
    let want = (29_750.0 + 930.0 + 28_707.812) * 1e-6;
    let got = one_node_wrr["simulated_seconds"].as_f64().unwrap();
    assert!((got - want).abs() < 1e-9, "{got} vs {want}");
    assert!((one_node_wrr["throughput"].as_f64().unwrap() - 3.0 / want).abs() < 1e-6);
    // Two nodes: WRR sends the second /a elsewhere (another miss); LARD does not.
    let (wrr2, lard2) = (&runs[2], &runs[3]);
    assert_eq!(
        (wrr2["nodes"].as_u64(), wrr2["disk_reads"].as_u64()),
        (Some(2), Some(3))
    );
    assert_eq!(
        (lard2["policy"].as_str(), lard2["disk_reads"].as_u64()),
        (Some("lard"), Some(2))
    );
    assert!(runs
        .iter()
        .all(|r| r["wall_seconds"].as_f64().is_some() && r["per_node"].is_array()));
}

#[test]
fn a_gzip_log_reads_like_the_plain_one() {
    let dir = TempDir::new("sim-gz");
    let plain = dir.write("access.log", LOG.as_bytes());
    let status = Command::new("gzip").arg("-k").arg(&plain).status();
    if !status.is_ok_and(|s| s.success()) {
        eprintln!("gzip is not available; skipping");
        return;
    }
    let gz = dir.path.join("access.log.gz");
    let (_, v) = sim(&dir, &[path_str(&gz), "--nodes", "1", "--policy", "lard-r"]);
    assert_eq!(v["runs"][0]["requests"], 3);
    assert_eq!(v["runs"][0]["policy"], "lard-r");
}

#[test]
fn a_synthetic_trace_runs_every_strategy() {
    let dir = TempDir::new("sim-synth");
    let (_, v) = sim(&dir, &["ibm", "--nodes", "2", "--policy", "all", "--requests", "20000"]);
    assert_eq!(v["trace"]["name"], "ibm");
    let names: Vec<&str> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["policy"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["wrr", "wrr-gms", "lb", "lb-gc", "lard", "lard-r", "chash"]);
    for r in v["runs"].as_array().unwrap() {
        assert_eq!(r["requests"], 20000);
        assert!(r["throughput"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn bad_flags_and_traces_are_one_line_errors() {
    for (args, needle) in [
        (&["sim", "rice", "--nodes", "0"][..], "--nodes"),
        (&["sim", "rice", "--policy", "lardx"][..], "--policy"),
        (&["sim", "rice", "--cache-policy", "fifo"][..], "--cache-policy"),
        (&["sim", "rice", "--cpu-speed", "0"][..], "--cpu-speed"),
        (&["sim", "rice", "--balance-factor", "50"][..], "--balance-factor"),
        (&["sim", "rice", "--t-low", "70"][..], "--t-high"),
    ] {
        let out = weft(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.lines().next().unwrap().contains(needle), "{args:?}: {err}");
    }
    let dir = TempDir::new("sim-bad");
    let junk = dir.write("junk.log", b"not\na\nlog\n");
    let out = weft(&["sim", path_str(&junk)]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("3 of 3 lines"), "{err}");
    let out = weft(&["sim", "/nonexistent/trace.log"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn trace_coverage_and_cut_on_a_tiny_log() {
    let dir = TempDir::new("sim-trace");
    let log = dir.write("access.log", LOG.as_bytes());
    let json = dir.path.join("cov.json");
    let out = weft(&["trace", "coverage", path_str(&log), "--json", path_str(&json)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("requests 3  targets 2"), "{text}");
    let doc = read_json(&json);
    // /a.html: 2 of 3 requests, 8,192 bytes; 97 % of requests need both files.
    assert_eq!(doc["coverage"]["covering"][0][1], 8292);
    assert_eq!(doc["coverage"]["curve"][0]["bytes"], 8192);
    // Cut to 8 KiB: the /b.gif line (which would pass 8 KiB) and after are dropped; looped twice.
    let cut = dir.path.join("cut.log");
    let out = weft(&[
        "trace",
        "cut",
        path_str(&log),
        "--data-set",
        "8KiB",
        "--loop",
        "2",
        "--out",
        path_str(&cut),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let body = std::fs::read_to_string(&cut).unwrap();
    assert_eq!(body.lines().count(), 8);
    assert!(!body.contains("/b.gif"));
    let out = weft(&["trace", "cut", path_str(&log), "--data-set", "lots"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--data-set"));
}

#[test]
fn a_generated_thesis_like_trace_reads_back() {
    let dir = TempDir::new("sim-gen");
    let mut gen: Vec<&str> = "load gen trace --param like=owlnet --param requests=3000 --out"
        .split(' ')
        .collect();
    gen.push(path_str(&dir.path));
    let out = weft(&gen);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let log = dir.path.join("access.log");
    let out = weft(&["sim", path_str(&log), "--nodes", "2", "--policy", "lard"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.stderr.is_empty(),
        "no malformed lines: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = weft(&["sim", "cs", "--nodes", "2", "--requests", "2000"]);
    assert!(out.status.success());
}
