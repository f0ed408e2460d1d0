//! Workloads: what to request, in which order, with which think times.
//!
//! Two shapes drive the engine:
//!
//! - **sessions** (one-byte, file:SIZE, URL lists, SPECweb99, SURGE, trace
//!   replay as fast as N clients, SSL emulation): a session is one user with
//!   one connection at a time; open-loop arrivals (`--rate`) or closed-loop
//!   clients (`--clients`) start sessions, and the workload supplies each
//!   request and the think time before it;
//! - **requests** (PolyMix-4 robots, trace replay at logged timing): arrivals
//!   are single requests handed to an *agent* (a robot, a client host) that
//!   keeps a small pool of persistent connections, as Polygraph's robots do.
//!
//! Heavy, read-only parts (URL lists, traces, file sets) are prepared once and
//! shared by the threads ([`Prepared`]); each thread has its own cursor and
//! random stream ([`Workload`]).

pub mod polymix;
pub mod specweb99;
pub mod surge;
pub mod trace;

use crate::content;
use crate::request::Writer;
use crate::ssl::Handshake;
use crate::urls;
use rand::rngs::SmallRng;
use rand::Rng;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_http::Method;

/// `--param key=value` settings, consumed by the workload that reads them;
/// any left over is an error naming the key.
#[derive(Clone, Debug, Default)]
pub struct Params {
    items: Vec<(String, String)>,
}

impl Params {
    /// Parse `key=value` strings.
    pub fn parse(list: &[String]) -> Result<Params, String> {
        let mut items = Vec::new();
        for p in list {
            let Some((k, v)) = p.split_once('=') else {
                return Err(format!("invalid --param `{p}` (expected key=value)"));
            };
            items.push((k.trim().to_string(), v.trim().to_string()));
        }
        Ok(Params { items })
    }

    /// Take a raw value.
    pub fn take(&mut self, key: &str) -> Option<String> {
        let i = self.items.iter().position(|(k, _)| k == key)?;
        Some(self.items.remove(i).1)
    }

    /// Take a number, or the default.
    pub fn f64(&mut self, key: &str, default: f64) -> Result<f64, String> {
        match self.take(key) {
            None => Ok(default),
            Some(v) => match v.parse::<f64>() {
                Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
                _ => Err(format!("invalid --param {key}=`{v}` (expected a non-negative number)")),
            },
        }
    }

    /// Take a whole number within `range`, or the default.
    pub fn u64(&mut self, key: &str, default: u64, range: std::ops::RangeInclusive<u64>) -> Result<u64, String> {
        match self.take(key) {
            None => Ok(default),
            Some(v) => match v.parse::<u64>() {
                Ok(x) if range.contains(&x) => Ok(x),
                _ => Err(format!(
                    "invalid --param {key}=`{v}` (expected {}..{})",
                    range.start(),
                    range.end()
                )),
            },
        }
    }

    /// Take a distribution, or the default.
    pub fn dist(&mut self, key: &str, default: crate::Dist, unit: crate::dist::Unit) -> Result<crate::Dist, String> {
        match self.take(key) {
            None => Ok(default),
            Some(v) => crate::Dist::parse(&v, unit).map_err(|e| format!("invalid --param {key}: {e}")),
        }
    }

    /// Fail on any key nobody took.
    pub fn finish(&self, workload: &str, known: &[&str]) -> Result<(), String> {
        match self.items.first() {
            None => Ok(()),
            Some((k, _)) => Err(format!(
                "unknown --param `{k}` for workload {workload} (known: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            )),
        }
    }
}

/// What a request was, remembered until its reply arrives.
#[derive(Clone, Copy, Debug)]
pub struct ReqMeta {
    /// Method (HEAD and 304s have no body).
    pub method: Method,
    /// Check the body against the content of this pattern offset.
    pub verify: bool,
    /// Pattern offset of the path's content.
    pub content: u32,
    /// Body size the URL asks for (u64::MAX: unknown).
    pub size: u64,
    /// The workload's own reference (object, trace entry).
    pub tag: u64,
    /// When the request was written (set by the engine).
    pub sent_at: Instant,
}

/// Where a workload writes a request.
pub struct Out<'a> {
    /// The connection's output buffer.
    pub buf: &'a mut Vec<u8>,
    /// The request renderer.
    pub writer: &'a Writer,
    /// Ask for a persistent connection.
    pub keep_alive: bool,
    /// `--verify`.
    pub verify: bool,
    /// Time the request is being made.
    pub now: Instant,
}

impl<'a> Out<'a> {
    /// Output for a unit test: keep-alive, no `--verify`, made now.
    #[cfg(test)]
    pub(crate) fn for_test(buf: &'a mut Vec<u8>, writer: &'a Writer) -> Out<'a> {
        Out {
            buf,
            writer,
            keep_alive: true,
            verify: false,
            now: Instant::now(),
        }
    }

    /// Render one request and describe it.
    pub fn request(
        &mut self,
        method: Method,
        authority: usize,
        path: &[u8],
        extra: &[u8],
        body: &[u8],
        tag: u64,
    ) -> ReqMeta {
        self.writer
            .push(self.buf, method, authority, path, extra, self.keep_alive, body);
        let (verify, content, size) = if self.verify && method != Method::Head {
            let size = urls::parse(path).map(|s| s.size).unwrap_or(u64::MAX);
            (true, content::offset(path) as u32, size)
        } else {
            (false, 0, u64::MAX)
        };
        ReqMeta {
            method,
            verify,
            content,
            size,
            tag,
            sent_at: self.now,
        }
    }
}

/// How a session starts.
#[derive(Clone, Copy, Debug)]
pub struct SessionInit {
    /// Requests in the session; 0 = the configured `--calls`.
    pub calls: u32,
    /// Keep the connection between the session's requests.
    pub persist: bool,
    /// Emulated SSL handshake before the first request.
    pub ssl: Option<Handshake>,
}

/// A session's position in its workload.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cursor {
    /// Workload-defined.
    pub a: u64,
    /// Workload-defined.
    pub b: u64,
    /// Workload-defined.
    pub c: u64,
    /// Requests made in this session so far.
    pub n: u64,
}

/// The next step of a session.
pub enum Next {
    /// A request was written; wait this long before sending it.
    Request(ReqMeta, Duration),
    /// The workload has nothing more (a trace ran out).
    Exhausted,
}

/// An arrival for request-driven workloads.
#[derive(Clone, Copy, Debug)]
pub struct Arrival {
    /// Seconds since the start, when the workload times it (trace replay).
    pub at: Option<f64>,
    /// Agent that makes the request.
    pub agent: u32,
    /// The workload's reference to the request.
    pub item: u64,
}

/// Which shape drives the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drive {
    /// Sessions.
    Sessions,
    /// Requests handed to agents; `timed`: the workload gives the times.
    Requests {
        /// Arrival times come from the workload (trace), not from `--rate`.
        timed: bool,
    },
}

/// A list of URLs requested in order (wrapping).
#[derive(Clone, Debug)]
pub struct UrlList {
    /// (authority index, origin-form path).
    pub urls: Vec<(usize, Vec<u8>)>,
    /// Emulated SSL for every session (60 % abbreviated).
    pub ssl: bool,
}

/// Read-only workload data shared by the threads.
#[derive(Debug)]
pub enum Prepared {
    /// One or more URLs.
    Urls(UrlList),
    /// SPECweb99.
    SpecWeb99(specweb99::SpecWeb99),
    /// SURGE.
    Surge(surge::SurgeSet),
    /// PolyMix-4.
    Polymix(polymix::PolymixConfig),
    /// Trace replay.
    Trace(trace::Replay),
}

/// Workload names for messages.
pub const NAMES: &str = "one-byte, file:SIZE, specweb99, surge, polymix, trace[:FILE], ssl-emulation";

/// A workload as named on the command line.
#[derive(Clone, Debug, PartialEq)]
pub enum Spec {
    /// The URL (or `--urls` list) as given.
    Url,
    /// A 1-byte file.
    OneByte,
    /// A file of this size.
    File(u64),
    /// SPECweb99 static.
    SpecWeb99,
    /// SURGE.
    Surge,
    /// PolyMix-4.
    Polymix,
    /// Trace replay (file from `trace:FILE` or `--param file=`).
    Trace(Option<PathBuf>),
    /// SSL-handshake emulation.
    Ssl,
}

impl Spec {
    /// Parse `--workload NAME`.
    pub fn parse(s: &str) -> Result<Spec, String> {
        Ok(match s {
            "url" => Spec::Url,
            "one-byte" => Spec::OneByte,
            "specweb99" => Spec::SpecWeb99,
            "surge" => Spec::Surge,
            "polymix" | "polymix-4" => Spec::Polymix,
            "trace" => Spec::Trace(None),
            "ssl-emulation" | "ssl" => Spec::Ssl,
            _ => {
                if let Some(sz) = s.strip_prefix("file:") {
                    let n = weft_core::units::parse_size(sz).map_err(|e| format!("workload file:SIZE: {e}"))?;
                    Spec::File(n)
                } else if let Some(f) = s.strip_prefix("trace:") {
                    if f.is_empty() {
                        return Err("workload trace:FILE needs a file name".into());
                    }
                    Spec::Trace(Some(PathBuf::from(f)))
                } else {
                    return Err(format!("unknown workload `{s}` (expected {NAMES})"));
                }
            }
        })
    }

    /// The name as written in reports.
    pub fn name(&self) -> String {
        match self {
            Spec::Url => "url".into(),
            Spec::OneByte => "one-byte".into(),
            Spec::File(n) => format!("file:{n}"),
            Spec::SpecWeb99 => "specweb99".into(),
            Spec::Surge => "surge".into(),
            Spec::Polymix => "polymix".into(),
            Spec::Trace(Some(p)) => format!("trace:{}", p.display()),
            Spec::Trace(None) => "trace".into(),
            Spec::Ssl => "ssl-emulation".into(),
        }
    }
}

/// Inputs for preparing a workload.
pub struct PrepareInput<'a> {
    /// The workload.
    pub spec: &'a Spec,
    /// Its parameters.
    pub params: Params,
    /// The URL's origin-form path.
    pub base_path: &'a [u8],
    /// `--urls FILE` contents, already read: (authority index, path).
    pub url_list: Option<Vec<(usize, Vec<u8>)>>,
    /// Number of origin authorities (polymix spreads objects over them).
    pub authorities: usize,
    /// `--seed`.
    pub seed: u64,
}

impl Prepared {
    /// Build the shared part of a workload; every parameter is checked here.
    pub fn prepare(inp: PrepareInput<'_>) -> Result<Prepared, String> {
        let mut params = inp.params;
        let single = |size: u64, base: &[u8]| -> Vec<u8> {
            if base == b"/" || base.is_empty() {
                let mut p = Vec::new();
                urls::push_size_path(&mut p, size, urls::CacheFlag::Default);
                p.extend_from_slice(b"/file");
                p
            } else {
                base.to_vec()
            }
        };
        let w = match inp.spec {
            Spec::Url | Spec::OneByte | Spec::File(_) => {
                let urls = match (&inp.url_list, inp.spec) {
                    (Some(list), _) => list.clone(),
                    (None, Spec::OneByte) => vec![(0, single(1, inp.base_path))],
                    (None, Spec::File(n)) => vec![(0, single(*n, inp.base_path))],
                    (None, _) => vec![(0, inp.base_path.to_vec())],
                };
                params.finish(&inp.spec.name(), &[])?;
                Prepared::Urls(UrlList { urls, ssl: false })
            }
            Spec::Ssl => {
                let size = match params.take("size") {
                    Some(v) => Some(weft_core::units::parse_size(&v).map_err(|e| format!("--param size: {e}"))?),
                    None => None,
                };
                params.finish("ssl-emulation", &["size"])?;
                let urls = match (&inp.url_list, size) {
                    (Some(list), _) => list.clone(),
                    (None, Some(n)) => {
                        let mut p = Vec::new();
                        urls::push_size_path(&mut p, n, urls::CacheFlag::NoStore);
                        p.extend_from_slice(b"/ssl");
                        vec![(0, p)]
                    }
                    (None, None) => vec![(0, single(1024, inp.base_path))],
                };
                Prepared::Urls(UrlList { urls, ssl: true })
            }
            Spec::SpecWeb99 => Prepared::SpecWeb99(specweb99::SpecWeb99::from_params(&mut params)?),
            Spec::Surge => Prepared::Surge(surge::SurgeSet::from_params(&mut params, inp.seed)?),
            Spec::Polymix => Prepared::Polymix(polymix::PolymixConfig::from_params(&mut params, inp.authorities)?),
            Spec::Trace(file) => Prepared::Trace(trace::Replay::from_params(&mut params, file.clone())?),
        };
        Ok(w)
    }

    /// How this workload drives the engine.
    pub fn drive(&self) -> Drive {
        match self {
            Prepared::Polymix(c) => Drive::Requests {
                timed: c.phases.is_some(),
            },
            Prepared::Trace(t) if t.timed() => Drive::Requests { timed: true },
            _ => Drive::Sessions,
        }
    }
}

/// One thread's workload: the shared data, a cursor and state.
pub enum Workload {
    /// URL list.
    Urls {
        /// Shared list.
        list: Arc<Prepared>,
        /// Next index.
        next: usize,
    },
    /// SPECweb99.
    SpecWeb99(Arc<Prepared>),
    /// SURGE.
    Surge(surge::SurgeThread),
    /// PolyMix-4.
    Polymix(Box<polymix::Polymix>),
    /// Trace replay.
    Trace(trace::ReplayThread),
}

impl Workload {
    /// This thread's view of a prepared workload.
    pub fn for_thread(p: &Arc<Prepared>, thread: usize, threads: usize, rate: f64) -> Workload {
        match &**p {
            Prepared::Urls(_) => Workload::Urls {
                list: p.clone(),
                next: thread,
            },
            Prepared::SpecWeb99(_) => Workload::SpecWeb99(p.clone()),
            Prepared::Surge(_) => Workload::Surge(surge::SurgeThread::new(p.clone(), thread, threads)),
            Prepared::Polymix(c) => {
                Workload::Polymix(Box::new(polymix::Polymix::new(c.clone(), thread, threads, rate)))
            }
            Prepared::Trace(_) => Workload::Trace(trace::ReplayThread::new(p.clone(), thread, threads)),
        }
    }

    /// Start a session.
    pub fn new_session(&mut self, rng: &mut SmallRng) -> SessionInit {
        match self {
            Workload::Urls { list, .. } => {
                let ssl = matches!(&**list, Prepared::Urls(UrlList { ssl: true, .. }));
                SessionInit {
                    calls: 0,
                    persist: true,
                    ssl: ssl.then(|| {
                        if rng.gen::<f64>() < crate::ssl::ABBREVIATED_SHARE {
                            Handshake::Abbreviated
                        } else {
                            Handshake::Full
                        }
                    }),
                }
            }
            Workload::SpecWeb99(_) => {
                let calls = specweb99::session_length(rng);
                SessionInit {
                    calls,
                    persist: calls > 1,
                    ssl: None,
                }
            }
            Workload::Surge(_) | Workload::Trace(_) => SessionInit {
                calls: u32::MAX,
                persist: true,
                ssl: None,
            },
            Workload::Polymix(_) => SessionInit {
                calls: 1,
                persist: true,
                ssl: None,
            },
        }
    }

    /// Write the session's next request.
    pub fn next_request(&mut self, cur: &mut Cursor, rng: &mut SmallRng, out: &mut Out<'_>) -> Next {
        cur.n += 1;
        match self {
            Workload::Urls { list, next } => {
                let Prepared::Urls(l) = &**list else { unreachable!() };
                let (auth, path) = &l.urls[*next % l.urls.len()];
                *next = next.wrapping_add(1);
                Next::Request(out.request(Method::Get, *auth, path, b"", b"", 0), Duration::ZERO)
            }
            Workload::SpecWeb99(p) => {
                let Prepared::SpecWeb99(s) = &**p else { unreachable!() };
                let mut path = [0u8; 64];
                let n = s.pick_path(rng, &mut path);
                Next::Request(out.request(Method::Get, 0, &path[..n], b"", b"", 0), Duration::ZERO)
            }
            Workload::Surge(s) => s.next_request(cur, rng, out),
            Workload::Trace(t) => t.next_request(out),
            Workload::Polymix(_) => Next::Exhausted,
        }
    }

    /// Agents of a request-driven workload.
    pub fn agents(&self) -> usize {
        match self {
            Workload::Polymix(p) => p.robots(),
            Workload::Trace(t) => t.agents(),
            _ => 0,
        }
    }

    /// Most connections an agent keeps open.
    pub fn conns_per_agent(&self) -> usize {
        match self {
            Workload::Polymix(p) => p.conns_per_robot(),
            Workload::Trace(t) => t.conns_per_host(),
            _ => 1,
        }
    }

    /// Requests a new agent connection may carry before the client closes it.
    pub fn conn_use_limit(&mut self, rng: &mut SmallRng) -> u32 {
        match self {
            Workload::Polymix(p) => p.conn_use_limit(rng),
            _ => u32::MAX,
        }
    }

    /// The next request arrival (request-driven workloads).
    pub fn next_arrival(&mut self, rng: &mut SmallRng) -> Option<Arrival> {
        match self {
            Workload::Polymix(p) => p.next_arrival(rng),
            Workload::Trace(t) => t.next_arrival(),
            _ => None,
        }
    }

    /// Write the request for an agent's item.
    pub fn render_item(&mut self, item: u64, rng: &mut SmallRng, out: &mut Out<'_>) -> ReqMeta {
        match self {
            Workload::Polymix(p) => p.render(item, rng, out),
            Workload::Trace(t) => t.render(item, out),
            _ => unreachable!("only request-driven workloads have items"),
        }
    }

    /// A reply completed for an agent: follow-up items (embedded objects) go to `queue`.
    pub fn on_reply(&mut self, meta: &ReqMeta, status: u16, queue: &mut Vec<u64>) {
        if let Workload::Polymix(p) = self {
            p.on_reply(meta, status, queue);
        }
    }

    /// Share of transactions the client aborts on purpose after the reply head.
    pub fn abort_prob(&self) -> f64 {
        match self {
            Workload::Polymix(p) => p.abort_prob(),
            _ => 0.0,
        }
    }

    /// The workload ran out (traces without `loop=1`).
    pub fn exhausted(&self) -> bool {
        match self {
            Workload::Trace(t) => t.exhausted(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_params() {
        assert_eq!(Spec::parse("file:8KiB").unwrap(), Spec::File(8192));
        assert_eq!(Spec::parse("trace:/x.log").unwrap(), Spec::Trace(Some("/x.log".into())));
        assert!(Spec::parse("file:big").is_err());
        assert!(Spec::parse("trace:").is_err());
        let e = Spec::parse("webstone").unwrap_err();
        assert!(e.contains("specweb99"), "{e}");
        let mut p = Params::parse(&["dirs=3".into(), "x=1".into()]).unwrap();
        assert_eq!(p.u64("dirs", 10, 1..=100).unwrap(), 3);
        let e = p.finish("specweb99", &["dirs"]).unwrap_err();
        assert!(e.contains("unknown --param `x`"), "{e}");
        assert!(Params::parse(&["novalue".into()]).is_err());
        let mut p = Params::parse(&["dirs=0".into()]).unwrap();
        assert!(p.u64("dirs", 10, 1..=100).is_err());
    }
}
