//! `weft front`: a cluster front-end that places every request on a
//! back-end with weft-policy's strategies (WRR, LB, LARD, LARD/R, bounded-load
//! consistent hashing; thesis 004, chapter 3) and relays it there over the
//! proxy's machinery: the same worker, client side, upstream pool and splice
//! relay as `weft proxy` in reverse mode, with the cache off and the upstream
//! chosen per request by the dispatcher instead of by the Host route.
//!
//! - [`Front`]: the one decision state of the process — a `Mutex` around
//!   weft-policy's [`Dispatcher`] (loads, health, target map, admission limit
//!   S and its FIFO queue), held only for the decision itself — plus the
//!   per-back-end counters and the workers' mailboxes for queued requests
//!   admitted later;
//! - `place`: the worker's hooks (place a request, release its load when its
//!   response completes or fails, passive health, retry on another back-end);
//! - `handoff`: `--mode handoff`, the client's connection handed to the
//!   back-end over a Unix socket (SCM_RIGHTS) instead of relayed;
//! - `health`: the active checker thread (interval, timeout, rise/fall);
//! - `admin`: `/stats` (JSON) and `/metrics` (Prometheus) of the front-end;
//! - [`FrontServer`]: the running role (the proxy's workers + checker + admin).

mod admin;
mod handoff;
mod health;
mod place;

pub use health::HealthConfig;
pub use weft_policy::distribution::{DispatcherConfig, Policy};

use crate::config::{HostPort, ProxyConfig};
use crate::{Proxy, ProxyStats};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use weft_io::handoff::NextRule;
use weft_io::{Mailboxes, Token};
use weft_policy::distribution::{Dispatcher, Placement, Request, ServerId};

/// How requests reach the back-ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// The front-end forwards each request over a pooled back-end connection
    /// and relays the response (splice for bodies).
    #[default]
    Relay,
    /// The front-end hands the client's connection, with the bytes it read,
    /// to the back-end (`weft serve --handoff-socket`, same host), which
    /// answers the client directly.
    Handoff,
    /// `weft front --mode booster` (issue 26): clients terminated, requests
    /// multiplexed over a few persistent pipelined connections per origin
    /// ([`crate::booster`], run by `BoosterServer`).
    Booster,
}

weft_core::enum_names!(Mode, error = "unknown mode `{s}` (expected relay, handoff or booster)", {
    Relay => "relay",
    Handoff => "handoff",
    Booster => "booster",
});

/// One back-end: where it listens and its weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendSpec {
    /// Its HTTP address.
    pub addr: SocketAddr,
    /// Its weight (≥ 1) for WRR and consistent hashing.
    pub weight: u32,
}

impl std::str::FromStr for BackendSpec {
    type Err = String;
    /// `ADDR:PORT` or `ADDR:PORT=WEIGHT`.
    fn from_str(s: &str) -> Result<BackendSpec, String> {
        let (a, w) = match s.rsplit_once('=') {
            Some((a, w)) => {
                let w: u32 = w
                    .trim()
                    .parse()
                    .ok()
                    .filter(|&w| w > 0)
                    .ok_or_else(|| format!("invalid weight in back-end `{s}` (a whole number above 0)"))?;
                (a, w)
            }
            None => (s, 1),
        };
        let addr = a
            .trim()
            .parse()
            .map_err(|_| format!("invalid back-end `{s}` (expected IP:PORT or IP:PORT=WEIGHT)"))?;
        Ok(BackendSpec { addr, weight: w })
    }
}

/// Everything `weft front` adds to the proxy's settings.
#[derive(Clone, Debug)]
pub struct FrontConfig {
    /// The back-ends, in order (their index is their id in the policy).
    pub backends: Vec<BackendSpec>,
    /// The strategy.
    pub policy: Policy,
    /// How requests reach the back-ends.
    pub mode: Mode,
    /// `--mode handoff`: each back-end's handoff socket (`--handoff PATH`,
    /// in the order of the back-ends; their addresses stay for the health
    /// checks).
    pub handoff: Vec<String>,
    /// Handoff mode: what the back-end does with a connection's later
    /// requests (`--handoff-next keep|return|owner|close`).
    pub handoff_next: NextRule,
    /// Admission limit S's thresholds and the queue bound.
    pub dispatch: DispatcherConfig,
    /// Active health checks.
    pub health: HealthConfig,
    /// The front-end's admin endpoint (`/stats`, `/metrics`).
    pub admin: Option<SocketAddr>,
    /// `--mode booster`: the sites and the booster's settings.
    pub booster: Option<crate::booster::BoosterConfig>,
}

impl Default for FrontConfig {
    fn default() -> Self {
        FrontConfig {
            backends: Vec::new(),
            policy: Policy::LardR(Default::default()),
            mode: Mode::Relay,
            handoff: Vec::new(),
            handoff_next: NextRule::Keep,
            dispatch: DispatcherConfig::default(),
            health: HealthConfig::default(),
            admin: None,
            booster: None,
        }
    }
}

/// A queued request's identity: which worker, which client.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ticket {
    worker: usize,
    token: Token,
    /// Its target (the owner table records where it went).
    target: u64,
}

/// A queued request let in (or refused: `server` None) by another placement's end.
pub(crate) struct Admitted {
    token: Token,
    server: Option<ServerId>,
}

/// One back-end's state outside the dispatcher (read by the admin thread).
struct Backend {
    spec: BackendSpec,
    up: AtomicBool,
    requests: AtomicU64,
    bytes: AtomicU64,
    failures: AtomicU64,
    checks_failed: AtomicU64,
}

/// Process-wide counters of the decision state.
#[derive(Default)]
struct Counters {
    decisions: AtomicU64,
    decision_ns: AtomicU64,
    queued: AtomicU64,
    rejected: AtomicU64,
    retries: AtomicU64,
    handoffs: AtomicU64,
    handed_back: AtomicU64,
}

/// The front-end's one decision state, shared by every worker.
pub struct Front {
    backends: Vec<Backend>,
    policy: Policy,
    mode: Mode,
    handoff: Vec<String>,
    handoff_next: NextRule,
    /// `--handoff-next owner`: the target map the back-ends read (the
    /// last placement of each target), shared memory.
    owners: Option<weft_io::sys::SharedWords>,
    dispatcher: Mutex<Dispatcher<Ticket>>,
    admitted: Mailboxes<Admitted>,
    counters: Counters,
    origin: Instant,
    /// `--mode booster`: the sites and their state.
    booster: Option<Arc<crate::booster::Booster>>,
}

impl fmt::Debug for Front {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Front")
            .field("backends", &self.backends.iter().map(|b| b.spec).collect::<Vec<_>>())
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Front {
    /// The state for `cfg`'s back-ends, with a mailbox per worker.
    pub fn new(cfg: &FrontConfig, workers: usize) -> io::Result<Front> {
        let weights: Vec<u32> = cfg.backends.iter().map(|b| b.weight).collect();
        let strategy = cfg.policy.build(&weights);
        Ok(Front {
            backends: cfg
                .backends
                .iter()
                .map(|&spec| Backend {
                    spec,
                    up: AtomicBool::new(true),
                    requests: AtomicU64::new(0),
                    bytes: AtomicU64::new(0),
                    failures: AtomicU64::new(0),
                    checks_failed: AtomicU64::new(0),
                })
                .collect(),
            policy: cfg.policy,
            mode: cfg.mode,
            handoff: cfg.handoff.clone(),
            handoff_next: cfg.handoff_next,
            owners: match (cfg.mode, cfg.handoff_next) {
                (Mode::Handoff, NextRule::Owner) => Some(weft_io::sys::SharedWords::create(
                    c"weft-front-owners",
                    weft_io::handoff::OWNER_SLOTS,
                )?),
                _ => None,
            },
            dispatcher: Mutex::new(Dispatcher::new(strategy, &weights, cfg.dispatch)),
            admitted: Mailboxes::new(workers)?,
            counters: Counters::default(),
            origin: Instant::now(),
            booster: None,
        })
    }

    /// `--mode booster`: requests are placed by `b` (not the dispatcher).
    pub fn with_booster(mut self, b: Arc<crate::booster::Booster>) -> Front {
        self.booster = Some(b);
        self
    }

    /// The booster, in `--mode booster`.
    pub(crate) fn booster(&self) -> Option<&crate::booster::Booster> {
        self.booster.as_deref()
    }

    fn lock(&self) -> MutexGuard<'_, Dispatcher<Ticket>> {
        self.dispatcher.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    /// The back-end at `addr` (n is small: a scan beats a map).
    pub(crate) fn index_of(&self, addr: &SocketAddr) -> Option<ServerId> {
        self.backends.iter().position(|b| b.spec.addr == *addr)
    }

    /// The address of back-end `s`.
    pub(crate) fn addr(&self, s: ServerId) -> SocketAddr {
        self.backends[s].spec.addr
    }

    /// The eventfd worker `i` watches for admitted requests.
    pub(crate) fn waker(&self, worker: usize) -> std::os::fd::RawFd {
        self.admitted.waker(worker)
    }

    /// Move worker `i`'s admitted requests into `out`.
    pub(crate) fn take_admitted(&self, worker: usize, out: &mut Vec<Admitted>) {
        self.admitted.take(worker, out);
    }

    /// Place one request for `target` from client `token` of `worker`. The
    /// lock is held for the strategy's decision and the load update only;
    /// the time from asking for the lock to releasing it is counted.
    pub(crate) fn place(&self, worker: usize, token: Token, target: u64) -> Placement {
        let start = Instant::now();
        let now = self.now();
        let p = self
            .lock()
            .place(Ticket { worker, token, target }, Request::new(target), now);
        let spent = start.elapsed().as_nanos() as u64;
        self.counters.decisions.fetch_add(1, Ordering::Relaxed);
        self.counters.decision_ns.fetch_add(spent, Ordering::Relaxed);
        match p {
            Placement::Assigned(s) => {
                self.backends[s].requests.fetch_add(1, Ordering::Relaxed);
                self.record_owner(target, s);
            }
            Placement::Queued => {
                self.counters.queued.fetch_add(1, Ordering::Relaxed);
            }
            Placement::Rejected(_) => {
                self.counters.rejected.fetch_add(1, Ordering::Relaxed);
            }
        }
        p
    }

    /// The request placed on `s` is done (answered, failed or abandoned):
    /// its load goes, and requests waiting for admission go out.
    pub(crate) fn finished(&self, s: ServerId) {
        let now = self.now();
        let mut d = self.lock();
        d.finished(s, now);
        self.admit(&mut d, now);
    }

    /// `k` connections handed to `s` are done (reported closed, or their
    /// channel ended): one lock for all of them.
    pub(crate) fn finished_n(&self, s: ServerId, k: u64) {
        if k == 0 {
            return;
        }
        let now = self.now();
        let mut d = self.lock();
        for _ in 0..k {
            d.finished(s, now);
        }
        self.admit(&mut d, now);
    }

    /// In handoff mode?
    pub(crate) fn hands_off(&self) -> bool {
        self.mode == Mode::Handoff
    }

    /// What back-ends do with a handed connection's later requests.
    pub(crate) fn next_rule(&self) -> NextRule {
        self.handoff_next
    }

    /// `--handoff-next owner`: the owner table to share with the back-ends.
    pub(crate) fn owner_table(&self) -> Option<&weft_io::sys::SharedWords> {
        self.owners.as_ref()
    }

    /// `target` was placed on `s`: the back-ends' view of the map follows.
    fn record_owner(&self, target: u64, s: ServerId) {
        if let Some(t) = &self.owners {
            weft_io::handoff::OwnerMap(t.words()).record(target, s as u64);
        }
    }

    /// A handed connection came back for its next request's placement.
    pub(crate) fn count_handed_back(&self) {
        self.counters.handed_back.fetch_add(1, Ordering::Relaxed);
    }

    /// Back-end `s`'s handoff socket.
    pub(crate) fn handoff_path(&self, s: ServerId) -> Option<&str> {
        self.handoff.get(s).map(String::as_str)
    }

    /// A connection was handed over.
    pub(crate) fn count_handoff(&self) {
        self.counters.handoffs.fetch_add(1, Ordering::Relaxed);
    }

    /// Hand queued requests the limit now lets in to their workers.
    fn admit(&self, d: &mut Dispatcher<Ticket>, now: u64) {
        while let Some((t, s)) = d.next_queued(now) {
            self.backends[s].requests.fetch_add(1, Ordering::Relaxed);
            self.record_owner(t.target, s);
            self.admitted.post(
                t.worker,
                Admitted {
                    token: t.token,
                    server: Some(s),
                },
            );
        }
    }

    /// Record response bytes relayed from `s`.
    pub(crate) fn add_bytes(&self, s: ServerId, n: u64) {
        self.backends[s].bytes.fetch_add(n, Ordering::Relaxed);
    }

    /// A request was sent again to another back-end.
    pub(crate) fn count_retry(&self) {
        self.counters.retries.fetch_add(1, Ordering::Relaxed);
    }

    /// Passive health: connecting to `s` failed, or it dropped a request
    /// before answering. It leaves the policy's map until the active checks
    /// see it healthy again.
    pub(crate) fn failed(&self, s: ServerId) {
        self.backends[s].failures.fetch_add(1, Ordering::Relaxed);
        if self.backends[s].up.load(Ordering::Relaxed) {
            weft_core::warn!("back-end {} failed: marked down", self.backends[s].spec.addr);
            self.set_up(s, false);
        }
    }

    /// Is `s` up?
    pub fn is_up(&self, s: ServerId) -> bool {
        self.backends[s].up.load(Ordering::Relaxed)
    }

    /// Health: `s` is up or down. When none is left up, the waiting
    /// requests are refused (503); when one returns, S grows and waiting
    /// requests may go.
    pub(crate) fn set_up(&self, s: ServerId, up: bool) {
        let now = self.now();
        let mut d = self.lock();
        self.backends[s].up.store(up, Ordering::Relaxed);
        d.set_up(s, up, now);
        if d.backends().up_count() == 0 {
            for t in d.drain_queue() {
                self.admitted.post(
                    t.worker,
                    Admitted {
                        token: t.token,
                        server: None,
                    },
                );
            }
        } else {
            self.admit(&mut d, now);
        }
    }
}

/// A running `weft front`: the proxy's workers in front-end mode, the
/// health checker and the admin endpoint.
pub struct FrontServer {
    proxy: Proxy,
    front: Arc<Front>,
    /// None in booster mode (the origins report their load instead).
    health: Option<health::Checker>,
    admin_addr: Option<SocketAddr>,
}

impl FrontServer {
    /// Start: `proxy` gives the listener, workers, timeouts and pool; its
    /// cache is turned off and its upstream is chosen per request.
    pub fn start((front_cfg, mut proxy): (FrontConfig, ProxyConfig)) -> io::Result<FrontServer> {
        let Some(first) = front_cfg.backends.first() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no back-end (--backend ADDR)",
            ));
        };
        check_handoff(&front_cfg)?;
        let workers = proxy.workers.max(1);
        let mut front = Front::new(&front_cfg, workers)?;
        if let Some(b) = &front_cfg.booster {
            front = front.with_booster(Arc::new(crate::booster::Booster::new(b.clone(), workers)));
            crate::booster::tune_proxy(&mut proxy);
        }
        let front = Arc::new(front);
        // Reverse mode routes every request; the address is replaced by the
        // dispatcher's choice before connecting.
        proxy.upstream = Some(HostPort {
            host: first.addr.ip().to_string(),
            port: first.addr.port(),
        });
        proxy.routes.clear();
        proxy.cache_size = 0;
        proxy.cache_dir = None;
        proxy.admin = None;
        proxy.front = Some(front.clone());
        let proxy = Proxy::start(proxy)?;
        let (health, admin_addr) =
            match &front.booster {
                // The load monitor and the booster's /stats.
                Some(b) => (None, crate::booster::start(b, front_cfg.admin, &proxy)?),
                None => (
                    Some(health::Checker::start(front.clone(), front_cfg.health.clone())?),
                    match front_cfg.admin {
                        Some(a) => Some(admin::start(a, front.clone(), proxy.slots()).map_err(|e| {
                            io::Error::new(e.kind(), format!("cannot listen on admin address {a}: {e}"))
                        })?),
                        None => None,
                    },
                ),
            };
        Ok(FrontServer {
            proxy,
            front,
            health,
            admin_addr,
        })
    }

    /// Its addresses (the admin endpoint its own) and stop switch.
    pub fn bound(&self) -> weft_io::Bound {
        let admin = self.admin_addr;
        weft_io::Bound {
            admin,
            ..self.proxy.bound()
        }
    }

    /// Wait for the workers; the proxy's counters and the front-end's JSON.
    pub fn wait(self) -> io::Result<(ProxyStats, String)> {
        let r = self.proxy.wait();
        if let Some(h) = self.health {
            h.stop();
        }
        let (stats, _) = r?;
        let doc = match &self.front.booster {
            Some(b) => b.document(&stats),
            None => admin::render_json(&self.front),
        };
        Ok((stats, doc))
    }
}

/// Handoff mode needs one handoff socket per back-end; relay mode none.
fn check_handoff(cfg: &FrontConfig) -> io::Result<()> {
    let bad = |m: String| Err(io::Error::new(io::ErrorKind::InvalidInput, m));
    match cfg.mode {
        Mode::Handoff if cfg.handoff.len() != cfg.backends.len() => bad(format!(
            "--mode handoff needs one --handoff PATH per --backend, in the same order ({} back-ends, {} paths)",
            cfg.backends.len(),
            cfg.handoff.len()
        )),
        Mode::Handoff if cfg.backends.len() > handoff::MAX_BACKENDS => bad(format!(
            "handoff mode takes at most {} back-ends",
            handoff::MAX_BACKENDS
        )),
        Mode::Relay if !cfg.handoff.is_empty() => bad("--handoff PATH is for --mode handoff".into()),
        _ => Ok(()),
    }
}

pub(crate) use handoff::{channel_of, Channels};
pub(crate) use place::{count_bytes, release};

#[cfg(test)]
mod tests {
    use super::*;

    fn two_backends(queue_limit: usize) -> Front {
        let cfg = FrontConfig {
            backends: vec!["127.0.0.1:1".parse().unwrap(), "127.0.0.1:2=2".parse().unwrap()],
            policy: Policy::Wrr,
            dispatch: DispatcherConfig {
                t_low: 1,
                t_high: 1,
                queue_limit,
                admission: true,
            },
            ..FrontConfig::default()
        };
        Front::new(&cfg, 2).unwrap()
    }

    /// [`two_backends`] with its one admission slot held by token 1 (placed
    /// by worker 0) and token 2 waiting (placed by worker `waiter`): the
    /// front and the holder's back-end.
    fn one_held_one_waiting(queue_limit: usize, waiter: usize) -> (Front, ServerId) {
        let f = two_backends(queue_limit);
        let Placement::Assigned(s) = f.place(0, Token::new(1, 0), 7) else {
            panic!("the first request is assigned")
        };
        assert_eq!(f.place(waiter, Token::new(2, 0), 8), Placement::Queued);
        (f, s)
    }

    #[test]
    fn backends_parse_with_weights() {
        let b: BackendSpec = "10.0.0.1:80=3".parse().unwrap();
        assert_eq!((b.addr.port(), b.weight), (80, 3));
        assert_eq!("10.0.0.1:80".parse::<BackendSpec>().unwrap().weight, 1);
        assert!("10.0.0.1:80=0".parse::<BackendSpec>().is_err());
        assert!("host:80".parse::<BackendSpec>().is_err());
        assert_eq!("handoff".parse::<Mode>().unwrap(), Mode::Handoff);
        let mut cfg = FrontConfig {
            backends: vec!["127.0.0.1:1".parse().unwrap()],
            mode: Mode::Handoff,
            ..FrontConfig::default()
        };
        assert!(check_handoff(&cfg).is_err(), "a path per back-end");
        cfg.handoff.push("/run/b.sock".into());
        assert!(check_handoff(&cfg).is_ok());
        cfg.mode = Mode::Relay;
        assert!(check_handoff(&cfg).is_err(), "paths only in handoff mode");
    }

    #[test]
    fn waiting_requests_are_admitted_through_their_workers_mailbox() {
        // S = (2-1)*1 + 1 - 1 = 1; one may wait.
        let (f, s) = one_held_one_waiting(1, 1);
        let t = |i| Token::new(i, 0);
        assert!(matches!(f.place(0, t(3), 9), Placement::Rejected(_)));
        f.finished(s);
        let mut got = Vec::new();
        f.take_admitted(0, &mut got);
        assert!(got.is_empty(), "worker 0 has nothing waiting");
        f.take_admitted(1, &mut got);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].token, t(2));
        let s2 = got[0].server.expect("a back-end");
        let json = admin::render_json(&f);
        assert!(
            json.contains("\"in_flight\":1,\"admission_limit\":1,\"queue_len\":0"),
            "{json}"
        );
        // Every back-end down: what waits is refused.
        assert_eq!(f.place(0, t(4), 10), Placement::Queued);
        f.failed(0);
        f.set_up(1, false);
        got.clear();
        f.take_admitted(0, &mut got);
        assert_eq!((got.len(), got[0].server), (1, None));
        f.finished(s2);
        // The proxy engine's families under the role's name, beside the
        // decision state's and the back-ends'.
        let slots: Vec<crate::stats::Slot> = (0..2).map(|_| Default::default()).collect();
        let mut engine = crate::ProxyStats {
            requests: 3,
            bytes_spliced: 4096,
            ..Default::default()
        };
        engine.status.count(200);
        engine.syscalls.0[weft_io::SysKind::Splice as usize] = 2;
        slots[1].publish(&engine);
        let mut lat = weft_core::metrics::Latency::new();
        lat.record_us(800);
        slots[1].latency.flush(&mut lat);
        let text = admin::render_prometheus(&f, &slots);
        for want in [
            "weft_front_backend_up{worker=\"1\"} 0\n",
            "\nweft_front_requests_total{worker=\"1\"} 3\nweft_front_requests_total 3\n",
            "\nweft_front_status_total{class=\"2xx\"} 1\n",
            "\nweft_front_bytes_spliced_total 4096\n",
            "\nweft_front_syscalls_total{kind=\"splice\"} 2\n",
            "# TYPE weft_front_response_seconds histogram\n",
            "\nweft_front_response_seconds_count 1\n",
            "\nweft_front_decisions_total ",
        ] {
            assert!(text.contains(want), "{want} not in {text}");
        }
        // The status page's request rate reads the first unlabelled
        // `_requests_total`: the engine's.
        let first = text
            .lines()
            .find(|l| !l.starts_with('#') && l.contains("_requests_total ") && !l.contains('{'))
            .unwrap();
        assert_eq!(first, "weft_front_requests_total 3");
    }

    #[test]
    fn handed_connections_finish_in_batches_and_admit_waiting_ones() {
        // S = 1: one handed connection holds it; the next waits.
        let (f, s) = one_held_one_waiting(4, 0);
        let t = |i| Token::new(i, 0);
        f.finished_n(s, 0);
        let mut got = Vec::new();
        f.take_admitted(0, &mut got);
        assert!(got.is_empty(), "nothing finished yet");
        // The back-end's report (or its channel's end) finishes it once.
        f.finished_n(s, 1);
        f.take_admitted(0, &mut got);
        assert_eq!((got.len(), got[0].token), (1, t(2)));
        let s2 = got[0].server.unwrap();
        f.finished_n(s2, 1);
        assert!(admin::render_json(&f).contains("\"in_flight\":0"));
    }
}
