//! The simulator on tiny traces whose results can be worked out by hand from
//! the cost model of §3.2.1 (set-up and teardown 145 µs, 40 µs per 512 bytes,
//! disk 28 ms + 410 µs per 4 KB, 14 ms per further 44 KB block).

use weft_policy::Policy;
use weft_sim::{simulate, ClfTrace, SimConfig, SimReport, TraceRequest, TraceSource, TraceStats};

/// A trace from a list of (target, size).
struct ListTrace<'a>(std::slice::Iter<'a, (u64, u64)>);

impl<'a> ListTrace<'a> {
    fn new(v: &'a [(u64, u64)]) -> ListTrace<'a> {
        ListTrace(v.iter())
    }
}

impl TraceSource for ListTrace<'_> {
    fn next_request(&mut self) -> Option<TraceRequest> {
        self.0.next().map(|&(target, size)| TraceRequest { target, size })
    }
    fn stats(&self) -> TraceStats {
        TraceStats::default()
    }
}

fn run(config: SimConfig, trace: &[(u64, u64)]) -> SimReport {
    simulate(config, &mut ListTrace::new(trace)).unwrap()
}

/// One node, every other setting at its default.
fn one_node() -> SimConfig {
    SimConfig {
        nodes: 1,
        ..SimConfig::default()
    }
}

fn one_client(nodes: usize, policy: Policy) -> SimConfig {
    SimConfig {
        nodes,
        policy,
        clients: Some(1),
        ..SimConfig::default()
    }
}

const US: f64 = 1e-6;

#[test]
fn self_check_one_node_one_cached_8k_file_serves_1075_per_second() {
    let trace = vec![(0, 8192); 200_000];
    let r = run(one_node(), &trace);
    assert_eq!(r.requests, 200_000);
    assert_eq!(r.disk_reads, 1);
    assert!((r.throughput - 1075.0).abs() < 2.0, "throughput {}", r.throughput);
}

#[test]
fn a_miss_then_a_hit() {
    let r = run(one_client(1, Policy::Wrr), &[(0, 8192), (0, 8192)]);
    // Miss: 145 + 28,000 + 2 × 410 + 640 + 145 µs; hit: 145 + 640 + 145 µs.
    let want = (145.0 + 28_820.0 + 640.0 + 145.0) + 930.0;
    assert!(
        (r.simulated_seconds - want * US).abs() < 1e-9,
        "{}",
        r.simulated_seconds
    );
    assert_eq!((r.requests, r.disk_reads), (2, 1));
    assert!((r.miss_ratio - 0.5).abs() < 1e-12);
    assert!((r.delay_mean_ms - want / 2.0 / 1000.0).abs() < 1e-9);
}

#[test]
fn a_large_file_is_read_and_sent_block_by_block() {
    let size = 100 * 1024; // 44 + 44 + 12 KB
    let r = run(one_client(1, Policy::Wrr), &[(0, size)]);
    let disk = (28_000.0 + 11.0 * 410.0) + (14_000.0 + 11.0 * 410.0) + (14_000.0 + 3.0 * 410.0);
    let send = 3520.0 + 3520.0 + 960.0;
    let want = 145.0 + disk + send + 145.0;
    assert!(
        (r.simulated_seconds - want * US).abs() < 1e-9,
        "{} vs {}",
        r.simulated_seconds,
        want * US
    );
}

#[test]
fn concurrent_misses_on_one_file_share_one_disk_read() {
    let config = SimConfig {
        clients: Some(2),
        ..one_node()
    };
    let r = run(config, &[(0, 8192), (0, 8192)]);
    assert_eq!(r.disk_reads, 1);
    assert_eq!(r.miss_ratio, 1.0);
    // Client 0's read ends at 145 + 28,820 µs; the waiter's send (640) runs
    // first, then client 0's block (640), the waiter's teardown, client 0's.
    let want = 145.0 + 28_820.0 + 640.0 + 640.0 + 145.0 + 145.0;
    assert!(
        (r.simulated_seconds - want * US).abs() < 1e-9,
        "{}",
        r.simulated_seconds
    );
}

#[test]
fn lard_keeps_a_target_on_one_node_where_wrr_spreads_it() {
    let trace = [(1, 8192), (1, 8192), (2, 8192), (2, 8192), (1, 8192), (2, 8192)];
    let wrr = run(one_client(2, Policy::Wrr), &trace);
    let lard = run(one_client(2, "lard".parse().unwrap()), &trace);
    let lard_r = run(one_client(2, "lard-r".parse().unwrap()), &trace);
    let lb = run(one_client(2, Policy::Lb), &trace);
    assert_eq!(wrr.disk_reads, 4, "each target missed on both nodes");
    assert_eq!(lard.disk_reads, 2);
    assert_eq!(lard_r.disk_reads, 2);
    assert_eq!(lb.disk_reads, 2);
    assert_eq!(lard.mapped_targets, 2);
    assert!(lard.throughput > wrr.throughput);
}

#[test]
fn wrr_gms_serves_a_miss_from_another_nodes_memory_at_network_cost() {
    let config = SimConfig {
        gms: true,
        ..one_client(2, Policy::Wrr)
    };
    let r = run(config, &[(0, 8192), (0, 8192)]);
    assert_eq!((r.disk_reads, r.remote_hits), (1, 1));
    let want = (145.0 + 28_820.0 + 640.0 + 145.0) + (145.0 + 2.0 * 640.0 + 145.0);
    assert!((r.simulated_seconds - want * US).abs() < 1e-9);
    assert_eq!(r.policy, "wrr-gms");
}

#[test]
fn the_admission_limit_bounds_clients_in_flight_and_idle_time_is_measured() {
    // One node: S = T_low − 1 = 24 clients; 4 cached requests each.
    let trace = vec![(0, 8192); 96];
    let r = run(one_node(), &trace);
    assert_eq!(r.admission_limit, 24);
    assert_eq!(r.clients, 24);
    // Load stays at 24 (≥ 10 = 40 % of T_low) until the last requests drain.
    assert!(r.idle_fraction < 0.2, "idle {}", r.idle_fraction);
    let more = run(
        SimConfig {
            clients: Some(30),
            ..one_node()
        },
        &trace,
    );
    assert_eq!(more.rejected, 0);
    assert!(more.delay_mean_ms > r.delay_mean_ms, "queued requests wait");
}

#[test]
fn a_log_drives_the_simulation() {
    let log = "a - - [01/Jun/1998:00:00:00 +0000] \"GET /x HTTP/1.0\" 200 8192\n\
               a - - [01/Jun/1998:00:00:01 +0000] \"GET /x HTTP/1.0\" 304 -\n\
               not a log line\n\
               a - - [01/Jun/1998:00:00:02 +0000] \"GET /y HTTP/1.0\" 200 100\n";
    let mut t = ClfTrace::from_text(log);
    let r = simulate(one_client(1, Policy::Wrr), &mut t).unwrap();
    assert_eq!(r.requests, 3);
    assert_eq!(r.disk_reads, 2);
    assert_eq!((r.trace.malformed, r.trace.targets), (1, 2));
}
