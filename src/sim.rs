//! `weft sim`: the command line over the weft-sim crate (the thesis's
//! trace-driven cluster simulator, §3.2). Every combination of `--nodes` and
//! `--policy` is one run over the same trace; the results are printed as a
//! table and, with `--json`, written as JSON.

use crate::args::{duration as parse_duration, size as parse_size};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use weft_sim::synth::HotTargets;
use weft_sim::{
    json_document, simulate, table, CachePolicy, CostModel, Input, LardParams, Policy, SimConfig, SynthOptions,
};

/// A strategy as `weft sim` names it: a weft-policy strategy, or WRR over a
/// global memory system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimPolicy {
    /// A weft-policy strategy by name.
    Named(&'static str),
    /// WRR/GMS.
    WrrGms,
}

/// Every strategy, in the thesis's order.
const ALL: &[&str] = &["wrr", "wrr-gms", "lb", "lb-gc", "lard", "lard-r", "chash"];

/// `--policy a,b,...` or `all`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyList(pub Vec<SimPolicy>);

fn parse_policies(s: &str) -> Result<PolicyList, String> {
    let names: Vec<&str> = if s == "all" {
        ALL.to_vec()
    } else {
        s.split(',').collect()
    };
    let mut out = Vec::new();
    for n in names {
        let p = match n.trim() {
            "wrr-gms" | "gms" => SimPolicy::WrrGms,
            other => match ALL.iter().find(|&&a| a == other) {
                Some(&a) => SimPolicy::Named(a),
                None => {
                    return Err(format!(
                        "unknown policy `{other}` (expected all or a list of {})",
                        ALL.join(", ")
                    ))
                }
            },
        };
        out.push(p);
    }
    Ok(PolicyList(out))
}

/// `--nodes 8`, `--nodes 1,2,4,8` or `--nodes 1-16`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeList(pub Vec<usize>);

fn parse_nodes(s: &str) -> Result<NodeList, String> {
    let bad = || format!("invalid node count `{s}` (expected N, N,M,... or N-M, each 1..1024)");
    let one = |t: &str| t.trim().parse::<usize>().ok().filter(|n| (1..=1024).contains(n));
    let mut out = Vec::new();
    for part in s.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (one(a).ok_or_else(bad)?, one(b).ok_or_else(bad)?);
                if a > b {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => out.push(one(part).ok_or_else(bad)?),
        }
    }
    Ok(NodeList(out))
}

fn parse_count(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if (1..=1_000_000).contains(&n) => Ok(n),
        _ => Err(format!("invalid count `{s}` (expected 1..1000000)")),
    }
}

fn parse_speed(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && (0.01..=1000.0).contains(&x) => Ok(x),
        _ => Err(format!("invalid speed `{s}` (expected a factor such as 1, 2 or 0.5)")),
    }
}

fn parse_locality(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if (0.0..1.0).contains(&p) => Ok(p),
        _ => Err(format!("invalid probability `{s}` (expected 0 <= P < 1)")),
    }
}

/// `SHARE[:COUNT[:SIZE]]`, e.g. `0.3` or `0.3:5:32KiB`.
fn parse_hot(s: &str) -> Result<HotTargets, String> {
    let bad = || format!("invalid hot targets `{s}` (expected SHARE[:COUNT[:SIZE]], e.g. 0.3:5:32KiB, 0 < SHARE < 1)");
    let mut parts = s.split(':');
    let share = parts
        .next()
        .and_then(|p| p.parse::<f64>().ok())
        .filter(|p| *p > 0.0 && *p < 1.0)
        .ok_or_else(bad)?;
    let count = match parts.next() {
        Some(c) => c
            .parse::<u32>()
            .ok()
            .filter(|c| (1..=10_000).contains(c))
            .ok_or_else(bad)?,
        None => 5,
    };
    let size = match parts.next() {
        Some(z) => parse_size(z).map_err(|_| bad())?,
        None => 32 * 1024,
    };
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(HotTargets { share, count, size })
}

fn parse_requests(s: &str) -> Result<u64, String> {
    match s.replace('_', "").parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("invalid request count `{s}` (expected a positive integer)")),
    }
}

fn parse_cache_policy(s: &str) -> Result<CachePolicy, String> {
    s.parse()
}

/// `weft sim`.
#[derive(Args, Debug)]
pub struct SimArgs {
    /// An access log (Common or Combined Log Format, plain or gzip), or a synthetic trace with
    /// the statistics of one of the thesis's: rice, ibm, merged, ece, cs, owlnet.
    #[arg(value_name = "TRACE|SHAPE")]
    pub trace: String,

    /// Back-end nodes: N, a list N,M,... or a range N-M; one run per count [default: 8].
    #[arg(long, value_name = "N", value_parser = parse_nodes)]
    pub nodes: Option<NodeList>,

    /// Strategies, comma-separated, or `all`: wrr, wrr-gms, lb, lb-gc, lard, lard-r, chash
    /// [default: wrr,lard,lard-r].
    #[arg(long, value_name = "LIST", value_parser = parse_policies)]
    pub policy: Option<PolicyList>,

    /// Node cache replacement: gds (Greedy-Dual-Size) or lru (never caches files over 500 KB)
    /// [default: gds].
    #[arg(long, value_name = "gds|lru", value_parser = parse_cache_policy)]
    pub cache_policy: Option<CachePolicy>,

    /// Cache per node [default: 32MiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub cache_size: Option<u64>,

    /// Disks per node; files are striped over them in order of popularity [default: 1].
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub disks: Option<u32>,

    /// CPU speed relative to the thesis's 300 MHz Pentium II (its §3.3.3 runs use 2, 3, 4 with
    /// 1.5, 2, 3 times the cache) [default: 1].
    #[arg(long, value_name = "X", value_parser = parse_speed)]
    pub cpu_speed: Option<f64>,

    /// LARD's T_low, also in the admission limit and the idle threshold (40 % of it) [default: 25].
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub t_low: Option<u32>,

    /// LARD's T_high, also in the admission limit S = (n-1)*T_high + T_low - 1 [default: 65].
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub t_high: Option<u32>,

    /// LARD/R: a server set unchanged this long loses its most loaded node [default: 20s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub k: Option<Duration>,

    /// Targets LARD and LARD/R remember (least recently requested forgotten) [default: 1048576].
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub map_size: Option<u32>,

    /// chash: HAProxy's hash-balance-factor, in percent, 100 or more [default: 125].
    #[arg(long, value_name = "PCT", value_parser = clap::value_parser!(u32).range(100..=100_000))]
    pub balance_factor: Option<u32>,

    /// Closed-loop clients [default: the admission limit S, so S requests are always in flight].
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub clients: Option<u32>,

    /// Requests: the length of a synthetic trace, or the most read from a log [default:
    /// 1000000 synthetic, the whole log].
    #[arg(long, value_name = "N", value_parser = parse_requests)]
    pub requests: Option<u64>,

    /// Synthetic traces: the probability that a request repeats one of the last 10,000, adding
    /// temporal locality without changing popularity; 0 is the independent reference model
    /// [default: 0].
    #[arg(long, value_name = "P", value_parser = parse_locality)]
    pub locality: Option<f64>,

    /// Synthetic traces: artificial hot targets (§3.3.2), SHARE[:COUNT[:SIZE]]: COUNT extra
    /// targets of SIZE bytes draw SHARE of all requests [default count 5, size 32KiB].
    #[arg(long, value_name = "SHARE[:COUNT[:SIZE]]", value_parser = parse_hot)]
    pub hot: Option<HotTargets>,

    /// Seed of a synthetic trace (sizes and draws) [default: 1].
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,

    /// Also write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

impl SimArgs {
    fn policy(&self, p: SimPolicy) -> (Policy, bool) {
        let lard = LardParams {
            t_low: self.t_low.unwrap_or(25),
            t_high: self.t_high.unwrap_or(65),
            k: self
                .k
                .map_or(20_000_000_000, |d| d.as_nanos().min(u128::from(u64::MAX)) as u64),
            map_capacity: self.map_size.unwrap_or(1 << 20) as usize,
        };
        match p {
            SimPolicy::WrrGms => (Policy::Wrr, true),
            SimPolicy::Named(name) => {
                let policy = match name.parse::<Policy>().expect("validated name") {
                    Policy::Lard(_) => Policy::Lard(lard),
                    Policy::LardR(_) => Policy::LardR(lard),
                    Policy::LbGc { .. } => Policy::LbGc {
                        cache_bytes: self.cache_bytes(),
                        max_file: match self.cache_policy {
                            Some(CachePolicy::Lru) => weft_sim::cache::LRU_MAX_FILE,
                            _ => self.cache_bytes(),
                        },
                    },
                    Policy::Chash { .. } => Policy::Chash {
                        balance_factor: self.balance_factor.unwrap_or(125),
                    },
                    other => other,
                };
                (policy, false)
            }
        }
    }

    fn cache_bytes(&self) -> u64 {
        self.cache_size.unwrap_or(32 << 20)
    }

    fn config(&self, nodes: usize, p: SimPolicy) -> SimConfig {
        let (policy, gms) = self.policy(p);
        SimConfig {
            nodes,
            policy,
            gms,
            cache_policy: self.cache_policy.unwrap_or(CachePolicy::Gds),
            cache_bytes: self.cache_bytes(),
            disks: self.disks.unwrap_or(1) as usize,
            cost: CostModel {
                cpu_speed: self.cpu_speed.unwrap_or(1.0),
                ..CostModel::default()
            },
            t_low: self.t_low.unwrap_or(25),
            t_high: self.t_high.unwrap_or(65),
            clients: self.clients.map(|c| c as usize),
        }
    }
}

/// Run `weft sim`.
pub fn run(args: SimArgs) -> ExitCode {
    let (t_low, t_high) = (args.t_low.unwrap_or(25), args.t_high.unwrap_or(65));
    if t_high <= t_low {
        eprintln!("weft: --t-high ({t_high}) must be greater than --t-low ({t_low})");
        return ExitCode::from(2);
    }
    let nodes = args.nodes.clone().map_or(vec![8], |n| n.0);
    let policies = args.policy.clone().map_or_else(
        || {
            vec![
                SimPolicy::Named("wrr"),
                SimPolicy::Named("lard"),
                SimPolicy::Named("lard-r"),
            ]
        },
        |p| p.0,
    );
    let seed = args.seed.unwrap_or(1);
    let input = Input::from_arg(&args.trace, seed);
    let synth = SynthOptions {
        locality: args.locality.unwrap_or(0.0),
        hot: args.hot,
    };
    let mut runs = Vec::new();
    let mut warned = false;
    for &n in &nodes {
        for &p in &policies {
            let config = args.config(n, p);
            let mut source = match input.open(args.requests, seed, synth) {
                Ok(s) => s,
                Err(e) => return crate::args::fatal(e),
            };
            let started = Instant::now();
            let report = match simulate(config, source.as_mut()) {
                Ok(r) => r,
                Err(e) => return crate::args::fatal(format_args!("{}: {e}", args.trace)),
            };
            let wall = started.elapsed().as_secs_f64();
            if !warned && report.trace.malformed > 0 {
                warned = true;
                let first = report
                    .trace
                    .first_malformed
                    .as_ref()
                    .map_or(String::new(), |(l, why)| format!(" (first: line {l}: {why})"));
                eprintln!(
                    "weft: {}: {} of {} lines malformed and skipped{first}",
                    args.trace, report.trace.malformed, report.trace.lines
                );
            }
            runs.push((report, wall));
        }
    }
    let reports: Vec<_> = runs.iter().map(|(r, _)| r.clone()).collect();
    print!("{}", table(&reports));
    if let Some(path) = &args.json {
        if let Err(e) = std::fs::write(path, json_document(&input, &runs)) {
            return crate::args::fatal(format_args!("--json {}: {e}", path.display()));
        }
    }
    ExitCode::SUCCESS
}
