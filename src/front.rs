//! `weft front`: the argument struct, its mapping onto the proxy's settings
//! and the front-end's (`FrontConfig`), and the run function.

use crate::args::{duration, positive, set_given};
use crate::service::{apply_service_args, ServiceArgs};
use crate::upstream::UpstreamArgs;
use clap::{ArgAction, Args};
use std::process::ExitCode;
use std::time::Duration;
use weft_proxy::front::{BackendSpec, FrontConfig, FrontServer, Mode, Policy};

#[derive(Args, Debug, Default)]
#[command(
    mut_arg("listen", |a| a.help(crate::args::PROXY_LISTEN_HELP)),
    mut_arg("event", |a| a.value_parser(crate::args::event).help(crate::args::EVENT_HELP)),
    mut_arg("admin", |a| a.help(
        "Serve the front-end's state (back-ends: state, load, requests, bytes; target map, queue) \
         as JSON at http://ADDR/stats and as Prometheus text at /metrics"
    )),
    mut_arg("config", |a| a.help("Read settings from this TOML file's [front] table; flags override it")),
    // A front-end keeps at least one idle connection per back-end.
    mut_arg("pool_size", |a| a.value_parser(positive)),
)]
pub struct FrontArgs {
    // Listening, workers, timeouts, head limits, logging, the config file.
    #[command(flatten)]
    pub service: ServiceArgs,

    /// A back-end HTTP server, with an optional weight (repeatable; the config
    /// file takes a list, or `[[front.backend]]` tables with `addr` and `weight`).
    #[arg(long, value_name = "ADDR:PORT[=WEIGHT]", action = ArgAction::Append)]
    pub backend: Vec<BackendSpec>,

    /// Request distribution: wrr, lb, lb-gc, lard, lard-r or chash (bounded-load
    /// consistent hashing, factor 125) [default: lard-r].
    #[arg(long, value_name = "POLICY")]
    pub policy: Option<Policy>,

    /// How requests reach the back-ends: relay (forward over pooled connections,
    /// bodies back by splice), handoff (pass the client's connection to a `weft serve
    /// --handoff-socket` on this host, which answers it directly; needs --handoff) or booster
    /// (terminate clients, multiplex onto a few persistent pipelined connections per origin:
    /// docs/booster.md) [default: relay].
    #[arg(long, value_name = "relay|handoff|booster")]
    pub mode: Option<Mode>,

    /// Handoff mode: a back-end's handoff socket (its `weft serve --handoff-socket PATH`), one per
    /// --backend in the same order; the back-end's address stays for the health checks.
    #[arg(long, value_name = "PATH", action = ArgAction::Append)]
    pub handoff: Vec<String>,

    /// Handoff mode, a persistent connection's next request: keep (the back-end it was handed to
    /// answers it), return (the back-end gives the connection back after each response, and each
    /// request is placed on its own), owner (the back-end answers it when it owns its target in the
    /// front-end's map, shared with it, and gives the connection back otherwise) or close (the
    /// back-end closes the connection after the response) [default: keep].
    #[arg(long, value_name = "keep|return|owner|close")]
    pub handoff_next: Option<weft_io::handoff::NextRule>,

    /// T_low: LARD's load below which a back-end counts as idle, and a term of
    /// the admission limit S = (n-1)*T_high + T_low - 1 [default: 25].
    #[arg(long, value_name = "N", value_parser = positive)]
    pub t_low: Option<usize>,

    /// T_high: LARD's load above which a target moves, and a term of S [default: 65].
    #[arg(long, value_name = "N", value_parser = positive)]
    pub t_high: Option<usize>,

    /// Requests that may wait in order for admission beyond S; more get 503 [default: 4096].
    #[arg(long, value_name = "N")]
    pub queue_limit: Option<usize>,

    /// Apply the admission limit S (false: send every request at once) [default: true].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub admission: Option<bool>,

    /// Time between two active health checks of a back-end [default: 2s].
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub health_interval: Option<Duration>,

    /// Longest an active health check may take [default: 1s].
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub health_timeout: Option<Duration>,

    /// Passing checks in a row that bring a down back-end back [default: 2].
    #[arg(long, value_name = "N", value_parser = positive)]
    pub health_rise: Option<usize>,

    /// Failing checks in a row that take a back-end down [default: 3].
    #[arg(long, value_name = "N", value_parser = positive)]
    pub health_fall: Option<usize>,

    /// The path the health checks GET; a status below 500 passes [default: /].
    #[arg(long, value_name = "PATH")]
    pub health_path: Option<String>,

    // Back-end connect and silence timeouts, the idle connection pool.
    #[command(flatten)]
    pub upstream_conns: UpstreamArgs,

    // `--mode booster` (issue 26).
    #[command(flatten)]
    pub booster: crate::front_booster::BoosterArgs,
    // The access log.
    #[command(flatten)]
    pub access: crate::proxy_log::ProxyLogArgs,
}

impl FrontArgs {
    /// The validated configuration: the front-end's and the proxy's.
    pub fn to_config(&self) -> (FrontConfig, weft_proxy::ProxyConfig) {
        let mut p = weft_proxy::ProxyConfig::default();
        apply_service_args!(self.service, p);
        self.upstream_conns.apply(&mut p);
        self.access.apply(&mut p);
        let mut f = FrontConfig {
            backends: self.backend.clone(),
            handoff: self.handoff.clone(),
            handoff_next: self.handoff_next.unwrap_or_default(),
            admin: p.admin.take(),
            ..FrontConfig::default()
        };
        set_given!(self, f; policy, mode);
        let d = &mut f.dispatch;
        if let Some(v) = self.t_low {
            d.t_low = v as u32;
        }
        if let Some(v) = self.t_high {
            d.t_high = v as u32;
        }
        if let Some(v) = self.queue_limit {
            d.queue_limit = v;
        }
        if let Some(v) = self.admission {
            d.admission = v;
        }
        let h = &mut f.health;
        if let Some(v) = self.health_interval {
            h.interval = v;
        }
        if let Some(v) = self.health_timeout {
            h.timeout = v;
        }
        if let Some(v) = &self.health_path {
            h.path.clone_from(v);
        }
        if let Some(v) = self.health_rise {
            h.rise = v as u32;
        }
        if let Some(v) = self.health_fall {
            h.fall = v as u32;
        }
        (f, p)
    }
}

crate::service::service_by_its_own_methods!(
    FrontServer,
    (FrontConfig, weft_proxy::ProxyConfig),
    (weft_proxy::ProxyStats, String)
);

/// Run `weft front` until a shutdown signal.
pub fn run(args: FrontArgs) -> ExitCode {
    args.service.apply_process_flags();
    let (mut front, mut proxy) = args.to_config();
    if let Err(e) = crate::front_booster::apply(&args, &mut front, &mut proxy) {
        eprintln!("weft: {e}");
        return ExitCode::from(2);
    }
    if front.backends.is_empty() {
        eprintln!("weft: front: at least one --backend ADDR:PORT is needed");
        return ExitCode::from(2);
    }
    let stats_on_exit = proxy.stats_on_exit;
    let (n, policy, mode, workers, event) = (
        front.backends.len(),
        front.policy,
        front.mode,
        proxy.workers,
        proxy.event,
    );
    let reconfigure = || {
        crate::reload::reparse(|c| match c {
            crate::cli::Command::Front(a) => match a.to_config() {
                (f, _) if f.backends.is_empty() => Err("front: at least one --backend ADDR:PORT is needed".into()),
                c => Ok(c),
            },
            _ => Err("not `weft front` any more".into()),
        })
    };
    crate::reload::run::<FrontServer>(
        (front, proxy),
        args.service.pid_file.as_deref(),
        reconfigure,
        || {
            weft_core::info!(
                "front-end over {n} back-end(s), policy {policy}, mode {}, {workers} worker(s), event backend {event}",
                mode.name()
            );
        },
        |(stats, front)| {
            if stats_on_exit {
                eprintln!("{{\"total\":{},\"front\":{}}}", stats.to_json(), front.trim_end());
            }
        },
    )
}
