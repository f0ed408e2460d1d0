//! The front-end's admin endpoint: per-back-end state, load, requests,
//! bytes and failures, and the decision state's target-map size, queue
//! length, admission limit and decision cost, declared once in the metrics
//! registry and served as JSON (`/stats`) and Prometheus text (`/metrics`).
//!
//! In the Prometheus text the back-end families are
//! `weft_front_backend_<name>{worker="i"}`: the registry's per-entry label is
//! `worker`, and here entry i is back-end i (its address is in `/stats`).
//! The proxy engine's counters (requests, status classes, bytes spliced and
//! copied, system calls by kind...) and its response latency histogram come
//! first, as `weft_front_<name>` per worker and summed, the families `weft
//! serve` and `weft proxy` export under their own role names (the status
//! page's charts read the first unlabelled `_requests_total` and the
//! `_response_seconds` sum and count).

use super::Front;
use crate::stats::{self, ProxyStats};
use std::fmt::Write;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use weft_core::metrics::{Group, Prometheus};
use weft_io::admin::{self, Pages};

weft_core::metrics! {
    /// One back-end as the admin endpoint shows it.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct BackendMetrics {
        /// 1 while the back-end may be chosen, 0 while it is down.
        gauge up,
        /// Requests in flight on it (the policy's load).
        gauge load,
        /// Its weight.
        gauge weight,
        /// Requests placed on it.
        counter requests,
        /// Response bytes from it (heads and announced bodies).
        counter bytes,
        /// Passive failures (connect refused, dropped before answering).
        counter failures,
        /// Active checks that failed.
        counter checks_failed,
    }
    groups {}
}

weft_core::metrics! {
    /// The decision state as the admin endpoint shows it.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct FrontMetrics {
        /// Back-ends up.
        gauge backends_up,
        /// Requests in flight on all back-ends.
        gauge in_flight,
        /// The admission limit S for the back-ends up now.
        gauge admission_limit,
        /// Requests waiting for admission.
        gauge queue_len,
        /// Targets in the strategy's target map.
        gauge target_map,
        /// Placement decisions taken (lock + strategy).
        counter decisions,
        /// Nanoseconds spent in them, lock wait included.
        counter decision_ns,
        /// Requests that waited for admission.
        counter queued,
        /// Requests refused with 503 (queue full or no back-end up).
        counter rejected,
        /// Requests placed again after their back-end failed.
        counter retries,
        /// Client connections handed to a back-end (`--mode handoff`).
        counter handoffs,
        /// Handed connections given back for their next request's placement
        /// (`--handoff-next return|owner`).
        counter handed_back,
    }
    groups {}
}

/// A consistent view: one lock for the dispatcher's numbers.
fn snapshot(front: &Front) -> (FrontMetrics, Vec<BackendMetrics>) {
    let d = front.lock();
    let b = d.backends();
    let per: Vec<BackendMetrics> = front
        .backends
        .iter()
        .enumerate()
        .map(|(s, be)| BackendMetrics {
            up: u64::from(b.is_up(s)),
            load: u64::from(b.load(s)),
            weight: u64::from(be.spec.weight),
            requests: be.requests.load(Ordering::Relaxed),
            bytes: be.bytes.load(Ordering::Relaxed),
            failures: be.failures.load(Ordering::Relaxed),
            checks_failed: be.checks_failed.load(Ordering::Relaxed),
        })
        .collect();
    let limit = d.limit();
    let f = FrontMetrics {
        backends_up: b.up_count() as u64,
        in_flight: d.in_flight() as u64,
        admission_limit: if limit == usize::MAX { 0 } else { limit as u64 },
        queue_len: d.queue_len() as u64,
        target_map: d.strategy().mapped_targets() as u64,
        decisions: front.counters.decisions.load(Ordering::Relaxed),
        decision_ns: front.counters.decision_ns.load(Ordering::Relaxed),
        queued: front.counters.queued.load(Ordering::Relaxed),
        rejected: front.counters.rejected.load(Ordering::Relaxed),
        retries: front.counters.retries.load(Ordering::Relaxed),
        handoffs: front.counters.handoffs.load(Ordering::Relaxed),
        handed_back: front.counters.handed_back.load(Ordering::Relaxed),
    };
    (f, per)
}

/// `{"policy":..,"mode":..,"front":{..},"backends":[{"addr":..,"state":..,..}]}`.
pub(crate) fn render_json(front: &Front) -> String {
    let (f, per) = snapshot(front);
    let mut s = String::new();
    let _ = write!(
        s,
        "{{\"policy\":\"{}\",\"mode\":\"{}\",\"front\":{},\"backends\":[",
        front.policy.name(),
        front.mode.name(),
        f.to_json()
    );
    for (i, (be, m)) in front.backends.iter().zip(&per).enumerate() {
        if i > 0 {
            s.push(',');
        }
        let state = if m.up == 1 { "up" } else { "down" };
        let _ = write!(s, "{{\"addr\":\"{}\",\"state\":\"{state}\",\"stats\":", be.spec.addr);
        m.write_json(&mut s);
        s.push('}');
    }
    s.push_str("]}\n");
    s
}

/// Prometheus text: the engine's `weft_front_*` counters and
/// `weft_front_response_seconds` (from the workers' `slots`), the decision
/// state's `weft_front_*` and the back-ends' `weft_front_backend_*`.
pub(crate) fn render_prometheus(front: &Front, slots: &[stats::Slot]) -> String {
    let (f, per) = snapshot(front);
    let engine: Vec<ProxyStats> = slots.iter().map(stats::Slot::read).collect();
    let latency: Vec<weft_core::metrics::Latency> = slots.iter().map(|s| s.latency.read()).collect();
    Prometheus::new()
        .group("front", &engine)
        .histogram("front", "response", stats::LATENCY_HELP, &latency)
        .group("front", &[f])
        .group("front_backend", &per)
        .finish()
}

/// Serve `/stats` and `/metrics` on `addr`; `slots` are the proxy
/// engine's workers'.
pub(crate) fn start(addr: SocketAddr, front: Arc<Front>, slots: Arc<Vec<stats::Slot>>) -> io::Result<SocketAddr> {
    let json = front.clone();
    admin::serve(
        addr,
        Pages {
            settle: Some(stats::settle_pages(slots.clone())),
            stats: Arc::new(move || render_json(&json)),
            metrics: Some(Arc::new(move || render_prometheus(&front, &slots))),
            control: None,
        },
    )
}
