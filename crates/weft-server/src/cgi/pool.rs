//! The processes of a `--cgi PREFIX=PROGRAM` pool (FastCGI mode): started
//! once and kept, so a request costs a message exchange rather than a
//! fork and exec (Flash-Lite's persistent CGI; FastCGI's own process model).
//!
//! Each process has its own listening Unix socket (in a private directory
//! under the temporary directory), passed to it as descriptor 0
//! (FCGI_LISTENSOCK_FILENO) as the FastCGI specification says. weft keeps
//! the listener, so a replacement process inherits the same socket and the
//! serve worker that owns the slot simply connects again.
//!
//! A supervisor thread waits for the processes: one that exits (a crash) is
//! started again; one a serve worker asks to replace (it hung past
//! `--cgi-timeout`, or wrote more than it declared) is killed first. Restarts
//! of a slot that keeps dying are spaced (up to a second apart). The pool
//! kills its processes and removes its directory when dropped.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

struct Slot {
    listener: UnixListener,
    path: String,
    child: Option<Child>,
    kill: bool,
    /// Earliest time of the next start (a slot that keeps dying waits).
    next_start: Instant,
    backoff: Duration,
}

/// A supervised pool of FastCGI processes.
pub struct Pool {
    program: PathBuf,
    dir: PathBuf,
    paths: Vec<String>,
    slots: Mutex<Vec<Slot>>,
    /// Processes started per slot so far (a slot being replaced is used
    /// again once its count has moved on).
    gens: Vec<AtomicU64>,
    wake: Condvar,
    restarts: AtomicU64,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("program", &self.program)
            .field("processes", &self.paths.len())
            .finish()
    }
}

fn start_one(program: &Path, listener: &UnixListener) -> io::Result<Child> {
    let fd = OwnedFd::from(listener.try_clone()?);
    let mut cmd = Command::new(program);
    if let Some(dir) = program.parent().filter(|d| !d.as_os_str().is_empty()) {
        cmd.current_dir(dir);
    }
    cmd.stdin(Stdio::from(fd))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
}

impl Pool {
    /// Start `n` processes of `program`.
    pub fn start(program: &Path, n: usize) -> io::Result<Arc<Pool>> {
        static POOLS: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "weft-cgi-{}-{}",
            std::process::id(),
            POOLS.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let mut slots = Vec::with_capacity(n);
        let mut paths = Vec::with_capacity(n);
        for i in 0..n.max(1) {
            let path = dir.join(format!("{i}.sock"));
            let listener = UnixListener::bind(&path)?;
            let p = path.to_string_lossy().into_owned();
            let child = start_one(program, &listener)?;
            paths.push(p.clone());
            slots.push(Slot {
                listener,
                path: p,
                child: Some(child),
                kill: false,
                next_start: Instant::now(),
                backoff: Duration::from_millis(10),
            });
        }
        let pool = Arc::new(Pool {
            program: program.to_path_buf(),
            dir,
            paths,
            gens: (0..n.max(1)).map(|_| AtomicU64::new(1)).collect(),
            slots: Mutex::new(slots),
            wake: Condvar::new(),
            restarts: AtomicU64::new(0),
        });
        let weak = Arc::downgrade(&pool);
        std::thread::Builder::new()
            .name("weft-cgi-pool".into())
            .spawn(move || supervise(weak))?;
        Ok(pool)
    }

    /// Processes in the pool.
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    /// Is the pool empty? (Never: a pool has at least one process.)
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// The socket of slot `i`.
    pub fn path(&self, i: usize) -> &str {
        &self.paths[i]
    }

    /// Processes started again so far.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// Processes started in slot `i` so far.
    pub fn generation(&self, i: usize) -> u64 {
        self.gens[i].load(Ordering::Acquire)
    }

    /// Kill slot `i`'s process and start another (it hung or misbehaved).
    /// Returns the generation of the replacement: until it runs, a
    /// connection could reach the old process, still accepting.
    pub fn replace(&self, i: usize) -> u64 {
        let next = self.generation(i) + 1;
        if let Ok(mut s) = self.slots.lock() {
            if let Some(slot) = s.get_mut(i) {
                slot.kill = true;
            }
        }
        self.wake.notify_one();
        next
    }

    /// One round: kill what must go, restart what exited. Returns false
    /// when the pool is being dropped.
    fn tend(&self) {
        let Ok(mut slots) = self.slots.lock() else {
            return;
        };
        let now = Instant::now();
        for (i, s) in slots.iter_mut().enumerate() {
            if let Some(ch) = s.child.as_mut() {
                if s.kill {
                    let _ = ch.kill();
                    s.kill = false;
                    s.backoff = Duration::from_millis(10);
                }
                match ch.try_wait() {
                    Ok(None) => continue,
                    _ => {
                        s.child = None;
                        s.next_start = now + s.backoff;
                        s.backoff = (s.backoff * 2).min(Duration::from_secs(1));
                    }
                }
            }
            if s.child.is_none() && now >= s.next_start {
                match start_one(&self.program, &s.listener) {
                    Ok(ch) => {
                        s.child = Some(ch);
                        self.gens[i].fetch_add(1, Ordering::Release);
                        self.restarts.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        weft_core::warn!("cgi: cannot restart {} on {}: {e}", self.program.display(), s.path);
                        s.next_start = now + Duration::from_secs(1);
                    }
                }
            }
        }
        // A process that stays up a while earns a quick restart again.
        for s in slots
            .iter_mut()
            .filter(|s| s.child.is_some() && now > s.next_start + Duration::from_secs(5))
        {
            s.backoff = Duration::from_millis(10);
        }
        let _unused = self.wake.wait_timeout(slots, Duration::from_millis(50));
    }
}

fn supervise(pool: Weak<Pool>) {
    while let Some(p) = pool.upgrade() {
        p.tend();
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if let Ok(slots) = self.slots.get_mut() {
            for s in slots.iter_mut() {
                if let Some(mut ch) = s.child.take() {
                    let _ = ch.kill();
                    let _ = ch.wait();
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
