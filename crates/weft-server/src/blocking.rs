//! Starting the blocking architectures (`--arch mt|mp`); the per-connection
//! code is `worker/blocking.rs`.
//!
//! The thesis's settings (§4.5), scaled to this machine (`docs/serve.md`):
//! MT runs [`MT_THREADS`] threads, MP [`MP_PROCESSES`] processes, each
//! process with its own small caches ([`MP_PATH_CACHE`] entries,
//! [`MP_FILE_CACHE`] bytes): those private copies are MP's deficit. MT's
//! threads split the configured budgets among them ([`mt_share`]), so MT
//! holds what one AMPED worker holds, as the thesis's MT with one cache did.
//!
//! MP: this process binds the port with SO_REUSEPORT, starts the serving
//! processes (this executable again, told by `WEFT_MP_CHILD` which address
//! to bind beside it, each as a one-thread MT server), waits until each
//! listens, then closes its own listener before announcing the address: so
//! no connection is ever queued on it. The processes are killed when the
//! server stops.

use crate::admin::WorkerSlot;
use crate::{ServeConfig, ServeStats, Server};
use std::io::{self, BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weft_io::sys::Fd;
use weft_io::{WorkerGroup, WorkerSeat};

/// MT threads (the thesis: 64).
pub const MT_THREADS: usize = 64;
/// MP processes (the thesis: 32).
pub const MP_PROCESSES: usize = 32;
/// Path cache entries of each MP process (the thesis: 200).
pub const MP_PATH_CACHE: usize = 200;
/// File cache bytes of each MP process (the thesis: 4 MB).
pub const MP_FILE_CACHE: u64 = 4 << 20;
/// The environment variable that makes `weft serve` one of an MP server's processes.
pub const MP_CHILD_ENV: &str = "WEFT_MP_CHILD";

/// MP's serving processes, killed and reaped when dropped.
#[derive(Default)]
pub struct Children(Arc<Mutex<Vec<Child>>>);

impl Drop for Children {
    fn drop(&mut self) {
        let mut v = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for c in v.iter_mut() {
            let _ = c.kill();
        }
        for c in v.iter_mut() {
            let _ = c.wait();
        }
        v.clear();
    }
}

/// What MP's supervisor needs to start a serving process again.
struct Mp {
    exe: std::path::PathBuf,
    args: Vec<std::ffi::OsString>,
    addr: String,
    slots: Arc<Vec<WorkerSlot>>,
    /// Each slot's totals so far: the processes that died in it, plus the
    /// running one's last report (counters stay monotonic across restarts).
    totals: Arc<Mutex<Vec<Vec<u64>>>>,
}

/// The line prefix of a serving process's counters on its stdout.
pub const MP_STATS_LINE: &str = "weft-mp-stats";

impl Mp {
    /// Start process `i`, wait until it listens, and read its reports into
    /// slot `i` from then on.
    fn spawn(&self, i: usize) -> io::Result<Child> {
        let mut child = Command::new(&self.exe)
            .args(&self.args)
            .env(MP_CHILD_ENV, &self.addr)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot start MP process {i}: {e}")))?;
        let Some(out) = child.stdout.take() else {
            let _ = child.kill();
            return Err(io::Error::other("MP process without stdout"));
        };
        let mut r = BufReader::new(out);
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 || !line.starts_with("listening on") {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::other(format!("MP process {i} did not start")));
        }
        let base = self.totals.lock().unwrap_or_else(|e| e.into_inner())[i].clone();
        let (slots, totals) = (self.slots.clone(), self.totals.clone());
        std::thread::spawn(move || read_reports(r, i, &base, &slots, &totals));
        Ok(child)
    }
}

/// Read a serving process's counter lines until it exits.
fn read_reports(mut r: impl BufRead, i: usize, base: &[u64], slots: &[WorkerSlot], totals: &Mutex<Vec<Vec<u64>>>) {
    let mut line = String::new();
    loop {
        line.clear();
        match r.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let Some(rest) = line.trim_end().strip_prefix(MP_STATS_LINE) else {
            continue;
        };
        let words: Vec<u64> = rest.split_whitespace().map(|w| w.parse().unwrap_or(0)).collect();
        let sum: Vec<u64> = (0..words.len().max(base.len()))
            .map(|k| words.get(k).copied().unwrap_or(0) + base.get(k).copied().unwrap_or(0))
            .collect();
        if let Some(s) = slots.get(i) {
            s.counters.store_words(&sum);
        }
        if let Some(t) = totals.lock().unwrap_or_else(|e| e.into_inner()).get_mut(i) {
            *t = sum;
        }
    }
}

/// Start an MP server: the processes, then a supervising thread that holds
/// the shutdown switch and starts again a process that died. Each process
/// reports its counters on its stdout ([`MP_STATS_LINE`]) into its own slot
/// of `slots`: the admin endpoint's `/stats` lists the processes as its
/// workers and sums them.
pub(crate) fn start_mp(
    cfg: ServeConfig,
    listeners: Vec<Fd>,
    addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    slots: Arc<Vec<WorkerSlot>>,
) -> io::Result<Server> {
    let n = cfg.pool.unwrap_or(MP_PROCESSES).max(1);
    let mp = Mp {
        exe: std::env::current_exe()?,
        args: std::env::args_os().skip(1).collect(),
        addr: addr.to_string(),
        totals: Arc::new(Mutex::new(vec![Vec::new(); n])),
        slots,
    };
    let children = Children::default();
    for i in 0..n {
        let child = mp.spawn(i)?;
        children.0.lock().unwrap_or_else(|e| e.into_inner()).push(child);
    }
    // Every process listens now: this listener closes unused, before the
    // address is announced. The supervisor's seat gets a placeholder.
    drop(listeners);
    let kids = children.0.clone();
    let workers = WorkerGroup::start("weft-mp", vec![weft_io::sys::eventfd()?], move |seat: WorkerSeat| {
        let mut next_start = vec![Instant::now(); n];
        let mut backoff = vec![Duration::from_millis(10); n];
        while !seat.shutdown.requested() {
            std::thread::sleep(Duration::from_millis(100));
            supervise(&mp, &kids, &mut next_start, &mut backoff);
        }
        let mut total = ServeStats::default();
        for s in mp.slots.iter() {
            total.add(&s.counters.read());
        }
        Ok(total)
    })?;
    Ok(Server {
        addr,
        admin_addr,
        workers,
        helpers: None,
        children,
    })
}

/// One look at the processes: start again those that exited (a process
/// that keeps dying waits longer each time, up to a second).
fn supervise(mp: &Mp, kids: &Mutex<Vec<Child>>, next_start: &mut [Instant], backoff: &mut [Duration]) {
    let mut kids = kids.lock().unwrap_or_else(|e| e.into_inner());
    let now = Instant::now();
    for (i, child) in kids.iter_mut().enumerate() {
        let status = match child.try_wait() {
            Ok(Some(st)) => st,
            _ => continue,
        };
        if now < next_start[i] {
            continue;
        }
        weft_core::warn!(
            "MP process {i} (pid {}) exited ({status}): starting it again",
            child.id()
        );
        match mp.spawn(i) {
            Ok(c) => {
                *child = c;
                backoff[i] = Duration::from_millis(10);
            }
            Err(e) => {
                weft_core::warn!("{e}");
                next_start[i] = now + backoff[i];
                backoff[i] = (backoff[i] * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// MT: each of `threads` threads gets an equal share of the cache budgets
/// (file cache bytes and entries, path cache entries, object cache bytes),
/// so the process holds at most what the flags say, as the thesis's MT
/// shared one 128 MB cache among its threads. (The threads do not share
/// entries: a file hot on every thread is cached once per thread, within
/// that thread's share.) A budget of 0 stays 0; a share is at least one
/// entry.
pub fn mt_share(c: &mut ServeConfig, threads: usize) {
    let n = threads.max(1);
    c.file_cache /= n as u64;
    c.object_cache /= n as u64;
    c.file_cache_entries = (c.file_cache_entries / n).max(1);
    if c.path_cache > 0 {
        c.path_cache = (c.path_cache / n).max(1);
    }
}

/// For a process started by [`start_mp`]: bind beside the parent, one
/// connection at a time, with the thesis's small private caches.
pub fn as_mp_child(c: &mut ServeConfig, addr: SocketAddr) {
    c.mp_child = true;
    c.listen = addr;
    c.reuse_port = true;
    c.arch = crate::Arch::Mt;
    c.pool = Some(1);
    c.admin = None;
    c.stats_on_exit = false;
    c.path_cache = c.path_cache.min(MP_PATH_CACHE);
    c.file_cache = c.file_cache.min(MP_FILE_CACHE);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mt_threads_split_the_budgets() {
        let mut c = ServeConfig {
            file_cache: 64 << 20,
            object_cache: 32 << 20,
            file_cache_entries: 1000,
            path_cache: 1000,
            ..ServeConfig::default()
        };
        mt_share(&mut c, 64);
        assert_eq!((c.file_cache, c.object_cache), (1 << 20, 512 << 10));
        assert_eq!((c.file_cache_entries, c.path_cache), (15, 15));
        c.path_cache = 0;
        mt_share(&mut c, 64);
        assert_eq!(
            (c.path_cache, c.file_cache_entries),
            (0, 1),
            "0 stays off; at least one entry"
        );
    }
}
