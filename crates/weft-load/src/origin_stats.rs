//! The counters of `weft origin`, declared once in the metrics registry
//! ([`weft_core::metrics`](mod@weft_core::metrics)).
//!
//! Each origin worker owns an [`OriginStats`] and bumps its plain `u64`
//! fields (`stats.requests += 1`): no atomic read-modify-write on a cache
//! line every worker shares, as the origin had before, so that the
//! instrument stays cheaper than what it measures. The workers' structs are
//! summed when they stop (`--stats-on-exit`); a live view, if one is wanted,
//! is a [`OriginSlot`] per worker published once per batch, as serve and the
//! proxy do.

weft_core::metrics! {
    /// Counters one origin worker keeps; summed over workers at exit.
    ///
    /// Declared in alphabetical order: `--stats-on-exit` has always printed
    /// the keys sorted (it went through serde_json's sorted map), and the
    /// order of the printed document is kept.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct OriginStats {
        /// Responses aborted on purpose (`--abort`): half the body, then a reset.
        counter aborted,
        /// Connections accepted.
        counter accepted,
        /// Body bytes sent.
        counter body_bytes,
        /// Emulated SSL handshakes (full + abbreviated).
        counter handshakes,
        /// 304 answers.
        counter not_modified,
        /// Connections open.
        gauge open_connections,
        /// Requests refused (4xx/5xx other than 404).
        counter refused,
        /// Connections closed at accept because the worker held
        /// `--max-connections` already.
        counter refused_max_connections,
        /// Requests answered.
        counter requests,
        /// Connections the client reset (or broke) with every reply delivered
        /// and no request pending: how `weft load --client-close reset` ends.
        counter reset_idle,
        /// Connections that broke with output unsent or a request unanswered:
        /// replies the client did not get.
        counter reset_unfinished,
    }
    groups {
        /// What the worker's buffer pools hold now.
        pools: weft_io::PoolGauges,
    }
}

/// One origin worker's published counters, for a live reader.
pub type OriginSlot = weft_core::metrics::Slot<OriginStats>;

/// The Prometheus text of the workers' counters (`weft_origin_<counter>_total`).
pub fn render_prometheus(workers: &[OriginStats]) -> String {
    weft_core::metrics::render_prometheus("origin", workers)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The line `weft origin --stats-on-exit` printed before the registry
    /// (serde_json's object: sorted keys, no spaces); tests/load.rs and the
    /// lab read it.
    #[test]
    fn json_is_unchanged() {
        let s = OriginStats {
            aborted: 1,
            accepted: 2,
            body_bytes: 3,
            handshakes: 4,
            not_modified: 5,
            refused: 6,
            requests: 7,
            reset_idle: 8,
            reset_unfinished: 9,
            ..Default::default()
        };
        let before = serde_json::json!({
            "accepted": 2,
            "requests": 7,
            "not_modified": 5,
            "body_bytes": 3,
            "handshakes": 4,
            "refused": 6,
            "reset_idle": 8,
            "reset_unfinished": 9,
            "aborted": 1,
            // Added by issue 21 (memory and connection gauges); the pool
            // gauges nested under "pools" since issue 14 (shared by every role).
            "open_connections": 0, "refused_max_connections": 0,
            "pools": {
                "input_bufs_lent": 0, "input_bytes_lent": 0, "input_bufs_pooled": 0, "input_bytes_pooled": 0,
                "output_bufs_lent": 0, "output_bufs_pooled": 0, "output_bytes_pooled": 0,
            },
        });
        let got: serde_json::Value = serde_json::from_str(&s.to_json()).unwrap();
        assert_eq!(got, before);
        let slot = OriginSlot::default();
        slot.publish(&s);
        let mut t = slot.read();
        t.add(&s);
        assert_eq!(t.requests, 14);
        assert!(render_prometheus(&[s, t]).contains("\nweft_origin_requests_total 21\n"));
    }
}
