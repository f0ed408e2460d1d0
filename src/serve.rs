//! `weft serve`: the argument struct, its mapping onto `ServeConfig`, and the
//! run function.

use crate::args::{duration as parse_duration, set_given, size as parse_size};
use crate::service::{apply_service_args, ServiceArgs};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// A path or `off`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffPath(pub Option<PathBuf>);

pub(crate) fn parse_off_path(s: &str) -> Result<OffPath, String> {
    match s {
        "off" => Ok(OffPath(None)),
        "" => Err("empty path (use `off` to disable)".into()),
        p => Ok(OffPath(Some(PathBuf::from(p)))),
    }
}

/// `--precompressed br,gzip`: sidecar codings in order of preference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Codings(pub Vec<weft_server::Precompressed>);

fn codings(s: &str) -> Result<Codings, String> {
    weft_server::Precompressed::parse_list(s).map(Codings)
}

/// `weft serve`. The event backend's tuning is explained more fully here
/// than in the other roles' help.
#[derive(Args, Debug, Default)]
#[command(
    mut_arg("max_pass", |a| a.help(
        "tracked backends: consecutive passes served from the user-level readiness table before the kernel is \
         asked anyway, so descriptors not known to be ready are not starved; 0 asks the kernel at every pass \
         [default: 8]"
    )),
    mut_arg("wake_interval", |a| a.help(
        "uring and tracked: batch wake-ups under load. A wait that finds no completion asks the kernel for those \
         expected within this interval at the recent rate and holds the first back at most ten intervals \
         (io_uring min-wait, Linux 6.12); under two expected, it wakes at the first. Fewer io_uring_enter calls \
         for about one interval of added latency under load; 0 turns it off [default: 0]"
    )),
)]
pub struct ServeArgs {
    /// Document root. Without it, weft serves its built-in demo site.
    #[arg(value_name = "DIR")]
    pub root: Option<PathBuf>,

    // Listening, workers, timeouts, head limits, logging, the config file.
    #[command(flatten)]
    pub service: ServiceArgs,

    // --max-pass, --wake-interval (src/event_tuning.rs).
    #[command(flatten)]
    pub tuning: crate::event_tuning::EventTuningArgs,

    /// Requests per connection before it is closed; 0 = unlimited [default: 0].
    #[arg(long, value_name = "N")]
    pub max_requests: Option<u64>,

    /// How file bodies are sent: sendfile (no byte through user space), copy
    /// (pread + writev), or auto (small files from memory, larger ones with
    /// sendfile) [default: auto].
    #[arg(long, value_name = "sendfile|copy|auto")]
    pub send: Option<weft_server::SendMode>,

    /// In auto mode, files up to this size are kept in memory [default: 16KiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub small_file_max: Option<u64>,

    /// Open files cached per worker [default: 1000].
    #[arg(long, value_name = "N")]
    pub file_cache_entries: Option<usize>,

    /// Re-check a cached file's metadata after this long [default: 1s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub file_cache_valid: Option<Duration>,

    /// List directories that have no index.html.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub autoindex: Option<bool>,

    /// Send `X.br` or `X.gz` instead of `X` to a client whose Accept-Encoding accepts that
    /// coding, where the sidecar exists and is not older than `X` (nginx's gzip_static, h2o's
    /// send-compressed): codings in order of preference, e.g. `br,gzip`; every file response
    /// then carries `Vary: Accept-Encoding` [default: off].
    #[arg(long, value_name = "CODINGS|off", value_parser = codings)]
    pub precompressed: Option<Codings>,

    /// Follow symlinks that lead outside the document root.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub follow_symlinks: Option<bool>,

    /// Combined Log Format access log, or `off` [default: off].
    #[arg(long, value_name = "FILE|off", value_parser = parse_off_path)]
    pub access_log: Option<OffPath>,

    /// Also take client connections handed over by `weft front --mode handoff` on this Unix
    /// SEQPACKET socket (a path, or `@name` in the abstract namespace): each comes with the bytes
    /// the front-end read from it and is answered from here directly.
    #[arg(long, value_name = "PATH")]
    pub handoff_socket: Option<String>,

    // CGI and FastCGI.
    #[command(flatten)]
    pub cgi: crate::serve_cgi::CgiArgs,

    // Architecture and caches (Flash, IO-Lite).
    #[command(flatten)]
    pub flash: crate::serve_flash::FlashArgs,

    // The origin accelerator for a booster (issue 26).
    #[command(flatten)]
    pub accelerator: crate::serve_accelerator::AcceleratorArgs,

    // Access log format (status).
    #[command(flatten)]
    pub log: crate::log_flags::LogArgs,

    // Socket settings (WAN).
    #[command(flatten)]
    pub net: crate::serve_net::NetArgs,
    // Virtual hosts.
    #[command(flatten)]
    pub site: crate::serve_site::SiteArgs,
}

impl ServeArgs {
    /// The validated server configuration.
    pub fn to_config(&self) -> weft_server::ServeConfig {
        let mut c = weft_server::ServeConfig {
            root: self.root.clone(),
            ..Default::default()
        };
        apply_service_args!(self.service, c);
        set_given!(self.tuning, c; max_pass, wake_interval);
        set_given!(
            self,
            c;
            max_requests,
            send,
            small_file_max,
            file_cache_entries,
            file_cache_valid,
            autoindex,
            follow_symlinks
        );
        if let Some(v) = &self.access_log {
            c.access_log = v.0.clone();
        }
        if let Some(v) = &self.precompressed {
            c.precompressed = v.0.clone();
        }
        if let Some(f) = self.log.access_log_format {
            c.access_log_format = f;
        }
        c.handoff_socket.clone_from(&self.handoff_socket);
        c.cgi = self.cgi.to_config();
        self.flash.apply(&mut c);
        self.net.apply(&mut c);
        self.accelerator.apply(&mut c, self.flash.object_cache.is_some());
        c.sites.clone_from(&self.site.sites);
        c
    }
}

/// Run `weft serve` until a shutdown signal.
pub fn run(args: ServeArgs) -> ExitCode {
    args.service.apply_process_flags();
    let cfg = args.to_config();
    let stats_on_exit = cfg.stats_on_exit;
    let what = match &cfg.root {
        Some(p) => p.display().to_string(),
        None => "the built-in demo site".to_string(),
    };
    let (event, workers, send) = (cfg.event, cfg.workers, cfg.send);
    let reconfigure = || {
        crate::reload::reparse(|c| match c {
            crate::cli::Command::Serve(a) => match a.to_config() {
                c if c.arch == weft_server::Arch::Mp => {
                    Err("key `serve.arch`: mp cannot reload in place; restart instead".into())
                }
                c => Ok(c),
            },
            _ => Err("not `weft serve` any more".into()),
        })
    };
    crate::reload::run::<weft_server::Server>(
        cfg,
        args.service.pid_file.as_deref(),
        reconfigure,
        || {
            weft_core::info!(
                "serving {what} with {workers} worker(s), event backend {event}, send {}",
                send.name()
            );
        },
        |stats| {
            if stats_on_exit {
                eprintln!("{}", stats.to_json());
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_log_values() {
        assert_eq!(parse_off_path("off").unwrap(), OffPath(None));
        assert_eq!(parse_off_path("x").unwrap(), OffPath(Some(PathBuf::from("x"))));
        assert!(parse_off_path("").is_err());
    }

    /// `--max-pass` and `--wake-interval` come from the group serve shares
    /// with proxy and front; they must still reach serve's configuration.
    #[test]
    fn event_tuning_flags_reach_the_config() {
        use clap::Parser;
        let argv = ["weft", "serve", "--max-pass", "3", "--wake-interval", "1ms"];
        let crate::cli::Command::Serve(a) = crate::cli::Cli::try_parse_from(argv).unwrap().command else {
            panic!()
        };
        let c = a.to_config();
        assert_eq!((c.max_pass, c.wake_interval), (3, Duration::from_millis(1)));
    }
}
