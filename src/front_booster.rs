//! `weft front --mode booster` (issue 26): its flag group and run function.
//! Listening, workers (one unless `--workers` is given), timeouts, head
//! limits and the admin address come from the front's service flags;
//! `--backend` without `--site` is one site answering every Host.

use crate::args::positive;
use crate::front::FrontArgs;
use crate::service::{self, Service};
use clap::{ArgAction, Args};
use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;
use weft_io::Shutdown;
use weft_proxy::booster::{Boost, BoosterConfig, BoosterServer, SiteSpec};
use weft_proxy::ProxyConfig;

#[derive(Args, Debug, Default)]
pub struct BoosterArgs {
    /// Booster: a site and its origin, with the origin's admin address to poll
    /// for its load (`weft serve --admin`); HOST `*` answers any Host (repeatable).
    #[arg(long, value_name = "HOST=ADDR:PORT[@ADMIN:PORT]", action = ArgAction::Append)]
    pub site: Vec<SiteSpec>,

    /// Booster: persistent connections per origin, shared out over the workers [default: 2].
    #[arg(long, value_name = "N", value_parser = positive)]
    pub upstream_conns: Option<usize>,

    /// Booster: requests on one origin connection at once, the one being answered and the idempotent
    /// ones pipelined behind it [default: 8].
    #[arg(long, value_name = "N", value_parser = positive)]
    pub pipeline_depth: Option<usize>,

    /// Booster: requests held per origin, waiting or in flight; more are answered 503 [default: 1024].
    #[arg(long, value_name = "N", value_parser = positive)]
    pub max_queue: Option<usize>,

    /// Booster: when a site is boosted: always, never (requests passed straight through),
    /// or auto (from the origin's load report, with hysteresis) [default: always].
    #[arg(long, value_name = "always|never|auto")]
    pub boost: Option<Boost>,

    /// Booster, auto: switch in at this many busy cores on the origin [default: 0.8].
    #[arg(long, value_name = "CORES")]
    pub boost_on_cpu: Option<f64>,

    /// Booster, auto: ... or at this many open connections on the origin [default: 256].
    #[arg(long, value_name = "N", value_parser = positive)]
    pub boost_on_conns: Option<usize>,

    /// Booster, auto: switch out below this fraction of the request rate at switch-in [default: 0.5].
    #[arg(long, value_name = "F")]
    pub boost_off_fraction: Option<f64>,

    /// Booster, auto: readings in a row below it before switching out [default: 5].
    #[arg(long, value_name = "N", value_parser = positive)]
    pub boost_hold: Option<usize>,

    /// Booster, auto: time between two load readings [default: 250ms].
    #[arg(long, value_name = "DURATION", value_parser = crate::args::duration)]
    pub load_interval: Option<Duration>,

    /// Booster: TCP_QUICKACK off on origin connections after each response (delayed ACKs).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub delayed_ack: Option<bool>,
}

/// The booster's configuration, its admin address and the proxy's settings
/// from the front's arguments.
type Config = (BoosterConfig, Option<SocketAddr>, ProxyConfig);

fn config(args: &FrontArgs) -> Result<Config, String> {
    let (front, mut proxy) = args.to_config();
    if args.service.workers.is_none() {
        proxy.workers = 1;
    }
    let b = &args.booster;
    let mut c = BoosterConfig {
        sites: b.site.clone(),
        ..BoosterConfig::default()
    };
    if c.sites.is_empty() {
        c.sites = front
            .backends
            .iter()
            .map(|s| SiteSpec {
                host: "*".into(),
                origin: s.addr,
                load: None,
            })
            .take(1)
            .collect();
    }
    if c.sites.is_empty() {
        return Err("front: booster mode needs --site HOST=ADDR:PORT (or one --backend)".into());
    }
    let t = &mut c.thresholds;
    let frac = |k: &str, v: f64| {
        (v.is_finite() && v > 0.0 && v <= 1024.0)
            .then_some(v)
            .ok_or(format!("front: invalid --{k} {v}"))
    };
    if let Some(v) = b.boost_on_cpu {
        t.on_cpu = frac("boost-on-cpu", v)?;
    }
    if let Some(v) = b.boost_off_fraction {
        t.off_fraction = frac("boost-off-fraction", v)?.min(1.0);
    }
    if let Some(v) = b.boost_on_conns {
        t.on_conns = v as u64;
    }
    if let Some(v) = b.boost_hold {
        t.hold = v.min(10_000) as u32;
    }
    if let Some(v) = b.load_interval {
        t.interval = v.max(Duration::from_millis(10));
    }
    if b.boost == Some(Boost::Auto) && c.sites.iter().all(|s| s.load.is_none()) {
        return Err("front: --boost auto needs a site with @ADMIN (the origin's load report)".into());
    }
    c.boost = b.boost.unwrap_or_default();
    c.upstream_conns = b.upstream_conns.unwrap_or(2).min(1024);
    c.pipeline = b.pipeline_depth.unwrap_or(8).min(1024);
    c.max_queue = b.max_queue.unwrap_or(1024);
    c.delayed_ack = b.delayed_ack.unwrap_or(false);
    Ok((c, front.admin, proxy))
}

impl Service for BoosterServer {
    type Config = Config;
    type Stats = (weft_proxy::ProxyStats, String);
    fn start((c, admin, proxy): Self::Config) -> io::Result<Self> {
        BoosterServer::start(c, admin, proxy)
    }
    fn shutdown_handle(&self) -> Shutdown {
        BoosterServer::shutdown_handle(self)
    }
    fn local_addr(&self) -> SocketAddr {
        BoosterServer::local_addr(self)
    }
    fn admin_addr(&self) -> Option<SocketAddr> {
        BoosterServer::admin_addr(self)
    }
    fn wait(self) -> io::Result<Self::Stats> {
        BoosterServer::wait(self)
    }
}

/// Run `weft front --mode booster` until a shutdown signal.
pub fn run(args: &FrontArgs) -> ExitCode {
    args.service.apply_process_flags();
    let cfg = match config(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weft: {e}");
            return ExitCode::from(2);
        }
    };
    let stats_on_exit = cfg.2.stats_on_exit;
    let (n, conns, boost, workers) = (cfg.0.sites.len(), cfg.0.upstream_conns, cfg.0.boost, cfg.2.workers);
    service::run::<BoosterServer>(
        cfg,
        || {
            weft_core::info!(
                "booster over {n} site(s), {conns} connection(s) per origin, boost {boost:?}, {workers} worker(s)"
            )
        },
        |(_, doc)| {
            if stats_on_exit {
                eprint!("{doc}");
            }
        },
    )
}
