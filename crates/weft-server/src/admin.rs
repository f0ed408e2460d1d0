//! The admin endpoint (`--admin ADDR`): live counters as JSON, per worker and
//! in total, so an experiment can read system calls per request while the
//! server runs. The listener thread is `weft_io::admin`'s; this module holds
//! the server's counter slots and renders them.
//!
//! Each worker publishes its counters into its own slot of relaxed atomics at
//! the end of every event-loop batch (a few dozen plain stores, no lock, no
//! shared cache line with other workers). The admin listener runs on its own
//! thread with blocking std sockets: it is a cold diagnostic path, and keeping
//! it off the workers keeps their system-call counts exactly the server's.

use crate::stats::ServeStats;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use weft_io::sys::counters::KINDS;
use weft_io::SysCounts;

const FIELDS: usize = 13;

/// One worker's published counters.
pub struct Slot {
    fields: [AtomicU64; FIELDS],
    syscalls: [AtomicU64; KINDS],
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            fields: std::array::from_fn(|_| AtomicU64::new(0)),
            syscalls: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Slot {
    /// Publish a worker's counters.
    pub fn publish(&self, s: &ServeStats) {
        let f = [
            s.accepted,
            s.refused_fd_limit,
            s.requests,
            s.bytes_sendfile,
            s.bytes_copy,
            s.bytes_memory,
            s.timeouts,
            s.bad_requests,
            u64::from(s.tracker.is_some()),
            s.tracker.map_or(0, |t| t.user_passes),
            s.tracker.map_or(0, |t| t.user_events),
            s.tracker.map_or(0, |t| t.kernel_polls),
            s.tracker.map_or(0, |t| t.forced_polls),
        ];
        for (a, v) in self.fields.iter().zip(f) {
            a.store(v, Ordering::Relaxed);
        }
        for (a, v) in self.syscalls.iter().zip(s.syscalls.0) {
            a.store(v, Ordering::Relaxed);
        }
    }

    /// Read the published counters.
    pub fn read(&self) -> ServeStats {
        let f: Vec<u64> = self.fields.iter().map(|a| a.load(Ordering::Relaxed)).collect();
        let mut sc = SysCounts::default();
        for (o, a) in sc.0.iter_mut().zip(self.syscalls.iter()) {
            *o = a.load(Ordering::Relaxed);
        }
        ServeStats {
            accepted: f[0],
            refused_fd_limit: f[1],
            requests: f[2],
            bytes_sendfile: f[3],
            bytes_copy: f[4],
            bytes_memory: f[5],
            timeouts: f[6],
            bad_requests: f[7],
            syscalls: sc,
            tracker: (f[8] != 0).then_some(weft_io::TrackerStats {
                user_passes: f[9],
                user_events: f[10],
                kernel_polls: f[11],
                forced_polls: f[12],
            }),
        }
    }
}

/// The JSON document the endpoint serves.
pub fn render(backend: &str, slots: &[Slot]) -> String {
    let mut total = ServeStats::default();
    let mut workers = Vec::with_capacity(slots.len());
    for (i, s) in slots.iter().enumerate() {
        let st = s.read();
        total.add(&st);
        workers.push(format!("{{\"worker\":{i},\"stats\":{}}}", st.to_json()));
    }
    format!(
        "{{\"backend\":\"{backend}\",\"workers\":[{}],\"total\":{}}}\n",
        workers.join(","),
        total.to_json()
    )
}

/// Start the admin listener on `addr`; returns the bound address.
pub fn start(addr: SocketAddr, backend: &'static str, slots: Arc<Vec<Slot>>) -> std::io::Result<SocketAddr> {
    weft_io::admin::start(addr, Arc::new(move || render(backend, &slots)))
}
