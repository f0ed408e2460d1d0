//! `weft front --mode booster` (issue 26): its flag group and what it adds
//! to the front's configuration.
//! Listening, workers (one unless `--workers` is given), timeouts, head
//! limits and the admin address come from the front's service flags;
//! `--backend` without `--site` is one site answering every Host.

use crate::args::positive;
use crate::front::FrontArgs;
use clap::{ArgAction, Args};
use std::time::Duration;
use weft_proxy::booster::{Boost, BoosterConfig, SiteSpec};
use weft_proxy::front::{BackendSpec, FrontConfig, Mode};
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

/// `--mode booster`: the booster's settings from the front's arguments
/// (the sites become the back-ends; one worker unless `--workers` is given).
/// Nothing for the other modes.
pub fn apply(args: &FrontArgs, front: &mut FrontConfig, proxy: &mut ProxyConfig) -> Result<(), String> {
    if front.mode != Mode::Booster {
        return Ok(());
    }
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
    front.backends = c
        .sites
        .iter()
        .map(|s| BackendSpec {
            addr: s.origin,
            weight: 1,
        })
        .collect();
    front.booster = Some(c);
    Ok(())
}
