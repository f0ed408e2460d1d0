//! Per-worker counters: what was served and by which path, declared once in
//! the metrics registry ([`weft_core::metrics`](mod@weft_core::metrics)). A worker bumps plain `u64`
//! fields; the registry generates the sum, the slot it publishes into, and
//! the JSON (`--stats-on-exit`, `/stats`) and Prometheus (`/metrics`) renderings.

use weft_io::{PoolGauges, SysCounts, TrackerStats};

weft_core::metrics! {
    /// Counters one worker keeps; summed over workers at exit.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct ServeStats {
        /// Connections accepted.
        counter accepted,
        /// Connections refused because the backend could not hold the descriptor.
        counter refused_fd_limit,
        /// Requests answered (any status).
        counter requests,
        /// Body bytes sent with sendfile.
        counter bytes_sendfile,
        /// Body bytes sent by pread + writev.
        counter bytes_copy,
        /// Body bytes sent from memory (small-file cache, demo site, generated pages).
        counter bytes_memory,
        /// Connections closed by a timeout.
        counter timeouts,
        /// Requests rejected with 4xx/5xx by the codec.
        counter bad_requests,
        /// Connections closed at accept because the worker held
        /// `--max-connections` already.
        counter refused_max_connections,
        /// Client connections adopted from a front-end (`--handoff-socket`).
        counter handoffs,
        /// Adopted connections given back to their front-end after a response
        /// (`weft front --handoff-next return`).
        counter given_back,
        /// Connections open now.
        gauge open_connections,
        /// AMPED: requests parked for a helper (open/stat or load).
        counter parked,
        /// AMPED: residency tests made (a positive one is trusted briefly).
        counter residency_tests,
        /// AMPED: residency tests that found the range not (all) resident.
        counter residency_misses,
        /// AMPED: helper jobs finished (all workers' pool).
        gauge helper_jobs,
        /// Responses aborted because their file changed while being sent.
        counter snapshot_aborts,
        /// Body bytes sent from the object cache's mappings (writev, no copy in weft).
        counter bytes_object,
        /// Large bodies' bytes sent chunk by chunk from the file cache's mappings.
        counter bytes_mapped,
        /// Of those, bytes sent with MSG_ZEROCOPY (`--zero-copy-send`).
        counter bytes_zerocopy,
        /// Zero-copy completions that reported a copy (the connection stops using it).
        counter zerocopy_copied,
        /// Object cache: lookups.
        gauge object_lookups,
        /// Object cache: lookups answered from it (object hit ratio = hits / lookups).
        gauge object_hits,
        /// Object cache: bytes the lookups asked for.
        gauge object_bytes_looked_up,
        /// Object cache: bytes answered from it (byte hit ratio = hit / looked up).
        gauge object_bytes_hit,
        /// Object cache: entries evicted for space.
        gauge object_evictions,
        /// Object cache: entries dropped because the file changed.
        gauge object_invalidations,
        /// Object cache: entries now.
        gauge object_entries,
        /// Object cache: heap bytes (ready-to-send header fields).
        gauge object_heap_bytes,
        /// Object cache: bytes of bodies held as page-cache mappings.
        gauge object_mapped_bytes,
        /// Bytes of file chunks mapped now (active and inactive).
        gauge mapped_chunk_bytes,
        /// Files in the worker's file cache (path, head and contents caches).
        gauge file_cache_entries,
        /// Bytes the file cache's entries count: small files' contents, header
        /// fields and each open descriptor.
        gauge file_cache_bytes,
        /// Bytes of large files' chunks the file cache has mapped (same budget).
        gauge file_mapped_bytes,
        /// File cache entries and chunks evicted for its byte budget.
        gauge file_cache_evictions,
        /// AMPED: helper threads started (all workers' pool; kept in reserve).
        gauge helper_threads,
        /// AMPED: jobs waiting for a helper.
        gauge helper_queue,
        /// AMPED: bytes the helpers hold (read buffers of helpers that had
        /// to read, queued jobs).
        gauge helper_bytes,
        /// Bytes in the connections' kernel send queues (SIOCOUTQ; sampled
        /// once a second).
        gauge socket_send_bytes,
        /// Bytes in the connections' kernel receive queues (SIOCINQ; sampled
        /// once a second).
        gauge socket_recv_bytes,
        /// Times the caches shrank for memory pressure (`--memory-pressure`).
        counter pressure_shrinks,
        /// Bytes those shrinks released (cache entries, chunks, pooled buffers).
        counter pressure_released_bytes,
        /// Responses whose body came from memory (a small file's copy or the
        /// object cache): the access log's `cache` field `HIT`.
        counter cache_hits,
        /// Responses whose body was sent or read from its file: `MISS`.
        /// Responses without a file body (errors, 304, listings) are neither.
        counter cache_misses,
        /// `--page-cache-admit reuse`: files whose pages were dropped after
        /// their response (not expected to be requested within the horizon).
        counter admit_dropped_files,
        /// Their bytes.
        counter admit_dropped_bytes,
        /// Responses answered from a precompressed sidecar (`--precompressed`).
        counter precompressed,
        /// Sidecars passed over because they are older than their file
        /// (made from an earlier version of it; `--precompressed`).
        counter precompressed_stale,
        /// Keep-alive connections asleep between requests: each keeps only
        /// its idle record, inline in its slot (`conn::Slot::Idle`).
        gauge idle_connections,
        /// Connection records kept for reuse by the next connection that
        /// wakes or is accepted.
        gauge conn_records_pooled,
    }
    groups {
        /// What the worker's buffer pools hold now.
        pools: PoolGauges,
        /// System calls by kind.
        syscalls: SysCounts,
        /// Responses by status class.
        status: weft_core::metrics::StatusClasses,
        /// What the `tracked` backend's readiness table answered (None for the
        /// other backends).
        tracker: Option<TrackerStats>,
        /// `--cgi` / `--fastcgi` (None without them).
        cgi: Option<crate::cgi::CgiStats>,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The document `--stats-on-exit` printed before the registry, key for key.
    #[test]
    fn json_is_unchanged() {
        let mut s = ServeStats {
            accepted: 1,
            refused_fd_limit: 2,
            requests: 3,
            bytes_sendfile: 4,
            bytes_copy: 5,
            bytes_memory: 6,
            timeouts: 7,
            bad_requests: 8,
            ..Default::default()
        };
        s.syscalls.0[weft_io::SysKind::Accept as usize] = 9;
        s.syscalls.0[weft_io::SysKind::Sendfile as usize] = 10;
        // Keys before issue 21, then the gauges it added (the pool gauges
        // nested under "pools" since issue 14, the same group in every role),
        // then issue 17's cache hits and misses, then `--precompressed`, then
        // the sleeping connections and their pooled records.
        let head = "{\"accepted\":1,\"refused_fd_limit\":2,\"requests\":3,\"bytes_sendfile\":4,\"bytes_copy\":5,\"bytes_memory\":6,\"timeouts\":7,\"bad_requests\":8,\"refused_max_connections\":0,\"handoffs\":0,\"given_back\":0,\"open_connections\":0,\"parked\":0,\"residency_tests\":0,\"residency_misses\":0,\"helper_jobs\":0,\"snapshot_aborts\":0,\"bytes_object\":0,\"bytes_mapped\":0,\"bytes_zerocopy\":0,\"zerocopy_copied\":0,\"object_lookups\":0,\"object_hits\":0,\"object_bytes_looked_up\":0,\"object_bytes_hit\":0,\"object_evictions\":0,\"object_invalidations\":0,\"object_entries\":0,\"object_heap_bytes\":0,\"object_mapped_bytes\":0,\"mapped_chunk_bytes\":0,\"file_cache_entries\":0,\"file_cache_bytes\":0,\"file_mapped_bytes\":0,\"file_cache_evictions\":0,\"helper_threads\":0,\"helper_queue\":0,\"helper_bytes\":0,\"socket_send_bytes\":0,\"socket_recv_bytes\":0,\"pressure_shrinks\":0,\"pressure_released_bytes\":0,\"cache_hits\":0,\"cache_misses\":0,\"admit_dropped_files\":0,\"admit_dropped_bytes\":0,\"precompressed\":0,\"precompressed_stale\":0,\"idle_connections\":0,\"conn_records_pooled\":0,\"pools\":{\"input_bufs_lent\":0,\"input_bytes_lent\":0,\"input_bufs_pooled\":0,\"input_bytes_pooled\":0,\"output_bufs_lent\":0,\"output_bufs_pooled\":0,\"output_bytes_pooled\":0},\"syscalls\":{\"accept\":9,\"sendfile\":10},\"status\":{}";
        assert_eq!(s.to_json(), format!("{head}}}"));
        s.tracker = Some(TrackerStats {
            user_passes: 11,
            user_events: 12,
            kernel_polls: 13,
            forced_polls: 14,
        });
        assert_eq!(
            s.to_json(),
            format!("{head},\"tracker\":{{\"user_passes\":11,\"user_events\":12,\"kernel_polls\":13,\"forced_polls\":14}}}}")
        );
        let mut t = ServeStats::default();
        t.add(&s);
        t.add(&s);
        assert_eq!((t.requests, t.tracker.map(|t| t.forced_polls)), (6, Some(28)));
    }
}
