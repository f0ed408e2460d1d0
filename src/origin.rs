//! `weft origin`: the command line over weft-load's origin emulator.

use crate::args::{duration as parse_duration, set_given, size as parse_size, workers as parse_workers};
use crate::service;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use weft_load::dist::{Dist, Unit};
use weft_load::OriginConfig;

fn parse_think(s: &str) -> Result<Dist, String> {
    Dist::parse(s, Unit::Seconds)
}

fn parse_count(s: &str) -> Result<Dist, String> {
    Dist::parse(s, Unit::Count)
}

fn parse_share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("invalid share `{s}` (expected 0..1)")),
    }
}

fn parse_cache_control(s: &str) -> Result<String, String> {
    if s.is_empty() || s.bytes().any(|b| !(b' '..0x7f).contains(&b)) {
        return Err(format!("invalid Cache-Control value `{s}`"));
    }
    Ok(s.to_string())
}

/// `weft origin`.
#[derive(Args, Debug, Default)]
pub struct OriginArgs {
    /// Address to listen on; port 0 picks a free port (printed as `listening on ADDR:PORT`) [default: 127.0.0.1:9090].
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<SocketAddr>,

    /// Share the port with other processes that listen on it with this flag (several processes behind
    /// one port; the same user). Without it, a port another process holds is an error [default: false].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub reuse_port: Option<bool>,

    /// Worker threads [default: 1].
    #[arg(long, value_name = "N", value_parser = parse_workers)]
    pub workers: Option<usize>,

    /// Event backend [default: epoll].
    #[arg(long, value_name = "BACKEND", value_parser = crate::args::event)]
    pub event: Option<weft_io::BackendKind>,

    /// Think time before each response, e.g. `norm(2.5s,1s)` (PolyMix-4) or `100ms` [default: none].
    #[arg(long, value_name = "DIST", value_parser = parse_think)]
    pub think: Option<Dist>,

    /// Close a persistent connection after this many requests, e.g. `zipf(16)` [default: unlimited].
    #[arg(long, value_name = "DIST", value_parser = parse_count)]
    pub conn_requests: Option<Dist>,

    /// Abort this share of 200 responses halfway (half the body, then a reset), e.g. `0.001` (PolyMix-4) [default: 0].
    #[arg(long, value_name = "P", value_parser = parse_share)]
    pub abort: Option<f64>,

    /// Close connections idle this long [default: 15s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub idle_timeout: Option<Duration>,

    /// Connections one worker holds at most; beyond it new ones are closed at accept and counted
    /// (`refused_max_connections`); 0 = unlimited [default: 0].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,

    /// Cache-Control of URLs without a cacheability flag [default: max-age=3600].
    #[arg(long, value_name = "VALUE", value_parser = parse_cache_control)]
    pub cache_control: Option<String>,

    /// Largest body served [default: 1GiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_size: Option<u64>,

    /// Seed of think-time and connection-limit draws [default: 1].
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,

    /// Print counters as JSON on stderr at exit.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub stats_on_exit: Option<bool>,

    /// Read settings from this TOML file's [origin] table; flags override it.
    #[arg(short = 'c', long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

impl OriginArgs {
    /// The origin's configuration.
    pub fn to_config(&self) -> OriginConfig {
        let mut c = OriginConfig::default();
        set_given!(
            self,
            c;
            listen,
            reuse_port,
            workers,
            event,
            abort,
            idle_timeout,
            max_connections,
            cache_control,
            max_size,
            seed
        );
        c.think = self.think;
        c.conn_requests = self.conn_requests;
        c
    }
}

/// Run `weft origin` until SIGINT/SIGTERM.
pub fn run(args: OriginArgs) -> ExitCode {
    let stats_on_exit = args.stats_on_exit == Some(true);
    service::run::<weft_load::Origin>(
        args.to_config(),
        || {},
        |stats| {
            if stats_on_exit {
                eprintln!("{}", stats.to_json());
            }
        },
    )
}
