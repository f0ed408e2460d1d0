//! What the long-running HTTP roles share on the command line: the flags
//! every server has ([`ServiceArgs`], flattened into `weft serve` and `weft
//! proxy`), and the run sequence of serve, proxy and origin ([`run`]: block
//! signals, start, hand the signals over, announce the addresses, wait,
//! report).
//!
//! The shared flags' help is written once, in `weft serve`'s words; where
//! `weft proxy` says it differently (client connections, transfers), its
//! argument struct replaces that text with `#[command(mut_arg(...))]`, so
//! every subcommand's help reads as it always has.

use crate::args::{
    accept_limit as parse_accept_limit, duration as parse_duration, fatal, size_usize as parse_size_usize,
    workers as parse_workers, AcceptLimit,
};
use clap::Args;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use weft_io::Bound;

/// Listed after every flag of the role's own (and before `--help`, which
/// clap places at 999): the head limits, counters, logging and the config
/// file close each subcommand's help, as they always have. The other shared
/// flags keep their place at the top.
const TAIL: usize = 900;

/// The flags of every long-running HTTP server (`weft serve`, `weft proxy`).
#[derive(Args, Debug, Default)]
pub struct ServiceArgs {
    /// Address to listen on; port 0 picks a free port. The bound address is
    /// printed on stdout as `listening on ADDR:PORT`.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<SocketAddr>,

    /// Event backend: select, poll, epoll, epoll-et, epoll-once, epoll-batched, uring, or tracked
    /// (user-level readiness tracking over uring; tracked:epoll-et, tracked:epoll, tracked:poll and
    /// tracked:select wrap those instead) [default: epoll].
    #[arg(long, value_name = "BACKEND")]
    pub event: Option<weft_io::BackendKind>,

    /// Worker threads, one event loop and SO_REUSEPORT listener each [default: number of CPUs].
    #[arg(long, value_name = "N", value_parser = parse_workers)]
    pub workers: Option<usize>,

    /// Connections accepted per listener readiness event, or `inf` to accept until EAGAIN [default: 10].
    #[arg(long, value_name = "N|inf", value_parser = parse_accept_limit)]
    pub accept_limit: Option<AcceptLimit>,

    /// Listen backlog [default: 4096].
    #[arg(long, value_name = "N")]
    pub backlog: Option<i32>,

    /// Share the port with other processes that listen on it with this flag (several processes behind
    /// one port; the same user). Without it, a port another process holds is an error [default: false].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub reuse_port: Option<bool>,

    /// Connections one worker holds at most; beyond it new ones are closed at accept and counted
    /// (`refused_max_connections`), so memory has a ceiling; 0 = unlimited [default: 0].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,

    /// Close keep-alive connections idle this long [default: 60s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub idle_timeout: Option<Duration>,

    /// Close connections whose request head is incomplete this long after it began, with 408 [default: 10s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub header_timeout: Option<Duration>,

    /// Close connections that make no write progress this long [default: 60s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub send_timeout: Option<Duration>,

    /// After SIGTERM/SIGINT, how long in-flight responses may take to finish [default: 10s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, display_order = TAIL)]
    pub grace: Option<Duration>,

    /// Longest request line; longer gets 414 [default: 8KiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size_usize, display_order = TAIL + 1)]
    pub max_request_line: Option<usize>,

    /// Largest request head; larger gets 431 [default: 64KiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size_usize, display_order = TAIL + 2)]
    pub max_header_bytes: Option<usize>,

    /// Most header fields in a request; more gets 431 [default: 100].
    #[arg(long, value_name = "N", display_order = TAIL + 3)]
    pub max_headers: Option<usize>,

    /// Print counters (requests, bytes by send path, system calls by kind) as JSON on stderr at exit.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", display_order = TAIL + 4)]
    pub stats_on_exit: Option<bool>,

    /// Serve live counters (per worker and total: requests, bytes by send path,
    /// system calls by kind) as JSON at http://ADDR/stats.
    #[arg(long, value_name = "ADDR:PORT", display_order = TAIL + 5)]
    pub admin: Option<SocketAddr>,

    /// Log level: error, warn, info or debug [default: info].
    #[arg(long, value_name = "LEVEL", display_order = TAIL + 6)]
    pub log_level: Option<weft_core::log::Level>,

    /// Read settings from this TOML file's [serve] table; flags override it.
    #[arg(short = 'c', long, value_name = "FILE", display_order = TAIL + 7)]
    pub config: Option<PathBuf>,

    /// After binding (e.g. port 80 as root), switch to this user, its group and
    /// supplementary groups for good; the process must be root to do so.
    #[arg(long, value_name = "NAME", value_parser = parse_user, display_order = TAIL + 8)]
    pub user: Option<weft_io::sys::privilege::User>,

    /// Write the process id to this file (removed at exit), for `weft reload`.
    #[arg(long, value_name = "FILE", display_order = TAIL + 9)]
    pub pid_file: Option<PathBuf>,
}

/// The user `--user` names, looked up when the flag is read.
fn parse_user(s: &str) -> Result<weft_io::sys::privilege::User, String> {
    weft_io::sys::privilege::lookup_user(s).map_err(|e| e.to_string())
}

/// `--user`, kept by [`ServiceArgs::apply_process_flags`] (which every role
/// calls first) for [`run`] to switch to once the listeners are bound.
static RUN_AS: std::sync::OnceLock<weft_io::sys::privilege::User> = std::sync::OnceLock::new();

/// Copy the shared flags that were given onto a role's configuration
/// (`weft_server::ServeConfig`, `weft_proxy::ProxyConfig`: the same field
/// names), leaving its defaults where they were not.
macro_rules! apply_service_args {
    ($args:expr, $c:expr) => {{
        let a: &$crate::service::ServiceArgs = &$args;
        $crate::args::set_given!(
            a,
            $c;
            listen,
            event,
            workers,
            backlog,
            reuse_port,
            max_connections,
            idle_timeout,
            header_timeout,
            send_timeout,
            grace,
            stats_on_exit
        );
        if let Some(v) = a.accept_limit {
            $c.accept_limit = v.0;
        }
        if a.admin.is_some() {
            $c.admin = a.admin;
        }
        if let Some(v) = a.max_request_line {
            $c.limits.max_request_line = v;
        }
        if let Some(v) = a.max_header_bytes {
            $c.limits.max_head = v;
        }
        if let Some(v) = a.max_headers {
            $c.limits.max_headers = v;
        }
    }};
}
pub(crate) use apply_service_args;

impl ServiceArgs {
    /// Apply `--log-level` (before anything logs), and keep `--user` for
    /// [`run`] to switch to once the listeners are bound.
    pub fn apply_process_flags(&self) {
        if let Some(l) = self.log_level {
            weft_core::log::set_level(l);
        }
        if let Some(u) = &self.user {
            let _ = RUN_AS.set(u.clone());
        }
    }
}

/// A long-running role as the command line drives it.
pub trait Service: Sized {
    /// What it is started with.
    type Config;
    /// What it reports when it stops.
    type Stats;
    /// Bind and start the workers.
    fn start(cfg: Self::Config) -> io::Result<Self>;
    /// Its addresses and the switch that stops it gracefully.
    fn bound(&self) -> Bound;
    /// Wait until it has stopped.
    fn wait(self) -> io::Result<Self::Stats>;
}

/// `impl Service` for a role whose inherent methods already have these
/// names and signatures.
macro_rules! service_by_its_own_methods {
    ($role:ty, $config:ty, $stats:ty) => {
        impl $crate::service::Service for $role {
            type Config = $config;
            type Stats = $stats;
            fn start(cfg: Self::Config) -> std::io::Result<Self> {
                <$role>::start(cfg)
            }
            fn bound(&self) -> weft_io::Bound {
                <$role>::bound(self)
            }
            fn wait(self) -> std::io::Result<Self::Stats> {
                <$role>::wait(self)
            }
        }
    };
}

pub(crate) use service_by_its_own_methods;

service_by_its_own_methods!(weft_server::Server, weft_server::ServeConfig, weft_server::ServeStats);
service_by_its_own_methods!(
    weft_proxy::Proxy,
    weft_proxy::ProxyConfig,
    (weft_proxy::ProxyStats, String)
);
service_by_its_own_methods!(
    weft_load::Origin,
    weft_load::OriginConfig,
    weft_load::origin::OriginStats
);

/// Switch to `--user`, once the listeners are bound and the log files open
/// (handed to the user first, so that it can open them again: reload,
/// SIGUSR1).
pub(crate) fn drop_privileges() -> Result<(), ExitCode> {
    if let Some(u) = RUN_AS.get() {
        if weft_io::sys::privilege::current_uid().1 == 0 {
            if let Err(e) = weft_io::logfile::give_to(u.uid, u.gid) {
                return Err(fatal(format_args!(
                    "cannot give the log files to user `{}`: {e}",
                    u.name
                )));
            }
        }
        if let Err(e) = weft_io::sys::privilege::drop_privileges(u) {
            return Err(fatal(format_args!("cannot switch to user `{}`: {e}", u.name)));
        }
    }
    Ok(())
}

/// Run a role until SIGTERM/SIGINT: block those signals before any worker
/// exists (every thread inherits the mask; only the signal thread takes
/// them), start, announce the bound addresses, call `started` (a log line),
/// wait, and hand the final counters to `report`. Start-up failures are
/// one-line fatal errors (status 1).
pub fn run<S: Service>(cfg: S::Config, started: impl FnOnce(), report: impl FnOnce(S::Stats)) -> ExitCode {
    if let Err(code) = crate::args::block_shutdown_signals() {
        return code;
    }
    let service = match S::start(cfg) {
        Ok(s) => s,
        Err(e) => return fatal(e),
    };
    if let Err(code) = drop_privileges() {
        return code;
    }
    let bound = service.bound();
    if let Err(e) = bound.shutdown.on_signals() {
        return fatal(format_args!("cannot start the signal thread: {e}"));
    }
    crate::args::announce(bound.addr, bound.admin);
    started();
    match service.wait() {
        Ok(stats) => {
            report(stats);
            ExitCode::SUCCESS
        }
        Err(e) => fatal(e),
    }
}
