//! Memory, visible and bounded (issue 24): what `/stats` says a worker holds
//! besides its caches, and the caches following memory pressure as well as
//! their byte budgets (thesis 004 §2.2.7).
//!
//! **Socket buffers** are *sampled*, once a second per worker (with the pool
//! decay): the send and receive queue bytes (SIOCOUTQ, SIOCINQ) of every
//! connection, summed into `socket_send_bytes` / `socket_recv_bytes`. Summing
//! on every change would cost two ioctls per write; once a second costs two
//! per connection per second (at 10,000 connections about 20,000 cheap ioctls,
//! a few milliseconds a second). These are payload bytes; the kernel's
//! sk_buffs around them are larger.
//!
//! **Helpers** hold a read buffer (64 KiB, kept while the helper lives) once
//! they had to read (`--helper-load read`, or read-ahead's fallback), and the
//! queued jobs: `helper_bytes` (the pool's, reported by worker 0).
//!
//! **Memory pressure** (`--memory-pressure`): one watcher thread per process
//! blocks on the kernel's notification ([`weft_io::sys::pressure`]: the v1
//! memory cgroup's `memory.pressure_level`, or a PSI trigger) and bumps a
//! generation; each worker, at its next once-a-second check, drops every
//! file-cache entry, mapped chunk and object-cache entry no response in
//! flight uses (they are rebuilt on demand) and its idle pooled buffers.
//! `pressure_shrinks` and `pressure_released_bytes` count what it did.

use crate::conn::Slot;
use crate::worker::Shared;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;
use weft_io::sys;
use weft_io::Slab;

/// Which kernel notification the caches follow (`--memory-pressure`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MemoryPressure {
    /// Only the byte budgets.
    #[default]
    Off,
    /// The v1 memory cgroup's `memory.pressure_level` at this level.
    Cgroup(Level),
    /// A PSI trigger: tasks stalled on memory 100 ms within 2 s (system-wide).
    Psi,
}

/// A v1 `memory.pressure_level` level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Any reclaim.
    Low,
    /// Reclaim working hard.
    Medium,
    /// About to run out.
    Critical,
}

impl std::str::FromStr for MemoryPressure {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "off" => MemoryPressure::Off,
            "psi" => MemoryPressure::Psi,
            "cgroup" | "cgroup:medium" => MemoryPressure::Cgroup(Level::Medium),
            "cgroup:low" => MemoryPressure::Cgroup(Level::Low),
            "cgroup:critical" => MemoryPressure::Cgroup(Level::Critical),
            _ => {
                return Err(format!(
                "invalid memory pressure source `{s}` (off, psi, cgroup, cgroup:low, cgroup:medium, cgroup:critical)"
            ))
            }
        })
    }
}

/// Pressure notifications seen by the watcher so far.
static GENERATION: AtomicU64 = AtomicU64::new(0);
static WATCHER: OnceLock<Result<(), String>> = OnceLock::new();

/// Start the process's pressure watcher for `how` (once; later calls return
/// the first one's result). An error says why the kernel refused.
pub fn watch(how: MemoryPressure) -> Result<(), String> {
    WATCHER
        .get_or_init(|| {
            let w = match how {
                MemoryPressure::Off => return Ok(()),
                MemoryPressure::Psi => sys::pressure::psi_trigger(Duration::from_millis(100)),
                MemoryPressure::Cgroup(l) => sys::pressure::cgroup_level(match l {
                    Level::Low => "low",
                    Level::Medium => "medium",
                    Level::Critical => "critical",
                }),
            }
            .map_err(|e| format!("--memory-pressure: cannot register with the kernel: {e}"))?;
            std::thread::Builder::new()
                .name("weft-pressure".into())
                .spawn(move || loop {
                    match w.wait(Duration::from_secs(3600)) {
                        Ok(true) => {
                            GENERATION.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(false) => {}
                        Err(_) => return,
                    }
                })
                .map(drop)
                .map_err(|e| format!("--memory-pressure: {e}"))
        })
        .clone()
}

/// Once a second: sample the socket queues, and
/// shrink the caches if memory pressure was reported since the last check.
pub(crate) fn each_second(s: &mut Shared<'_>, conns: &Slab<Slot>) {
    let (mut send, mut recv) = (0, 0);
    for t in conns.tokens() {
        if let Some((o, i)) = conns.get(t).and_then(|c| sys::sockmem::queued(c.fd()).ok()) {
            send += o;
            recv += i;
        }
    }
    (s.stats.socket_send_bytes, s.stats.socket_recv_bytes) = (send, recv);
    let g = GENERATION.load(Ordering::Relaxed);
    if g != s.pressure_seen {
        s.pressure_seen = g;
        shrink(s);
    }
}

/// Drop what no response in flight uses: file-cache entries and chunks,
/// object-cache entries, idle pooled buffers.
fn shrink(s: &mut Shared<'_>) {
    let mut freed = 0;
    if let Some(f) = s.files.as_mut() {
        freed += f.shrink();
    }
    if let Some(o) = s.objects.as_mut() {
        freed += o.shrink();
    }
    let pooled = (s.pool.idle_bytes() + s.own_pool.idle_bytes()) as u64;
    s.pool.trim(0);
    s.own_pool.trim(0);
    s.records.trim(0);
    freed += pooled.saturating_sub((s.pool.idle_bytes() + s.own_pool.idle_bytes()) as u64);
    s.stats.pressure_shrinks += 1;
    s.stats.pressure_released_bytes += freed;
}
