//! Per-worker counters of the proxy, summed at exit (`--stats-on-exit`) and
//! published live (`--admin`): what the cache did, how body bytes moved
//! (spliced, tee'd, copied, served from memory) and how each body transfer
//! (a "session") ended — so an experiment can say *why* a CPU figure moved.

use std::sync::atomic::{AtomicU64, Ordering};
use weft_io::sys::counters::KINDS;
use weft_io::SysCounts;

macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident),* $(,)?) => {
        /// Counters one worker keeps.
        #[derive(Clone, Copy, Debug, Default)]
        pub struct ProxyStats {
            $($(#[doc = $doc])* pub $name: u64,)*
            /// System calls by kind.
            pub syscalls: SysCounts,
        }

        const NAMES: &[&str] = &[$(stringify!($name)),*];
        const FIELDS: usize = NAMES.len();

        impl ProxyStats {
            fn values(&self) -> [u64; FIELDS] {
                [$(self.$name),*]
            }
            fn from_values(v: &[u64], syscalls: SysCounts) -> ProxyStats {
                let mut it = v.iter().copied();
                ProxyStats { $($name: it.next().unwrap_or(0),)* syscalls }
            }
            /// Add another worker's counters.
            pub fn add(&mut self, o: &ProxyStats) {
                $(self.$name += o.$name;)*
                self.syscalls.add(&o.syscalls);
            }
        }
    };
}

counters! {
    /// Client connections accepted.
    accepted,
    /// Client connections refused: the backend could not hold the descriptor.
    refused_fd_limit,
    /// Requests refused by access control (403).
    denied,
    /// Requests handled (any outcome).
    requests,
    /// Requests rejected by the codec (4xx) or refused before forwarding.
    bad_requests,
    /// Answered from the cache without contacting the upstream.
    hits,
    /// Answered stale from the cache because the client's max-stale allowed it.
    stale_hits,
    /// Forwarded: nothing usable was stored.
    misses,
    /// Conditional requests sent to refresh a stored response.
    revalidations,
    /// Revalidations answered 304 (stored response refreshed and served).
    revalidated,
    /// Forwarded responses that were not storable (or the cache is off).
    uncacheable,
    /// Responses stored.
    stored,
    /// Stored responses removed after an unsafe method.
    invalidated,
    /// `only-if-cached` requests answered 504.
    only_if_cached_misses,
    /// Requests that missed in memory and waited for their key's objects to
    /// be read from the disk store (`--cache-dir`).
    disk_loads,
    /// Upstream connections opened.
    upstream_connects,
    /// Requests sent on a pooled upstream connection.
    upstream_reused,
    /// Requests resent after a pooled connection turned out closed.
    upstream_retries,
    /// 502 answers (refused, DNS failure, bad response).
    errors_502,
    /// 504 answers (connect or response timeout).
    errors_504,
    /// Connections closed by a timeout.
    timeouts,
    /// CONNECT tunnels established.
    tunnels,
    /// Body bytes moved pipe → client socket by splice.
    bytes_spliced,
    /// Body bytes duplicated by tee (KeepCopy).
    bytes_teed,
    /// Body bytes relayed through user space.
    bytes_copied,
    /// Body bytes read into the cache while forwarding (KeepCopy and copy).
    bytes_filled,
    /// Body bytes sent from the cache.
    bytes_cache,
    /// Tunnel bytes moved by splice.
    tunnel_bytes_spliced,
    /// Tunnel bytes copied.
    tunnel_bytes_copied,
    /// Body transfers completed by splice.
    sessions_splice,
    /// Body transfers completed by splice with tee (KeepCopy).
    sessions_keep_copy,
    /// Body transfers completed by copying.
    sessions_copy,
    /// Splice or tee failed and the transfer went on by copying.
    sessions_fallback,
    /// No pipe was available (budget spent): copied instead.
    sessions_no_pipe,
    /// Client went away during the transfer.
    sessions_client_abort,
    /// Objects completed into the cache after their client went away.
    sessions_orphan_fill,
    /// Upstream closed or failed mid-body (client connection closed).
    sessions_upstream_abort,
    /// Read batches (`--rcv-lowat`) that did not fill in time; those
    /// sessions then read at every arrival.
    read_batches_cut,
}

impl ProxyStats {
    /// A JSON object.
    pub fn to_json(&self) -> String {
        let mut s = String::from("{");
        for (name, v) in NAMES.iter().zip(self.values()) {
            s.push_str(&format!("\"{name}\":{v},"));
        }
        s.push_str("\"syscalls\":{");
        let mut first = true;
        for (name, n) in self.syscalls.nonzero() {
            if !first {
                s.push(',');
            }
            first = false;
            s.push_str(&format!("\"{name}\":{n}"));
        }
        s.push_str("}}");
        s
    }
}

/// One worker's published counters (relaxed atomics, written once per batch).
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
    pub fn publish(&self, s: &ProxyStats) {
        for (a, v) in self.fields.iter().zip(s.values()) {
            a.store(v, Ordering::Relaxed);
        }
        for (a, v) in self.syscalls.iter().zip(s.syscalls.0) {
            a.store(v, Ordering::Relaxed);
        }
    }

    /// Read them back.
    pub fn read(&self) -> ProxyStats {
        let v: Vec<u64> = self.fields.iter().map(|a| a.load(Ordering::Relaxed)).collect();
        let mut sc = SysCounts::default();
        for (o, a) in sc.0.iter_mut().zip(self.syscalls.iter()) {
            *o = a.load(Ordering::Relaxed);
        }
        ProxyStats::from_values(&v, sc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_read_add_and_json() {
        let mut a = ProxyStats {
            hits: 3,
            bytes_spliced: 10,
            ..Default::default()
        };
        let slot = Slot::default();
        slot.publish(&a);
        let b = slot.read();
        assert_eq!(b.hits, 3);
        a.add(&b);
        assert_eq!(a.hits, 6);
        let j = a.to_json();
        assert!(j.contains("\"hits\":6,") && j.contains("\"bytes_spliced\":20,"), "{j}");
        assert!(j.ends_with("\"syscalls\":{}}"), "{j}");
    }
}
