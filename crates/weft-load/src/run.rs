//! A whole `weft load` invocation: prepare the workload once, run it
//! (`--repeat` times) on `--threads` event loops, show a live progress line
//! on a terminal, and produce the report.
//!
//! Threads split the load evenly: each gets `rate / threads` (with fixed
//! inter-arrivals, thread i is offset by i/rate so the merged stream stays
//! evenly spaced), its share of clients, connections and idle connections,
//! and its own random stream derived from `--seed`. All threads start at the
//! same instant `t0`, which also anchors the one-second samples.

use crate::config::{resolve, LoadConfig, Url};
use crate::engine::{run_thread, Plan, Shared, Slot};
use crate::report::{self, RunResult};
use crate::request::Writer;
use crate::workload::{Drive, PrepareInput, Prepared, Spec};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use weft_http::Version;
use weft_io::sys;

/// Longest `--urls` file line.
const MAX_URL_LINE: usize = 8192;
/// Most `--urls` lines.
const MAX_URLS: usize = 10_000_000;

/// What a finished invocation produced.
pub struct Outcome {
    /// Each run.
    pub runs: Vec<RunResult>,
    /// The human summary.
    pub text: String,
    /// The JSON report.
    pub json: serde_json::Value,
}

/// Stop flag set by SIGINT/SIGTERM (installed once per process).
fn stop_flag() -> &'static Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        if sys::block_shutdown_signals().is_ok() {
            let f = flag.clone();
            let _ = std::thread::Builder::new()
                .name("weft-load-signals".into())
                .spawn(move || {
                    if sys::wait_shutdown_signal().is_ok() {
                        eprintln!("\nweft load: interrupted, finishing requests in flight (again to quit at once)");
                        f.store(true, Ordering::SeqCst);
                        if sys::wait_shutdown_signal().is_ok() {
                            std::process::exit(130);
                        }
                    }
                });
        }
        flag
    })
}

/// Read `--urls FILE`: one path (`/a/b`) or absolute URL per line; `#` starts
/// a comment. Absolute URLs add their authority to `authorities`.
fn read_urls(path: &std::path::Path, authorities: &mut Vec<String>) -> Result<Vec<(usize, Vec<u8>)>, String> {
    let text = std::fs::read(path).map_err(|e| format!("cannot read --urls {}: {e}", path.display()))?;
    let text = String::from_utf8_lossy(&text);
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let bad = |why: &str| format!("--urls {}: line {}: {why}", path.display(), i + 1);
        if l.len() > MAX_URL_LINE {
            return Err(bad("longer than 8192 bytes"));
        }
        if out.len() >= MAX_URLS {
            return Err(bad("more than 10000000 URLs"));
        }
        if l.starts_with('/') {
            if l.bytes().any(|b| b <= b' ' || b == 0x7f) {
                return Err(bad("spaces or control characters in the path"));
            }
            out.push((0, l.as_bytes().to_vec()));
        } else {
            let u = Url::parse(l).map_err(|e| bad(&e))?;
            let idx = match authorities.iter().position(|a| *a == u.authority) {
                Some(i) => i,
                None => {
                    authorities.push(u.authority.clone());
                    authorities.len() - 1
                }
            };
            out.push((idx, u.path));
        }
    }
    if out.is_empty() {
        return Err(format!("--urls {}: no URLs in the file", path.display()));
    }
    Ok(out)
}

/// Run `weft load` with a configuration; errors are one line.
pub fn run(mut cfg: LoadConfig) -> Result<Outcome, String> {
    let url = Url::parse(&cfg.url)?;
    let mut params = crate::workload::Params::parse(&cfg.params)?;
    let mut authorities = vec![url.authority.clone()];
    if cfg.workload == Spec::Polymix {
        if let Some(list) = params.take("servers") {
            authorities.clear();
            for s in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let u = Url::parse(s).map_err(|e| format!("--param servers: {e}"))?;
                authorities.push(u.authority);
            }
            if authorities.is_empty() {
                return Err("--param servers: no server given".into());
            }
        }
    }
    let url_list = match &cfg.urls {
        Some(p) => {
            if !matches!(cfg.workload, Spec::Url | Spec::Ssl) {
                return Err(format!(
                    "--urls goes with the default workload or ssl-emulation, not {}",
                    cfg.workload.name()
                ));
            }
            Some(read_urls(p, &mut authorities)?)
        }
        None => None,
    };
    let target = match &cfg.proxy {
        Some(p) => resolve(p).map_err(|e| format!("--proxy: {e}"))?,
        None => {
            if authorities.len() > 1 {
                return Err("URLs name several servers: send them through --proxy HOST:PORT".into());
            }
            url.resolve()?
        }
    };
    let prepared = Prepared::prepare(PrepareInput {
        spec: &cfg.workload,
        params,
        base_path: &url.path,
        url_list,
        authorities: authorities.len(),
        seed: cfg.seed,
    })?;
    let drive = prepared.drive();
    cfg.validate(drive)?;
    let trace = match &prepared {
        Prepared::Trace(r) => Some((r.trace.lines, r.trace.malformed, r.trace.other_methods)),
        _ => None,
    };
    let prepared = Arc::new(prepared);
    let version = if cfg.http10 { Version::Http10 } else { Version::Http11 };
    let writer = Writer::new(
        &authorities,
        cfg.host.as_deref(),
        version,
        &cfg.headers,
        cfg.close,
        cfg.proxy.is_some(),
    );
    let tunnel = writer.direct();
    if let Err(e) = cfg.event.probe() {
        return Err(format!("--event {}: unavailable here: {e}", cfg.event));
    }
    let _ = sys::raise_nofile_limit();
    let stop = stop_flag().clone();
    let mut runs = Vec::with_capacity(cfg.repeat);
    for rep in 0..cfg.repeat {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let mut r = run_once(&cfg, &writer, &tunnel, &prepared, target, drive, rep, &stop)?;
        r.trace = trace;
        runs.push(r);
    }
    if runs.is_empty() {
        return Err("interrupted before the first run".into());
    }
    let text = report::text(&cfg, &runs);
    let json = report::outcome_json(&cfg, &runs);
    if let Some(p) = &cfg.json {
        let body = serde_json::to_string_pretty(&json).expect("JSON values serialize");
        std::fs::write(p, body + "\n").map_err(|e| format!("cannot write --json {}: {e}", p.display()))?;
    }
    Ok(Outcome { runs, text, json })
}

fn split(total: usize, parts: usize, i: usize) -> usize {
    total / parts + usize::from(i < total % parts)
}

#[allow(clippy::too_many_arguments)]
fn run_once(
    cfg: &LoadConfig,
    writer: &Writer,
    tunnel: &Writer,
    prepared: &Arc<Prepared>,
    target: std::net::SocketAddr,
    drive: Drive,
    rep: usize,
    stop: &AtomicBool,
) -> Result<RunResult, String> {
    let threads = cfg.threads;
    let t0 = Instant::now() + Duration::from_millis(20);
    let shared = Shared {
        cfg,
        writer,
        tunnel,
        prepared,
        target,
        t0,
        stop,
    };
    let clients = match (cfg.rate, cfg.clients, drive) {
        (None, Some(n), _) => n,
        (None, None, Drive::Sessions) if cfg.idle == 0 || cfg.num_conns.is_some() => 1,
        _ => 0,
    };
    let slots: Vec<Slot> = (0..threads).map(|_| Slot::default()).collect();
    let cpu0 = sys::process_cpu_time();
    let progress = !cfg.quiet && std::io::stderr().is_terminal();
    let results = std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for (i, slot) in slots.iter().enumerate() {
            let plan = Plan {
                index: i,
                threads,
                rate: cfg.rate.map(|r| r / threads as f64),
                phase: cfg.rate.map(|r| i as f64 / r).unwrap_or(0.0),
                clients: split(clients, threads, i),
                budget: cfg.num_conns.map(|n| split(n as usize, threads, i) as u64),
                idle: split(cfg.idle, threads, i),
                seed: cfg
                    .seed
                    .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                    .wrapping_add((rep as u64) << 32)
                    .wrapping_add(i as u64 + 1),
            };
            let shared = &shared;
            let event = cfg.event;
            let h = std::thread::Builder::new()
                .name(format!("weft-load-{i}"))
                .spawn_scoped(
                    scope,
                    move || weft_io::with_backend!(event, P => run_thread::<P>(shared, plan, slot)),
                )
                .map_err(|e| format!("cannot start a thread: {e}"));
            handles.push(h);
        }
        let mut last_print = Instant::now();
        let mut last_replies = 0u64;
        loop {
            let running = handles.iter().any(|h| h.as_ref().is_ok_and(|h| !h.is_finished()));
            if !running {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
            if progress && last_print.elapsed() >= Duration::from_secs(1) {
                let (mut rq, mut rp, mut er, mut op) = (0u64, 0u64, 0u64, 0u64);
                for s in &slots {
                    rq += s.requests.load(Ordering::Relaxed);
                    rp += s.replies.load(Ordering::Relaxed);
                    er += s.errors.load(Ordering::Relaxed);
                    op += s.open.load(Ordering::Relaxed);
                }
                let dt = last_print.elapsed().as_secs_f64();
                let rate = (rp - last_replies) as f64 / dt;
                last_replies = rp;
                last_print = Instant::now();
                let mut e = std::io::stderr().lock();
                let _ = write!(
                    e,
                    "\r\x1b[K[{:>5.0}s] requests {rq}  replies {rp} ({rate:.0}/s)  errors {er}  open {op}",
                    t0.elapsed().as_secs_f64()
                );
                let _ = e.flush();
            }
        }
        if progress {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
        let mut out = Vec::new();
        for h in handles {
            let h = h?;
            match h.join() {
                Ok(Ok(r)) => out.push(r),
                Ok(Err(e)) => return Err(format!("event loop failed: {e}")),
                Err(_) => return Err("a load thread panicked".to_string()),
            }
        }
        Ok(out)
    })?;
    let cpu1 = sys::process_cpu_time();
    let mut stats = crate::stats::Stats::default();
    let mut dropped = 0;
    let mut end = t0;
    for (s, d, e) in &results {
        stats.merge(s);
        dropped += d;
        end = end.max(*e);
    }
    Ok(RunResult {
        stats,
        duration_s: end.saturating_duration_since(t0).as_secs_f64(),
        cpu: (
            cpu1.0.saturating_sub(cpu0.0).as_secs_f64(),
            cpu1.1.saturating_sub(cpu0.1).as_secs_f64(),
        ),
        arrivals_dropped: dropped,
        trace: None,
    })
}
