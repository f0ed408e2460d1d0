//! weft-server: the static web server behind `weft serve`.
//!
//! Flash's design on a modern kernel: a single-process event-driven server per
//! worker thread (SPED), with Flash's caches folded into one per-worker
//! [`files::FileCache`] (pathname → open descriptor, metadata, ready-made header
//! fields, and the bytes of small files), bodies sent with sendfile or
//! pread + writev ([`config::SendMode`]), strict HTTP/1.1 from `weft-http`, and
//! the event backend chosen at start-up from `weft-io`.
//!
//! - [`config`]: [`ServeConfig`], the validated settings;
//! - [`worker`]: one event loop's connections and the request cycle; with
//!   `--handoff-socket`, also the client connections a `weft front --mode
//!   handoff` hands over (`worker/handoff.rs`);
//! - `conn`, `answer`, `files`, `respond`: connection state, answering a
//!   target (file, directory, demo page), the file cache, response heads;
//! - `path`, `mime`, `autoindex`, `accesslog`, `demo`: request-path safety,
//!   content types, directory listings, Combined Log Format, the built-in site;
//! - [`stats`]: per-worker counters (bytes by send path, syscalls by kind).

#![forbid(unsafe_code)]
// The module docs name the private functions and types they describe, as
// links that `cargo doc --document-private-items` renders: the crate's
// readers are weft's developers.
#![allow(rustdoc::private_intra_doc_links)]

pub mod accesslog;
pub mod admin;
pub mod admit;
mod answer;
pub mod autoindex;
pub mod blocking;
pub mod cgi;
pub mod config;
mod conn;
pub mod demo;
mod files;
pub mod load_report;
pub mod memory;
pub mod mime;
mod notice;
mod objects;
pub mod path;
mod respond;
pub mod stats;
mod stream;
pub mod vhost;
pub mod worker;

pub use config::{Arch, Precompressed, ResidencyTest, SendMode, ServeConfig};
pub use stats::ServeStats;

use std::ffi::CString;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::Instant;
use weft_io::sys::{self, Fd};
use weft_io::{Bound, GroupStats, WorkerGroup, WorkerSeat};

/// A running server: its address and its workers (with their shutdown switch).
pub struct Server {
    addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    workers: WorkerGroup<ServeStats>,
    helpers: Option<Arc<worker::amped::Helpers>>,
    /// MP: the serving processes (killed when dropped).
    children: blocking::Children,
}

impl GroupStats for ServeStats {
    fn merge(&mut self, other: &ServeStats) {
        self.add(other);
    }
}

impl Server {
    /// Bind, spawn the workers and return at once. Call [`Server::wait`] to
    /// block until shutdown.
    pub fn start(mut cfg: ServeConfig) -> io::Result<Server> {
        let nofile = sys::raise_nofile_limit().unwrap_or(1024);
        weft_core::debug!("descriptor limit {nofile}");
        let workers = cfg.workers.max(1);
        memory::watch(cfg.memory_pressure).map_err(io::Error::other)?;
        // Fail early, with the path in the message, if a root is unusable.
        let mut site_roots = Vec::with_capacity(cfg.sites.len());
        if !cfg.sites.is_empty() {
            let sites = vhost::Sites::new(&cfg.sites, cfg.root.is_some(), cfg.autoindex)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            for p in sites.roots() {
                site_roots.push(checked_root(p)?);
            }
            cfg.site_table = Some(Arc::new(sites));
        }
        let root_path = match &cfg.root {
            Some(p) => Some(checked_root(p)?),
            // Only sites: the first one's root stands in (site 0 is never chosen).
            None => site_roots.first().cloned(),
        };
        let root_path = root_path.map(|r| (r, site_roots));
        let log_fd = match &cfg.access_log {
            Some(p) => Some(
                weft_io::logfile::LogFile::open(p)
                    .map_err(|e| io::Error::new(e.kind(), format!("cannot open access log {}: {e}", p.display())))?,
            ),
            None => None,
        };
        // MT: one listener shared by the threads; MP: one listener shared by
        // the processes, which inherit it (an MP process binds nothing).
        let blocking = matches!(cfg.arch, Arch::Mt | Arch::Mp);
        let workers = match cfg.arch {
            Arch::Mt => cfg.pool.unwrap_or(blocking::MT_THREADS),
            Arch::Mp => 1,
            _ => workers,
        };
        let share = weft_io::workers::PortShare::from_reuse_port(cfg.reuse_port);
        let bound = if blocking { 1 } else { workers };
        let (mut listeners, addr) = if cfg.mp_parent.is_some() {
            blocking::inherited_listener(cfg.listen)?
        } else {
            weft_io::workers::bind_listeners(cfg.listen, bound, cfg.backlog, share)?
        };
        if blocking {
            let first = std::os::fd::OwnedFd::from(listeners.remove(0));
            for _ in 1..workers {
                listeners.push(Fd::from(first.try_clone()?));
            }
            listeners.insert(0, Fd::from(first));
        }
        for l in &listeners {
            // Accepted sockets inherit TCP_NODELAY from the listener on Linux: a
            // second small write on a connection (pipelined responses) must not
            // wait for the delayed ACK of the first.
            let _ = sys::set_nodelay(l, true);
            // --send-buffer: accepted sockets inherit SO_SNDBUF (and its lock
            // against autotuning) from the listener.
            if let Some(b) = cfg.send_buffer {
                sys::sockopt::set_sndbuf(l, b)?;
            }
        }
        // MP: a slot per serving process (each reports to this one).
        let nslots = match cfg.arch {
            Arch::Mp => cfg.pool.unwrap_or(blocking::MP_PROCESSES).max(1),
            _ => workers,
        };
        let slots: Arc<Vec<admin::WorkerSlot>> = Arc::new((0..nslots).map(|_| admin::WorkerSlot::default()).collect());
        let admin_addr = match cfg.admin {
            Some(a) => Some(
                admin::start(a, cfg.event.name(), slots.clone())
                    .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on admin address {a}: {e}")))?,
            ),
            None => None,
        };
        let handoff = match &cfg.handoff_socket {
            Some(path) => Some(Arc::new(sys::seqpacket_listener(path, cfg.backlog).map_err(|e| {
                io::Error::new(e.kind(), format!("cannot listen on handoff socket {path}: {e}"))
            })?)),
            None => None,
        };
        if cfg.arch == Arch::Mp {
            return blocking::start_mp(cfg, listeners, addr, admin_addr, slots);
        }
        if cfg.arch == Arch::Mt {
            blocking::mt_share(&mut cfg, workers);
        }
        let helpers = match (cfg.arch, &root_path) {
            (Arch::Amped, Some(_)) => Some(Arc::new(start_helpers(&cfg, workers)?)),
            _ => None,
        };
        let pool = helpers.clone();
        let cfg = Arc::new(cfg);
        let workers = WorkerGroup::start("weft-worker", listeners, move |seat: WorkerSeat| {
            let slot = &slots[seat.index];
            // Every worker takes front-end connections from one listener.
            let handoff = match &handoff {
                Some(l) => Some(Fd::from(l.as_fd().try_clone_to_owned()?)),
                None => None,
            };
            let pool = pool.clone();
            run_worker(&cfg, seat, root_path.clone(), (log_fd.clone(), handoff, pool), slot)
        })?;
        Ok(Server {
            addr,
            admin_addr,
            workers,
            helpers,
            children: blocking::Children::default(),
        })
    }

    /// Its addresses and stop switch.
    pub fn bound(&self) -> Bound {
        Bound::of(self.addr, self.admin_addr, &self.workers)
    }

    /// Wait for every worker to finish; returns the summed counters.
    pub fn wait(self) -> io::Result<ServeStats> {
        let stats = self.workers.wait();
        drop(self.children);
        if let Some(h) = &self.helpers {
            h.shutdown();
        }
        stats
    }
}

/// A document root as a C string, opened once to fail early with the path
/// in the message.
fn checked_root(p: &std::path::Path) -> io::Result<CString> {
    let c = CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "root path contains NUL"))?;
    let fd = sys::open_dir(&c)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot open document root {}: {e}", p.display())))?;
    drop(fd);
    Ok(c)
}

/// AMPED's helper pool: one for all workers, threads started on demand.
fn start_helpers(cfg: &ServeConfig, workers: usize) -> io::Result<worker::amped::Helpers> {
    let mailboxes = Arc::new(weft_io::Mailboxes::new(workers)?);
    let delay = cfg.test_disk_delay;
    Ok(weft_io::helpers::HelperPool::new(
        cfg.helpers,
        worker::amped::QUEUE_LIMIT,
        mailboxes,
        move |job| {
            if !delay.is_zero() {
                // `--test-disk-delay`: a slow disk, for the tests.
                std::thread::sleep(delay);
            }
            weft_io::helpers::run_disk_job(job)
        },
    ))
}

type WorkerExtras = (
    Option<Arc<weft_io::logfile::LogFile>>,
    Option<Fd>,
    Option<Arc<worker::amped::Helpers>>,
);

fn run_worker(
    cfg: &ServeConfig,
    seat: WorkerSeat,
    root: Option<(CString, Vec<CString>)>,
    (log_fd, handoff, helpers): WorkerExtras,
    slot: &admin::WorkerSlot,
) -> io::Result<ServeStats> {
    let files = match root {
        Some((c, sites)) => {
            let dir = sys::open_dir(&c)?;
            // With the object cache, file bytes are page-cache mappings only
            // (no heap copies of small files).
            let small = match cfg.send {
                SendMode::Auto if cfg.object_cache == 0 => Some(cfg.small_file_max),
                _ => None,
            };
            // `--path-cache 0`: every request translates its path again.
            let (entries, valid) = match cfg.path_cache {
                0 => (cfg.file_cache_entries, std::time::Duration::ZERO),
                n => (cfg.file_cache_entries.min(n), cfg.file_cache_valid),
            };
            let cache = files::FileCache::new(dir, cfg.follow_symlinks, entries, valid, small, cfg.file_cache)
                .with_sites(sites.iter().map(|c| sys::open_dir(c)).collect::<io::Result<_>>()?);
            // Change notices need the event loop to read them.
            let notices = cfg.snapshot_check && cfg.snapshot_notify && !matches!(cfg.arch, Arch::Mt | Arch::Mp);
            Some(if notices { cache.with_notices() } else { cache })
        }
        None => None,
    };
    let log = log_fd
        .as_ref()
        .map(|f| accesslog::AccessLog::new(f.clone(), cfg.access_log_format, Instant::now()));
    let waker = seat.shutdown.waker(seat.index);
    let index = seat.index;
    let mut w = worker::Worker::new(cfg, seat.listener, files, seat.shutdown, waker, log, slot).with_cgi(index);
    if let Some(l) = handoff {
        w = w.with_handoff(l);
    }
    if let Some(pool) = helpers {
        w = w.with_helpers(pool, seat.index);
    }
    if matches!(cfg.arch, Arch::Mt | Arch::Mp) {
        w.run_blocking()?;
        let stats = w.stats();
        drop(w);
        return Ok(stats);
    }
    let stats = weft_io::with_backend!(cfg.event, P => {
        let opts = weft_io::BackendOptions {
            max_pass: cfg.max_pass,
            wake_interval: cfg.wake_interval,
        };
        let mut cx = weft_io::Ctx::<P>::with_options(&opts)?;
        w.register(&mut cx)?;
        weft_io::run(&mut cx, &mut w)?;
        w.stats()
    });
    drop(w);
    drop(log_fd);
    Ok(stats)
}
