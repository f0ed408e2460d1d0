//! AMPED helper threads (Flash, thesis 004 §4.3–4.4): the work an event loop
//! must never wait for — open and stat of an uncached path, reading a file
//! range into the page cache — done on helper threads that report back
//! through the worker's [`Mailboxes`] eventfd, which its loop watches like any
//! socket.
//!
//! - Helpers start **on demand**, one when a job is queued and none is idle, up
//!   to `max_helpers`, and then stay **in reserve** (idle on a condition
//!   variable) until the pool shuts down, as Flash's helper processes did: a
//!   burst of misses pays the thread start once.
//! - [`HelperPool::submit`] never blocks on a helper: it takes the queue lock
//!   (held by helpers only to pop a job, never while running one), appends the
//!   job, and returns. A full queue (`queue_limit`) hands the job back
//!   ([`Full`]) so the worker can answer 503 or block that one connection,
//!   never its loop.
//! - The pool is generic over the job `J` and result `R`; `run: Fn(J) -> R`
//!   is what a helper does. [`DiskJob`] / [`run_disk_job`] are the jobs
//!   `weft serve` sends: open-and-stat beneath the document root, and load a
//!   range (read-ahead, returning once it is resident).
//! - Shutdown ([`HelperPool::shutdown`], also on drop) drops queued jobs, lets
//!   jobs in progress finish, and joins the helpers; a helper stuck on a
//!   blocking call delays it until that call returns.

use crate::mailbox::Mailboxes;
use crate::sys::residency::{self, LoadMethod};
use crate::sys::{self, Fd, FileStat, Resolve};
use std::collections::VecDeque;
use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// A job the queue refused because it was full; the job is handed back.
#[derive(Debug)]
pub struct Full<J>(pub J);

/// Counters of a pool (a snapshot).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HelperStats {
    /// Helper threads started so far (they are never retired before shutdown).
    pub started: usize,
    /// Helpers waiting for work.
    pub idle: usize,
    /// Jobs waiting for a helper.
    pub queued: usize,
    /// Jobs finished.
    pub completed: u64,
    /// Jobs refused because the queue was full.
    pub refused: u64,
}

struct State<J> {
    queue: VecDeque<(usize, J)>,
    stats: HelperStats,
    stopping: bool,
}

struct Shared<J, R> {
    state: Mutex<State<J>>,
    work: Condvar,
    results: Arc<Mailboxes<R>>,
    run: Box<dyn Fn(J) -> R + Send + Sync>,
}

impl<J, R> Shared<J, R> {
    fn lock(&self) -> MutexGuard<'_, State<J>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A pool of helper threads shared by a role's workers; results go to the
/// submitting worker's mailbox.
pub struct HelperPool<J: Send + 'static, R: Send + 'static> {
    shared: Arc<Shared<J, R>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    max_helpers: usize,
    queue_limit: usize,
}

impl<J: Send + 'static, R: Send + 'static> HelperPool<J, R> {
    /// A pool of up to `max_helpers` threads (at least one) running `run`,
    /// holding at most `queue_limit` waiting jobs, posting results to
    /// `results` (one mailbox per worker). No thread starts until the first job.
    pub fn new(
        max_helpers: usize,
        queue_limit: usize,
        results: Arc<Mailboxes<R>>,
        run: impl Fn(J) -> R + Send + Sync + 'static,
    ) -> HelperPool<J, R> {
        HelperPool {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    stats: HelperStats::default(),
                    stopping: false,
                }),
                work: Condvar::new(),
                results,
                run: Box::new(run),
            }),
            threads: Mutex::new(Vec::new()),
            max_helpers: max_helpers.max(1),
            queue_limit: queue_limit.max(1),
        }
    }

    /// The eventfd worker `worker` watches for this pool's results.
    pub fn waker(&self, worker: usize) -> RawFd {
        self.shared.results.waker(worker)
    }

    /// Move the results for `worker` into `out` (call when its eventfd fires).
    pub fn take(&self, worker: usize, out: &mut Vec<R>) {
        self.shared.results.take(worker, out);
    }

    /// Queue `job` for a helper; its result will be posted to `worker`'s
    /// mailbox. Never waits for a helper. `Err(Full(job))` when the queue is
    /// full or the pool is shutting down.
    pub fn submit(&self, worker: usize, job: J) -> Result<(), Full<J>> {
        let mut st = self.shared.lock();
        if st.stopping || st.queue.len() >= self.queue_limit {
            st.stats.refused += 1;
            return Err(Full(job));
        }
        st.queue.push_back((worker, job));
        st.stats.queued = st.queue.len();
        let start = st.stats.idle < st.queue.len() && st.stats.started < self.max_helpers;
        if start {
            st.stats.started += 1;
        }
        drop(st);
        self.shared.work.notify_one();
        if start && self.spawn().is_err() {
            // No thread: the job stays queued for a helper already running, or
            // for the next submit's attempt.
            self.shared.lock().stats.started -= 1;
        }
        Ok(())
    }

    fn spawn(&self) -> io::Result<()> {
        let shared = Arc::clone(&self.shared);
        let h = std::thread::Builder::new()
            .name("weft-helper".into())
            .spawn(move || helper_loop(&shared))?;
        self.threads.lock().unwrap_or_else(|e| e.into_inner()).push(h);
        Ok(())
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> HelperStats {
        self.shared.lock().stats
    }

    /// Stop: drop queued jobs, let running ones finish, join every helper.
    /// Idempotent.
    pub fn shutdown(&self) {
        {
            let mut st = self.shared.lock();
            st.stopping = true;
            st.queue.clear();
            st.stats.queued = 0;
        }
        self.shared.work.notify_all();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

impl<J: Send + 'static, R: Send + 'static> Drop for HelperPool<J, R> {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn helper_loop<J, R>(shared: &Shared<J, R>) {
    let mut st = shared.lock();
    loop {
        if st.stopping {
            return;
        }
        let Some((worker, job)) = st.queue.pop_front() else {
            st.stats.idle += 1;
            st = shared.work.wait(st).unwrap_or_else(|e| e.into_inner());
            st.stats.idle -= 1;
            continue;
        };
        st.stats.queued = st.queue.len();
        drop(st);
        let result = (shared.run)(job);
        shared.results.post(worker, result);
        st = shared.lock();
        st.stats.completed += 1;
    }
}

/// The blocking file-system work `weft serve` hands to helpers. `tag` comes
/// back in the result so the worker finds the waiting connection(s).
#[derive(Debug)]
pub enum DiskJob {
    /// Open `path` (relative) beneath the directory `root` and fstat it.
    Open {
        /// The worker's key for this job.
        tag: u64,
        /// The document root.
        root: Arc<Fd>,
        /// The path below it.
        path: CString,
        /// Whether symlinks may leave the root.
        resolve: Resolve,
        /// A regular file up to this size is also loaded into the page cache
        /// (the worker reads small files whole once the answer arrives).
        preload: u64,
        /// How the preload brings the file in.
        method: LoadMethod,
    },
    /// Bring `[offset, offset + len)` of `file` into the page cache.
    Load {
        /// The worker's key for this job.
        tag: u64,
        /// The open file.
        file: Arc<Fd>,
        /// Start of the range.
        offset: u64,
        /// Length of the range.
        len: u64,
        /// How the range is brought in.
        method: LoadMethod,
    },
}

/// A finished [`DiskJob`].
#[derive(Debug)]
pub enum DiskDone {
    /// The file, opened, and its metadata.
    Opened {
        /// The job's tag.
        tag: u64,
        /// The open file and its stat, or why not.
        result: io::Result<(Fd, FileStat)>,
    },
    /// The range is resident (bytes loaded: short at end of file).
    Loaded {
        /// The job's tag.
        tag: u64,
        /// Bytes loaded, or the read error.
        result: io::Result<u64>,
    },
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// What a helper does with a [`DiskJob`] (pass it to [`HelperPool::new`]).
pub fn run_disk_job(job: DiskJob) -> DiskDone {
    match job {
        DiskJob::Open {
            tag,
            root,
            path,
            resolve,
            preload,
            method,
        } => {
            let result = sys::retry(|| sys::open_beneath(&*root, &path, resolve))
                .and_then(|fd| sys::fstat(&fd).map(|st| (fd, st)));
            if let Ok((fd, st)) = &result {
                if st.is_file && st.size > 0 && st.size <= preload {
                    let _ = with_scratch(|s| residency::load(fd, 0, st.size, s, method));
                }
            }
            DiskDone::Opened { tag, result }
        }
        DiskJob::Load {
            tag,
            file,
            offset,
            len,
            method,
        } => {
            let result = with_scratch(|s| residency::load(&*file, offset, len, s, method));
            DiskDone::Loaded { tag, result }
        }
    }
}

/// Bytes of read buffers the helpers of this process have allocated (each
/// helper's first read; a helper that only loads with read-ahead has none).
static SCRATCH_BYTES: AtomicU64 = AtomicU64::new(0);

/// Bytes of read buffers the helpers hold (they keep theirs for reuse).
pub fn scratch_bytes() -> u64 {
    SCRATCH_BYTES.load(Ordering::Relaxed)
}

fn with_scratch<T>(f: impl FnOnce(&mut Vec<u8>) -> T) -> T {
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        let before = s.capacity();
        let out = f(&mut s);
        SCRATCH_BYTES.fetch_add(s.capacity().saturating_sub(before) as u64, Ordering::Relaxed);
        out
    })
}

#[cfg(test)]
mod tests;
