//! weft-proxy: the caching forward and reverse HTTP/1.1 proxy behind
//! `weft proxy`, with kernel data-stream splicing (papers 000 §3 and 001).
//!
//! The control path — request and response heads, cache decisions, the
//! connection pool — runs in user space; the data path of misses,
//! uncacheable responses and CONNECT tunnels runs in the kernel with
//! splice(2), and cacheable responses are tee'd so the cache still fills
//! (KeepCopy). Cache hits are written from shared buffers with writev.
//!
//! - [`config`]: [`ProxyConfig`], the validated settings;
//! - [`worker`]: one event loop: its state, events, timers, draining;
//! - `client`: the client side (accept, the one socket read, linger, reject);
//! - `request`: a request routed, answered from the cache, or forwarded;
//! - `txn`: a transaction's state machine (connect, exchange, body, tunnel);
//! - `upstream`: the upstream pool, connecting, retrying, response heads;
//! - `response`: a response head's cache decisions, framing and body path;
//! - `hit`: answering from a stored response (conditionals, ranges);
//! - `relay`, `tunnel`: body transfers (copy, splice, tee) and CONNECT tunnels;
//! - `cache`: the two tiers behind one facade (order and locking);
//! - [`store`]: the memory cache (weft-buf aggregates, LRU or GDS);
//! - [`disk`]: the disk tier under it (`--cache-dir`), kept across restarts;
//! - `headers`: forwarded and relayed heads, Via, cache keys;
//! - [`resolve`]: host names resolved on helper threads, cached with a TTL;
//! - helper threads post results through `weft_io::mailbox`;
//! - [`acl`]: which clients may use the proxy;
//! - [`stats`]: counters (`--stats-on-exit`, `--admin`).

#![forbid(unsafe_code)]

pub mod accesslog;
pub mod acl;
mod background;
pub mod booster;
mod cache;
mod cache_status;
mod client;
pub mod config;
mod conn;
pub mod disk;
mod fill;
pub mod front;
mod headers;
mod hit;
mod purge;
mod relay;
mod request;
pub mod resolve;
mod response;
mod sockmap;
pub mod stats;
pub mod store;
mod tunnel;
mod txn;
mod upstream;
pub mod worker;

pub use config::{CachePolicy, ProxyConfig, SpliceMode};
pub use stats::ProxyStats;

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use weft_io::sys::{self, Fd};
use weft_io::{Bound, GroupStats, PipeBudget, PipePool, WorkerGroup, WorkerSeat};

/// Idle pipes kept per worker (HAProxy keeps a similar per-thread cache).
const IDLE_PIPES: usize = 64;

/// A running proxy: its address, its shutdown switch, and its workers.
pub struct Proxy {
    addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    resolver: resolve::Resolver,
    workers: WorkerGroup<ProxyStats>,
    store: Option<Arc<Mutex<store::Store>>>,
    disk: Option<Arc<disk::DiskStore>>,
    /// The workers' live counters (the booster's `/stats` sums them).
    slots: Arc<Vec<stats::Slot>>,
}

/// Options every accepted client socket inherits from its listener, so they
/// cost nothing per connection: TCP_NODELAY, and TCP_NOTSENT_LOWAT.
///
/// Without a bound on unsent bytes, a relay pours every body byte it can read
/// into the client socket (whose buffer autotunes to megabytes), and the queue
/// of a transfer lives there: with a pacing congestion control (BBR, the
/// default on weft's machines) the kernel then releases it segment by segment
/// from a pacing hrtimer in the proxy's context — most of the proxy's CPU on a
/// 1 MiB miss. Bounded, the socket takes a segment or two at a time, the pipe
/// fills, the proxy stops reading, and the body waits in the upstream socket
/// until the client drains: the flow control HAProxy gets from reading one
/// pipe per wake-up.
///
/// The bound is not inherited from the listener: the worker sets it on a
/// client socket when it first relays an upstream body or tunnel to it and
/// lifts it for large cache hits (`client::set_notsent_lowat`), which write
/// an object already in memory and would only be cut into small writes.
/// Here we check once that the kernel takes the option.
fn tune_listener(fd: &Fd, cfg: &ProxyConfig) {
    let _ = sys::set_nodelay(fd, true);
    if cfg.notsent_lowat > 0 {
        let probe = sys::set_notsent_lowat(fd, cfg.notsent_lowat).and_then(|()| sys::set_notsent_lowat(fd, 0));
        if let Err(e) = probe {
            weft_core::warn!("TCP_NOTSENT_LOWAT not available: {e}");
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or_else(|| "weft".to_string())
}

impl Proxy {
    /// Bind, spawn the workers and return at once.
    pub fn start(cfg: ProxyConfig) -> io::Result<Proxy> {
        let nofile = sys::raise_nofile_limit().unwrap_or(1024);
        weft_core::debug!("descriptor limit {nofile}");
        let workers = cfg.workers.max(1);
        let share = weft_io::workers::PortShare::from_reuse_port(cfg.reuse_port);
        let (listeners, addr) = weft_io::workers::bind_listeners(cfg.listen, workers, cfg.backlog, share)?;
        for l in &listeners {
            tune_listener(l, &cfg);
        }
        let rules = store::cache_rules(&cfg).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let resolver = resolve::Resolver::start(workers, cfg.resolver_threads)?;
        let store = (cfg.cache_size > 0).then(|| {
            Arc::new(Mutex::new(store::Store::new(
                cfg.cache_size,
                cfg.max_object_size,
                cfg.cache_policy,
            )))
        });
        // Collapsed forwarding (fill.rs): with a cache, unless switched off.
        let fills = match (&store, cfg.collapse) {
            (Some(_), true) => Some(Arc::new(fill::Fills::new(workers)?)),
            _ => None,
        };
        // Range misses fill the cache (background.rs): with a cache, unless switched off.
        let range_fills = (store.is_some() && cfg.range_fill).then(Arc::default);
        let disk = match (&cfg.cache_dir, &store) {
            (None, _) => None,
            (Some(_), None) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "cache-dir: the disk store needs the memory cache (cache-size above 0)",
                ))
            }
            (Some(dir), Some(store)) => {
                let d = disk::DiskStore::open(
                    disk::DiskConfig {
                        dir: dir.clone(),
                        cap: cfg.cache_dir_size,
                        max_object: cfg.max_object_size,
                        rules,
                    },
                    workers,
                    store.clone(),
                )?;
                Some(Arc::new(d))
            }
        };
        let budget = PipeBudget::new(cfg.max_pipes, cfg.pipe_size);
        let slots: Arc<Vec<stats::Slot>> = Arc::new((0..workers).map(|_| stats::Slot::default()).collect());
        let admin_addr = match cfg.admin {
            Some(a) => {
                let slots = slots.clone();
                let store = store.clone();
                let disk = disk.clone();
                let backend = cfg.event.name();
                let prom = slots.clone();
                let slots_settle = slots.clone();
                // POST /purge/URL and /purge-prefix/URL (`purge.rs`).
                let control = store.clone().map(|s| purge::control(s, disk.clone()));
                let render = Arc::new(move || render_stats(backend, &slots, store.as_deref(), disk.as_deref()));
                let pages = weft_io::admin::Pages {
                    stats: render,
                    metrics: Some(Arc::new(move || stats::render_prometheus(&prom))),
                    control,
                    settle: Some(stats::settle_pages(slots_settle)),
                };
                Some(
                    weft_io::admin::serve(a, pages)
                        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on admin address {a}: {e}")))?,
                )
            }
            None => None,
        };
        let via_name = cfg
            .via_name
            .clone()
            .unwrap_or_else(|| format!("{}:{}", hostname(), addr.port()));
        let log = match &cfg.access_log {
            Some(p) => Some(
                weft_io::logfile::LogFile::open(p)
                    .map_err(|e| io::Error::new(e.kind(), format!("cannot open access log {}: {e}", p.display())))?,
            ),
            None => None,
        };
        let shared = Arc::new(WorkerShared {
            log,
            cfg,
            store: store.clone(),
            disk: disk.clone(),
            fills,
            range_fills,
            resolver: resolver.clone(),
            via_name,
            budget,
            slots: slots.clone(),
        });
        let workers = WorkerGroup::start("weft-proxy", listeners, move |seat| run_worker(&shared, seat))?;
        Ok(Proxy {
            addr,
            admin_addr,
            resolver,
            workers,
            store,
            disk,
            slots,
        })
    }

    /// The workers' live counters, summed.
    pub fn live_totals(slots: &[stats::Slot]) -> ProxyStats {
        let mut total = ProxyStats::default();
        for s in slots {
            total.add(&s.read());
        }
        total
    }

    /// The workers' live counter slots.
    pub fn slots(&self) -> Arc<Vec<stats::Slot>> {
        self.slots.clone()
    }

    /// Its addresses and stop switch.
    pub fn bound(&self) -> Bound {
        Bound::of(self.addr, self.admin_addr, &self.workers)
    }

    /// Wait for every worker; returns the summed counters and the store's as JSON.
    pub fn wait(self) -> io::Result<(ProxyStats, String)> {
        let total = self.workers.wait();
        self.resolver.stop();
        if let Some(d) = &self.disk {
            // Queued writes finish: an object stored in memory is on disk
            // before the process exits.
            d.stop();
        }
        let store = store_json(self.store.as_deref(), self.disk.as_deref());
        Ok((total?, store))
    }
}

fn store_json(store: Option<&Mutex<store::Store>>, disk: Option<&disk::DiskStore>) -> String {
    let disk = match disk {
        None => "null".to_string(),
        Some(d) => {
            let s = d.stats();
            format!(
                "{{\"objects\":{},\"bytes\":{},\"scanned\":{},\"written\":{},\"loaded\":{},\"removed\":{},\"evicted\":{},\"errors\":{},\"skipped\":{},\"scanning\":{}}}",
                s.objects, s.bytes, s.scanned, s.written, s.loaded, s.removed, s.evicted, s.errors, s.skipped, s.scanning
            )
        }
    };
    match store {
        None => "null".to_string(),
        Some(s) => {
            let st = s.lock().unwrap_or_else(|e| e.into_inner()).stats();
            format!(
                "{{\"objects\":{},\"bytes\":{},\"inserted\":{},\"evicted\":{},\"invalidated\":{},\"rejected\":{},\"disk\":{disk}}}",
                st.objects, st.bytes, st.inserted, st.evicted, st.invalidated, st.rejected
            )
        }
    }
}

/// The JSON served by `--admin` and printed by `--stats-on-exit`.
pub fn render_stats(
    backend: &str,
    slots: &[stats::Slot],
    store: Option<&Mutex<store::Store>>,
    disk: Option<&disk::DiskStore>,
) -> String {
    let mut total = ProxyStats::default();
    let mut workers = Vec::with_capacity(slots.len());
    for (i, s) in slots.iter().enumerate() {
        let st = s.read();
        total.add(&st);
        workers.push(format!("{{\"worker\":{i},\"stats\":{}}}", st.to_json()));
    }
    format!(
        "{{\"backend\":\"{backend}\",\"workers\":[{}],\"total\":{},\"store\":{}}}\n",
        workers.join(","),
        total.to_json(),
        store_json(store, disk)
    )
}

/// What every worker thread shares, owned by the group's closure.
struct WorkerShared {
    cfg: ProxyConfig,
    store: Option<Arc<Mutex<store::Store>>>,
    disk: Option<Arc<disk::DiskStore>>,
    fills: Option<Arc<fill::Fills>>,
    range_fills: Option<Arc<background::RangeFills>>,
    resolver: resolve::Resolver,
    via_name: String,
    budget: Arc<PipeBudget>,
    slots: Arc<Vec<stats::Slot>>,
    /// `--access-log`, shared by the workers' buffers.
    log: Option<Arc<weft_io::logfile::LogFile>>,
}

impl GroupStats for ProxyStats {
    fn merge(&mut self, other: &ProxyStats) {
        self.add(other);
    }
}

/// One worker thread: its loop over its seat's listener.
fn run_worker(shared: &WorkerShared, seat: WorkerSeat) -> io::Result<ProxyStats> {
    let cfg = &shared.cfg;
    let mut w = worker::Worker::new(worker::WorkerSetup {
        cfg,
        index: seat.index,
        listener: seat.listener,
        shutdown: seat.shutdown,
        store: shared.store.as_deref(),
        disk: shared.disk.as_deref(),
        fills: shared.fills.as_deref(),
        range_fills: shared.range_fills.clone(),
        pipes: PipePool::new(shared.budget.clone(), IDLE_PIPES),
        resolver: &shared.resolver,
        via_name: shared.via_name.clone(),
        slot: &shared.slots[seat.index],
        log: shared.log.as_ref().map(|f| {
            let lines = accesslog::AccessLog::new(f.clone(), cfg.access_log_format, std::time::Instant::now());
            accesslog::Log::new(lines)
        }),
    });
    let stats = weft_io::with_backend!(cfg.event, P => {
        let mut cx = weft_io::Ctx::<P>::with_options(&cfg.event_options)?;
        w.register(&mut cx)?;
        weft_io::run(&mut cx, &mut w)?;
        w.final_stats()
    });
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_sockets_inherit_nodelay_but_no_unsent_bound() {
        // The bound is the worker's to set per connection (relays yes, large
        // hits no): the listener only probes that the kernel takes it.
        for lowat in [32 * 1024, 0] {
            let cfg = ProxyConfig {
                notsent_lowat: lowat,
                ..ProxyConfig::default()
            };
            let l = sys::tcp_listener(&SocketAddr::from(([127, 0, 0, 1], 0)), false, 16).unwrap();
            tune_listener(&l, &cfg);
            let addr = sys::local_addr(&l).unwrap();
            let _client = std::net::TcpStream::connect(addr).unwrap();
            let (accepted, _) = sys::accept(&l).unwrap();
            let fd = &accepted;
            assert_eq!(sys::notsent_lowat(fd).unwrap(), 0, "0: the kernel default (unbounded)");
            assert!(sys::nodelay(fd).unwrap());
        }
    }
}
