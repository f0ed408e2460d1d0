//! The results: an httperf-like text summary and the `--json` object.
//!
//! The JSON keys are a contract other parts of weft (the lab) build on:
//! `requests`, `replies`, `reply_rate`, `request_rate`, `conn_rate`,
//! `connections`, `response_time_ms`, `connect_time_ms`, `bytes`, `errors`,
//! `duration_s`, `cpu`, `config` — plus details (`cpu_per_request_us`,
//! `sessions`, `idle`, `ssl`, `workload`, ...). With `--repeat`, the top-level
//! keys describe all runs together and `repeat` holds each run and the 90 %
//! confidence intervals of the main figures.

use crate::config::LoadConfig;
use crate::stats::{ci90, RateSummary, Stats};
use serde_json::{json, Value};
use std::fmt::Write as _;

/// One finished run.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// Merged measurements of all threads.
    pub stats: Stats,
    /// Seconds from the start to the last thread's end.
    pub duration_s: f64,
    /// CPU of the load process during the run: (user, system) seconds.
    pub cpu: (f64, f64),
    /// Arrivals dropped at agents with too many waiting requests.
    pub arrivals_dropped: u64,
    /// Trace statistics: (lines, malformed, other methods).
    pub trace: Option<(u64, u64, u64)>,
}

impl RunResult {
    fn complete_seconds(&self) -> usize {
        self.duration_s.floor().max(0.0) as usize
    }
    /// Replies per second over the whole run.
    pub fn reply_rate_overall(&self) -> f64 {
        self.stats.replies_total() as f64 / self.duration_s.max(1e-9)
    }
    /// Reply-rate summary over complete one-second samples.
    pub fn reply_rate(&self) -> RateSummary {
        RateSummary::of(
            &self.stats.reply_samples,
            self.complete_seconds(),
            self.reply_rate_overall(),
        )
    }
    /// Request-rate summary.
    pub fn request_rate(&self) -> RateSummary {
        RateSummary::of(
            &self.stats.request_samples,
            self.complete_seconds(),
            self.stats.requests as f64 / self.duration_s.max(1e-9),
        )
    }
    /// CPU microseconds per reply (user + system).
    pub fn cpu_per_reply_us(&self) -> f64 {
        let r = self.stats.replies_total();
        if r == 0 {
            return 0.0;
        }
        (self.cpu.0 + self.cpu.1) * 1e6 / r as f64
    }
}

fn ms(us: f64) -> f64 {
    (us / 1000.0 * 1000.0).round() / 1000.0
}

fn rate_json(r: &RateSummary, overall: f64) -> Value {
    json!({
        "min": r.min, "avg": r.avg, "max": r.max, "stddev": r.stddev,
        "overall": overall,
        "samples": r.samples,
    })
}

/// The ports connections could take: `--local-ports`, or the kernel's
/// ephemeral range.
fn local_port_range(cfg: &LoadConfig) -> Option<String> {
    if let Some((lo, hi)) = cfg.local_ports {
        return Some(format!("{lo}-{hi} (--local-ports)"));
    }
    let s = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut it = s.split_whitespace();
    Some(format!("{}-{} (ip_local_port_range)", it.next()?, it.next()?))
}

/// The JSON object of one run (or of several merged).
pub fn run_json(cfg: &LoadConfig, r: &RunResult) -> Value {
    let s = &r.stats;
    let h = &s.response_us;
    let c = &s.connect_us;
    let l = &s.conn_life_us;
    let q = |h: &hdrhistogram::Histogram<u64>, p: f64| {
        if h.is_empty() {
            0.0
        } else {
            ms(h.value_at_quantile(p) as f64)
        }
    };
    let mean = |h: &hdrhistogram::Histogram<u64>| if h.is_empty() { 0.0 } else { ms(h.mean()) };
    let reply = r.reply_rate();
    let request = r.request_rate();
    let e = &s.errors;
    let miss = s.uncached_us();
    json!({
        "requests": s.requests,
        "replies": {
            "total": s.replies_total(),
            "1xx": s.replies[0], "2xx": s.replies[1], "3xx": s.replies[2], "4xx": s.replies[3], "5xx": s.replies[4],
        },
        "reply_rate": rate_json(&reply, r.reply_rate_overall()),
        "request_rate": rate_json(&request, s.requests as f64 / r.duration_s.max(1e-9)),
        "conn_rate": s.connections as f64 / r.duration_s.max(1e-9),
        "connections": s.connections,
        "max_open_connections": s.max_open,
        "sessions": s.sessions,
        "response_time_ms": {
            "mean": mean(h), "p50": q(h, 0.5), "p90": q(h, 0.9), "p99": q(h, 0.99), "p999": q(h, 0.999),
            "max": if h.is_empty() { 0.0 } else { ms(h.max() as f64) },
            // Spread of response time (paper 001, Figs. 10 and 20): stdev / mean.
            "stdev": if h.is_empty() { 0.0 } else { ms(h.stdev()) },
            "cv": if h.is_empty() || h.mean() == 0.0 { 0.0 } else { h.stdev() / h.mean() },
        },
        "connect_time_ms": { "mean": mean(c), "p50": q(c, 0.5), "p99": q(c, 0.99) },
        // Replies with an Age field (a cache's answers: a proxy's hits) and the rest.
        "cache": {
            "hits": s.cached_us.len(),
            "misses": miss.len(),
            "hit_response_time_ms": { "mean": mean(&s.cached_us), "p50": q(&s.cached_us, 0.5), "p90": q(&s.cached_us, 0.9), "p99": q(&s.cached_us, 0.99) },
            "miss_response_time_ms": { "mean": mean(&miss), "p50": q(&miss, 0.5), "p90": q(&miss, 0.9), "p99": q(&miss, 0.99) },
        },
        "connection_time_ms": { "mean": mean(l), "p50": q(l, 0.5), "max": if l.is_empty() { 0.0 } else { ms(l.max() as f64) } },
        "bytes": { "sent": s.bytes_sent, "received": s.bytes_received, "reply_head": s.head_bytes, "reply_body": s.body_bytes },
        // Counts only, so a consumer may sum them; details live beside.
        "errors": {
            "refused": e.refused, "reset": e.reset, "timeout": e.timeout,
            "fd_unavailable": e.fd_unavailable, "addr_unavailable": e.addr_unavailable,
            "bad_response": e.bad_response, "verify": e.verify, "other": e.other,
        },
        "error_details": {
            "total": e.total(),
            "other_errno": s.other_errno,
            "fd_limit": s.fd_limit,
            "local_port_range": if e.addr_unavailable > 0 { local_port_range(cfg) } else { None },
        },
        "verified": s.verified,
        "idle": { "held": s.idle_opened, "reopened": s.idle_closed_by_server },
        "ssl": { "full": s.ssl_handshakes.0, "abbreviated": s.ssl_handshakes.1 },
        "workload": {
            "name": cfg.workload.name(),
            "exhausted": s.workload_exhausted,
            "aborted": s.aborted,
            "arrivals_dropped": r.arrivals_dropped,
            "trace_lines": r.trace.map(|t| t.0),
            "trace_malformed": r.trace.map(|t| t.1),
            "trace_other_methods": r.trace.map(|t| t.2),
        },
        "duration_s": r.duration_s,
        "cpu": { "user_s": r.cpu.0, "sys_s": r.cpu.1 },
        "cpu_per_request_us": r.cpu_per_reply_us(),
        "config": cfg.to_json(),
    })
}

/// Merge several runs into one result (counts summed, durations added).
pub fn merge_runs(runs: &[RunResult]) -> RunResult {
    let mut m = runs[0].clone();
    for r in &runs[1..] {
        m.stats.merge(&r.stats);
        m.duration_s += r.duration_s;
        m.cpu.0 += r.cpu.0;
        m.cpu.1 += r.cpu.1;
        m.arrivals_dropped += r.arrivals_dropped;
    }
    // Samples of consecutive runs are not aligned in time: keep them per run.
    m.stats.reply_samples = runs
        .iter()
        .flat_map(|r| r.stats.reply_samples.iter().take(r.complete_seconds()).copied())
        .collect();
    m.stats.request_samples = runs
        .iter()
        .flat_map(|r| r.stats.request_samples.iter().take(r.complete_seconds()).copied())
        .collect();
    let total_complete: usize = runs.iter().map(|r| r.complete_seconds()).sum();
    m.duration_s = m.duration_s.max(total_complete as f64);
    m
}

/// The figures whose confidence intervals a repeated run reports.
fn repeat_figures(r: &RunResult) -> [(&'static str, f64); 5] {
    let h = &r.stats.response_us;
    [
        ("reply_rate", r.reply_rate_overall()),
        ("request_rate", r.stats.requests as f64 / r.duration_s.max(1e-9)),
        (
            "response_time_ms_mean",
            if h.is_empty() { 0.0 } else { h.mean() / 1000.0 },
        ),
        (
            "response_time_ms_p99",
            if h.is_empty() {
                0.0
            } else {
                h.value_at_quantile(0.99) as f64 / 1000.0
            },
        ),
        ("cpu_per_request_us", r.cpu_per_reply_us()),
    ]
}

/// The JSON of a whole invocation (one run, or `--repeat K`).
pub fn outcome_json(cfg: &LoadConfig, runs: &[RunResult]) -> Value {
    if runs.len() == 1 {
        return run_json(cfg, &runs[0]);
    }
    let merged = merge_runs(runs);
    let mut v = run_json(cfg, &merged);
    let per_run: Vec<Value> = runs.iter().map(|r| run_json(cfg, r)).collect();
    let mut ci = serde_json::Map::new();
    for (i, (name, _)) in repeat_figures(&runs[0]).iter().enumerate() {
        let vals: Vec<f64> = runs.iter().map(|r| repeat_figures(r)[i].1).collect();
        let c = ci90(&vals);
        ci.insert(
            name.to_string(),
            json!({
                "mean": c.mean,
                "ci90_half_width": if c.half.is_finite() { json!(c.half) } else { Value::Null },
                "low": c.mean - c.half, "high": c.mean + c.half,
                "runs": vals,
            }),
        );
    }
    v["repeat"] = json!({ "k": runs.len(), "ci90": Value::Object(ci), "runs": per_run });
    v
}

/// The human summary (httperf's layout, with percentiles).
pub fn text(cfg: &LoadConfig, runs: &[RunResult]) -> String {
    let mut o = String::new();
    if runs.len() > 1 {
        for (i, r) in runs.iter().enumerate() {
            let h = &r.stats.response_us;
            let _ = writeln!(
                o,
                "run {}: {:.1} replies/s, response mean {:.3} ms, p99 {:.3} ms, errors {}, CPU {:.1} µs/request",
                i + 1,
                r.reply_rate_overall(),
                if h.is_empty() { 0.0 } else { h.mean() / 1000.0 },
                if h.is_empty() {
                    0.0
                } else {
                    h.value_at_quantile(0.99) as f64 / 1000.0
                },
                r.stats.errors.total(),
                r.cpu_per_reply_us()
            );
        }
        let _ = writeln!(
            o,
            "\nAcross {} runs (mean ± 90% confidence interval, Student t):",
            runs.len()
        );
        for (i, (name, _)) in repeat_figures(&runs[0]).iter().enumerate() {
            let vals: Vec<f64> = runs.iter().map(|r| repeat_figures(r)[i].1).collect();
            let c = ci90(&vals);
            let _ = writeln!(o, "  {name:<24} {:.3} ± {:.3}", c.mean, c.half);
        }
        let _ = writeln!(o, "\nAll runs together:");
        o.push_str(&one(cfg, &merge_runs(runs)));
        return o;
    }
    o.push_str(&one(cfg, &runs[0]));
    o
}

fn one(cfg: &LoadConfig, r: &RunResult) -> String {
    let s = &r.stats;
    let mut o = String::new();
    let _ = writeln!(o, "weft load {} workload {}", cfg.url, cfg.workload.name());
    let _ = writeln!(
        o,
        "Total: connections {} requests {} replies {} test-duration {:.3} s",
        s.connections,
        s.requests,
        s.replies_total(),
        r.duration_s
    );
    let _ = writeln!(o);
    connection_lines(&mut o, r);
    let _ = writeln!(o);
    request_lines(&mut o, r);
    let _ = writeln!(o);
    reply_lines(&mut o, cfg, r);
    let _ = writeln!(o);
    cpu_lines(&mut o, r);
    let _ = writeln!(o);
    error_lines(&mut o, cfg, r);
    o
}

/// Connection rate and times, idle connections, aborts.
fn connection_lines(o: &mut String, r: &RunResult) {
    let s = &r.stats;
    let d = r.duration_s.max(1e-9);
    let c = &s.connect_us;
    let l = &s.conn_life_us;
    let conn_rate = s.connections as f64 / d;
    let _ = writeln!(
        o,
        "Connection rate: {:.1} conn/s ({:.3} ms/conn, <={} concurrent connections)",
        conn_rate,
        if conn_rate > 0.0 { 1000.0 / conn_rate } else { 0.0 },
        s.max_open
    );
    if !l.is_empty() {
        let _ = writeln!(
            o,
            "Connection time [ms]: mean {:.3} p50 {:.3} max {:.3}",
            l.mean() / 1000.0,
            l.value_at_quantile(0.5) as f64 / 1000.0,
            l.max() as f64 / 1000.0
        );
    }
    if !c.is_empty() {
        let _ = writeln!(
            o,
            "Connection time [ms]: connect mean {:.3} p50 {:.3} p99 {:.3}",
            c.mean() / 1000.0,
            c.value_at_quantile(0.5) as f64 / 1000.0,
            c.value_at_quantile(0.99) as f64 / 1000.0
        );
    }
    if s.idle_opened > 0 {
        let _ = writeln!(
            o,
            "Idle connections: {} held, {} reopened after the server closed them",
            s.idle_opened, s.idle_closed_by_server
        );
    }
    if s.aborted > 0 {
        let _ = writeln!(o, "Aborted by the client (workload): {} transactions", s.aborted);
    }
}

/// Request rate.
fn request_lines(o: &mut String, r: &RunResult) {
    let s = &r.stats;
    let d = r.duration_s.max(1e-9);
    let req = r.request_rate();
    let _ = writeln!(
        o,
        "Request rate: {:.1} req/s ({:.3} ms/req)",
        s.requests as f64 / d,
        if s.requests > 0 {
            d * 1000.0 / s.requests as f64
        } else {
            0.0
        }
    );
    let _ = writeln!(
        o,
        "Request rate [req/s]: min {:.1} avg {:.1} max {:.1} stddev {:.1} ({} samples)",
        req.min,
        req.avg,
        req.max,
        req.stddev,
        req.samples.len()
    );
}

/// Reply rate, response times, sizes, statuses, verification, SSL emulation.
fn reply_lines(o: &mut String, cfg: &LoadConfig, r: &RunResult) {
    let s = &r.stats;
    let replies = s.replies_total();
    let h = &s.response_us;
    let hq = |p: f64| {
        if h.is_empty() {
            0.0
        } else {
            h.value_at_quantile(p) as f64 / 1000.0
        }
    };
    let rr = r.reply_rate();
    let _ = writeln!(
        o,
        "Reply rate [replies/s]: min {:.1} avg {:.1} max {:.1} stddev {:.1} ({} samples); overall {:.1}",
        rr.min,
        rr.avg,
        rr.max,
        rr.stddev,
        rr.samples.len(),
        r.reply_rate_overall()
    );
    let _ = writeln!(
        o,
        "Response time [ms]: mean {:.3} p50 {:.3} p90 {:.3} p99 {:.3} p99.9 {:.3} max {:.3}",
        if h.is_empty() { 0.0 } else { h.mean() / 1000.0 },
        hq(0.5),
        hq(0.9),
        hq(0.99),
        hq(0.999),
        if h.is_empty() { 0.0 } else { h.max() as f64 / 1000.0 }
    );
    if !h.is_empty() && h.mean() > 0.0 {
        let _ = writeln!(
            o,
            "Response time spread: stdev {:.3} ms, coefficient of variation {:.3}",
            h.stdev() / 1000.0,
            h.stdev() / h.mean()
        );
    }
    if !s.cached_us.is_empty() {
        let miss = s.uncached_us();
        let m = |h: &hdrhistogram::Histogram<u64>| if h.is_empty() { 0.0 } else { h.mean() / 1000.0 };
        let _ = writeln!(
            o,
            "Cached replies (with Age): {} ({:.1}%); response time [ms] mean: cached {:.3}, others {:.3}",
            s.cached_us.len(),
            100.0 * s.cached_us.len() as f64 / (replies.max(1)) as f64,
            m(&s.cached_us),
            m(&miss)
        );
    }
    if replies > 0 {
        let _ = writeln!(
            o,
            "Reply size [B]: header {:.1} content {:.1} (total {:.1})",
            s.head_bytes as f64 / replies as f64,
            s.body_bytes as f64 / replies as f64,
            (s.head_bytes + s.body_bytes) as f64 / replies as f64
        );
    }
    let _ = writeln!(
        o,
        "Reply status: 1xx={} 2xx={} 3xx={} 4xx={} 5xx={}",
        s.replies[0], s.replies[1], s.replies[2], s.replies[3], s.replies[4]
    );
    if cfg.verify {
        let _ = writeln!(
            o,
            "Verified: {} bodies checked, {} differed from the origin's content",
            s.verified, s.errors.verify
        );
    }
    if s.ssl_handshakes != (0, 0) {
        let _ = writeln!(
            o,
            "SSL emulation: {} full and {} abbreviated handshakes",
            s.ssl_handshakes.0, s.ssl_handshakes.1
        );
    }
}

/// CPU time and network I/O.
fn cpu_lines(o: &mut String, r: &RunResult) {
    let s = &r.stats;
    let d = r.duration_s.max(1e-9);
    let cpu = r.cpu.0 + r.cpu.1;
    let _ = writeln!(
        o,
        "CPU time [s]: user {:.2} system {:.2} ({:.1}% of one CPU); {:.1} µs per reply",
        r.cpu.0,
        r.cpu.1,
        cpu * 100.0 / d,
        r.cpu_per_reply_us()
    );
    let _ = writeln!(
        o,
        "Net I/O: {:.1} KB/s (sent {:.1} KB, received {:.1} KB)",
        (s.bytes_sent + s.bytes_received) as f64 / 1024.0 / d,
        s.bytes_sent as f64 / 1024.0,
        s.bytes_received as f64 / 1024.0
    );
}

/// Errors, the warnings they call for, and the trace's summary.
fn error_lines(o: &mut String, cfg: &LoadConfig, r: &RunResult) {
    let s = &r.stats;
    let e = &s.errors;
    let _ = writeln!(
        o,
        "Errors: total {} client-timo {} refused {} reset {} bad-response {} verify {}",
        e.total(),
        e.timeout,
        e.refused,
        e.reset,
        e.bad_response,
        e.verify
    );
    let _ = writeln!(
        o,
        "Errors: fd-unavail {} addrunavail {} other {}{}",
        e.fd_unavailable,
        e.addr_unavailable,
        e.other,
        s.other_errno
            .map(|n| format!(" (first: {})", std::io::Error::from_raw_os_error(n)))
            .unwrap_or_default()
    );
    if e.fd_unavailable > 0 {
        let _ = writeln!(
            o,
            "warning: ran out of descriptors (limit {}): the results are not meaningful; \
             hold --idle connections in a separate weft load process",
            s.fd_limit.map(|n| n.to_string()).unwrap_or_else(|| "unknown".into())
        );
    }
    if e.addr_unavailable > 0 {
        let _ = writeln!(
            o,
            "warning: ran out of local ports ({}): lower the rate, reuse connections or add --local-addrs",
            local_port_range(cfg).unwrap_or_else(|| "unknown".into())
        );
    }
    if r.arrivals_dropped > 0 {
        let _ = writeln!(
            o,
            "warning: {} arrivals dropped: agents had more than 10000 requests waiting",
            r.arrivals_dropped
        );
    }
    if let Some((lines, bad, other)) = r.trace {
        let _ = writeln!(
            o,
            "Trace: {lines} lines, {bad} malformed and {other} with other methods skipped{}",
            if s.workload_exhausted {
                "; the trace ran out"
            } else {
                ""
            }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn run_with(replies: u64, secs: f64, cpu: f64) -> RunResult {
        let mut s = Stats::default();
        for i in 0..replies {
            s.record_request(10, (i as f64 / replies as f64 * secs) as usize);
            s.record_reply(
                200,
                Duration::from_micros(500 + i % 1000),
                (i as f64 / replies as f64 * secs) as usize,
                i % 4 == 0,
            );
        }
        s.connections = replies;
        RunResult {
            stats: s,
            duration_s: secs,
            cpu: (cpu, 0.0),
            arrivals_dropped: 0,
            trace: None,
        }
    }

    #[test]
    fn json_has_the_contract_keys() {
        let cfg = LoadConfig::default();
        let v = outcome_json(&cfg, &[run_with(3000, 3.0, 0.3)]);
        for k in [
            "requests",
            "replies",
            "reply_rate",
            "request_rate",
            "conn_rate",
            "connections",
            "response_time_ms",
            "connect_time_ms",
            "bytes",
            "errors",
            "duration_s",
            "cpu",
            "config",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        for k in ["total", "1xx", "2xx", "3xx", "4xx", "5xx"] {
            assert!(v["replies"][k].is_u64(), "replies.{k}");
        }
        for k in ["min", "avg", "max", "stddev", "samples"] {
            assert!(v["reply_rate"].get(k).is_some(), "reply_rate.{k}");
        }
        for k in ["mean", "p50", "p90", "p99", "p999", "max"] {
            assert!(v["response_time_ms"][k].is_number(), "response_time_ms.{k}");
        }
        for k in [
            "refused",
            "reset",
            "timeout",
            "fd_unavailable",
            "addr_unavailable",
            "bad_response",
            "verify",
            "other",
        ] {
            assert!(v["errors"][k].is_u64(), "errors.{k}");
        }
        assert_eq!(
            v["errors"].as_object().unwrap().len(),
            8,
            "errors holds the eight counts only"
        );
        assert_eq!(v["error_details"]["total"].as_u64(), Some(0));
        assert_eq!(v["reply_rate"]["samples"].as_array().unwrap().len(), 3);
        assert_eq!(v["reply_rate"]["avg"].as_f64().unwrap(), 1000.0);
        assert!((v["cpu_per_request_us"].as_f64().unwrap() - 100.0).abs() < 1e-9);
        let p50 = v["response_time_ms"]["p50"].as_f64().unwrap();
        assert!((0.9..1.1).contains(&p50), "{p50}");
        assert_eq!(v["cache"]["hits"].as_u64(), Some(750));
        assert_eq!(v["cache"]["misses"].as_u64(), Some(2250));
        for k in ["hit_response_time_ms", "miss_response_time_ms"] {
            let mean = v["cache"][k]["mean"].as_f64().unwrap();
            assert!((0.9..1.1).contains(&mean), "{k} {mean}");
        }
    }

    #[test]
    fn repeats_report_confidence_intervals() {
        let cfg = LoadConfig::default();
        let runs = [
            run_with(1000, 1.0, 0.1),
            run_with(1100, 1.0, 0.1),
            run_with(1200, 1.0, 0.1),
        ];
        let v = outcome_json(&cfg, &runs);
        let rr = &v["repeat"]["ci90"]["reply_rate"];
        assert_eq!(rr["mean"].as_f64().unwrap(), 1100.0);
        // s = 100, t(0.95,2) = 2.92, half = 2.92·100/√3 = 168.6.
        let half = rr["ci90_half_width"].as_f64().unwrap();
        assert!((half - 168.58).abs() < 0.1, "{half}");
        assert_eq!(v["replies"]["total"].as_u64().unwrap(), 3300);
        assert_eq!(v["repeat"]["runs"].as_array().unwrap().len(), 3);
        let t = text(&cfg, &runs);
        assert!(t.contains("Across 3 runs"), "{t}");
    }
}
