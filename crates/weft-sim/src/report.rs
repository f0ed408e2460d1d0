//! What a run measured (§3.2.3), as a table row and as JSON.
//!
//! Throughput is requests over the simulated time to serve them all; the miss
//! ratio counts requests that needed their node's disk (a miss that joined a
//! read in progress included; WRR/GMS's remote-memory hits excluded); idle
//! time is the fraction of time a node's load was below 40 % of T_low,
//! averaged over nodes; delay runs from a client's request to its teardown.

use crate::cache::CachePolicy;
use crate::trace::TraceStats;
use serde::Serialize;
use std::fmt::Write;

/// One node's figures.
#[derive(Clone, Debug, Serialize)]
pub struct NodeReport {
    /// Requests it served.
    pub requests: u64,
    /// Of which missed its cache.
    pub misses: u64,
    /// Fraction of time its load was below 40 % of T_low.
    pub idle_fraction: f64,
    /// Fraction of time its CPU was busy.
    pub cpu_utilization: f64,
    /// Fraction of time its disks were busy (averaged over its disks).
    pub disk_utilization: f64,
    /// Bytes in its cache at the end.
    pub cached_bytes: u64,
}

/// One simulation's results.
#[derive(Clone, Debug, Serialize)]
pub struct SimReport {
    /// Strategy (`wrr`, `lard-r`, `wrr-gms`...).
    pub policy: String,
    /// Back-end nodes.
    pub nodes: usize,
    /// Cache replacement.
    pub cache_policy: CachePolicy,
    /// Cache bytes per node.
    pub cache_bytes: u64,
    /// Disks per node.
    pub disks: usize,
    /// CPU speed factor.
    pub cpu_speed: f64,
    /// Closed-loop clients.
    pub clients: usize,
    /// The admission limit S.
    pub admission_limit: usize,
    /// Requests served.
    pub requests: u64,
    /// Requests refused by the front-end (0 unless clients exceed S + queue).
    pub rejected: u64,
    /// Simulated time to serve them.
    pub simulated_seconds: f64,
    /// Requests per simulated second.
    pub throughput: f64,
    /// Requests that needed the disk, over requests.
    pub miss_ratio: f64,
    /// Disk reads started (one per miss not joining a read in progress).
    pub disk_reads: u64,
    /// WRR/GMS: misses served from another node's memory.
    pub remote_hits: u64,
    /// Mean over nodes of the fraction of time with load below 40 % of T_low.
    pub idle_fraction: f64,
    /// Mean delay from request to completion, ms.
    pub delay_mean_ms: f64,
    /// Longest delay, ms.
    pub delay_max_ms: f64,
    /// Targets in the strategy's map at the end.
    pub mapped_targets: usize,
    /// What the trace held.
    pub trace: TraceStats,
    /// Per node.
    pub per_node: Vec<NodeReport>,
}

/// Column headings of [`table`].
const HEAD: &str = "policy    nodes  throughput/s  miss %  idle %  delay ms  cpu %  disk %";

/// A plain-text table, one row per run.
pub fn table(reports: &[SimReport]) -> String {
    let mut out = String::from(HEAD);
    out.push('\n');
    for r in reports {
        let n = r.per_node.len().max(1) as f64;
        let cpu = r.per_node.iter().map(|x| x.cpu_utilization).sum::<f64>() / n;
        let disk = r.per_node.iter().map(|x| x.disk_utilization).sum::<f64>() / n;
        let _ = writeln!(
            out,
            "{:<8}  {:>5}  {:>12.1}  {:>6.2}  {:>6.2}  {:>8.1}  {:>5.1}  {:>6.1}",
            r.policy,
            r.nodes,
            r.throughput,
            100.0 * r.miss_ratio,
            100.0 * r.idle_fraction,
            r.delay_mean_ms,
            100.0 * cpu,
            100.0 * disk
        );
    }
    out
}
