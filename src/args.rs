//! What every subcommand shares: value parsers for clap (so `--workers 0` or
//! `--idle-timeout 5x` reads the same everywhere, from a flag or a config
//! key), and the start-up steps of the long-running ones (serve, proxy,
//! origin): blocking shutdown signals before any worker exists, printing the
//! bound addresses, and one-line fatal errors.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

/// `5s`, `250ms`, `2m`... (weft-core's units).
pub fn duration(s: &str) -> Result<Duration, String> {
    weft_core::units::parse_duration(s)
}

/// `64KiB`, `1MiB`, `4096`... (weft-core's units).
pub fn size(s: &str) -> Result<u64, String> {
    weft_core::units::parse_size(s)
}

/// A size that must fit in memory.
pub fn size_usize(s: &str) -> Result<usize, String> {
    size(s).and_then(|n| usize::try_from(n).map_err(|_| format!("size `{s}` is too large")))
}

/// Worker threads: 1..1024.
pub fn workers(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=1024).contains(&n) => Ok(n),
        _ => Err(format!("invalid worker count `{s}` (expected 1..1024)")),
    }
}

/// `--listen` of the roles on the proxy's engine (`weft proxy`, `weft front`).
pub const PROXY_LISTEN_HELP: &str = "Address to listen on; port 0 picks a free port. The bound address is printed on \
    stdout as `listening on ADDR:PORT` [default: 127.0.0.1:3128]";

/// `--event` of the roles whose help names every backend.
pub const EVENT_HELP: &str = "Event backend: select, poll, epoll, epoll-et, epoll-once, epoll-batched, uring, tracked \
    or tracked:INNER [default: epoll]";

/// `--event` of every role: each one's handler reports what its reads and
/// writes used up (`Ctx::settled`, `Ctx::learned`), so the `tracked`
/// backends work everywhere (docs/events.md).
pub fn event(s: &str) -> Result<weft_io::BackendKind, String> {
    s.parse()
}

/// A positive count.
pub fn positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("invalid number `{s}` (expected a positive integer)")),
    }
}

/// `--accept-limit N|inf` (a newtype: clap reads `Option<Option<T>>` as a flag
/// with an optional value, which is not what this is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcceptLimit(pub Option<usize>);

/// `N` (positive) or `inf` (accept until EAGAIN); serve and proxy share it.
pub fn accept_limit(s: &str) -> Result<AcceptLimit, String> {
    if s == "inf" {
        return Ok(AcceptLimit(None));
    }
    match s.parse::<usize>() {
        Ok(0) | Err(_) => Err(format!(
            "invalid accept limit `{s}` (expected a positive number or `inf`)"
        )),
        Ok(n) => Ok(AcceptLimit(Some(n))),
    }
}

/// Copy each named field of the argument struct `$args` that was given
/// (`Some`) onto the same-named field of the configuration `$c`, leaving the
/// configuration's default where it was not.
macro_rules! set_given {
    ($args:expr, $c:expr; $($field:ident),* $(,)?) => {
        $( if let Some(v) = $args.$field.clone() { $c.$field = v; } )*
    };
}
pub(crate) use set_given;

/// Block SIGTERM/SIGINT in this thread before any worker exists, so every
/// thread inherits the mask and only the signal thread takes them.
pub fn block_shutdown_signals() -> Result<(), ExitCode> {
    weft_io::sys::block_shutdown_signals().map_err(|e| fatal(format_args!("cannot block signals: {e}")))
}

/// Print the bound addresses on stdout (`listening on ADDR:PORT`, then
/// `admin on ADDR:PORT`), the lines scripts and tests wait for.
pub fn announce(listening: SocketAddr, admin: Option<SocketAddr>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "listening on {listening}");
    if let Some(a) = admin {
        let _ = writeln!(out, "admin on {a}");
    }
    let _ = out.flush();
}

/// A one-line fatal error on stderr; exit status 1.
pub fn fatal(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("weft: {msg}");
    ExitCode::from(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers_accept_and_refuse() {
        assert_eq!(duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(size("1KiB").unwrap(), 1024);
        assert!(workers("0").is_err());
        assert!(workers("1025").is_err());
        assert_eq!(workers("2").unwrap(), 2);
        assert!(positive("0").is_err());
        assert_eq!(positive("3").unwrap(), 3);
        assert_eq!(accept_limit("inf").unwrap(), AcceptLimit(None));
        assert_eq!(accept_limit("10").unwrap(), AcceptLimit(Some(10)));
        assert!(accept_limit("0").is_err());
    }
}
