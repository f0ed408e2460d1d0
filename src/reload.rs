//! Graceful reload of `weft serve`, `weft proxy` and `weft front` (SIGHUP,
//! or `weft reload`, which reads the pid file), and the run sequence of a
//! role that can reload.
//!
//! On SIGHUP the command line is read again (with its config file) and
//! validated exactly as at start; a bad file leaves the running server
//! untouched and logs one line naming the key. A good one starts a new worker
//! group on the same listening sockets (`weft_io::group::handover`: the same
//! accept queues, so no queued connection is reset), then stops the old
//! group's accepting; its in-flight requests finish within `--grace`, as at
//! shutdown. Admin endpoints keep their address and serve the new workers.

use crate::args::fatal;
use crate::service::Service;
use clap::Args;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc;
use weft_io::sys::signal::{self, Control};
use weft_io::Shutdown;

/// `weft reload`.
#[derive(Args, Debug)]
pub struct ReloadArgs {
    /// The pid file the server writes (`--pid-file` of serve, proxy and front;
    /// the packaged systemd unit's is /run/weft/weft.pid). Without it:
    /// /run/weft/weft.pid, or /run/weft.pid (the default before) when only that one exists.
    #[arg(long, value_name = "FILE")]
    pub pid_file: Option<PathBuf>,
    /// Validate this config file first (as `weft check` does) and do not
    /// signal when it is bad.
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// `weft reload`: validate (with `-c`), read the pid file, send SIGHUP.
pub fn command(args: ReloadArgs) -> ExitCode {
    if let Some(c) = &args.config {
        let code = crate::check(crate::cli::CheckArgs { config: c.clone() });
        if code != ExitCode::SUCCESS {
            return code;
        }
    }
    let pid_file = args.pid_file.unwrap_or_else(|| default_pid_file(Path::exists));
    let pid = match read_pid(&pid_file) {
        Ok(p) => p,
        Err(e) => return fatal(format_args!("{}: {e}", pid_file.display())),
    };
    match signal::send_hangup(pid) {
        Ok(()) => {
            println!("sent SIGHUP to {pid}");
            ExitCode::SUCCESS
        }
        Err(e) => fatal(format_args!(
            "cannot signal process {pid} ({}): {e}",
            pid_file.display()
        )),
    }
}

/// The pid file of the packaged unit (systemd's `RuntimeDirectory=weft`).
const PID_FILE: &str = "/run/weft/weft.pid";
/// Where `weft reload` looked before the unit had a runtime directory.
const OLD_PID_FILE: &str = "/run/weft.pid";

/// `weft reload` without `--pid-file`: [`PID_FILE`], unless only the old
/// default exists (a server started with `--pid-file /run/weft.pid`).
fn default_pid_file(exists: impl Fn(&Path) -> bool) -> PathBuf {
    let (new, old) = (Path::new(PID_FILE), Path::new(OLD_PID_FILE));
    if !exists(new) && exists(old) {
        old.to_path_buf()
    } else {
        new.to_path_buf()
    }
}

fn read_pid(path: &Path) -> Result<u32, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    match text.trim().parse::<u32>() {
        Ok(p) if p > 1 => Ok(p),
        _ => Err(format!("`{}` is not a process id", text.trim().escape_debug())),
    }
}

/// The pid file, removed when the server exits.
struct PidFile(Option<PathBuf>);

impl PidFile {
    fn write(path: Option<&Path>) -> io::Result<PidFile> {
        if let Some(p) = path {
            // Whole or not at all: `weft reload` may read it the moment it appears.
            weft_io::statefile::write_whole(p, format!("{}\n", std::process::id()).as_bytes())?;
        }
        Ok(PidFile(path.map(Path::to_path_buf)))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The configuration the command line (and its config file) gives now, for
/// a role: `pick` takes it out of the parsed command.
pub fn reparse<C>(pick: impl Fn(crate::cli::Command) -> Result<C, String>) -> Result<C, String> {
    let args: Vec<OsString> = std::env::args_os().collect();
    let args = crate::cli::merge_config(args).map_err(|e| e.0)?;
    let cli = <crate::cli::Cli as clap::Parser>::try_parse_from(args).map_err(|e| {
        let msg = e.to_string();
        msg.lines()
            .next()
            .unwrap_or("invalid arguments")
            .trim_start_matches("error: ")
            .to_string()
    })?;
    pick(cli.command)
}

enum Event<T> {
    Signal(Control),
    /// A worker generation stopped, with its counters.
    Stopped(u64, io::Result<T>),
}

/// Wait for a generation in a thread; its end arrives as an event.
fn watch<S>(service: S, generation: u64, tx: &mpsc::Sender<Event<S::Stats>>) -> Shutdown
where
    S: Service + Send + 'static,
    S::Stats: Send + 'static,
{
    let handle = service.bound().shutdown;
    let tx = tx.clone();
    std::thread::spawn(move || {
        let r = service.wait();
        let _ = tx.send(Event::Stopped(generation, r));
    });
    handle
}

/// Run a role until SIGTERM/SIGINT, reloading on SIGHUP with the
/// configuration `reconfigure` gives; otherwise as [`crate::service::run`].
pub fn run<S>(
    cfg: S::Config,
    pid_file: Option<&Path>,
    reconfigure: impl Fn() -> Result<S::Config, String>,
    started: impl FnOnce(),
    report: impl FnOnce(S::Stats),
) -> ExitCode
where
    S: Service + Send + 'static,
    S::Stats: Send + 'static,
{
    if let Err(code) = crate::args::block_shutdown_signals() {
        return code;
    }
    if let Err(e) = signal::block_reload_signal() {
        return fatal(format_args!("cannot block signals: {e}"));
    }
    weft_io::group::handover::enable();
    let service = match S::start(cfg) {
        Ok(s) => s,
        Err(e) => return fatal(e),
    };
    // Written before dropping root: the pid file's directory (systemd's
    // RuntimeDirectory, /run/weft) belongs to root. Removing it at exit then
    // fails under `--user`; systemd removes the directory at stop.
    let _pid = match PidFile::write(pid_file) {
        Ok(p) => p,
        Err(e) => return fatal(format_args!("cannot write the pid file: {e}")),
    };
    if let Err(code) = crate::service::drop_privileges() {
        return code;
    }
    let (tx, rx) = mpsc::channel();
    let signals = tx.clone();
    let spawned = std::thread::Builder::new().name("weft-signals".into()).spawn(move || {
        while let Ok(c) = signal::wait_control() {
            if signals.send(Event::Signal(c)).is_err() {
                break;
            }
        }
    });
    if let Err(e) = spawned {
        return fatal(format_args!("cannot start the signal thread: {e}"));
    }
    let bound = service.bound();
    crate::args::announce(bound.addr, bound.admin);
    started();
    let mut generation = 0;
    let mut current = watch(service, generation, &tx);
    let mut old: Vec<Shutdown> = Vec::new();
    let mut stopping = false;
    while let Ok(event) = rx.recv() {
        match event {
            Event::Signal(Control::Stop(sig)) if stopping => {
                weft_core::stderr_line!("weft: second signal {sig}, exiting immediately");
                std::process::exit(130);
            }
            Event::Signal(Control::Stop(sig)) => {
                weft_core::stderr_line!("weft: signal {sig} received, shutting down gracefully");
                stopping = true;
                current.trigger();
            }
            Event::Signal(Control::Reload) if stopping => {}
            Event::Signal(Control::Reload) => {
                if let Some(new) = reload::<S>(&reconfigure) {
                    generation += 1;
                    let next = watch(new, generation, &tx);
                    // The new workers accept from the same queues; the old
                    // stop accepting and finish what is in flight.
                    current.trigger();
                    old.push(std::mem::replace(&mut current, next));
                    weft_core::info!("reload: new workers started (generation {generation}); the previous ones drain");
                }
            }
            Event::Stopped(g, r) if g == generation => {
                for o in &old {
                    o.trigger();
                }
                return match r {
                    Ok(stats) => {
                        report(stats);
                        ExitCode::SUCCESS
                    }
                    Err(e) => fatal(e),
                };
            }
            Event::Stopped(g, r) => {
                if let Err(e) = r {
                    weft_core::warn!("reload: the workers of generation {g} ended with an error: {e}");
                } else {
                    weft_core::info!("reload: the workers of generation {g} finished");
                }
            }
        }
    }
    ExitCode::SUCCESS
}

/// Validate and start the new configuration on the kept sockets; `None`
/// (logged, one line) leaves the running server as it is.
fn reload<S: Service>(reconfigure: &impl Fn() -> Result<S::Config, String>) -> Option<S> {
    let cfg = match reconfigure() {
        Ok(c) => c,
        Err(e) => {
            weft_core::error!("reload refused, the running configuration stays: {e}");
            return None;
        }
    };
    weft_io::group::handover::begin();
    match S::start(cfg) {
        Ok(s) => {
            weft_io::group::handover::finish(true);
            Some(s)
        }
        Err(e) => {
            weft_io::group::handover::finish(false);
            weft_core::error!("reload refused, the running configuration stays: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_files_are_checked() {
        let p = std::env::temp_dir().join(format!("weft-reload-test-{}", std::process::id()));
        std::fs::write(&p, "1\n").unwrap();
        assert!(read_pid(&p).is_err());
        std::fs::write(&p, "abc").unwrap();
        assert!(read_pid(&p).is_err());
        std::fs::write(&p, "4242\n").unwrap();
        assert_eq!(read_pid(&p), Ok(4242));
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn the_default_pid_file_falls_back_to_the_old_path() {
        let only = |p: &'static str| move |q: &Path| q == Path::new(p);
        assert_eq!(default_pid_file(only(PID_FILE)), Path::new(PID_FILE));
        assert_eq!(default_pid_file(|_| true), Path::new(PID_FILE));
        assert_eq!(default_pid_file(|_| false), Path::new(PID_FILE));
        assert_eq!(default_pid_file(only(OLD_PID_FILE)), Path::new(OLD_PID_FILE));
    }
}
