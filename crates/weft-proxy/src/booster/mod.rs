//! `weft front --mode booster` (issue 26, paper 003): a web booster that
//! terminates client connections and feeds each origin over a small fixed
//! pool of persistent, pipelined connections, so that the origin's cost per
//! request is one request's worth of work on a long-lived connection instead
//! of an accept, a handshake, a teardown and their packets.
//!
//! It runs on the proxy's worker (the shared event loop, as every `weft
//! front` mode): the proxy's client side parses and terminates clients (a
//! bad request is answered and closed there, never forwarded), the relay
//! moves response bodies (splice or copy, never held whole). What the
//! booster adds:
//!
//! - [`Booster`]: the sites (Host → origin), whether each is boosted now,
//!   the requests each holds (`--max-queue`), the counters;
//! - `lane`: per worker and origin, the fixed set of persistent connections
//!   and the requests pipelined on each (the worker's hooks: placing a
//!   request, handing a connection to the next response in line, re-sending
//!   what a dying connection leaves unanswered);
//! - `monitor`: polls each origin's load report (`weft serve --admin`, key
//!   `load` of `/stats`) and switches its site in and out with hysteresis;
//! - `server`: what `FrontServer` starts for the booster (the monitor, the
//!   admin endpoint) and the proxy settings it tunes.
//!
//! While a site is not boosted its requests take the proxy's ordinary
//! path (one request per origin connection at a time, connections opened as
//! needed and kept in the worker's idle pool): the booster stays in the path
//! and passes traffic straight through. The decision is taken per request,
//! so switching never drops one. The booster keeps no content: every
//! response is the origin's, passed on byte for byte. The origin learns each
//! request's parsed target from `X-Weft-Target` (a client's own copy of that
//! header is never forwarded).

mod lane;
mod monitor;
mod server;

pub(crate) use lane::{booster_of, Lanes};
pub use monitor::Thresholds;
pub use server::{start, tune_proxy};

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The header carrying the parsed target to the origin.
pub const TARGET_HEADER: &str = weft_http::TARGET_HEADER;

/// One site: the Host it answers (`*`: any), its origin, and where the
/// origin reports its load (`weft serve --admin`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteSpec {
    pub host: String,
    pub origin: SocketAddr,
    pub load: Option<SocketAddr>,
}

impl std::str::FromStr for SiteSpec {
    type Err = String;
    /// `HOST=ORIGIN[@ADMIN]`, e.g. `a.example=10.0.0.2:80@10.0.0.2:9090`.
    fn from_str(s: &str) -> Result<SiteSpec, String> {
        let err = || format!("invalid site `{s}` (expected HOST=IP:PORT or HOST=IP:PORT@ADMIN_IP:PORT)");
        let (host, rest) = s.split_once('=').ok_or_else(err)?;
        let (origin, load) = match rest.split_once('@') {
            Some((o, l)) => (o, Some(l.trim().parse().map_err(|_| err())?)),
            None => (rest, None),
        };
        let host = host.trim().to_ascii_lowercase();
        if host.is_empty() || host.len() > 255 || host.bytes().any(|b| b.is_ascii_whitespace()) {
            return Err(err());
        }
        Ok(SiteSpec {
            host,
            origin: origin.trim().parse().map_err(|_| err())?,
            load,
        })
    }
}

/// When a site is boosted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Boost {
    /// From the start, whatever the load.
    #[default]
    Always,
    /// Never: every request passed straight through.
    Never,
    /// When the origin's load report says it is near capacity.
    Auto,
}

weft_core::enum_names!(Boost, error = "unknown boost `{s}` (expected always, never or auto)", {
    Always => "always" | "on",
    Never => "never" | "off",
    Auto => "auto",
});

/// Everything the booster adds to `weft front`'s settings.
#[derive(Clone, Debug)]
pub struct BoosterConfig {
    pub sites: Vec<SiteSpec>,
    /// Persistent connections per origin (over all workers).
    pub upstream_conns: usize,
    /// Requests on one connection at once (the one being answered and
    /// those pipelined behind it).
    pub pipeline: usize,
    /// Requests held per origin (waiting, on a connection or being
    /// answered); more get 503.
    pub max_queue: usize,
    pub boost: Boost,
    pub thresholds: Thresholds,
    /// TCP_QUICKACK off toward the origin after each response.
    pub delayed_ack: bool,
}

impl Default for BoosterConfig {
    fn default() -> Self {
        BoosterConfig {
            sites: Vec::new(),
            upstream_conns: 2,
            pipeline: 8,
            max_queue: 1024,
            boost: Boost::Always,
            thresholds: Thresholds::default(),
            delayed_ack: false,
        }
    }
}

/// The booster's counters (all sites, all workers).
#[derive(Default)]
pub struct BoosterStats {
    pub requests: AtomicU64,
    pub boosted: AtomicU64,
    pub direct: AtomicU64,
    pub pipelined: AtomicU64,
    pub queued: AtomicU64,
    pub refused_queue: AtomicU64,
    pub resent: AtomicU64,
    pub failed_upstream: AtomicU64,
    pub upstream_connects: AtomicU64,
    pub upstream_responses: AtomicU64,
    pub switches: AtomicU64,
    /// TCP segments on the lane connections to the origins, from TCP_INFO
    /// (`segs_out`: sent to the origin, so received there; `segs_in`: sent
    /// by the origin), sampled by each worker about once a second and when
    /// a lane connection closes.
    pub origin_segs_received: AtomicU64,
    pub origin_segs_sent: AtomicU64,
    /// Responses on those connections over the same samples (the
    /// denominator of the per-request figures).
    pub sampled_responses: AtomicU64,
}

impl BoosterStats {
    fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// A site at run time.
pub struct Site {
    pub spec: SiteSpec,
    pub boosting: AtomicBool,
    /// Requests held now (placed and not yet finished).
    held: AtomicUsize,
    /// Requests admitted boosted / passed straight through.
    boosted: AtomicU64,
    direct: AtomicU64,
    /// The last load report, as JSON (empty before the first).
    pub last_load: Mutex<String>,
}

/// The booster's shared state (one per process, read by every worker).
pub struct Booster {
    pub cfg: BoosterConfig,
    pub sites: Vec<Site>,
    pub stats: BoosterStats,
    /// Persistent connections per origin in each worker.
    pub(crate) conns_per_worker: usize,
}

impl std::fmt::Debug for Booster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Booster")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl Booster {
    /// The state for `cfg` run by `workers` workers.
    pub fn new(cfg: BoosterConfig, workers: usize) -> Booster {
        let boosting = cfg.boost == Boost::Always;
        let sites = cfg
            .sites
            .iter()
            .map(|spec| Site {
                spec: spec.clone(),
                boosting: AtomicBool::new(boosting),
                held: AtomicUsize::new(0),
                boosted: AtomicU64::new(0),
                direct: AtomicU64::new(0),
                last_load: Mutex::new(String::new()),
            })
            .collect();
        let conns_per_worker = (cfg.upstream_conns / workers.max(1)).max(1);
        Booster {
            cfg,
            sites,
            stats: BoosterStats::default(),
            conns_per_worker,
        }
    }

    /// The site for a Host value (`name[:port]`): an exact match, else `*`,
    /// else the first.
    pub(crate) fn site_for(&self, host_value: &[u8]) -> usize {
        let name = crate::headers::split_authority(host_value, 80)
            .map(|(h, _)| h)
            .unwrap_or(host_value);
        let named = |s: &Site| s.spec.host.as_bytes().eq_ignore_ascii_case(name);
        self.sites
            .iter()
            .position(named)
            .or_else(|| self.sites.iter().position(|s| s.spec.host == "*"))
            .unwrap_or(0)
    }

    /// Admit one more request for site `i`: None past `--max-queue`, else
    /// whether it is boosted (decided now, once per request: the request
    /// keeps its path however the site switches while it is held).
    pub(crate) fn admit(&self, i: usize) -> Option<bool> {
        let site = &self.sites[i];
        BoosterStats::bump(&self.stats.requests);
        if site.held.fetch_add(1, Ordering::AcqRel) >= self.cfg.max_queue {
            site.held.fetch_sub(1, Ordering::AcqRel);
            BoosterStats::bump(&self.stats.refused_queue);
            return None;
        }
        let boosted = site.boosting.load(Ordering::Relaxed);
        let (way, mine) = if boosted {
            (&self.stats.boosted, &site.boosted)
        } else {
            (&self.stats.direct, &site.direct)
        };
        BoosterStats::bump(way);
        BoosterStats::bump(mine);
        Some(boosted)
    }

    /// A request admitted for site `i` is done.
    pub(crate) fn finished(&self, i: usize) {
        if let Some(s) = self.sites.get(i) {
            let _ = s
                .held
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| h.checked_sub(1));
        }
    }

    /// Switch site `host` (`*` included; any case) in or out by hand
    /// (`POST /boost` on the admin endpoint); false: no such site.
    pub fn switch(&self, host: &str, on: bool) -> bool {
        let Some(site) = self.sites.iter().find(|s| s.spec.host.eq_ignore_ascii_case(host)) else {
            return false;
        };
        if site.boosting.swap(on, Ordering::Relaxed) != on {
            BoosterStats::bump(&self.stats.switches);
            weft_core::info!(
                "booster: site {} {} by hand",
                site.spec.host,
                if on { "boosted" } else { "passed straight through" }
            );
        }
        true
    }

    /// The `/stats` document: the booster's counters, its sites, and the
    /// proxy's totals (`proxy`, JSON) with the per-request figures derived
    /// from them.
    pub fn render(&self, proxy: &str) -> String {
        let st = &self.stats;
        let mut s = String::from("{\"mode\":\"booster\",\"counters\":{");
        let counters: [(&str, &AtomicU64); 14] = [
            ("requests", &st.requests),
            ("boosted", &st.boosted),
            ("direct", &st.direct),
            ("pipelined", &st.pipelined),
            ("queued", &st.queued),
            ("refused_queue", &st.refused_queue),
            ("resent", &st.resent),
            ("failed_upstream", &st.failed_upstream),
            ("upstream_connects", &st.upstream_connects),
            ("upstream_responses", &st.upstream_responses),
            ("switches", &st.switches),
            ("origin_segs_received", &st.origin_segs_received),
            ("origin_segs_sent", &st.origin_segs_sent),
            ("sampled_responses", &st.sampled_responses),
        ];
        for (i, (k, v)) in counters.iter().enumerate() {
            let sep = if i > 0 { "," } else { "" };
            let _ = write!(s, "{sep}\"{k}\":{}", v.load(Ordering::Relaxed));
        }
        let sampled = st.sampled_responses.load(Ordering::Relaxed).max(1) as f64;
        let per = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64 / sampled;
        let _ = write!(
            s,
            "}},\"origin_segments_per_request\":{{\"received\":{:.2},\"sent\":{:.2}}}",
            per(&st.origin_segs_received),
            per(&st.origin_segs_sent)
        );
        s.push_str(",\"sites\":[");
        for (i, site) in self.sites.iter().enumerate() {
            let load = site.last_load.lock().map(|l| l.clone()).unwrap_or_default();
            let _ = write!(
                s,
                "{}{{\"host\":\"{}\",\"origin\":\"{}\",\"boosting\":{},\"held\":{},\"boosted\":{},\"direct\":{},\"load\":{}}}",
                if i > 0 { "," } else { "" },
                site.spec.host.escape_default(),
                site.spec.origin,
                site.boosting.load(Ordering::Relaxed),
                site.held.load(Ordering::Relaxed),
                site.boosted.load(Ordering::Relaxed),
                site.direct.load(Ordering::Relaxed),
                if load.is_empty() { "null" } else { &load },
            );
        }
        let _ = writeln!(s, "],\"proxy\":{}}}", if proxy.is_empty() { "null" } else { proxy });
        s
    }
}

/// Append the target header to a request head written by
/// `headers::write_request` (which ends with the empty line).
pub(crate) fn add_target(out: &mut Vec<u8>, path: &[u8]) {
    if out.ends_with(b"\r\n\r\n") {
        out.truncate(out.len() - 2);
        weft_http::encode::field(out, TARGET_HEADER.as_bytes(), path);
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sites_parse_and_hosts_pick_them() {
        let a: SiteSpec = "A.test=127.0.0.1:81@127.0.0.1:91".parse().unwrap();
        assert_eq!((a.host.as_str(), a.load.map(|l| l.port())), ("a.test", Some(91)));
        assert!("x=host:80".parse::<SiteSpec>().is_err());
        assert!("=127.0.0.1:80".parse::<SiteSpec>().is_err());
        let cfg = BoosterConfig {
            sites: vec![a, "*=127.0.0.1:82".parse().unwrap()],
            max_queue: 1,
            ..BoosterConfig::default()
        };
        let b = Booster::new(cfg, 1);
        assert_eq!(b.site_for(b"a.test:8080"), 0);
        assert_eq!(b.site_for(b"other"), 1);
        assert_eq!(b.admit(1), Some(true));
        assert_eq!(b.admit(1), None, "past --max-queue");
        b.finished(1);
        assert_eq!(b.admit(1), Some(true));
        let doc = b.render("");
        assert!(doc.contains("\"refused_queue\":1"), "{doc}");
        assert!(
            doc.contains("\"host\":\"*\",\"origin\":\"127.0.0.1:82\",\"boosting\":true,\"held\":1,\"boosted\":2"),
            "{doc}"
        );
        let mut head = b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
        add_target(&mut head, b"/x?y");
        assert!(head.ends_with(b"Host: a\r\nX-Weft-Target: /x?y\r\n\r\n"));
    }

    #[test]
    fn sites_on_one_origin_keep_their_own_count_and_boost_state() {
        let cfg = BoosterConfig {
            sites: vec!["a=127.0.0.1:81".parse().unwrap(), "b=127.0.0.1:81".parse().unwrap()],
            max_queue: 2,
            boost: Boost::Never,
            ..BoosterConfig::default()
        };
        let b = Booster::new(cfg, 1);
        assert!(b.switch("A", true) && !b.switch("c", true));
        // Site b's requests end as often as they begin: its count never leaks.
        for _ in 0..10 {
            assert_eq!(b.admit(1), Some(false), "b stays straight through");
            b.finished(1);
        }
        assert_eq!(b.admit(0), Some(true));
        assert_eq!(b.admit(0), Some(true));
        assert_eq!(b.admit(0), None, "a's own queue is full");
        assert_eq!(b.admit(1), Some(false), "b's is not");
        b.finished(0);
        assert_eq!(b.admit(0), Some(true));
        let doc = b.render("");
        assert!(
            doc.contains(
                "\"host\":\"a\",\"origin\":\"127.0.0.1:81\",\"boosting\":true,\"held\":2,\"boosted\":3,\"direct\":0"
            ),
            "{doc}"
        );
        assert!(
            doc.contains(
                "\"host\":\"b\",\"origin\":\"127.0.0.1:81\",\"boosting\":false,\"held\":1,\"boosted\":0,\"direct\":11"
            ),
            "{doc}"
        );
    }
}
