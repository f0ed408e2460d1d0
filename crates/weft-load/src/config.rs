//! The validated configuration of a `weft load` run.
//!
//! The command line (or the `[load]` table of a config file) fills a
//! [`LoadConfig`]; [`LoadConfig::validate`] checks the combinations and turns
//! the URL and proxy into addresses, so a bad run is refused before anything
//! is sent, with a one-line message naming the flag.

use crate::dist::Dist;
use crate::workload::{Drive, Spec};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;
use weft_io::BackendKind;

/// Inter-arrival distribution of the open loop (`--dist`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Arrivals {
    /// Every 1/R seconds (httperf `--period=d`).
    #[default]
    Fixed,
    /// Exponential with mean 1/R: Poisson arrivals (`--period=e`).
    Exp,
    /// Uniform on [0, 2/R) (`--period=u`).
    Uniform,
}

weft_core::enum_names!(Arrivals, "inter-arrival distribution", {
    Fixed => "fixed" | "det" | "d",
    Exp => "exp" | "poisson" | "e",
    Uniform => "uniform" | "unif" | "u",
});

/// How the client closes a connection it ends itself (`--client-close`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ClientClose {
    /// SO_LINGER 0 once every reply is complete: the close sends RST and
    /// leaves no TIME_WAIT entry on the client's port.
    #[default]
    Reset,
    /// A normal close (FIN): the client's port stays in TIME_WAIT for 60 s.
    Fin,
}

weft_core::enum_names!(ClientClose, "--client-close", {
    Reset => "reset" | "rst",
    Fin => "fin",
});

/// Everything a run needs.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// The URL as given.
    pub url: String,
    /// `--rate`: sessions (or requests, for request-driven workloads) per second.
    pub rate: Option<f64>,
    /// `--dist`.
    pub arrivals: Arrivals,
    /// `--clients`: closed-loop clients.
    pub clients: Option<usize>,
    /// `--calls`: requests per session (0 = unlimited).
    pub calls: Option<u32>,
    /// `--duration`.
    pub duration: Option<Duration>,
    /// `--num-conns`: sessions (or requests) to make.
    pub num_conns: Option<u64>,
    /// `--timeout`: no progress for this long fails the request.
    pub timeout: Duration,
    /// `--idle`: idle connections held open.
    pub idle: usize,
    /// `--pipeline`: requests written back to back per burst.
    pub pipeline: u32,
    /// `--http10`.
    pub http10: bool,
    /// `--close`.
    pub close: bool,
    /// `--host`.
    pub host: Option<String>,
    /// `--header` (repeatable).
    pub headers: Vec<String>,
    /// `--proxy HOST:PORT`.
    pub proxy: Option<String>,
    /// `--urls FILE`.
    pub urls: Option<PathBuf>,
    /// `--workload`.
    pub workload: Spec,
    /// `--param k=v` (repeatable).
    pub params: Vec<String>,
    /// `--threads`.
    pub threads: usize,
    /// `--json FILE`.
    pub json: Option<PathBuf>,
    /// `--repeat K`.
    pub repeat: usize,
    /// `--seed`.
    pub seed: u64,
    /// `--verify`.
    pub verify: bool,
    /// `--think`: client think time between requests (and between sessions of a closed-loop client).
    pub think: Dist,
    /// `--event`.
    pub event: BackendKind,
    /// `--recv-buffer`: SO_RCVBUF of each connection.
    pub recv_buffer: Option<usize>,
    /// `--quiet`: no live progress line.
    pub quiet: bool,
    /// `--local-addrs`: source addresses used in turn (each has its own
    /// ports and TIME_WAIT space).
    pub local_addrs: Vec<std::net::IpAddr>,
    /// `--local-ports LO-HI`: bind each connection to the next port of this
    /// range (httperf's `--hog`), instead of letting connect() search.
    pub local_ports: Option<(u16, u16)>,
    /// `--client-close`: how the client closes connections it ends.
    pub client_close: ClientClose,
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            url: String::new(),
            rate: None,
            arrivals: Arrivals::Fixed,
            clients: None,
            calls: None,
            duration: None,
            num_conns: None,
            timeout: Duration::from_secs(10),
            idle: 0,
            pipeline: 1,
            http10: false,
            close: false,
            host: None,
            headers: Vec::new(),
            proxy: None,
            urls: None,
            workload: Spec::Url,
            params: Vec::new(),
            threads: 1,
            json: None,
            repeat: 1,
            seed: 1,
            verify: false,
            think: Dist::Const(0.0),
            event: BackendKind::Epoll,
            recv_buffer: None,
            quiet: false,
            local_addrs: Vec::new(),
            local_ports: None,
            client_close: ClientClose::Reset,
        }
    }
}

/// A parsed `http://host:port/path` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    /// `host:port` (port explicit).
    pub authority: String,
    /// The host part.
    pub host: String,
    /// The port.
    pub port: u16,
    /// Origin-form path and query (at least `/`).
    pub path: Vec<u8>,
}

impl Url {
    /// Parse an `http://` URL (a bare `host:port/path` is taken as http).
    pub fn parse(s: &str) -> Result<Url, String> {
        let rest = if let Some(r) = s.strip_prefix("http://") {
            r
        } else if s.contains("://") {
            return Err(format!("unsupported URL `{s}` (only http:// is spoken)"));
        } else {
            s
        };
        let (auth, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let path = if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        if auth.is_empty() {
            return Err(format!("URL `{s}` has no host"));
        }
        let (host, port) = if let Some(v6) = auth.strip_prefix('[') {
            let end = v6.find(']').ok_or_else(|| format!("invalid IPv6 address in `{s}`"))?;
            let host = &v6[..end];
            let port = match &v6[end + 1..] {
                "" => 80,
                p => p
                    .strip_prefix(':')
                    .and_then(|p| p.parse().ok())
                    .ok_or_else(|| format!("invalid port in `{s}`"))?,
            };
            (format!("[{host}]"), port)
        } else {
            match auth.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), p.parse().map_err(|_| format!("invalid port in `{s}`"))?),
                None => (auth.to_string(), 80),
            }
        };
        if host.is_empty() || host == "[]" {
            return Err(format!("URL `{s}` has no host"));
        }
        if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(format!("URL `{s}` contains spaces or control characters"));
        }
        Ok(Url {
            authority: format!("{host}:{port}"),
            host,
            port,
            path: path.into_bytes(),
        })
    }

    /// Resolve the host (once, at start-up).
    pub fn resolve(&self) -> Result<SocketAddr, String> {
        resolve(&self.authority)
    }
}

/// Parse `--local-addrs`: addresses and IPv4 ranges, comma-separated
/// (`127.0.0.2-127.0.0.17,127.0.1.1`), at most 65536 of them.
pub fn parse_local_addrs(s: &str) -> Result<Vec<std::net::IpAddr>, String> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        if let Some((a, b)) = item.split_once('-') {
            let a: std::net::Ipv4Addr = a
                .trim()
                .parse()
                .map_err(|_| format!("invalid address `{a}` in `{s}`"))?;
            let b: std::net::Ipv4Addr = b
                .trim()
                .parse()
                .map_err(|_| format!("invalid address `{b}` in `{s}`"))?;
            let (a, b) = (u32::from(a), u32::from(b));
            if b < a || b - a >= 65536 {
                return Err(format!(
                    "invalid address range `{item}` (at most 65536 addresses, low to high)"
                ));
            }
            out.extend((a..=b).map(|x| std::net::IpAddr::V4(x.into())));
        } else {
            out.push(item.parse().map_err(|_| format!("invalid address `{item}` in `{s}`"))?);
        }
        if out.len() > 65536 {
            return Err(format!("`{s}`: more than 65536 addresses"));
        }
    }
    if out.is_empty() {
        return Err("--local-addrs: no address given".into());
    }
    Ok(out)
}

/// Parse `--local-ports LO-HI` (1024..65535, at least 2 ports).
pub fn parse_local_ports(s: &str) -> Result<(u16, u16), String> {
    let bad = || format!("invalid --local-ports `{s}` (expected LO-HI within 1024-65535, e.g. 10000-60000)");
    let (a, b) = s.split_once('-').ok_or_else(bad)?;
    let a: u16 = a.trim().parse().map_err(|_| bad())?;
    let b: u16 = b.trim().parse().map_err(|_| bad())?;
    if a < 1024 || b <= a {
        return Err(bad());
    }
    Ok((a, b))
}

/// Resolve `host:port` to its first address.
pub fn resolve(authority: &str) -> Result<SocketAddr, String> {
    let mut addrs = authority
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve `{authority}`: {e}"))?;
    addrs.next().ok_or_else(|| format!("`{authority}` has no address"))
}

impl LoadConfig {
    /// Check combinations; returns how the workload drives the engine.
    pub fn validate(&mut self, drive: Drive) -> Result<(), String> {
        if let Some(r) = self.rate {
            if !(r.is_finite() && r > 0.0 && r <= 10_000_000.0) {
                return Err(format!("--rate {r}: expected a positive rate up to 10000000"));
            }
        }
        if self.rate.is_some() && self.clients.is_some() {
            return Err("--rate (open loop) and --clients (closed loop) exclude each other".into());
        }
        if self.clients == Some(0) {
            return Err("--clients must be at least 1".into());
        }
        if !(1..=1024).contains(&self.pipeline) {
            return Err(format!("--pipeline {}: expected 1..1024", self.pipeline));
        }
        if !(1..=256).contains(&self.threads) {
            return Err(format!("--threads {}: expected 1..256", self.threads));
        }
        if !(1..=1000).contains(&self.repeat) {
            return Err(format!("--repeat {}: expected 1..1000", self.repeat));
        }
        if self.timeout.is_zero() {
            return Err("--timeout must be positive".into());
        }
        for h in &self.headers {
            let ok = h
                .split_once(':')
                .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_graphic() && b != b':'))
                && !h.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0);
            if !ok {
                return Err(format!("--header `{h}`: expected `Name: value` on one line"));
            }
        }
        if let Some(h) = &self.host {
            if h.is_empty() || h.bytes().any(|b| b <= b' ' || b == 0x7f) {
                return Err(format!("--host `{h}`: expected a host name without spaces"));
            }
        }
        match (&self.workload, drive) {
            (Spec::Surge, _) if self.rate.is_some() => {
                return Err("workload surge is driven by --clients (user equivalents), not --rate".into())
            }
            (Spec::Polymix, _) if self.rate.is_none() => {
                return Err("workload polymix needs --rate (total requests/s; robots = rate / 0.4)".into())
            }
            (Spec::Polymix, _) if self.proxy.is_none() => {
                return Err(
                    "workload polymix sends absolute-form requests through a proxy: give --proxy HOST:PORT".into(),
                )
            }
            (Spec::Polymix, _) if self.clients.is_some() => {
                return Err("workload polymix is driven by --rate, not --clients".into())
            }
            (Spec::Trace(_), Drive::Requests { timed: true }) if self.rate.is_some() || self.clients.is_some() => {
                return Err("a trace replayed at logged timing sets its own pace: drop --rate/--clients".into())
            }
            _ => {}
        }
        if self.pipeline > 1 && matches!(drive, Drive::Requests { .. }) {
            return Err("--pipeline applies to session workloads only".into());
        }
        // Every run stops by itself: a time limit applies unless the run is
        // finite anyway (a count of finite sessions, or a trace that runs out).
        let looping = self.params.iter().any(|p| p.replace(' ', "") == "loop=1");
        let counted = self.num_conns.is_some();
        let finite = match (drive, &self.workload) {
            // A phase schedule ends by itself unless its fill phase waits for
            // a byte count (cache=), which a slow proxy may never reach.
            (Drive::Requests { timed: true }, Spec::Polymix) => {
                !self.params.iter().any(|p| p.trim_start().starts_with("cache="))
            }
            (Drive::Requests { timed: true }, _) => !looping,
            (Drive::Requests { timed: false }, _) => counted,
            (Drive::Sessions, Spec::Trace(_)) => !looping,
            (Drive::Sessions, Spec::Surge) => false,
            (Drive::Sessions, Spec::SpecWeb99) => counted,
            // Sessions of --calls requests; closed-loop clients default to
            // unlimited (keep-alive, like wrk), open-loop sessions to one.
            (Drive::Sessions, _) => {
                counted
                    && match self.calls {
                        Some(0) => false,
                        Some(_) => true,
                        None => self.rate.is_some(),
                    }
            }
        };
        if self.duration.is_none() && !finite {
            self.duration = Some(Duration::from_secs(10));
        }
        if self.duration.is_some_and(|d| d.is_zero()) {
            return Err("--duration must be positive".into());
        }
        if self.num_conns == Some(0) {
            return Err("--num-conns must be at least 1".into());
        }
        Ok(())
    }

    /// A JSON object of the settings (for `config` in the report).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "url": self.url,
            "rate": self.rate,
            "dist": self.arrivals.name(),
            "clients": self.clients,
            "calls": self.calls,
            "duration_s": self.duration.map(|d| d.as_secs_f64()),
            "num_conns": self.num_conns,
            "timeout_s": self.timeout.as_secs_f64(),
            "idle": self.idle,
            "pipeline": self.pipeline,
            "http10": self.http10,
            "close": self.close,
            "host": self.host,
            "headers": self.headers,
            "proxy": self.proxy,
            "urls": self.urls.as_ref().map(|p| p.display().to_string()),
            "workload": self.workload.name(),
            "params": self.params,
            "threads": self.threads,
            "repeat": self.repeat,
            "seed": self.seed,
            "verify": self.verify,
            "think": self.think.to_string(),
            "event": self.event.name(),
            "recv_buffer": self.recv_buffer,
            "local_addrs": self.local_addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
            "local_ports": self.local_ports.map(|(a, b)| format!("{a}-{b}")),
            "client_close": self.client_close.name(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = Url::parse("http://127.0.0.1:8080/a/b?c").unwrap();
        assert_eq!(u.authority, "127.0.0.1:8080");
        assert_eq!(u.path, b"/a/b?c");
        let u = Url::parse("localhost").unwrap();
        assert_eq!((u.authority.as_str(), &u.path[..]), ("localhost:80", &b"/"[..]));
        let u = Url::parse("http://[::1]:9/x").unwrap();
        assert_eq!(u.authority, "[::1]:9");
        assert_eq!(u.resolve().unwrap().port(), 9);
        assert!(Url::parse("https://x/").is_err());
        assert!(Url::parse("http://:80/").is_err());
        assert!(Url::parse("http://h:port/").is_err());
        assert!(Url::parse("http://h/a b").is_err());
        assert_eq!(Url::parse("h?q").unwrap().path, b"/?q");
    }

    #[test]
    fn validation() {
        let mut c = LoadConfig {
            rate: Some(10.0),
            clients: Some(2),
            ..Default::default()
        };
        assert!(c.validate(Drive::Sessions).unwrap_err().contains("exclude"));
        let mut c = LoadConfig::default();
        c.validate(Drive::Sessions).unwrap();
        assert_eq!(c.duration, Some(Duration::from_secs(10)), "every run is bounded");
        let mut c = LoadConfig {
            headers: vec!["X-Bad\r\nInjected: 1".into()],
            ..Default::default()
        };
        assert!(c.validate(Drive::Sessions).is_err());
        let mut c = LoadConfig {
            workload: Spec::Polymix,
            rate: Some(10.0),
            ..Default::default()
        };
        assert!(c
            .validate(Drive::Requests { timed: false })
            .unwrap_err()
            .contains("--proxy"));
        let mut c = LoadConfig {
            workload: Spec::Trace(None),
            ..Default::default()
        };
        c.validate(Drive::Requests { timed: true }).unwrap();
        assert_eq!(c.duration, None, "a finite trace bounds itself");
        assert_eq!("exp".parse::<Arrivals>().unwrap(), Arrivals::Exp);
        let a = parse_local_addrs("127.0.0.2-127.0.0.4, ::1").unwrap();
        assert_eq!(a.len(), 4);
        assert_eq!(a[2].to_string(), "127.0.0.4");
        assert!(parse_local_addrs("127.0.0.9-127.0.0.1").is_err());
        assert!(parse_local_addrs("x").is_err());
        assert!("gamma".parse::<Arrivals>().is_err());
        assert_eq!(parse_local_ports("10000-20000").unwrap(), (10000, 20000));
        for bad in ["80-90", "2000-1000", "x-2", "3000"] {
            assert!(parse_local_ports(bad).is_err(), "{bad}");
        }
        assert_eq!("fin".parse::<ClientClose>().unwrap(), ClientClose::Fin);
        assert!("linger".parse::<ClientClose>().is_err());
    }
}
