//! Settings of `weft proxy`, already validated (the CLI and `weft.toml` build them).

use crate::acl::{Cidr, Ports};
use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;
use weft_io::BackendKind;

/// When response bodies and tunnels move through the kernel with splice(2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SpliceMode {
    /// Every body still to come after the response head, and every tunnel.
    On,
    /// Never: bodies are read into user space and written out.
    Off,
    /// Bodies of at least `--splice-threshold` bytes (and bodies of unknown
    /// length), and tunnels; smaller bodies are copied.
    #[default]
    Auto,
    /// As `auto` for bodies; CONNECT tunnels are forwarded in the kernel by
    /// a BPF sk_skb program on a sockmap (weft-sockmap), or spliced where BPF
    /// is not permitted.
    Sockmap,
}

weft_core::enum_names!(SpliceMode, "splice mode", {
    On => "on",
    Off => "off",
    Auto => "auto",
    Sockmap => "sockmap",
});

/// The cache's replacement policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CachePolicy {
    /// Least recently used.
    #[default]
    Lru,
    /// Greedy-Dual-Size with cost 1 (favours small objects: hit ratio).
    Gds,
}

weft_core::enum_names!(CachePolicy, "cache policy", {
    Lru => "lru",
    Gds => "gds",
});

/// `host:port` of an upstream (a name is resolved off the event loop).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPort {
    /// Host name or address literal (IPv6 without brackets), lowercased.
    pub host: String,
    /// Port.
    pub port: u16,
}

impl FromStr for HostPort {
    type Err = String;
    fn from_str(s: &str) -> Result<HostPort, String> {
        let bad = || format!("invalid upstream `{s}` (expected HOST:PORT, e.g. 127.0.0.1:8080 or [::1]:80)");
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (h, p) = rest.split_once("]:").ok_or_else(bad)?;
            (h, p)
        } else {
            s.rsplit_once(':').ok_or_else(bad)?
        };
        let port: u16 = port.parse().map_err(|_| bad())?;
        if host.is_empty() || port == 0 || host.contains(|c: char| c.is_whitespace() || c == '/') {
            return Err(bad());
        }
        Ok(HostPort {
            host: host.to_ascii_lowercase(),
            port,
        })
    }
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// A reverse-proxy route: requests whose Host is `host` go to `upstream`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The Host value, lowercased (with or without a port).
    pub host: String,
    /// Where its requests go.
    pub upstream: HostPort,
}

impl FromStr for Route {
    type Err = String;
    fn from_str(s: &str) -> Result<Route, String> {
        let (h, u) = s
            .split_once('=')
            .ok_or_else(|| format!("invalid route `{s}` (expected HOST=UPSTREAM_HOST:PORT)"))?;
        let host = h.trim().to_ascii_lowercase();
        if host.is_empty() {
            return Err(format!("invalid route `{s}`: empty host"));
        }
        Ok(Route {
            host,
            upstream: u.trim().parse()?,
        })
    }
}

/// Everything `weft proxy` needs.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// Address to listen on (port 0 picks one).
    pub listen: SocketAddr,
    /// Event backend.
    pub event: BackendKind,
    /// Its tuning (`--max-pass`, `--wake-interval`).
    pub event_options: weft_io::BackendOptions,
    /// Worker threads, each with its own SO_REUSEPORT listener and loop.
    pub workers: usize,
    /// Listen backlog.
    pub backlog: i32,
    /// Share the listening port with other processes (`--reuse-port`);
    /// otherwise a port another process holds is an error.
    pub reuse_port: bool,
    /// Connections a worker holds at most; more are closed at accept (0 = unlimited).
    pub max_connections: usize,
    /// Client connections accepted per listener readiness event (`None`:
    /// until EAGAIN). 10 by default, as `weft serve`: under overload an
    /// unbounded accept loop fills the loop with new connections whose
    /// requests then wait behind it (the µserver study, paper 002).
    pub accept_limit: Option<usize>,
    /// Reverse mode: every request goes here (unless a route matches).
    pub upstream: Option<HostPort>,
    /// Reverse mode: Host → upstream.
    pub routes: Vec<Route>,
    /// Clients allowed; empty means the default (loopback in forward mode,
    /// everyone in reverse mode).
    pub allow: Vec<Cidr>,
    /// Ports CONNECT may reach.
    pub connect_ports: Ports,
    /// Ports a forward request (absolute-form, upgrades included) may reach.
    pub forward_ports: Ports,
    /// Close a keep-alive client connection idle this long (and a quiet
    /// tunnel, unless `tunnel_timeout` says otherwise).
    pub idle_timeout: Duration,
    /// Close a tunnel (CONNECT, or an upgraded connection such as a
    /// WebSocket) that moved no byte either way this long; None: the idle
    /// timeout (HAProxy's `timeout tunnel`).
    pub tunnel_timeout: Option<Duration>,
    /// Close a client whose request head is incomplete this long after it began.
    pub header_timeout: Duration,
    /// Close a client that makes no write progress this long.
    pub send_timeout: Duration,
    /// Give up connecting to an upstream after this long (504).
    pub connect_timeout: Duration,
    /// Give up on an upstream that sends nothing for this long (504 before
    /// the response head; the client connection is closed after it).
    pub upstream_timeout: Duration,
    /// Close pooled idle upstream connections after this long.
    pub pool_idle_timeout: Duration,
    /// Idle connections kept per upstream address, per worker. Large by
    /// default (1024): the pool is a stack, so connections beyond what the
    /// load needs sit at its bottom unused and expire after
    /// `pool_idle_timeout`, while a small cap closes connections at every
    /// peak of concurrency and opens new ones at the next — measured, at 64
    /// and 40,000 requests/s a third to two thirds of the requests opened a
    /// connection and the proxy's CPU per request tripled.
    pub pool_size: usize,
    /// Memory cache budget in bytes; 0 disables the cache.
    pub cache_size: u64,
    /// Largest object stored (and filled after a client abort).
    pub max_object_size: u64,
    /// Replacement policy.
    pub cache_policy: CachePolicy,
    /// Disk store directory (`disk`); None: memory only.
    pub cache_dir: Option<std::path::PathBuf>,
    /// Most bytes of files in `cache_dir`.
    pub cache_dir_size: u64,
    /// Splice mode.
    pub splice: SpliceMode,
    /// In `auto` mode, bodies smaller than this are copied.
    pub splice_threshold: u64,
    /// Tee cacheable bodies (forward in the kernel and keep a copy).
    pub keep_copy: bool,
    /// Move spliced chunks with uring linked chains (one io_uring_enter per
    /// chunk: splice in, tee, splice out; `--uring-linked`).
    pub uring_linked: bool,
    /// Linked chains also carry the response head: written into the
    /// client's pipe ahead of the first body bytes (`--uring-linked-head`).
    pub uring_linked_head: bool,
    /// Pipe size asked for with F_SETPIPE_SZ.
    pub pipe_size: usize,
    /// TCP_NOTSENT_LOWAT of client sockets (0: the kernel's default, no
    /// limit). See `Proxy::start` for why the proxy bounds unsent bytes.
    pub notsent_lowat: usize,
    /// SO_RCVLOWAT batch for long upstream bodies (0: wake at every
    /// arrival). See `relay::Relay::batch_reads`.
    pub rcv_lowat: usize,
    /// Most pipes alive in the process.
    pub max_pipes: usize,
    /// Bytes of an upstream response read into user space before deciding
    /// how the body moves (the paper reads two segments, 2896 bytes).
    pub first_read: usize,
    /// How long resolved host names are kept.
    pub dns_ttl: Duration,
    /// Threads resolving host names.
    pub resolver_threads: usize,
    /// This proxy's name in Via (`received-by`); loops are detected by it.
    /// `None`: `hostname:port`.
    pub via_name: Option<String>,
    /// Request (and response head) limits.
    pub limits: weft_http::Limits,
    /// How long in-flight transfers may take to finish after SIGTERM/SIGINT.
    pub grace: Duration,
    /// Print counters as JSON on stderr at exit.
    pub stats_on_exit: bool,
    /// Access log (`--access-log`), and its line format.
    pub access_log: Option<std::path::PathBuf>,
    /// The access log's line format (`--access-log-format`).
    pub access_log_format: crate::accesslog::Format,
    /// Serve live counters as JSON on this address.
    pub admin: Option<SocketAddr>,
    /// `weft front`: the upstream of each request is chosen by this decision state.
    pub front: Option<std::sync::Arc<crate::front::Front>>,
    /// Surrogate mode: a targeted field (`*-Cache-Control`, RFC 9213)
    /// honoured ahead of CDN-Cache-Control and Cache-Control.
    pub targeted_cache_control: Option<String>,
    /// Forward requests with methods weft does not know (they invalidate the
    /// cached target like unsafe methods); false: 501.
    pub extension_methods: bool,
    /// Forward protocol upgrades (WebSocket): a 101 makes the connection a
    /// tunnel. false: Upgrade is dropped as hop-by-hop.
    pub upgrade: bool,
    /// Seconds a stale stored response may stand in for an error from the
    /// origin when the response itself does not say (`stale-if-error`, RFC
    /// 5861); 0: only where responses or requests ask for it.
    pub stale_if_error: u64,
    /// Seconds a stale stored response may answer while it is revalidated
    /// in the background when the response itself does not say
    /// (`stale-while-revalidate`, RFC 5861); 0: only where responses ask.
    pub stale_while_revalidate: u64,
    /// Add RFC 9211 `Cache-Status` to every response that went through the
    /// cache (`cache_status.rs`).
    pub cache_status: bool,
    /// Collapsed forwarding (`fill.rs`): concurrent misses for one key wait
    /// for the first one's fill.
    pub collapse: bool,
    /// How long a miss waits for another's fill before it asks the origin
    /// itself (`--collapse-timeout`; a follower of the fill is not bound
    /// by it).
    pub collapse_timeout: std::time::Duration,
    /// Range misses fill the cache (`background.rs`): a 206 with the whole
    /// representation is stored as its 200, a 206 with a part starts one
    /// background GET of the whole.
    pub range_fill: bool,
}

impl ProxyConfig {
    /// How long a tunnel may stay quiet both ways.
    pub fn tunnel_idle(&self) -> Duration {
        self.tunnel_timeout.unwrap_or(self.idle_timeout)
    }

    /// Reverse mode (an upstream or routes are configured)?
    pub fn is_reverse(&self) -> bool {
        self.upstream.is_some() || !self.routes.is_empty()
    }

    /// The clients allowed, with the mode's default applied.
    pub fn effective_allow(&self) -> Vec<Cidr> {
        if !self.allow.is_empty() {
            self.allow.clone()
        } else if self.is_reverse() {
            vec!["0.0.0.0/0".parse().expect("valid"), "::/0".parse().expect("valid")]
        } else {
            Cidr::loopback()
        }
    }
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 3128)),
            event: BackendKind::Epoll,
            event_options: weft_io::BackendOptions::default(),
            workers: weft_io::sys::available_cpus(),
            backlog: 4096,
            reuse_port: false,
            max_connections: 0,
            accept_limit: Some(10),
            upstream: None,
            routes: Vec::new(),
            allow: Vec::new(),
            connect_ports: Ports::connect_default(),
            forward_ports: Ports::forward_default(),
            idle_timeout: Duration::from_secs(60),
            tunnel_timeout: None,
            header_timeout: Duration::from_secs(10),
            send_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(5),
            upstream_timeout: Duration::from_secs(60),
            pool_idle_timeout: Duration::from_secs(15),
            pool_size: 1024,
            cache_size: 256 << 20,
            max_object_size: 64 << 20,
            cache_policy: CachePolicy::Lru,
            cache_dir: None,
            cache_dir_size: 1 << 30,
            splice: SpliceMode::Auto,
            splice_threshold: 16 * 1024,
            keep_copy: true,
            uring_linked: false,
            uring_linked_head: false,
            pipe_size: 1 << 20,
            notsent_lowat: 32 * 1024,
            rcv_lowat: 128 * 1024,
            max_pipes: 1024,
            first_read: 4096,
            dns_ttl: Duration::from_secs(60),
            resolver_threads: 2,
            via_name: None,
            limits: weft_http::Limits::default(),
            grace: Duration::from_secs(10),
            stats_on_exit: false,
            access_log: None,
            access_log_format: crate::accesslog::Format::Combined,
            admin: None,
            front: None,
            targeted_cache_control: None,
            extension_methods: true,
            upgrade: true,
            stale_if_error: 0,
            stale_while_revalidate: 0,
            cache_status: false,
            // Opt-in, as nginx's proxy_cache_lock: behind a slow origin a
            // waiter for a key that turns out uncacheable pays the
            // leader's response time before its own (docs/proxy.md).
            collapse: false,
            collapse_timeout: crate::fill::WAIT_MAX,
            range_fill: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_ports_and_routes() {
        let h: HostPort = "Origin.Example:8080".parse().unwrap();
        assert_eq!(h.host, "origin.example");
        assert_eq!(h.port, 8080);
        let h: HostPort = "[::1]:80".parse().unwrap();
        assert_eq!(h.host, "::1");
        assert_eq!(h.to_string(), "[::1]:80");
        for bad in ["nohost", ":80", "h:0", "h:99999", "h:x", "[::1]80"] {
            assert!(bad.parse::<HostPort>().is_err(), "{bad}");
        }
        let r: Route = "www.example=127.0.0.1:9000".parse().unwrap();
        assert_eq!(r.host, "www.example");
        assert_eq!(r.upstream.port, 9000);
        assert!("nohost".parse::<Route>().is_err());
        assert!("=1.2.3.4:5".parse::<Route>().is_err());
    }

    #[test]
    fn default_acl_depends_on_mode() {
        let mut c = ProxyConfig::default();
        assert!(!c.is_reverse());
        assert_eq!(c.effective_allow(), Cidr::loopback());
        c.upstream = Some("127.0.0.1:1".parse().unwrap());
        assert!(c.is_reverse());
        assert_eq!(c.effective_allow().len(), 2);
        c.allow = vec!["10.0.0.0/8".parse().unwrap()];
        assert_eq!(c.effective_allow().len(), 1);
    }

    #[test]
    fn mode_names_round_trip() {
        for m in [SpliceMode::On, SpliceMode::Off, SpliceMode::Auto, SpliceMode::Sockmap] {
            assert_eq!(m.name().parse::<SpliceMode>().unwrap(), m);
        }
        for p in [CachePolicy::Lru, CachePolicy::Gds] {
            assert_eq!(p.name().parse::<CachePolicy>().unwrap(), p);
        }
        assert!("maybe".parse::<SpliceMode>().is_err());
    }
}
