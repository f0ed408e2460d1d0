//! Per-worker counters: what was served and by which path.

use weft_io::{SysCounts, TrackerStats};

/// Counters one worker keeps; summed over workers at exit.
#[derive(Clone, Copy, Debug, Default)]
pub struct ServeStats {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections refused because the backend could not hold the descriptor.
    pub refused_fd_limit: u64,
    /// Requests answered (any status).
    pub requests: u64,
    /// Body bytes sent with sendfile.
    pub bytes_sendfile: u64,
    /// Body bytes sent by pread + writev.
    pub bytes_copy: u64,
    /// Body bytes sent from memory (small-file cache, demo site, generated pages).
    pub bytes_memory: u64,
    /// Connections closed by a timeout.
    pub timeouts: u64,
    /// Requests rejected with 4xx/5xx by the codec.
    pub bad_requests: u64,
    /// System calls by kind.
    pub syscalls: SysCounts,
    /// What the `tracked` backend's readiness table answered (None for the
    /// other backends).
    pub tracker: Option<TrackerStats>,
}

impl ServeStats {
    /// Add another worker's counters.
    pub fn add(&mut self, o: &ServeStats) {
        self.accepted += o.accepted;
        self.refused_fd_limit += o.refused_fd_limit;
        self.requests += o.requests;
        self.bytes_sendfile += o.bytes_sendfile;
        self.bytes_copy += o.bytes_copy;
        self.bytes_memory += o.bytes_memory;
        self.timeouts += o.timeouts;
        self.bad_requests += o.bad_requests;
        self.syscalls.add(&o.syscalls);
        if let Some(t) = &o.tracker {
            self.tracker.get_or_insert_with(TrackerStats::default).add(t);
        }
    }

    /// A JSON object (hand-written: a few integers, no need for a serializer here).
    pub fn to_json(&self) -> String {
        let mut s = format!(
            "{{\"accepted\":{},\"refused_fd_limit\":{},\"requests\":{},\"bytes_sendfile\":{},\"bytes_copy\":{},\"bytes_memory\":{},\"timeouts\":{},\"bad_requests\":{},\"syscalls\":{{",
            self.accepted,
            self.refused_fd_limit,
            self.requests,
            self.bytes_sendfile,
            self.bytes_copy,
            self.bytes_memory,
            self.timeouts,
            self.bad_requests
        );
        let mut first = true;
        for (name, n) in self.syscalls.nonzero() {
            if !first {
                s.push(',');
            }
            first = false;
            s.push_str(&format!("\"{name}\":{n}"));
        }
        s.push('}');
        if let Some(t) = &self.tracker {
            s.push_str(&format!(
                ",\"tracker\":{{\"user_passes\":{},\"user_events\":{},\"kernel_polls\":{},\"forced_polls\":{}}}",
                t.user_passes, t.user_events, t.kernel_polls, t.forced_polls
            ));
        }
        s.push('}');
        s
    }
}
