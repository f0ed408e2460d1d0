//! The admin endpoint (`--admin ADDR`): live counters per worker and in
//! total, as JSON at `/stats` (so an experiment can read system calls per
//! request while the server runs) and as Prometheus text at `/metrics`. The
//! listener thread is `weft_io::admin`'s; the slots and both renderings are
//! the metrics registry's ([`weft_core::metrics`](mod@weft_core::metrics)).
//!
//! Each worker publishes its counters into its own slot of relaxed atomics at
//! the end of every event-loop batch (a few dozen plain stores, no lock, no
//! shared cache line with other workers). The admin listener runs on its own
//! thread with blocking std sockets: it is a cold diagnostic path, and keeping
//! it off the workers keeps their system-call counts exactly the server's.

use crate::stats::ServeStats;
use std::net::SocketAddr;
use std::sync::Arc;
use weft_core::metrics;

/// One worker's published counters.
pub type Slot = metrics::Slot<ServeStats>;

/// Where one worker publishes: its counters (every batch), its response
/// latency histogram (about once a second), and the clock that says whether
/// its counters are current (event-loop workers only).
#[derive(Default)]
pub struct WorkerSlot {
    pub counters: Slot,
    pub latency: metrics::LatencySlot,
    pub clock: metrics::PublishClock,
}

/// The help text of `weft_serve_response_seconds`.
pub const LATENCY_HELP: &str = "Time from the first byte of a request head to its response fully \
    queued (whole in-memory answers and heads written; a file body still being sent is not waited for).";

/// The JSON document the endpoint serves at `/stats`.
pub fn render(backend: &str, slots: &[WorkerSlot]) -> String {
    let counters: Vec<ServeStats> = slots.iter().map(|s| s.counters.read()).collect();
    // The load report a booster polls (issue 26).
    let load = crate::load_report::json(&counters);
    metrics::stats_document(backend, &counters, &[("load", &load)])
}

/// The Prometheus text the endpoint serves at `/metrics`
/// (`weft_serve_<counter>_total{worker="i"}`, and the sum without `worker`;
/// `weft_serve_response_seconds` histogram).
pub fn render_prometheus(slots: &[WorkerSlot]) -> String {
    let counters: Vec<ServeStats> = slots.iter().map(|s| s.counters.read()).collect();
    let latency: Vec<metrics::Latency> = slots.iter().map(|s| s.latency.read()).collect();
    metrics::Prometheus::new()
        .group("serve", &counters)
        .histogram("serve", "response", LATENCY_HELP, &latency)
        .finish()
}

/// Start the admin listener on `addr`; returns the bound address.
pub fn start(addr: SocketAddr, backend: &'static str, slots: Arc<Vec<WorkerSlot>>) -> std::io::Result<SocketAddr> {
    let (json, clocks) = (slots.clone(), slots.clone());
    weft_io::admin::serve(
        addr,
        weft_io::admin::Pages {
            stats: Arc::new(move || render(backend, &json)),
            metrics: Some(Arc::new(move || render_prometheus(&slots))),
            control: None,
            settle: Some(Arc::new(move || {
                metrics::settle(clocks.iter().map(|s| &s.clock), metrics::SETTLE_LIMIT);
            })),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn get(addr: SocketAddr, path: &str) -> String {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .unwrap();
        let mut s = String::new();
        c.read_to_string(&mut s).unwrap();
        s
    }

    #[test]
    fn stats_and_metrics_from_the_slots() {
        let slots: Arc<Vec<WorkerSlot>> = Arc::new((0..2).map(|_| WorkerSlot::default()).collect());
        let mut st = ServeStats {
            requests: 5,
            ..Default::default()
        };
        st.syscalls.0[weft_io::SysKind::Writev as usize] = 5;
        slots[0].counters.publish(&st);
        st.requests = 2;
        slots[1].counters.publish(&st);
        let mut lat = metrics::Latency::new();
        lat.record_us(300);
        slots[1].latency.flush(&mut lat);
        let doc = render("epoll", &slots);
        assert!(doc.starts_with("{\"backend\":\"epoll\",\"workers\":[{\"worker\":0,\"stats\":{\"accepted\":0,\"refused_fd_limit\":0,\"requests\":5,"), "{doc}");
        // The totals, then the load report a booster polls (issue 26).
        let (doc, load) = doc.split_once(",\"load\":").unwrap();
        assert!(doc.ends_with(",\"syscalls\":{\"writev\":10},\"status\":{}}"), "{doc}");
        assert!(
            load.starts_with("{\"open_connections\":0,\"requests\":7,\"cpu_ms\":"),
            "{load}"
        );
        let addr = start("127.0.0.1:0".parse().unwrap(), "epoll", slots).unwrap();
        let r = get(addr, "/stats");
        assert!(r.contains(doc), "{r}");
        let m = get(addr, "/metrics");
        assert!(m.contains("\r\nContent-Type: text/plain; version=0.0.4"), "{m}");
        assert!(m.contains("# TYPE weft_serve_requests_total counter\n"), "{m}");
        assert!(
            m.contains("\nweft_serve_requests_total{worker=\"1\"} 2\nweft_serve_requests_total 7\n"),
            "{m}"
        );
        assert!(m.contains("\nweft_serve_syscalls_total{kind=\"writev\"} 10\n"), "{m}");
        assert!(m.contains("# TYPE weft_serve_response_seconds histogram\n"), "{m}");
        assert!(m.contains("\nweft_serve_response_seconds_count 1\n"), "{m}");
    }
}
