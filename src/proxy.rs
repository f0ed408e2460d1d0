//! `weft proxy`: the argument struct, its mapping onto `ProxyConfig`, and the
//! run function (start, print the address, wait, report).

use crate::args::set_given;
use crate::service::{apply_service_args, ServiceArgs};
use crate::upstream::UpstreamArgs;
use clap::{ArgAction, Args};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use weft_proxy::acl::{Cidr, Ports};
use weft_proxy::config::{HostPort, Route};

use crate::args::{duration, positive, size, size_usize};

fn pipe_size(s: &str) -> Result<usize, String> {
    let n = size_usize(s)?;
    if !(4096..=(1 << 30)).contains(&n) {
        return Err(format!("pipe size `{s}` out of range (4KiB..1GiB)"));
    }
    Ok(n)
}

/// A socket low-water mark (`--notsent-lowat`, `--rcv-lowat`): 0..64MiB.
fn lowat(what: &'static str) -> impl Fn(&str) -> Result<usize, String> + Clone {
    move |s| {
        let n = size_usize(s)?;
        if n > (64 << 20) {
            return Err(format!("{what} `{s}` out of range (0..64MiB)"));
        }
        Ok(n)
    }
}

/// `--cache-dir-size`: a cap of 0 would remove every file as it is written.
fn cache_dir_size(s: &str) -> Result<u64, String> {
    let n = size(s)?;
    if n == 0 {
        return Err(format!("cache dir size `{s}` must be above 0"));
    }
    Ok(n)
}

fn first_read(s: &str) -> Result<usize, String> {
    let n = size_usize(s)?;
    if !(512..=(1 << 20)).contains(&n) {
        return Err(format!("first read `{s}` out of range (512..1MiB)"));
    }
    Ok(n)
}

/// `weft proxy`. The shared flags keep the proxy's own wording.
#[derive(Args, Debug, Default)]
#[command(
    mut_arg("listen", |a| a.help(crate::args::PROXY_LISTEN_HELP)),
    mut_arg("event", |a| a.value_parser(crate::args::event).help(crate::args::EVENT_HELP)),
    mut_arg("accept_limit", |a| a.help(
        "Client connections accepted per listener readiness event, or `inf` to accept until EAGAIN [default: 10]"
    )),
    mut_arg("idle_timeout", |a| a.help(
        "Close keep-alive client connections idle this long (and quiet tunnels, unless --tunnel-timeout) [default: 60s]"
    )),
    mut_arg("header_timeout", |a| a.help(
        "Close clients whose request head is incomplete this long after it began, with 408 [default: 10s]"
    )),
    mut_arg("send_timeout", |a| a.help("Close clients that make no write progress this long [default: 60s]")),
    mut_arg("max_header_bytes", |a| a.help(
        "Largest request (and response) head; larger gets 431 (502 for responses) [default: 64KiB]"
    )),
    mut_arg("grace", |a| a.help(
        "After SIGTERM/SIGINT, how long in-flight transfers may take to finish [default: 10s]"
    )),
    mut_arg("stats_on_exit", |a| a.help(
        "Print counters (cache, bytes by path, sessions by outcome, system calls) as JSON on stderr at exit"
    )),
    mut_arg("admin", |a| a.help("Serve live counters as JSON at http://ADDR/stats")),
    mut_arg("config", |a| a.help("Read settings from this TOML file's [proxy] table; flags override it")),
)]
pub struct ProxyArgs {
    // Listening, workers, timeouts, head limits, logging, the config file.
    #[command(flatten)]
    pub service: ServiceArgs,

    // --max-pass, --wake-interval (src/event_tuning.rs).
    #[command(flatten)]
    pub tuning: crate::event_tuning::EventTuningArgs,

    /// Reverse mode: send every request to this upstream (a name is resolved
    /// off the event loop). Without it (and without --route) weft is a forward proxy.
    #[arg(long, value_name = "HOST:PORT")]
    pub upstream: Option<HostPort>,

    /// Reverse mode: requests for Host HOST go to UPSTREAM (repeatable; the
    /// config file takes a list). Unmatched hosts go to --upstream, or get 421.
    #[arg(long, value_name = "HOST=HOST:PORT", action = ArgAction::Append)]
    pub route: Vec<Route>,

    /// Clients allowed to use the proxy (repeatable) [default: 127.0.0.0/8 and
    /// ::1 in forward mode, everyone in reverse mode].
    #[arg(long, value_name = "CIDR", action = ArgAction::Append)]
    pub allow: Vec<Cidr>,

    /// Ports CONNECT may reach, comma-separated, with ranges (443,8443 or
    /// 1025-65535) [default: 443].
    #[arg(long, value_name = "PORTS")]
    pub connect_ports: Option<Ports>,

    /// Ports a forward request (and a protocol upgrade) may reach; a request
    /// for another gets 403, so the proxy cannot be used to send HTTP lines
    /// to a mail, SSH or database port [default: 80,280,443,488,591,777,1025-65535,
    /// Squid's Safe_ports without ftp, gopher and wais].
    #[arg(long, value_name = "PORTS")]
    pub forward_ports: Option<Ports>,

    /// Body path: `on` splices every body and tunnel through the kernel,
    /// `off` copies through user space, `auto` splices bodies of at least
    /// --splice-threshold (and bodies of unknown length), `sockmap` is auto
    /// with CONNECT tunnels forwarded in the kernel by a BPF sk_skb program
    /// (needs root or CAP_BPF; splices where not permitted; a tunnel peer that
    /// does not read lets the other side fill kernel memory until
    /// --tunnel-timeout closes the tunnel: trusted clients only,
    /// docs/proxy.md) [default: auto].
    #[arg(long, value_name = "on|off|auto|sockmap")]
    pub splice: Option<weft_proxy::SpliceMode>,

    /// In auto mode, smaller bodies are copied [default: 16KiB].
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub splice_threshold: Option<u64>,

    /// KeepCopy: splice cacheable bodies too, duplicating them with tee(2)
    /// into the cache [default: true].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub keep_copy: Option<bool>,

    /// Pipe size for splice (F_SETPIPE_SZ) [default: 1MiB].
    #[arg(long, value_name = "SIZE", value_parser = pipe_size)]
    pub pipe_size: Option<usize>,

    /// Unsent bytes a client socket may hold before it stops taking more
    /// (TCP_NOTSENT_LOWAT): bodies wait in the pipe and the upstream socket
    /// instead of piling up in the client socket; 0 leaves the kernel's
    /// default (no limit) [default: 32KiB].
    #[arg(long, value_name = "SIZE", value_parser = lowat("notsent-lowat"))]
    pub notsent_lowat: Option<usize>,

    /// Bytes of a long upstream body that must be waiting before the kernel
    /// wakes the proxy to move them (SO_RCVLOWAT; the rest of the body if
    /// less), once it delivers in bulk: fewer wake-ups, reads and splices per
    /// body. A batch that does not fill within one to two seconds is not
    /// waited for again in that response; 0 wakes at every arrival
    /// [default: 128KiB].
    #[arg(long, value_name = "SIZE", value_parser = lowat("rcv-lowat"))]
    pub rcv_lowat: Option<usize>,

    /// Most pipes alive in the process; beyond it bodies are copied [default: 1024].
    #[arg(long, value_name = "N", value_parser = positive)]
    pub max_pipes: Option<usize>,

    /// Bytes of an upstream response read into user space before the body is
    /// spliced (the paper read 2896) [default: 4KiB].
    #[arg(long, value_name = "SIZE", value_parser = first_read)]
    pub first_read: Option<usize>,

    /// Memory cache size; 0 turns the cache off [default: 256MiB].
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub cache_size: Option<u64>,

    /// Largest object cached (and completed after a client abort) [default: 64MiB].
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub max_object_size: Option<u64>,

    /// Replacement policy: lru or gds (Greedy-Dual-Size) [default: lru].
    #[arg(long, value_name = "lru|gds")]
    pub cache_policy: Option<weft_proxy::CachePolicy>,

    /// Disk store: keep every cached object in this directory too (created if
    /// missing), so the cache outlives a restart and can hold more than
    /// memory; objects evicted from memory are read back on their next
    /// request [default: none, memory only].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,

    /// Most bytes of objects kept in --cache-dir; the least recently used go
    /// first [default: 1GiB].
    #[arg(long, value_name = "SIZE", value_parser = cache_dir_size)]
    pub cache_dir_size: Option<u64>,

    // Upstream connect and silence timeouts, the idle connection pool.
    #[command(flatten)]
    pub upstream_conns: UpstreamArgs,

    /// How long resolved host names are kept [default: 60s].
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub dns_ttl: Option<Duration>,

    /// Threads resolving host names [default: 2].
    #[arg(long, value_name = "N", value_parser = positive)]
    pub resolver_threads: Option<usize>,

    /// This proxy's name in Via, used to detect loops [default: hostname:port].
    #[arg(long, value_name = "NAME")]
    pub via_name: Option<String>,

    // Targeted cache control, unknown methods.
    #[command(flatten)]
    pub http: crate::proxy_http::HttpRuleArgs,

    // --uring-linked (src/proxy_uring.rs).
    #[command(flatten)]
    pub uring: crate::proxy_uring::UringLinkedArgs,
    // The access log.
    #[command(flatten)]
    pub access: crate::proxy_log::ProxyLogArgs,
}

impl ProxyArgs {
    /// The validated configuration.
    pub fn to_config(&self) -> weft_proxy::ProxyConfig {
        let mut c = weft_proxy::ProxyConfig::default();
        apply_service_args!(self.service, c);
        self.upstream_conns.apply(&mut c);
        self.access.apply(&mut c);
        c.event_options = self.tuning.options();
        set_given!(
            self,
            c;
            splice,
            splice_threshold,
            keep_copy,
            pipe_size,
            notsent_lowat,
            rcv_lowat,
            max_pipes,
            first_read,
            cache_size,
            max_object_size,
            cache_policy,
            cache_dir_size,
            dns_ttl,
            resolver_threads
        );
        c.upstream = self.upstream.clone();
        c.routes = self.route.clone();
        c.allow = self.allow.clone();
        c.via_name = self.via_name.clone();
        c.cache_dir = self.cache_dir.clone();
        if let Some(p) = &self.connect_ports {
            c.connect_ports = p.clone();
        }
        if let Some(p) = &self.forward_ports {
            c.forward_ports = p.clone();
        }
        self.http.apply(&mut c);
        self.uring.apply(&mut c);
        c
    }
}

/// Run `weft proxy` until a shutdown signal.
pub fn run(args: ProxyArgs) -> ExitCode {
    args.service.apply_process_flags();
    let cfg = args.to_config();
    let stats_on_exit = cfg.stats_on_exit;
    let mode = match (&cfg.upstream, cfg.routes.len()) {
        (None, 0) => "forward proxy".to_string(),
        (Some(u), 0) => format!("reverse proxy to {u}"),
        (u, n) => format!(
            "reverse proxy with {n} route(s){}",
            u.as_ref().map(|u| format!(", default {u}")).unwrap_or_default()
        ),
    };
    let (event, workers, splice, cache) = (cfg.event, cfg.workers, cfg.splice, cfg.cache_size);
    let reconfigure = || {
        crate::reload::reparse(|c| match c {
            crate::cli::Command::Proxy(a) => Ok(a.to_config()),
            _ => Err("not `weft proxy` any more".into()),
        })
    };
    crate::reload::run::<weft_proxy::Proxy>(
        cfg,
        args.service.pid_file.as_deref(),
        reconfigure,
        || {
            weft_core::info!(
                "{mode} with {workers} worker(s), event backend {event}, splice {}, cache {}",
                splice.name(),
                if cache > 0 {
                    format!("{} MiB", cache >> 20)
                } else {
                    "off".into()
                }
            );
        },
        |(stats, store)| {
            if stats_on_exit {
                eprintln!("{{\"total\":{},\"store\":{store}}}", stats.to_json());
            }
        },
    )
}
