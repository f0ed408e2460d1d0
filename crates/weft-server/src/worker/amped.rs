//! AMPED (thesis 004 §4.3–4.4): the loop never waits on the disk.
//!
//! Before a file body is read or sent, [`before_file_read`] asks whether the
//! range is in the page cache (`--residency nowait`: `preadv2(RWF_NOWAIT)`
//! probes; `mincore`; `none`). A miss, and an open or stat of a path the
//! path cache does not hold, parks the connection: the request stays in its
//! input buffer, a [`DiskJob`] goes to the shared [`HelperPool`], and when the
//! helper's answer arrives through the worker's eventfd the connection is
//! driven again and answers the same request from the now-warm caches. A
//! full helper queue answers 503 for that request; the loop never blocks.
//!
//! A positive residency test is trusted for [`RESIDENT_TRUST`], so a hot file
//! costs no test per request.
//!
//! The snapshot rule (§2.2.5) lives here too: a body sent from the file (or
//! its mappings) is checked (inode, size, mtime by `fstat`) before its head
//! is written and again before every flush that resumes a blocked send; the
//! connection is aborted if it changed, so a client sees a truncated
//! response, never a complete torn one.

use super::{schedule, Shared};
use crate::config::{ResidencyTest, SendMode};
use crate::conn::Conn;
use crate::files::CachedFile;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_io::helpers::{DiskDone, DiskJob, HelperPool};
use weft_io::sys::{self, residency, Fd};
use weft_io::{Ctx, Interest, Poller, Readiness, Token};

/// How long a residency test that found a whole range resident is trusted.
pub(crate) const RESIDENT_TRUST: Duration = Duration::from_millis(250);
/// Jobs waiting for a helper before requests get 503.
pub(crate) const QUEUE_LIMIT: usize = 4096;
/// Probe size of the `nowait` test.
const PROBE: usize = 64 * 1024;

/// The helper pool of a server (shared by its workers).
pub type Helpers = HelperPool<DiskJob, DiskDone>;

/// What a parked request waits for (set by the answer path, taken by the worker).
pub(crate) enum Wait {
    /// Open and stat this path (relative to the root).
    Open(Box<[u8]>),
    /// Bring a range of this file into the page cache.
    Load { file: Arc<Fd>, offset: u64, len: u64 },
}

/// Why a file body cannot be queued now.
pub(crate) enum NotYet {
    /// Parked: `Shared::wait` says for what.
    Wait,
    /// The helpers' queue is full.
    Busy,
    /// The file is not what the cache entry says any more.
    Changed,
}

/// A file body in flight on a connection whose send blocked: checked
/// again before each resumed flush.
pub(crate) type InFlight = Rc<CachedFile>;

/// What a job is about: requests waiting for the same open or load share one job.
#[derive(Hash, PartialEq, Eq)]
enum JobKey {
    Open(Box<[u8]>),
    Load(usize, u64, u64),
}

/// A job in flight: its key and the connections parked on it.
struct Job {
    key: JobKey,
    waiting: Vec<Token>,
}

/// One worker's side of the helper pool: parked connections by job tag.
pub(crate) struct Amped {
    pool: Arc<Helpers>,
    index: usize,
    jobs: HashMap<u64, Job>,
    by_key: HashMap<JobKey, u64>,
    next_tag: u64,
    done: Vec<DiskDone>,
}

/// A finished job: the connections to resume, the path it opened, the answer.
pub(crate) type Finished = (Vec<Token>, Option<Box<[u8]>>, DiskDone);

impl Amped {
    pub(crate) fn new(pool: Arc<Helpers>, index: usize) -> Amped {
        Amped {
            pool,
            index,
            jobs: HashMap::new(),
            by_key: HashMap::new(),
            next_tag: 1,
            done: Vec::new(),
        }
    }

    /// The eventfd the worker's loop watches.
    pub(crate) fn waker(&self) -> std::os::fd::RawFd {
        self.pool.waker(self.index)
    }

    /// Hand `wait` to a helper for the connection `token`. False when the
    /// queue is full (the caller answers 503).
    pub(crate) fn submit(&mut self, s: &Shared<'_>, token: Token, wait: Wait) -> bool {
        let key = match &wait {
            Wait::Open(rel) => JobKey::Open(rel.clone()),
            Wait::Load { file, offset, len } => JobKey::Load(Arc::as_ptr(file) as usize, *offset, *len),
        };
        if let Some(job) = self.by_key.get(&key).and_then(|t| self.jobs.get_mut(t)) {
            // Already asked: wait for the same answer.
            job.waiting.push(token);
            return true;
        }
        let tag = self.next_tag;
        let job = match wait {
            Wait::Open(rel) => {
                let Some(files) = s.files.as_ref() else {
                    return false;
                };
                let (root, path, resolve) = files.root_for(&rel);
                let Ok(path) = std::ffi::CString::new(if path.is_empty() { &b"."[..] } else { path }) else {
                    return false;
                };
                let preload = match s.cfg.send {
                    SendMode::Auto => s.cfg.small_file_max,
                    _ => 0,
                };
                DiskJob::Open {
                    tag,
                    root: Arc::clone(root),
                    path,
                    resolve,
                    preload,
                    method: s.cfg.helper_load,
                }
            }
            Wait::Load { file, offset, len } => DiskJob::Load {
                tag,
                file,
                offset,
                len,
                method: s.cfg.helper_load,
            },
        };
        if self.pool.submit(self.index, job).is_err() {
            return false;
        }
        self.next_tag += 1;
        self.by_key.insert(
            match &key {
                JobKey::Open(r) => JobKey::Open(r.clone()),
                JobKey::Load(a, b, c) => JobKey::Load(*a, *b, *c),
            },
            tag,
        );
        self.jobs.insert(
            tag,
            Job {
                key,
                waiting: vec![token],
            },
        );
        true
    }

    /// The helpers' answers, with the connections parked on each.
    pub(crate) fn finished(&mut self, s: &mut Shared<'_>, out: &mut Vec<Finished>) {
        self.pool.take(self.index, &mut self.done);
        for d in self.done.drain(..) {
            let tag = match &d {
                DiskDone::Opened { tag, .. } | DiskDone::Loaded { tag, .. } => *tag,
            };
            if let Some(job) = self.jobs.remove(&tag) {
                self.by_key.remove(&job.key);
                let rel = match job.key {
                    JobKey::Open(rel) => Some(rel),
                    JobKey::Load(..) => None,
                };
                out.push((job.waiting, rel, d));
            }
        }
        // The pool serves every worker: its numbers are reported once, by
        // worker 0, so the workers' sum (`total`) counts them once.
        if self.index == 0 {
            let st = self.pool.stats();
            s.stats.helper_jobs = st.completed;
            s.stats.helper_threads = st.started as u64;
            s.stats.helper_queue = st.queued as u64;
            s.stats.helper_bytes = weft_io::helpers::scratch_bytes()
                + st.queued as u64 * std::mem::size_of::<weft_io::helpers::DiskJob>() as u64;
        }
    }
}

/// Check, before a body is read or sent from `f`, that doing so cannot block
/// the loop (AMPED) and that the file is still the one cached (snapshot
/// rule, for bodies short enough to go whole).
pub(crate) fn before_file_read(
    s: &mut Shared<'_>,
    f: &CachedFile,
    start: u64,
    end: u64,
    now: Instant,
) -> Result<(), NotYet> {
    // `--snapshot-check notify`: a watched file no change notice touched
    // needs no fstat (`crate::notice`).
    if s.cfg.snapshot_check && !crate::notice::quiet(f) && !same_file(f) {
        return Err(NotYet::Changed);
    }
    if !s.amped || s.loaded || s.cfg.residency == ResidencyTest::None {
        return Ok(());
    }
    let trusted = f
        .resident_at
        .get()
        .is_some_and(|t| now.saturating_duration_since(t) < RESIDENT_TRUST);
    if !s.cfg.test_miss && (trusted || resident(s, f, start, end)) {
        if !trusted {
            f.resident_at.set(Some(now));
        }
        return Ok(());
    }
    s.stats.residency_misses += 1;
    if s.overloaded {
        return Err(NotYet::Busy);
    }
    s.wait = Some(Wait::Load {
        file: Arc::clone(&f.fd),
        offset: start,
        len: end - start,
    });
    Err(NotYet::Wait)
}

/// Is `[start, end)` of `f` in the page cache?
fn resident(s: &mut Shared<'_>, f: &CachedFile, start: u64, end: u64) -> bool {
    s.stats.residency_tests += 1;
    if s.cfg.residency == ResidencyTest::Cachestat {
        let page = residency::page_size() as u64;
        let pages = end.div_ceil(page) - start / page;
        match residency::cached_pages(&*f.fd, start, end - start) {
            Ok(Some(n)) => return n >= pages,
            Ok(None) => {}         // no cachestat here: the RWF_NOWAIT probe below
            Err(_) => return true, // the read itself will report the error
        }
    }
    if matches!(s.cfg.residency, ResidencyTest::Nowait | ResidencyTest::Cachestat) {
        if s.probe.is_empty() {
            s.probe = vec![0u8; PROBE];
        }
        let mut at = start;
        while at < end {
            let want = ((end - at) as usize).min(PROBE);
            match residency::pread_nowait(&*f.fd, &mut s.probe[..want], at) {
                Ok(residency::Nowait::Read(n)) if n == want => at += n as u64,
                Ok(residency::Nowait::Read(0)) => return true, // end of file: the send will say
                Ok(residency::Nowait::Read(_)) | Ok(residency::Nowait::WouldBlock) => return false,
                Ok(residency::Nowait::Unsupported) => return mincore(f, start, end),
                Err(_) => return true, // the read itself will report the error
            }
        }
        return true;
    }
    mincore(f, start, end)
}

fn mincore(f: &CachedFile, start: u64, end: u64) -> bool {
    residency::resident(&*f.fd, start, (end - start) as usize).map_or(true, |r| r.all())
}

/// Is the open file still what the cache entry describes?
pub(crate) fn same_file(f: &CachedFile) -> bool {
    match sys::fstat(&*f.fd) {
        Ok(st) => st.ino == f.stat.ino && st.size == f.stat.size && st.mtime_ns == f.stat.mtime_ns,
        Err(_) => false,
    }
}

/// The body of the response just answered is sent from `f` (a file range or
/// its mappings): remember it until the flush after the answer says whether
/// the send finished ([`after_flush`]).
pub(crate) fn sending_from(s: &mut Shared<'_>, f: Rc<CachedFile>) {
    if s.cfg.snapshot_check {
        s.in_flight = Some(f);
    }
}

/// Before a flush resumes a blocked send: is the file still the one whose
/// head went out? False: abort the response.
pub(crate) fn before_flush(c: &Conn, s: &mut Shared<'_>) -> bool {
    if !c.snapshot {
        return true;
    }
    let same = s.tails.get(&c.token).is_none_or(|f| same_file(f));
    if !same {
        s.stats.snapshot_aborts += 1;
    }
    same
}

/// After a flush: a blocked send keeps its file to check before the next
/// flush; a finished one forgets it.
pub(crate) fn after_flush(c: &mut Conn, s: &mut Shared<'_>, blocked: bool) {
    let fresh = s.in_flight.take();
    if blocked {
        if let Some(f) = fresh {
            s.tails.insert(c.token, f);
            c.snapshot = true;
        }
    } else if c.snapshot {
        s.tails.remove(&c.token);
        c.snapshot = false;
    }
}

/// The worker's side of AMPED: parking a connection and resuming it.
impl super::Worker<'_> {
    /// AMPED: `token`'s first request waits for the disk: submit `wait` to a
    /// helper and park the connection (no interest); a full queue answers 503.
    pub(super) fn park<P: Poller>(&mut self, cx: &mut Ctx<P>, token: Token, wait: Wait) {
        // Admission's clock: the page cache's inflow, whole ranges and
        // streamed chunks alike.
        if let (Some(a), Wait::Load { len, .. }) = (self.shared.admit.as_mut(), &wait) {
            a.loaded(*len);
        }
        let submitted = match self.helpers.as_mut() {
            Some(h) => h.submit(&self.shared, token, wait),
            None => false,
        };
        if !submitted {
            self.shared.overloaded = true;
            self.drive(cx, token);
            self.shared.overloaded = false;
            return;
        }
        self.shared.stats.parked += 1;
        let Some(c) = super::busy(&mut self.conns, token) else {
            return;
        };
        c.parked = true;
        // A readiness-tracking backend must not keep offering it meanwhile.
        cx.learned(c.fd.raw(), Readiness::default());
        c.input.release(&mut self.shared.pool);
        c.out.release_own(&mut self.shared.own_pool);
        if !P::CAPS.fixed_interest && c.interest != Interest::NONE {
            if cx.reregister(c.fd.raw(), token, Interest::NONE).is_err() {
                self.close(cx, token);
                return;
            }
            c.interest = Interest::NONE;
        }
        schedule(c, self.shared.cfg, self.shared.draining, cx);
    }

    /// The helpers answered: adopt what they opened, resume the connections.
    pub(super) fn helpers_done<P: Poller>(&mut self, cx: &mut Ctx<P>) {
        cx.learned(self.helpers.as_ref().map_or(-1, |h| h.waker()), Readiness::default());
        let mut done = std::mem::take(&mut self.resumed);
        if let Some(h) = self.helpers.as_mut() {
            h.finished(&mut self.shared, &mut done);
        }
        for (tokens, rel, d) in done.drain(..) {
            if let Some(files) = self.shared.files.as_mut() {
                files.set_resuming(true);
            }
            let loaded = match d {
                weft_io::helpers::DiskDone::Opened { result, .. } => {
                    if let (Some(files), Some(rel)) = (self.shared.files.as_mut(), rel) {
                        files.adopt(rel, result);
                    }
                    false
                }
                weft_io::helpers::DiskDone::Loaded { .. } => true,
            };
            for token in tokens {
                let Some(c) = super::busy(&mut self.conns, token) else {
                    continue; // closed while it waited
                };
                c.parked = false;
                self.shared.loaded = loaded;
                self.drive(cx, token);
                self.shared.loaded = false;
            }
            if let Some(files) = self.shared.files.as_mut() {
                files.set_resuming(false);
            }
        }
        self.resumed = done;
    }
}
