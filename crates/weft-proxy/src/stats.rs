//! Per-worker counters of the proxy, summed at exit (`--stats-on-exit`) and
//! published live (`--admin`): what the cache did, how body bytes moved
//! (spliced, tee'd, copied, served from memory) and how each body transfer
//! (a "session") ended — so an experiment can say *why* a CPU figure moved.
//!
//! Declared once in the metrics registry ([`weft_core::metrics`](mod@weft_core::metrics)): a worker
//! bumps plain `u64` fields; the registry generates the sum, the slot the
//! worker publishes into once per batch, and the JSON and Prometheus renderings.

use std::sync::Arc;
use weft_core::metrics;
use weft_io::{PoolGauges, SysCounts};

weft_core::metrics! {
    /// Counters one worker keeps.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct ProxyStats {
        /// Client connections accepted.
        counter accepted,
        /// Client connections refused: the backend could not hold the descriptor.
        counter refused_fd_limit,
        /// Requests refused by access control (403).
        counter denied,
        /// Requests handled (any outcome).
        counter requests,
        /// Requests rejected by the codec (4xx) or refused before forwarding.
        counter bad_requests,
        /// Answered from the cache without contacting the upstream.
        counter hits,
        /// Answered stale from the cache because the client's max-stale allowed it.
        counter stale_hits,
        /// Forwarded: nothing usable was stored.
        counter misses,
        /// Conditional requests sent to refresh a stored response.
        counter revalidations,
        /// Revalidations answered 304 (stored response refreshed and served).
        counter revalidated,
        /// Forwarded responses that were not storable (or the cache is off).
        counter uncacheable,
        /// Responses stored.
        counter stored,
        /// Stored responses removed after an unsafe method.
        counter invalidated,
        /// `only-if-cached` requests answered 504.
        counter only_if_cached_misses,
        /// Requests that missed in memory and waited for their key's objects to
        /// be read from the disk store (`--cache-dir`).
        counter disk_loads,
        /// Upstream connections opened.
        counter upstream_connects,
        /// Requests sent on a pooled upstream connection.
        counter upstream_reused,
        /// Requests resent after a pooled connection turned out closed.
        counter upstream_retries,
        /// 502 answers (refused, DNS failure, bad response).
        counter errors_502,
        /// 504 answers (connect or response timeout).
        counter errors_504,
        /// Connections closed by a timeout.
        counter timeouts,
        /// Tunnels established: CONNECT, and upgrades after a 101.
        counter tunnels,
        /// Body bytes moved pipe → client socket by splice.
        counter bytes_spliced,
        /// Body bytes duplicated by tee (KeepCopy).
        counter bytes_teed,
        /// Body bytes relayed through user space.
        counter bytes_copied,
        /// Body bytes read into the cache while forwarding (KeepCopy and copy).
        counter bytes_filled,
        /// Body bytes sent from the cache.
        counter bytes_cache,
        /// Tunnel bytes moved by splice.
        counter tunnel_bytes_spliced,
        /// Tunnel bytes copied.
        counter tunnel_bytes_copied,
        /// Body transfers completed by splice.
        counter sessions_splice,
        /// Body transfers completed by splice with tee (KeepCopy).
        counter sessions_keep_copy,
        /// Body transfers completed by copying.
        counter sessions_copy,
        /// Splice or tee failed and the transfer went on by copying.
        counter sessions_fallback,
        /// No pipe was available (budget spent): copied instead.
        counter sessions_no_pipe,
        /// Client went away during the transfer.
        counter sessions_client_abort,
        /// Objects completed into the cache after their client went away.
        counter sessions_orphan_fill,
        /// Upstream closed or failed mid-body (client connection closed).
        counter sessions_upstream_abort,
        /// Read batches (`--rcv-lowat`) that did not fill in time; those
        /// sessions then read at every arrival.
        counter read_batches_cut,
        /// Client connections closed at accept because the worker held
        /// `--max-connections` already.
        counter refused_max_connections,
        /// Client connections open.
        gauge open_connections,
        /// Upstream connections open (in use or pooled).
        gauge upstream_connections,
        /// Upstream connections idle in the pool.
        gauge upstream_pooled,
        /// Client records (with their request state: head table, head copy,
        /// cache key, transaction) waiting in the pool for a connection that
        /// wakes or is accepted.
        gauge request_state_pooled,
        /// Reads of response body bytes from the upstream into user space
        /// (copy path, and chunked framing), EAGAINs included.
        counter calls_copy_read,
        /// Flushes of the client's output during a relay (heads, framing,
        /// copied body bytes).
        counter calls_client_send,
        /// Splices upstream → pipe, EAGAINs included.
        counter calls_splice_in,
        /// Splices pipe → client, EAGAINs included.
        counter calls_splice_out,
        /// Tees into the output pipe (KeepCopy), or the pipe-to-pipe
        /// splices that replace them once the object stopped filling.
        counter calls_tee,
        /// Reads of tee'd bytes from the intake pipe into the object.
        counter calls_tee_read,
        /// Request body bytes moved pipe → upstream by splice (POST, PUT).
        counter bytes_spliced_up,
        /// Splices of request bodies (client → pipe, pipe → upstream),
        /// EAGAINs included.
        counter calls_splice_up,
        /// Body bytes moved pipe → client by uring linked chains (issue 27;
        /// also counted in `bytes_spliced`).
        counter bytes_linked,
        /// Linked chains submitted (`--uring-linked`): each is one
        /// io_uring_enter doing the splice in, the tee and the splice out
        /// (and the head's write into the pipe) of a chunk.
        counter calls_linked,
        /// CONNECT tunnels forwarded in the kernel by the sockmap program.
        counter sockmap_sessions,
        /// Tunnel bytes the sockmap program redirected, counted at each end of
        /// stream (TCP_INFO bytes_acked + SIOCOUTQ of the receiving peer since
        /// the join).
        counter sockmap_bytes,
        /// Tunnels and response bodies that asked for sockmap and spliced
        /// instead (BPF or its stream parser unavailable, map full, a tunnel
        /// whose client ended before the join, a body whose upstream had
        /// already ended).
        counter sockmap_declined,
        /// Response bodies forwarded in the kernel by the sockmap program
        /// (`--splice sockmap`: not cacheable, of known length, at or above
        /// the splice threshold).
        counter sockmap_bodies,
        /// Body bytes those redirected (the bytes read with the head are
        /// counted in `bytes_copied`).
        counter sockmap_body_bytes,
        /// Request bodies a response overtook whose rest was read and
        /// dropped, so the client kept its connection.
        counter bodies_discarded,
        /// Tunnel directions and bodies forwarded in the kernel whose
        /// receiving socket was written other bytes than the program
        /// redirected to it (a kernel fault: the connections are reset, and
        /// new tunnels and bodies splice from then on).
        counter sockmap_mismatches,
        /// Upstream connections closed instead of pooled because bytes (sent
        /// past a response's length) or a FIN waited in them.
        counter upstream_not_empty,
        /// Protocol upgrades (WebSocket) the upstream accepted with 101:
        /// tunnels after a forwarded request.
        counter upgrades,
        /// Stale stored responses sent in place of an origin's error
        /// (`stale-if-error`: a failed connection, a timeout, 500/502/503/504).
        counter stale_if_error,
        /// Misses that waited for another request's fill of their key
        /// (collapsed forwarding) instead of asking the origin.
        counter collapsed,
        /// Stale stored responses sent while a background revalidation
        /// refreshes them (`stale-while-revalidate`).
        counter stale_while_revalidate,
        /// Background revalidations started (one per stale object at a time).
        counter background_revalidations,
        /// Background GETs of a whole response started after a Range miss
        /// answered 206 with a part (`--range-fill`).
        counter range_fills,
        /// Misses answered from another request's fill while its body
        /// arrived (collapsed forwarding's stream, read-while-write).
        counter followed,
        /// Of those, answers cut short because the fill failed.
        counter followers_cut,
        /// Followed fills that went on by copying because their own client
        /// was slower than the upstream (a tee waits for it; a copy reads
        /// into the object whatever the client takes).
        counter fills_decoupled,
        /// Times a sockmap tunnel direction used up its redirect budget and
        /// weft took over the bytes the program then passed up (a
        /// destination slower than its source, or a long transfer: about one
        /// per 4 MiB, `tunnel::kernel::KERNEL_BUDGET`). weft writes those bytes
        /// itself (`tunnel_bytes_copied`) and grants a new budget.
        counter sockmap_takeovers,
        /// Passed-up skbs of taken-over sockmap tunnels that this kernel
        /// delivered before an earlier one; weft put each back in its place
        /// by its stamp (weft-sockmap's stamp.rs).
        counter sockmap_reordered,
        /// Taken-over sockmap tunnels reset because passed bytes could not
        /// be placed by their stamps (one went up unstamped, or a short
        /// skb's stamp fitted two).
        counter sockmap_unplaced,
        /// Records of passed-up skbs in the sockmap `stamps` map (counted at
        /// most once a second, up to 4,096): near zero unless takeovers are
        /// under way; one that stays up means records were left behind.
        gauge sockmap_stamp_records,
        /// Client connections idle between requests, holding only their
        /// idle record (no buffer, no request state: issue 21).
        gauge idle_connections,
    }
    groups {
        /// What the worker's buffer pools hold now.
        pools: PoolGauges,
        /// System calls by kind.
        syscalls: SysCounts,
        /// Responses by status class (`accesslog::answered`).
        status: metrics::StatusClasses,
    }
}

/// Where one worker publishes: its counters (relaxed atomics, written once
/// per batch), its response latency histogram (about once a second), and the
/// clock that says whether its counters are current.
#[derive(Default)]
pub struct Slot {
    pub counters: metrics::Slot<ProxyStats>,
    pub latency: metrics::LatencySlot,
    pub clock: metrics::PublishClock,
}

impl Slot {
    /// Publish the worker's counters.
    #[inline]
    pub fn publish(&self, s: &ProxyStats) {
        self.counters.publish(s);
    }

    /// The last published counters.
    pub fn read(&self) -> ProxyStats {
        self.counters.read()
    }
}

/// The admin endpoint's wait, before it renders, for the workers' batches
/// that are running unpublished (`metrics::settle`).
pub fn settle_pages(slots: Arc<Vec<Slot>>) -> weft_io::admin::Settle {
    Arc::new(move || {
        metrics::settle(slots.iter().map(|s| &s.clock), metrics::SETTLE_LIMIT);
    })
}

/// The help text of `weft_proxy_response_seconds`.
pub const LATENCY_HELP: &str = "Time from the first byte of a request head to its response fully \
    handed to the client socket (transaction over, nothing left queued): hits, misses and errors alike.";

/// The Prometheus text of the workers' counters (`weft_proxy_<counter>_total`
/// per worker and summed) and response latencies (`weft_proxy_response_seconds`),
/// for the admin endpoint's `/metrics`.
pub fn render_prometheus(slots: &[Slot]) -> String {
    let counters: Vec<ProxyStats> = slots.iter().map(Slot::read).collect();
    let latency: Vec<metrics::Latency> = slots.iter().map(|s| s.latency.read()).collect();
    metrics::Prometheus::new()
        .group("proxy", &counters)
        .histogram("proxy", "response", LATENCY_HELP, &latency)
        .finish()
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
        assert!(j.ends_with("\"syscalls\":{},\"status\":{}}"), "{j}");
    }

    /// Every counter, in the order and with the keys the JSON had before the
    /// registry (the lab and tests/proxy.rs read these keys).
    #[test]
    fn json_keys_are_unchanged() {
        const BEFORE: &str = "accepted refused_fd_limit denied requests bad_requests hits stale_hits misses \
            revalidations revalidated uncacheable stored invalidated only_if_cached_misses disk_loads \
            upstream_connects upstream_reused upstream_retries errors_502 errors_504 timeouts tunnels \
            bytes_spliced bytes_teed bytes_copied bytes_filled bytes_cache tunnel_bytes_spliced \
            tunnel_bytes_copied sessions_splice sessions_keep_copy sessions_copy sessions_fallback \
            sessions_no_pipe sessions_client_abort sessions_orphan_fill sessions_upstream_abort read_batches_cut";
        // Added by issues 21 and 27 and the proxy's body discard, after every
        // earlier key (the pool gauges nested under "pools" since issue 14).
        const ADDED: &str = "refused_max_connections open_connections upstream_connections upstream_pooled \
            request_state_pooled \
            calls_copy_read calls_client_send calls_splice_in calls_splice_out calls_tee calls_tee_read \
            bytes_spliced_up calls_splice_up bytes_linked calls_linked sockmap_sessions sockmap_bytes sockmap_declined \
            sockmap_bodies sockmap_body_bytes bodies_discarded sockmap_mismatches upstream_not_empty upgrades \
            stale_if_error collapsed stale_while_revalidate background_revalidations range_fills followed \
            followers_cut fills_decoupled sockmap_takeovers sockmap_reordered sockmap_unplaced \
            sockmap_stamp_records idle_connections";
        let names: Vec<&str> = BEFORE.split_whitespace().chain(ADDED.split_whitespace()).collect();
        assert_eq!(ProxyStats::NAMES, names.as_slice());
        let mut s = ProxyStats::default();
        s.syscalls.0[weft_io::SysKind::Splice as usize] = 4;
        let mut want = String::from("{");
        for n in &names {
            want.push_str(&format!("\"{n}\":0,"));
        }
        want.push_str("\"pools\":");
        want.push_str(&PoolGauges::default().to_json());
        want.push_str(",\"syscalls\":{\"splice\":4},\"status\":{}}");
        assert_eq!(s.to_json(), want);
        let text = render_prometheus(&[Slot::default()]);
        assert!(
            text.contains("\nweft_proxy_read_batches_cut_total{worker=\"0\"} 0\n"),
            "{text}"
        );
        assert!(text.contains("\nweft_proxy_response_seconds_count 0\n"), "{text}");
    }
}
