//! `weft load` and `weft load gen`: the command line over the weft-load crate.

use crate::args::{duration as parse_duration, set_given, size_usize as parse_size_usize};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use weft_load::dist::{Dist, Unit};
use weft_load::workload::Spec;
use weft_load::{Arrivals, LoadConfig};

fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!("invalid rate `{s}` (expected a positive number per second)")),
    }
}

fn parse_think(s: &str) -> Result<Dist, String> {
    Dist::parse(s, Unit::Seconds)
}

/// `--local-addrs` (a newtype: clap reads `Option<Vec<T>>` as a repeated flag).
#[derive(Clone, Debug)]
pub struct LocalAddrs(pub Vec<std::net::IpAddr>);

fn parse_local_addrs(s: &str) -> Result<LocalAddrs, String> {
    weft_load::config::parse_local_addrs(s).map(LocalAddrs)
}

fn parse_workload(s: &str) -> Result<Spec, String> {
    Spec::parse(s)
}

/// `weft load`.
#[derive(Args, Debug, Default)]
#[command(args_conflicts_with_subcommands = true)]
pub struct LoadArgs {
    #[command(subcommand)]
    pub command: Option<LoadCommand>,

    /// The server (or origin, with --proxy): http://HOST[:PORT][/PATH].
    #[arg(value_name = "URL")]
    pub url: Option<String>,

    /// Open loop: new sessions (connections) per second, whatever the server does.
    #[arg(long, value_name = "R", value_parser = parse_rate)]
    pub rate: Option<f64>,

    /// Inter-arrival times of the open loop: fixed, exp (Poisson) or uniform [default: fixed].
    #[arg(long, value_name = "fixed|exp|uniform")]
    pub dist: Option<Arrivals>,

    /// Closed loop: N concurrent clients, each starting its next session when one ends.
    #[arg(long, value_name = "N")]
    pub clients: Option<usize>,

    /// Requests per connection (session); 0 = unlimited [default: 1 open loop, 0 closed loop].
    #[arg(long, value_name = "N")]
    pub calls: Option<u32>,

    /// Stop starting sessions after this long [default: 10s unless --num-conns bounds the run].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Stop after this many sessions (connections), or requests for polymix and trace replay.
    #[arg(long, value_name = "N")]
    pub num_conns: Option<u64>,

    /// A request (or connect) with no progress for this long is a client timeout [default: 10s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub timeout: Option<Duration>,

    /// Hold N extra connections open without requests, reopening any the server closes (idleconn).
    #[arg(long, value_name = "N")]
    pub idle: Option<usize>,

    /// Requests written back to back on a connection before waiting for their replies [default: 1].
    #[arg(long, value_name = "DEPTH")]
    pub pipeline: Option<u32>,

    /// Speak HTTP/1.0 (keep-alive asked for only when a connection carries several requests).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub http10: Option<bool>,

    /// Ask the server to close after every request (Connection: close).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub close: Option<bool>,

    /// Host header value [default: the URL's host:port].
    #[arg(long, value_name = "HOST")]
    pub host: Option<String>,

    /// Extra request header, `Name: value` (repeatable).
    #[arg(long = "header", value_name = "'NAME: VALUE'")]
    pub headers: Vec<String>,

    /// Send absolute-form requests (and CONNECT) to this proxy.
    #[arg(long, value_name = "HOST:PORT")]
    pub proxy: Option<String>,

    /// Request the URLs of FILE (one path or http:// URL per line) in turn.
    #[arg(long, value_name = "FILE")]
    pub urls: Option<PathBuf>,

    /// one-byte, file:SIZE, specweb99, surge, polymix, trace[:FILE], ssl-emulation [default: the URL].
    #[arg(long, value_name = "NAME", value_parser = parse_workload)]
    pub workload: Option<Spec>,

    /// Workload parameter `key=value` (repeatable; see docs/load.md).
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,

    /// Event loops (threads), each with its share of the load [default: 1].
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,

    /// Write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Run K times and report means with 90% confidence intervals [default: 1].
    #[arg(long, value_name = "K")]
    pub repeat: Option<usize>,

    /// Seed of every random choice (workloads are reproducible) [default: 1].
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,

    /// Check every body against weft origin's deterministic content.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub verify: Option<bool>,

    /// Client think time between requests and between a client's sessions (a duration or a distribution such as exp(1s)).
    #[arg(long, value_name = "DURATION|DIST", value_parser = parse_think)]
    pub think: Option<Dist>,

    #[arg(long, value_name = "BACKEND", value_parser = crate::args::event, help = crate::args::EVENT_HELP)]
    pub event: Option<weft_io::BackendKind>,

    /// SO_RCVBUF of each connection (httperf's --recv-buffer) [default: the kernel's].
    #[arg(long, value_name = "BYTES", value_parser = parse_size_usize)]
    pub recv_buffer: Option<usize>,

    /// Source addresses for connections, used in turn: `127.0.0.2-127.0.0.17,127.0.1.1` (each
    /// has its own ports; spreads TIME_WAIT on loopback at high connection rates).
    #[arg(long, value_name = "ADDRS", value_parser = parse_local_addrs)]
    pub local_addrs: Option<LocalAddrs>,

    /// Bind each connection to the next source port of LO-HI in turn (httperf's --hog), instead of
    /// letting connect() search the ephemeral range.
    #[arg(long, value_name = "LO-HI", value_parser = weft_load::config::parse_local_ports)]
    pub local_ports: Option<(u16, u16)>,

    /// How the client closes connections it ends itself: reset (SO_LINGER 0 once every reply is in:
    /// no TIME_WAIT on the client) or fin (a normal close) [default: reset].
    #[arg(long, value_name = "reset|fin")]
    pub client_close: Option<weft_load::config::ClientClose>,

    /// No live progress line.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub quiet: Option<bool>,

    /// Read settings from this TOML file's [load] table; flags override it.
    #[arg(short = 'c', long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// `weft load` subcommands.
#[derive(Subcommand, Debug)]
pub enum LoadCommand {
    /// Write the file set or trace a workload needs (file:SIZE, specweb99, surge, trace).
    Gen(GenArgs),
}

/// `weft load gen`.
#[derive(Args, Debug)]
pub struct GenArgs {
    /// one-byte, file:SIZE, specweb99, surge or trace.
    #[arg(value_name = "WORKLOAD", value_parser = parse_workload)]
    pub workload: Spec,

    /// Directory to write into.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// Workload parameter `key=value` (repeatable).
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,

    /// Seed (use the same one with weft load) [default: 1].
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
}

impl LoadArgs {
    /// The configuration these flags describe.
    pub fn to_config(&self) -> Result<LoadConfig, String> {
        let Some(url) = self.url.clone() else {
            return Err("weft load needs a URL (e.g. weft load http://127.0.0.1:8080/ --rate 100)".into());
        };
        let mut c = LoadConfig {
            url,
            ..Default::default()
        };
        set_given!(self, c; idle, pipeline, http10, close, workload, threads, repeat, seed, verify, think, event, quiet, timeout);
        c.rate = self.rate;
        c.arrivals = self.dist.unwrap_or_default();
        c.clients = self.clients;
        c.calls = self.calls;
        c.duration = self.duration;
        c.num_conns = self.num_conns;
        c.host = self.host.clone();
        c.headers = self.headers.clone();
        c.proxy = self.proxy.clone();
        c.urls = self.urls.clone();
        c.params = self.params.clone();
        c.json = self.json.clone();
        c.recv_buffer = self.recv_buffer;
        c.local_addrs = self.local_addrs.clone().map(|l| l.0).unwrap_or_default();
        c.local_ports = self.local_ports;
        c.client_close = self.client_close.unwrap_or_default();
        Ok(c)
    }
}

/// Run `weft load` (or `weft load gen`).
pub fn run(args: LoadArgs) -> ExitCode {
    if let Some(LoadCommand::Gen(g)) = args.command {
        return gen(g);
    }
    let cfg = match args.to_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weft: {e}");
            return ExitCode::from(2);
        }
    };
    match weft_load::run(cfg) {
        Ok(out) => {
            print!("{}", out.text);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("weft: {e}");
            ExitCode::from(2)
        }
    }
}

fn gen(g: GenArgs) -> ExitCode {
    match weft_load::gen::generate(&g.workload, &g.params, &g.out, g.seed.unwrap_or(1)) {
        Ok(w) => {
            if w.lines > 0 {
                println!("wrote {} ({} lines)", w.path.display(), w.lines);
                if w.files > 0 {
                    println!("wrote {} files, {} bytes under {}", w.files, w.bytes, g.out.display());
                }
            } else {
                println!("wrote {} files, {} bytes under {}", w.files, w.bytes, g.out.display());
            }
            if let Some(m) = w.mean_request {
                println!("mean response over the reference sequence: {m:.0} bytes");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("weft: {e}");
            ExitCode::from(2)
        }
    }
}
