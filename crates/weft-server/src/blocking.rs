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
//! MP: this process binds the port once and keeps the listening socket; the
//! serving processes (this executable again, told by `WEFT_MP_CHILD` that it
//! is one and which address the socket has, and by `WEFT_MP_PARENT` whose,
//! each a one-thread MT server)
//! inherit it as their descriptor 0, as FastCGI passes its listener
//! (FCGI_LISTENSOCK_FILENO), and all accept from its one queue, as the
//! thesis's pre-forked MP shared one listening socket. A process that dies
//! loses only the connection it was serving: what waits in the queue is
//! accepted by the others or by its replacement, which needs no start-up
//! handshake (the queue holds connections until someone accepts). When the
//! server stops, each process is sent SIGTERM and drains as a worker does
//! (its connection finishes within `--grace`; it is killed after that) and
//! writes its last counters, which the parent reads before it sums them.
//!
//! (One SO_REUSEPORT listener per process, as before, gave each process its
//! own queue: the kernel resets the connections queued on a listener that
//! closes, so a killed process took its queue with it, and so did a
//! replacement the parent gave up on because a counter line came before its
//! `listening on` line.)

use crate::admin::WorkerSlot;
use crate::{ServeConfig, ServeStats, Server};
use std::io::{self, BufRead, BufReader};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
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
/// The environment variable that makes `weft serve` one of an MP server's
/// processes: the address of the listener it inherits.
pub const MP_CHILD_ENV: &str = "WEFT_MP_CHILD";
/// The environment variable with the pid of the MP server that started the
/// process (beside [`MP_CHILD_ENV`]).
pub const MP_PARENT_ENV: &str = "WEFT_MP_PARENT";

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
    /// The one listening socket every serving process accepts from (kept
    /// here while the server runs, so its queue outlives any process).
    listener: Fd,
    exe: std::path::PathBuf,
    args: Vec<std::ffi::OsString>,
    addr: String,
    slots: Arc<Vec<WorkerSlot>>,
    /// Each slot's totals so far: the processes that died in it, plus the
    /// running one's last report (counters stay monotonic across restarts).
    totals: Arc<Mutex<Vec<Vec<u64>>>>,
    /// Each slot's report reader: joined before its totals are read again
    /// (a replacement's base, the sum at stop), so a process's last report,
    /// written as it exits, is never lost.
    readers: Mutex<Vec<Option<JoinHandle<()>>>>,
    /// How long a stopping process may take to finish its connection.
    grace: Duration,
}

/// The line prefix of a serving process's counters on its stdout.
pub const MP_STATS_LINE: &str = "weft-mp-stats";

impl Mp {
    /// Start process `i` with the listener as its descriptor 0, and read
    /// its reports into slot `i`. Nothing is awaited: connections wait in
    /// the listener's queue until a process accepts them, and a process
    /// that fails to start exits and is started again ([`supervise`]).
    fn spawn(&self, i: usize) -> io::Result<Child> {
        let listener = self.listener.as_fd().try_clone_to_owned()?;
        let mut child = Command::new(&self.exe)
            .args(&self.args)
            .env(MP_CHILD_ENV, &self.addr)
            .env(MP_PARENT_ENV, std::process::id().to_string())
            .stdin(Stdio::from(listener))
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot start MP process {i}: {e}")))?;
        let Some(out) = child.stdout.take() else {
            let _ = child.kill();
            return Err(io::Error::other("MP process without stdout"));
        };
        // The slot's previous process has exited (or there was none): its
        // reader ends at the pipe's end, after the last report.
        self.join_reader(i);
        let base = self.totals.lock().unwrap_or_else(|e| e.into_inner())[i].clone();
        let (slots, totals) = (self.slots.clone(), self.totals.clone());
        let reader = std::thread::spawn(move || read_reports(BufReader::new(out), i, &base, &slots, &totals));
        self.readers.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(reader);
        Ok(child)
    }

    /// Wait for slot `i`'s reader to reach the end of its process's output
    /// (at once, normally: the process has exited). Bounded, so that a
    /// descendant still holding the pipe open cannot stall the supervisor:
    /// after [`MP_READER_END`] the reader is left to finish on its own.
    fn join_reader(&self, i: usize) {
        let Some(h) = self.readers.lock().unwrap_or_else(|e| e.into_inner())[i].take() else {
            return;
        };
        let deadline = Instant::now() + MP_READER_END;
        while !h.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        if h.is_finished() {
            let _ = h.join();
        } else {
            weft_core::warn!(
                "MP process {i}: its output is still open after it exited; its last counters may be missing"
            );
        }
    }

    /// Stop every process as a server stops: SIGTERM, so each finishes the
    /// connection it serves (within the grace period; killed after it) and
    /// writes its last report; then wait for them and read those reports.
    fn stop(&self, kids: &Mutex<Vec<Child>>) {
        let mut kids = kids.lock().unwrap_or_else(|e| e.into_inner());
        for c in kids.iter_mut() {
            // Only a process not yet reaped: a reaped one's pid may be reused.
            if matches!(c.try_wait(), Ok(None)) {
                weft_io::sys::signal::terminate(c.id());
            }
        }
        let deadline = Instant::now() + self.grace + Duration::from_secs(1);
        for c in kids.iter_mut() {
            while matches!(c.try_wait(), Ok(None)) {
                if Instant::now() >= deadline {
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        for i in 0..kids.len() {
            self.join_reader(i);
        }
    }
}

/// Read a serving process's counter lines until it exits (other lines, such
/// as its `listening on`, are skipped).
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

/// Start an MP server on `listeners` (one listener, bound by the caller):
/// the processes, then a supervising thread that holds the shutdown switch
/// and the listener, and starts again a process that died. Each process
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
    let Some(listener) = listeners.into_iter().next() else {
        return Err(io::Error::other("MP: no listener"));
    };
    let mp = Mp {
        listener,
        exe: std::env::current_exe()?,
        args: std::env::args_os().skip(1).collect(),
        addr: addr.to_string(),
        totals: Arc::new(Mutex::new(vec![Vec::new(); n])),
        readers: Mutex::new((0..n).map(|_| None).collect()),
        grace: cfg.grace,
        slots,
    };
    let children = Children::default();
    for i in 0..n {
        let child = mp.spawn(i)?;
        children.0.lock().unwrap_or_else(|e| e.into_inner()).push(child);
    }
    // The supervisor's seat gets a placeholder: this process never accepts.
    let kids = children.0.clone();
    let workers = WorkerGroup::start("weft-mp", vec![weft_io::sys::eventfd()?], move |seat: WorkerSeat| {
        let mut restarts = vec![Restart::new(Instant::now()); n];
        let mut exits = Exits::new(n);
        let stop = seat.shutdown.waker(seat.index);
        while !seat.shutdown.requested() {
            exits.follow(&kids, &restarts);
            // Sleep until a process exits (its pidfd), a restart held back
            // is due, or the stop notice (the seat's eventfd, readable from
            // then on) fires.
            let mut fds = vec![stop];
            fds.extend(exits.fds());
            let timeout = exits.timeout(&restarts, Instant::now());
            let _ = weft_io::sys::wait_any(&fds, timeout);
            supervise(&mp, &kids, &mut restarts);
        }
        mp.stop(&kids);
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

/// A process that exits within this time of its start is taken to have
/// failed to start: its next start waits ([`Restart`]).
const MP_SHORT_LIFE: Duration = Duration::from_secs(1);
/// The first wait before starting again a process that failed to start.
const MP_FIRST_BACKOFF: Duration = Duration::from_millis(10);
/// How long an exited process's report reader may take to reach the end of
/// its output ([`Mp::join_reader`]).
const MP_READER_END: Duration = Duration::from_secs(1);
/// The longest wait between starts of a process that keeps failing.
const MP_MAX_BACKOFF: Duration = Duration::from_secs(1);

/// How long MP's supervisor sleeps between looks where a process's exit
/// cannot be waited for (pidfd_open refused: a kernel before 5.3).
const MP_LOOK_EVERY: Duration = Duration::from_millis(100);

/// The supervisor's view of each slot's running process: a pidfd that
/// becomes readable when it exits, so an idle MP server's supervisor sleeps
/// until something happens instead of looking ten times a second.
struct Exits {
    /// (pid, its pidfd) per slot; None while the slot's process has exited
    /// and waits to be started again (its pidfd would stay readable).
    slots: Vec<Option<(u32, Fd)>>,
    /// pidfd_open failed for a running process: look on a timer.
    blind: bool,
}

impl Exits {
    fn new(n: usize) -> Exits {
        Exits {
            slots: (0..n).map(|_| None).collect(),
            blind: false,
        }
    }

    /// Follow the processes as they are now: a new pid gets its pidfd; a
    /// slot whose exit was seen (a restart pending) is not waited on.
    fn follow(&mut self, kids: &Mutex<Vec<Child>>, restarts: &[Restart]) {
        let kids = kids.lock().unwrap_or_else(|e| e.into_inner());
        self.blind = false;
        for (i, child) in kids.iter().enumerate() {
            let slot = &mut self.slots[i];
            if restarts[i].next_start.is_some() {
                *slot = None;
                continue;
            }
            let pid = child.id();
            if slot.as_ref().is_some_and(|(p, _)| *p == pid) {
                continue;
            }
            // Not yet reaped (only `supervise` reaps, on this thread), so
            // the pid is still this child's.
            *slot = weft_io::sys::signal::pidfd_open(pid).ok().map(|fd| (pid, fd));
            self.blind |= slot.is_none();
        }
    }

    fn fds(&self) -> impl Iterator<Item = std::os::fd::RawFd> + '_ {
        self.slots.iter().flatten().map(|(_, fd)| fd.raw())
    }

    /// The longest sleep: until the first restart held back is due (None:
    /// no limit), or [`MP_LOOK_EVERY`] where an exit cannot be waited for.
    fn timeout(&self, restarts: &[Restart], now: Instant) -> Option<Duration> {
        let due = restarts
            .iter()
            .filter_map(|r| r.next_start)
            .min()
            .map(|t| t.saturating_duration_since(now));
        let blind = self.blind.then_some(MP_LOOK_EVERY);
        match (due, blind) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// One slot's restart state. There is no start-up handshake to tell that a
/// process failed to start, so one that exits within [`MP_SHORT_LIFE`] of
/// its start counts as failed: its next start waits, twice as long each
/// time, up to [`MP_MAX_BACKOFF`].
#[derive(Clone)]
struct Restart {
    started: Instant,
    /// When the exit of the running process was seen, the earliest start of
    /// its replacement.
    next_start: Option<Instant>,
    backoff: Duration,
}

impl Restart {
    fn new(started: Instant) -> Restart {
        Restart {
            started,
            next_start: None,
            backoff: MP_FIRST_BACKOFF,
        }
    }

    /// The process exited (seen at `now`): when its replacement may start.
    fn exited(&mut self, now: Instant) -> Instant {
        if now.duration_since(self.started) >= MP_SHORT_LIFE {
            self.backoff = MP_FIRST_BACKOFF;
            return now;
        }
        let at = now + self.backoff;
        self.backoff = (self.backoff * 2).min(MP_MAX_BACKOFF);
        at
    }
}

/// One look at the processes: start again those that exited (a process
/// that keeps dying waits longer each time, up to a second).
fn supervise(mp: &Mp, kids: &Mutex<Vec<Child>>, restarts: &mut [Restart]) {
    let mut kids = kids.lock().unwrap_or_else(|e| e.into_inner());
    let now = Instant::now();
    for (i, child) in kids.iter_mut().enumerate() {
        let status = match child.try_wait() {
            Ok(Some(st)) => st,
            _ => continue,
        };
        let r = &mut restarts[i];
        let at = match r.next_start {
            Some(at) => at,
            None => {
                weft_core::warn!(
                    "MP process {i} (pid {}) exited ({status}): starting it again",
                    child.id()
                );
                let at = r.exited(now);
                r.next_start = Some(at);
                at
            }
        };
        if now < at {
            continue;
        }
        match mp.spawn(i) {
            Ok(c) => {
                *child = c;
                r.started = now;
                r.next_start = None;
            }
            Err(e) => {
                weft_core::warn!("{e}");
                r.next_start = Some(now + r.backoff);
                r.backoff = (r.backoff * 2).min(MP_MAX_BACKOFF);
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

/// The listener's address and the parent's pid, when this process is one
/// of an MP server's ([`MP_CHILD_ENV`], [`MP_PARENT_ENV`]).
pub fn mp_child_env() -> Option<(SocketAddr, u32)> {
    let addr = std::env::var(MP_CHILD_ENV).ok()?.parse().ok()?;
    let parent = std::env::var(MP_PARENT_ENV).ok()?.parse().ok()?;
    Some((addr, parent))
}

/// For a process started by [`start_mp`] (pid `parent`): accept from the
/// parent's listener ([`inherited_listener`]), one connection at a time,
/// with the thesis's small private caches.
pub fn as_mp_child(c: &mut ServeConfig, addr: SocketAddr, parent: u32) {
    c.mp_parent = Some(parent);
    c.listen = addr;
    c.arch = crate::Arch::Mt;
    c.pool = Some(1);
    c.admin = None;
    c.stats_on_exit = false;
    c.path_cache = c.path_cache.min(MP_PATH_CACHE);
    c.file_cache = c.file_cache.min(MP_FILE_CACHE);
}

/// An MP process's listener: the parent's, inherited as descriptor 0.
/// `addr` is the address the parent bound ([`MP_CHILD_ENV`]): a descriptor
/// 0 with another address (or none: not a socket) is refused, not served.
pub(crate) fn inherited_listener(addr: SocketAddr) -> io::Result<(Vec<Fd>, SocketAddr)> {
    let fd = Fd::from(io::stdin().as_fd().try_clone_to_owned()?);
    match weft_io::sys::local_addr(&fd) {
        Ok(a) if a == addr => Ok((vec![fd], a)),
        Ok(a) => Err(io::Error::other(format!(
            "MP process: descriptor 0 is bound to {a}, not the server's {addr}"
        ))),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("MP process: descriptor 0 is not the server's listener on {addr}: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_that_dies_young_waits_longer_each_time() {
        let t0 = Instant::now();
        let mut r = Restart::new(t0);
        // It lived its short life out: started again at once.
        let t1 = t0 + MP_SHORT_LIFE;
        assert_eq!(r.exited(t1), t1);
        // Dying young: 10 ms, then twice as long each time, up to 1 s.
        r.started = t1;
        assert_eq!(r.exited(t1), t1 + MP_FIRST_BACKOFF);
        assert_eq!(r.exited(t1), t1 + 2 * MP_FIRST_BACKOFF);
        for _ in 0..10 {
            r.exited(t1);
        }
        assert_eq!(r.exited(t1), t1 + MP_MAX_BACKOFF);
        // A long life again: the wait starts over (a young death next waits
        // the first 10 ms).
        let t2 = t1 + MP_SHORT_LIFE;
        assert_eq!(r.exited(t2), t2);
        assert_eq!(
            r.exited(t2 - MP_SHORT_LIFE / 2),
            t2 - MP_SHORT_LIFE / 2 + MP_FIRST_BACKOFF
        );
    }

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
