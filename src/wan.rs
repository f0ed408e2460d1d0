//! `weft wan`: run a command (or a shell) behind an emulated WAN path, as
//! easily as `mm-delay 40`: `weft wan --delay 40ms --loss 0.1% -- CMD`. The
//! flags describe one link between the command's namespace (`client`) and
//! the caller's own namespace (`host`); `--config FILE` describes any
//! number of hosts and links (see docs/wan.md and weft-wan's `config`).

use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use weft_wan::config::{
    self, parse_duration, parse_prob, parse_rate, DelayDist, DirSpec, Host, Link, Loss, Mode, RatePer, Shaper, Topology,
};

/// `weft wan` flags.
#[derive(Args, Debug)]
pub struct WanArgs {
    /// Hosts and links from a TOML file (instead of the one-link flags).
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// One-way delay, each direction (40ms: an 80 ms round trip).
    #[arg(long, value_parser = parse_duration)]
    pub delay: Option<Duration>,
    /// Delay spread (normal distribution's standard deviation, or ± for uniform).
    #[arg(long, value_parser = parse_duration)]
    pub jitter: Option<Duration>,
    /// Delay distribution with --jitter: normal or uniform.
    #[arg(long, value_name = "DIST")]
    pub dist: Option<String>,
    /// Loss rate each direction (0.1% or 0.001); with --loss-after-loss, the first-loss rate.
    #[arg(long, value_parser = parse_prob)]
    pub loss: Option<f64>,
    /// Gilbert–Elliott: loss rate of a packet right after a lost one (e.g. 40%).
    #[arg(long, value_parser = parse_prob)]
    pub loss_after_loss: Option<f64>,
    /// Rate limit each direction (56kbit, 10mbit, 1gbit).
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<u64>,
    /// Rate from the command's namespace out (overrides --rate).
    #[arg(long, value_parser = parse_rate)]
    pub up_rate: Option<u64>,
    /// Rate towards the command's namespace (overrides --rate).
    #[arg(long, value_parser = parse_rate)]
    pub down_rate: Option<u64>,
    /// What a rate limits: host (the link) or flow (each connection, a modem each).
    #[arg(long, value_name = "host|flow")]
    pub rate_per: Option<String>,
    /// Bytes that may queue for the rate limit before drop-tail.
    #[arg(long)]
    pub queue: Option<u64>,
    /// TCP SACK in the command's namespace (on/off).
    #[arg(long, value_name = "on|off")]
    pub sack: Option<String>,
    /// Who enforces the rate limits: router (its serialisation clock, per host or flow) or
    /// kernel (an HTB class on the sending TUN device; per host only).
    #[arg(long, value_name = "router|kernel")]
    pub shaper: Option<String>,
    /// Plain veth pairs (MTU 1500, offloads off) between two namespaces instead of the router.
    #[arg(long)]
    pub veth: bool,
    /// Host whose namespace runs the command (with --config; default: the first).
    #[arg(long, value_name = "HOST")]
    pub on: Option<String>,
    /// Run no command: keep the network until SIGINT/SIGTERM (for scripts).
    #[arg(long)]
    pub hold: bool,
    /// Write the hosts' namespaces and addresses (JSON) here when ready (the
    /// file appears whole: read it as soon as it exists).
    #[arg(long, value_name = "FILE")]
    pub ready: Option<PathBuf>,
    /// Write the router's counters (JSON) here at the end.
    #[arg(long, value_name = "FILE")]
    pub stats: Option<PathBuf>,
    /// Random seed for loss and jitter.
    #[arg(long)]
    pub seed: Option<u64>,
    /// No summary on stderr.
    #[arg(short, long)]
    pub quiet: bool,
    #[command(flatten)]
    pub router: RouterFlags,
    /// The command and its arguments (after `--`); default: $SHELL.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// How the router thread waits and runs (docs/wan.md, "Tuning").
#[derive(Args, Debug)]
pub struct RouterFlags {
    /// Wake this long before a departure and spin (poll without sleeping) until it (0: sleep until it).
    #[arg(long, value_parser = parse_duration, default_value = "200us")]
    pub spin: Duration,
    /// SCHED_FIFO priority of the router thread (1-99), or `off` for normal scheduling.
    #[arg(long, value_name = "PRIO|off", default_value = "10")]
    pub realtime: String,
    /// Pin the router thread to this CPU.
    #[arg(long, value_name = "N")]
    pub router_cpu: Option<usize>,
    /// Lock weft wan's memory (mlockall): no page fault mid-run.
    #[arg(long)]
    pub mlock: bool,
}

impl RouterFlags {
    fn tuning(&self) -> Result<weft_wan::Tuning, String> {
        if self.spin > Duration::from_millis(10) {
            return Err(format!("--spin: {:?} is more than 10ms", self.spin));
        }
        let realtime = match self.realtime.as_str() {
            "off" | "0" => None,
            p => match p.parse::<i32>() {
                Ok(n) if (1..=99).contains(&n) => Some(n),
                _ => return Err(format!("--realtime: `{p}` (expected 1-99 or off)")),
            },
        };
        Ok(weft_wan::Tuning {
            spin: self.spin,
            realtime,
            cpu: self.router_cpu,
            mlock: self.mlock,
        })
    }
}

impl WanArgs {
    fn link_flags(&self) -> bool {
        self.delay.is_some()
            || self.jitter.is_some()
            || self.dist.is_some()
            || self.loss.is_some()
            || self.loss_after_loss.is_some()
            || self.rate.is_some()
            || self.up_rate.is_some()
            || self.down_rate.is_some()
            || self.rate_per.is_some()
            || self.queue.is_some()
            || self.sack.is_some()
            || self.shaper.is_some()
            || self.veth
    }

    /// The one-link topology of the flags.
    fn topology(&self) -> Result<Topology, String> {
        let mut spec = DirSpec::default();
        spec.delay = self.delay.unwrap_or_default();
        spec.jitter = self.jitter.unwrap_or_default();
        spec.dist = match self.dist.as_deref() {
            None if spec.jitter > Duration::ZERO => DelayDist::Normal,
            None => DelayDist::Fixed,
            Some("normal") => DelayDist::Normal,
            Some("uniform") => DelayDist::Uniform,
            Some("fixed") => DelayDist::Fixed,
            Some(o) => return Err(format!("--dist: `{o}` (expected normal, uniform or fixed)")),
        };
        let p = self.loss.unwrap_or(0.0);
        spec.loss = match self.loss_after_loss {
            Some(after) => Loss::GilbertElliott { first: p, after },
            None if p > 0.0 => Loss::Bernoulli(p),
            None => Loss::None,
        };
        spec.rate_per = match self.rate_per.as_deref() {
            None | Some("host") => RatePer::Host,
            Some("flow") | Some("connection") => RatePer::Flow,
            Some(o) => return Err(format!("--rate-per: `{o}` (expected host or flow)")),
        };
        if let Some(q) = self.queue {
            if !(1500..=1 << 30).contains(&q) {
                return Err(format!("--queue: {q} out of range (1500 bytes to 1 GiB)"));
            }
            spec.queue_bytes = Some(q);
        }
        let (mut up, mut down) = (spec.clone(), spec);
        up.rate = self.up_rate.or(self.rate);
        down.rate = self.down_rate.or(self.rate);
        let mut client = Host {
            name: "client".into(),
            root: false,
            sysctls: Vec::new(),
        };
        match self.sack.as_deref() {
            None => {}
            Some("on") | Some("off") => {
                let v = if self.sack.as_deref() == Some("on") { "1" } else { "0" };
                client.sysctls.push(("net.ipv4.tcp_sack".into(), v.into()));
            }
            Some(o) => return Err(format!("--sack: `{o}` (expected on or off)")),
        }
        let other = Host {
            name: if self.veth { "server" } else { "host" }.into(),
            root: !self.veth,
            sysctls: Vec::new(),
        };
        let shaper = match self.shaper.as_deref() {
            None | Some("router") => Shaper::Router,
            Some("kernel") => Shaper::Kernel,
            Some(o) => return Err(format!("--shaper: `{o}` (expected router or kernel)")),
        };
        let topo = Topology {
            mode: if self.veth { Mode::Veth } else { Mode::Tun },
            subnet: None,
            seed: self.seed,
            shaper,
            hosts: vec![client, other],
            links: vec![Link { a: 0, b: 1, up, down }],
        };
        topo.validate()
            .map_err(|e| e.0.replace("wan config: link client-server: ", "--veth: "))?;
        Ok(topo)
    }
}

/// `weft wan`.
pub fn run(args: WanArgs) -> ExitCode {
    let topo = match &args.config {
        Some(path) => {
            if args.link_flags() {
                eprintln!("weft wan: --config describes the links; drop the link flags (--delay, --loss, --rate...)");
                return ExitCode::from(2);
            }
            let text = match std::fs::read_to_string(path) {
                Ok(t) if t.len() <= 1 << 20 => t,
                Ok(_) => {
                    eprintln!("weft wan: {}: larger than 1 MiB", path.display());
                    return ExitCode::from(2);
                }
                Err(e) => {
                    eprintln!("weft wan: {}: {e}", path.display());
                    return ExitCode::from(2);
                }
            };
            match config::parse_toml(&text, &path.display().to_string()) {
                Ok(mut t) => {
                    t.seed = args.seed.or(t.seed);
                    t
                }
                Err(e) => {
                    eprintln!("weft wan: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        None => match args.topology() {
            Ok(t) => t,
            Err(e) => {
                eprintln!("weft wan: {e}");
                return ExitCode::from(2);
            }
        },
    };
    if args.hold && !args.command.is_empty() {
        eprintln!("weft wan: --hold runs no command; drop the command or --hold");
        return ExitCode::from(2);
    }
    let tuning = match args.router.tuning() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("weft wan: {e}");
            return ExitCode::from(2);
        }
    };
    let opts = weft_wan::RunOptions {
        tuning,
        on: args.on.clone(),
        command: args.command.clone(),
        hold: args.hold,
        ready: args.ready.clone(),
        stats: args.stats.clone(),
        quiet: args.quiet,
    };
    ExitCode::from(weft_wan::run(&topo, &opts).clamp(0, 255) as u8)
}
