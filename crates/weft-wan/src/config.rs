//! The emulated network: hosts, links and each direction's settings, from a
//! TOML file or from `weft wan`'s flags. Every error is one line naming the
//! host, link and key.
//!
//! ```toml
//! [wan]                     # optional
//! mode = "tun"              # or "veth": plain veth pairs, MTU 1500, offloads off
//! subnet = "10.77.0.0/24"   # host i gets .(i+1); default derived from the pid
//! seed = 1                  # loss and jitter random numbers
//! shaper = "router"         # or "kernel": rate limits by HTB on the TUN devices
//!
//! [[host]]
//! name = "client"
//! sack = false              # net.ipv4.tcp_sack in the host's namespace
//! congestion = "reno"       # net.ipv4.tcp_congestion_control
//! sysctl = { "net.ipv4.tcp_timestamps" = "0" }
//!
//! [[link]]
//! a = "client"
//! b = "proxy"
//! delay = "50ms"            # one way, each direction
//! loss = "1%"               # first-loss rate (Bernoulli without loss_after_loss)
//! loss_after_loss = "40%"   # Gilbert–Elliott: loss rate right after a loss
//! rate_per = "flow"         # rate limits each connection, or "host"
//! up = { rate = "28kbit" }  # a -> b overrides
//! down = { rate = "56kbit" }# b -> a overrides
//! ```

use std::collections::HashSet;
use std::fmt;
use std::net::Ipv4Addr;
use std::time::Duration;
use toml::Value;

/// A configuration error: one line, naming what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

fn err<T>(msg: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError(msg.into()))
}

/// How packets cross between namespaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One TUN device per host; the user-space router applies delay, loss and rate.
    Tun,
    /// A veth pair per link (MTU 1500, GSO/GRO/TSO off); rates by TBF, no delay or loss.
    Veth,
}

/// Delay distribution of one direction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DelayDist {
    /// Always `delay`.
    Fixed,
    /// Uniform in `delay ± jitter`.
    Uniform,
    /// Normal with mean `delay` and standard deviation `jitter`, cut at 0.
    Normal,
}

/// Loss model of one direction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Loss {
    /// No loss.
    None,
    /// Each packet lost with probability p.
    Bernoulli(f64),
    /// Two states (paper 001, NIST Net): a packet after a delivered one is lost
    /// with `first`, a packet right after a lost one with `after`.
    GilbertElliott {
        /// First-loss (initial) rate.
        first: f64,
        /// Loss rate after a loss (subsequent).
        after: f64,
    },
}

impl Loss {
    /// The long-run fraction of packets lost.
    pub fn mean(&self) -> f64 {
        match *self {
            Loss::None => 0.0,
            Loss::Bernoulli(p) => p,
            Loss::GilbertElliott { first, after } => first / (1.0 - after + first),
        }
    }
}

/// What a rate limit applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RatePer {
    /// The whole direction of the link (a host's access line).
    Host,
    /// Each flow (protocol, ports) separately: a modem per connection.
    Flow,
}

/// The settings of one direction of a link.
#[derive(Clone, Debug, PartialEq)]
pub struct DirSpec {
    /// One-way delay.
    pub delay: Duration,
    /// Spread of the delay.
    pub jitter: Duration,
    /// Distribution of the delay.
    pub dist: DelayDist,
    /// Loss model.
    pub loss: Loss,
    /// Bits per second (None: unlimited).
    pub rate: Option<u64>,
    /// What the rate limits.
    pub rate_per: RatePer,
    /// Bytes that may wait for the rate limit before drop-tail; None: the
    /// default, see [`DirSpec::queue_limit`].
    pub queue_bytes: Option<u64>,
    /// Let jitter reorder packets (off: a packet never leaves before an earlier one).
    pub reorder: bool,
}

/// The rate-limit queue when none is set: 100 full-size packets...
pub const DEFAULT_QUEUE_BYTES: u64 = 100 * 1500;
/// ...or this much time at the rate, whichever is more.
pub const DEFAULT_QUEUE_TIME: Duration = Duration::from_millis(10);

impl DirSpec {
    /// Bytes that may wait for the rate limit before drop-tail: the set
    /// `queue`, else 100 full-size packets or 10 ms at the rate, whichever is
    /// more. 100 packets is 1.2 ms at 1 Gbit/s, shorter than the gaps a
    /// sender and the router get from the scheduler on a shared machine, so
    /// a fast link would run dry between them and deliver short of its rate
    /// (docs/results.md, "The rate limiter at 1 Gbit/s, without TCP"); the
    /// time floor changes nothing below 120 Mbit/s.
    pub fn queue_limit(&self) -> u64 {
        self.queue_bytes.unwrap_or_else(|| {
            let floor = self.rate.map_or(0, |r| {
                (r as u128 * DEFAULT_QUEUE_TIME.as_nanos() / 8_000_000_000) as u64
            });
            DEFAULT_QUEUE_BYTES.max(floor)
        })
    }
}

impl Default for DirSpec {
    fn default() -> Self {
        DirSpec {
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            dist: DelayDist::Fixed,
            loss: Loss::None,
            rate: None,
            rate_per: RatePer::Host,
            queue_bytes: None,
            reorder: false,
        }
    }
}

/// A host: a network namespace (or the caller's own, `root = true`).
#[derive(Clone, Debug, PartialEq)]
pub struct Host {
    /// Name (letters, digits, `-`, `_`; at most 12).
    pub name: String,
    /// Stay in the caller's namespace (the other end of `weft wan -- CMD`).
    pub root: bool,
    /// sysctls to set in the namespace, in order.
    pub sysctls: Vec<(String, String)>,
}

/// A link between two hosts.
#[derive(Clone, Debug, PartialEq)]
pub struct Link {
    /// Index of host a.
    pub a: usize,
    /// Index of host b.
    pub b: usize,
    /// a -> b.
    pub up: DirSpec,
    /// b -> a.
    pub down: DirSpec,
}

/// Who enforces the rate limits in TUN mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Shaper {
    /// The router's serialisation clock (per host or per flow).
    #[default]
    Router,
    /// An HTB class per link direction on the sending host's TUN device
    /// (per host only); the router then only delays and drops.
    Kernel,
}

/// The whole emulated network.
#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    /// TUN router or veth pairs.
    pub mode: Mode,
    /// First address of the /24 the hosts are numbered in (None: from the pid).
    pub subnet: Option<Ipv4Addr>,
    /// Random seed (None: from the clock).
    pub seed: Option<u64>,
    /// Who enforces TUN mode's rate limits: the router, or the kernel (HTB).
    pub shaper: Shaper,
    /// Hosts in order.
    pub hosts: Vec<Host>,
    /// Links.
    pub links: Vec<Link>,
}

impl Topology {
    /// Index of the host called `name`.
    pub fn host(&self, name: &str) -> Option<usize> {
        self.hosts.iter().position(|h| h.name == name)
    }

    /// Check what cannot be expressed in the chosen mode.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.hosts.is_empty() || self.hosts.len() > 200 {
            return err("wan config: need between 1 and 200 hosts");
        }
        if self.hosts.iter().filter(|h| h.root).count() > 1 {
            return err("wan config: at most one host may have `root = true`");
        }
        for l in &self.links {
            let name = format!("{}-{}", self.hosts[l.a].name, self.hosts[l.b].name);
            if self.mode == Mode::Veth {
                for (d, s) in [("up", &l.up), ("down", &l.down)] {
                    if s.delay > Duration::ZERO || s.loss != Loss::None || s.jitter > Duration::ZERO {
                        return err(format!(
                            "wan config: link {name}: key `{d}.delay/loss`: veth mode has no delay or loss (this kernel has no netem); use mode = \"tun\""
                        ));
                    }
                    if s.rate.is_some() && s.rate_per == RatePer::Flow {
                        return err(format!(
                            "wan config: link {name}: key `rate_per`: veth mode limits per host (TBF) only"
                        ));
                    }
                }
                if self.hosts[l.a].root || self.hosts[l.b].root {
                    return err(format!(
                        "wan config: link {name}: veth mode joins namespaces only (no `root` host)"
                    ));
                }
            }
            if self.shaper == Shaper::Kernel
                && [&l.up, &l.down]
                    .iter()
                    .any(|s| s.rate.is_some() && s.rate_per == RatePer::Flow)
            {
                return err(format!(
                    "wan config: link {name}: key `rate_per`: shaper = \"kernel\" limits per host (HTB) only; per flow needs the router"
                ));
            }
        }
        Ok(())
    }
}

/// Parse a duration: `40ms`, `1.5ms`, `250us`, `2s`; a bare number is
/// milliseconds (as `mm-delay 40`), unlike weft's other duration flags.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let bare = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    let d = if bare {
        weft_core::units::parse_duration(&format!("{s}ms"))
    } else {
        weft_core::units::parse_duration(s)
    }?;
    if d > Duration::from_secs(60) {
        return Err(format!("duration `{s}` out of range (0 to 60 s)"));
    }
    Ok(d)
}

/// Parse a probability: `0.1%` or `0.001`.
pub fn parse_prob(s: &str) -> Result<f64, String> {
    let s = s.trim();
    let v = match s.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => s.parse::<f64>(),
    }
    .map_err(|_| format!("bad probability `{s}` (e.g. 0.1% or 0.001)"))?;
    if !(0.0..=1.0).contains(&v) {
        return Err(format!("probability `{s}` out of range (0 to 100 %)"));
    }
    Ok(v)
}

/// Parse a rate in bits per second: `56kbit`, `10mbit`, `1gbit`, `28k`, `1000000`.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t.strip_suffix("/s").unwrap_or(&t);
    let t = t.strip_suffix("bit").or_else(|| t.strip_suffix("bps")).unwrap_or(t);
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("bad rate `{s}` (e.g. 56kbit, 10mbit, 1gbit)"))?;
    let scale = match unit {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        _ => return Err(format!("bad rate `{s}` (units: bit, kbit, mbit, gbit)")),
    };
    let r = v * scale;
    if !(1000.0..=100e9).contains(&r) {
        return Err(format!("rate `{s}` out of range (1 kbit/s to 100 gbit/s)"));
    }
    Ok(r as u64)
}

fn as_str(v: &Value, at: &str) -> Result<String, ConfigError> {
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Integer(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Boolean(b) => b.to_string(),
        _ => return err(format!("{at}: expected a string or number")),
    };
    if s.len() > 256 {
        return err(format!("{at}: value too long"));
    }
    Ok(s)
}

const DIR_KEYS: &[&str] = &[
    "delay",
    "jitter",
    "dist",
    "loss",
    "loss_after_loss",
    "rate",
    "rate_per",
    "queue",
    "reorder",
];

/// Set one direction key on `spec`; `at` names the place for errors.
fn set_dir_key(spec: &mut DirSpec, key: &str, v: &Value, at: &str) -> Result<(), ConfigError> {
    let here = format!("{at}: key `{key}`");
    let s = as_str(v, &here)?;
    let bad = |e: String| ConfigError(format!("{here}: {e}"));
    match key {
        "delay" => spec.delay = parse_duration(&s).map_err(bad)?,
        "jitter" => spec.jitter = parse_duration(&s).map_err(bad)?,
        "dist" => {
            spec.dist = match s.as_str() {
                "fixed" => DelayDist::Fixed,
                "uniform" => DelayDist::Uniform,
                "normal" => DelayDist::Normal,
                _ => return err(format!("{here}: `{s}` (expected fixed, uniform or normal)")),
            }
        }
        "loss" => {
            let p = parse_prob(&s).map_err(bad)?;
            spec.loss = match spec.loss {
                Loss::GilbertElliott { after, .. } => Loss::GilbertElliott { first: p, after },
                _ if p == 0.0 => Loss::None,
                _ => Loss::Bernoulli(p),
            }
        }
        "loss_after_loss" => {
            let after = parse_prob(&s).map_err(bad)?;
            let first = match spec.loss {
                Loss::None => 0.0,
                Loss::Bernoulli(p) | Loss::GilbertElliott { first: p, .. } => p,
            };
            spec.loss = Loss::GilbertElliott { first, after };
        }
        "rate" => {
            spec.rate = if s == "0" || s == "none" {
                None
            } else {
                Some(parse_rate(&s).map_err(bad)?)
            }
        }
        "rate_per" => {
            spec.rate_per = match s.as_str() {
                "host" => RatePer::Host,
                "flow" | "connection" => RatePer::Flow,
                _ => return err(format!("{here}: `{s}` (expected host or flow)")),
            }
        }
        "queue" => {
            let n: u64 = s.parse().map_err(|_| bad(format!("`{s}` is not a byte count")))?;
            if !(1500..=1 << 30).contains(&n) {
                return err(format!("{here}: {n} out of range (1500 bytes to 1 GiB)"));
            }
            spec.queue_bytes = Some(n);
        }
        "reorder" => spec.reorder = s.parse().map_err(|_| bad(format!("`{s}` (expected true or false)")))?,
        _ => unreachable!("caller checks DIR_KEYS"),
    }
    Ok(())
}

/// Host and namespace names: short, and safe in an interface name.
fn check_name(name: &str, at: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= 12
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        err(format!("{at}: bad name `{name}` (1 to 12 letters, digits, - or _)"))
    }
}

fn parse_host(t: &Value, i: usize, file: &str) -> Result<Host, ConfigError> {
    let at0 = format!("{file}: host #{}", i + 1);
    let Some(t) = t.as_table() else {
        return err(format!("{at0}: expected a table"));
    };
    let name = match t.get("name") {
        Some(v) => as_str(v, &format!("{at0}: key `name`"))?,
        None => return err(format!("{at0}: key `name`: missing")),
    };
    let at = format!("{file}: host {name}");
    check_name(&name, &format!("{at}: key `name`"))?;
    let mut host = Host {
        name,
        root: false,
        sysctls: Vec::new(),
    };
    for (k, v) in t {
        let here = format!("{at}: key `{k}`");
        match k.as_str() {
            "name" => {}
            "root" => {
                host.root = v
                    .as_bool()
                    .ok_or_else(|| ConfigError(format!("{here}: expected true or false")))?
            }
            "sack" => {
                let on = v
                    .as_bool()
                    .ok_or_else(|| ConfigError(format!("{here}: expected true or false")))?;
                host.sysctls
                    .push(("net.ipv4.tcp_sack".into(), if on { "1" } else { "0" }.into()));
            }
            "congestion" => {
                let c = as_str(v, &here)?;
                check_name(&c, &here)?;
                host.sysctls.push(("net.ipv4.tcp_congestion_control".into(), c));
            }
            "sysctl" => {
                let Some(tab) = v.as_table() else {
                    return err(format!("{here}: expected a table of sysctl = value"));
                };
                for (sk, sv) in tab {
                    let ok = sk.starts_with("net.")
                        && sk.len() < 128
                        && sk.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_');
                    if !ok {
                        return err(format!("{here}: `{sk}`: only net.* sysctls (namespaced) may be set"));
                    }
                    host.sysctls.push((sk.clone(), as_str(sv, &format!("{here}.{sk}"))?));
                }
            }
            _ => {
                return err(format!(
                    "{here}: unknown key (known: name, root, sack, congestion, sysctl)"
                ))
            }
        }
    }
    Ok(host)
}

fn parse_link(t: &Value, i: usize, file: &str, hosts: &[Host]) -> Result<Link, ConfigError> {
    let at0 = format!("{file}: link #{}", i + 1);
    let Some(t) = t.as_table() else {
        return err(format!("{at0}: expected a table"));
    };
    let end = |k: &str| -> Result<usize, ConfigError> {
        let Some(v) = t.get(k) else {
            return err(format!("{at0}: key `{k}`: missing (the host at this end)"));
        };
        let n = as_str(v, &format!("{at0}: key `{k}`"))?;
        hosts
            .iter()
            .position(|h| h.name == n)
            .ok_or_else(|| ConfigError(format!("{at0}: key `{k}`: no host named `{n}`")))
    };
    let (a, b) = (end("a")?, end("b")?);
    let at = format!("{file}: link {}-{}", hosts[a].name, hosts[b].name);
    if a == b {
        return err(format!("{at}: key `b`: a link joins two different hosts"));
    }
    let mut both = DirSpec::default();
    for (k, v) in t {
        match k.as_str() {
            "a" | "b" | "up" | "down" => {}
            k if DIR_KEYS.contains(&k) => set_dir_key(&mut both, k, v, &at)?,
            _ => {
                return err(format!(
                    "{at}: key `{k}`: unknown key (known: a, b, up, down, {})",
                    DIR_KEYS.join(", ")
                ))
            }
        }
    }
    let mut dirs = [both.clone(), both];
    for (d, spec) in ["up", "down"].iter().zip(dirs.iter_mut()) {
        let Some(v) = t.get(*d) else { continue };
        let Some(sub) = v.as_table() else {
            return err(format!("{at}: key `{d}`: expected a table of {}", DIR_KEYS.join(", ")));
        };
        for (k, v) in sub {
            if !DIR_KEYS.contains(&k.as_str()) {
                return err(format!(
                    "{at}: key `{d}.{k}`: unknown key (known: {})",
                    DIR_KEYS.join(", ")
                ));
            }
            set_dir_key(spec, k, v, &format!("{at}: {d}"))?;
        }
    }
    let [up, down] = dirs;
    Ok(Link { a, b, up, down })
}

fn parse_wan_table(t: &Value, file: &str, topo: &mut Topology) -> Result<(), ConfigError> {
    let Some(t) = t.as_table() else {
        return err(format!("{file}: `wan`: expected a table"));
    };
    for (k, v) in t {
        let here = format!("{file}: key `wan.{k}`");
        let s = as_str(v, &here)?;
        match k.as_str() {
            "mode" => {
                topo.mode = match s.as_str() {
                    "tun" => Mode::Tun,
                    "veth" => Mode::Veth,
                    _ => return err(format!("{here}: `{s}` (expected tun or veth)")),
                }
            }
            "subnet" => {
                let ip = s.trim_end_matches("/24");
                let ip: Ipv4Addr = ip
                    .parse()
                    .map_err(|_| ConfigError(format!("{here}: bad IPv4 /24 `{s}`")))?;
                topo.subnet = Some(Ipv4Addr::from(u32::from(ip) & 0xffff_ff00));
            }
            "seed" => {
                topo.seed = Some(
                    s.parse()
                        .map_err(|_| ConfigError(format!("{here}: `{s}` is not a number")))?,
                )
            }
            "shaper" => {
                topo.shaper = match s.as_str() {
                    "router" => Shaper::Router,
                    "kernel" => Shaper::Kernel,
                    _ => return err(format!("{here}: `{s}` (expected router or kernel)")),
                }
            }
            _ => return err(format!("{here}: unknown key (known: mode, subnet, seed, shaper)")),
        }
    }
    Ok(())
}

/// Parse a topology file's text (`file` names it in errors).
pub fn parse_toml(text: &str, file: &str) -> Result<Topology, ConfigError> {
    let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let first = e.to_string();
        let first = first.lines().next().unwrap_or("syntax error").to_string();
        ConfigError(format!("{file}: {first}"))
    })?;
    let mut topo = Topology {
        mode: Mode::Tun,
        subnet: None,
        seed: None,
        shaper: Shaper::Router,
        hosts: Vec::new(),
        links: Vec::new(),
    };
    for k in doc.keys() {
        if !["wan", "host", "link"].contains(&k.as_str()) {
            return err(format!("{file}: key `{k}`: unknown section (known: wan, host, link)"));
        }
    }
    if let Some(w) = doc.get("wan") {
        parse_wan_table(w, file, &mut topo)?;
    }
    let arr = |k: &str| -> Result<Vec<Value>, ConfigError> {
        match doc.get(k) {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) => Ok(a.clone()),
            Some(_) => err(format!("{file}: key `{k}`: expected [[{k}]] tables")),
        }
    };
    let mut seen = HashSet::new();
    for (i, h) in arr("host")?.iter().enumerate() {
        let host = parse_host(h, i, file)?;
        if !seen.insert(host.name.clone()) {
            return err(format!("{file}: host {}: key `name`: defined twice", host.name));
        }
        topo.hosts.push(host);
    }
    if topo.hosts.is_empty() {
        return err(format!("{file}: key `host`: no [[host]] defined"));
    }
    let mut pairs = HashSet::new();
    for (i, l) in arr("link")?.iter().enumerate() {
        let link = parse_link(l, i, file, &topo.hosts)?;
        if !pairs.insert((link.a.min(link.b), link.a.max(link.b))) {
            return err(format!(
                "{file}: link {}-{}: defined twice",
                topo.hosts[link.a].name, topo.hosts[link.b].name
            ));
        }
        topo.links.push(link);
    }
    topo.validate()
        .map_err(|e| ConfigError(e.0.replacen("wan config", file, 1)))?;
    Ok(topo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_defaults_to_100_packets_or_10_ms_at_the_rate() {
        let at = |rate: Option<u64>, queue: Option<u64>| {
            DirSpec {
                rate,
                queue_bytes: queue,
                ..DirSpec::default()
            }
            .queue_limit()
        };
        assert_eq!(at(None, None), 150_000);
        assert_eq!(at(Some(56_000), None), 150_000);
        assert_eq!(at(Some(100_000_000), None), 150_000, "10 ms is 125,000 bytes");
        assert_eq!(at(Some(1_000_000_000), None), 1_250_000);
        assert_eq!(at(Some(1_000_000_000), Some(3000)), 3000, "a set queue is kept");
    }

    #[test]
    fn units() {
        assert_eq!(parse_duration("40ms").unwrap(), Duration::from_millis(40));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("40").unwrap(), Duration::from_millis(40));
        assert!(parse_duration("4x").is_err());
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!((parse_prob("0.1%").unwrap() - 0.001).abs() < 1e-12);
        assert!(parse_prob("120%").is_err());
        assert_eq!(parse_rate("56kbit").unwrap(), 56_000);
        assert_eq!(parse_rate("1gbit/s").unwrap(), 1_000_000_000);
        assert!(parse_rate("fast").is_err());
    }

    const MODEM: &str = r#"
[[host]]
name = "client"
sack = false
[[host]]
name = "proxy"
[[host]]
name = "server"
[[link]]
a = "client"
b = "proxy"
delay = "50ms"
loss = "1%"
loss_after_loss = "40%"
rate_per = "flow"
up = { rate = "28kbit" }
down = { rate = "56kbit" }
[[link]]
a = "proxy"
b = "server"
delay = "90ms"
"#;

    #[test]
    fn modem_topology() {
        let t = parse_toml(MODEM, "m.toml").unwrap();
        assert_eq!(t.hosts.len(), 3);
        let l = &t.links[0];
        assert_eq!(l.up.rate, Some(28_000));
        assert_eq!(l.down.rate, Some(56_000));
        assert_eq!(l.up.rate_per, RatePer::Flow);
        assert_eq!(
            l.down.loss,
            Loss::GilbertElliott {
                first: 0.01,
                after: 0.4
            }
        );
        assert_eq!(
            t.hosts[0].sysctls,
            vec![("net.ipv4.tcp_sack".to_string(), "0".to_string())]
        );
    }

    #[test]
    fn errors_name_the_place() {
        let e = parse_toml(&MODEM.replace("\"90ms\"", "\"9y\""), "m.toml")
            .unwrap_err()
            .0;
        assert!(
            e.starts_with("m.toml: link proxy-server: key `delay`: invalid duration"),
            "{e}"
        );
        let e = parse_toml(&MODEM.replace("b = \"server\"", "b = \"nowhere\""), "m.toml")
            .unwrap_err()
            .0;
        assert!(e.contains("link #2: key `b`: no host named `nowhere`"), "{e}");
        let e = parse_toml(&MODEM.replace("sack = false", "sak = false"), "m.toml")
            .unwrap_err()
            .0;
        assert!(e.contains("host client: key `sak`: unknown key"), "{e}");
        let e = parse_toml(&MODEM.replace("{ rate = \"56kbit\" }", "{ rat = 1 }"), "m.toml")
            .unwrap_err()
            .0;
        assert!(e.contains("link client-proxy: key `down.rat`: unknown key"), "{e}");
        assert!(!e.contains('\n'));
    }
}
