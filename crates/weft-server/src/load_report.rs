//! The origin's load report for a web booster in front of it (issue 26):
//! the key `load` of the admin `/stats` document,
//! `{"open_connections":N,"requests":N,"cpu_ms":N,"at_ms":N}` — client
//! connections open now, requests served so far, CPU time (user + system) the
//! process has used, and when the reading was taken (milliseconds on a
//! monotonic clock that starts at the first reading). The booster polls it
//! and derives the request rate and busy cores from two readings; it decides
//! by itself (`weft_proxy::booster`, docs/booster.md), the origin only reports.

use crate::stats::ServeStats;
use std::sync::OnceLock;
use std::time::Instant;

/// Clock ticks per second of /proc's CPU times (USER_HZ, 100 on every Linux
/// architecture weft builds for).
const USER_HZ: u64 = 100;

/// User plus system CPU time of this process, in milliseconds (0 if /proc
/// cannot be read).
pub fn cpu_ms() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0;
    };
    // Fields after the command name in parentheses (which may hold spaces):
    // state is the 3rd field overall, utime the 14th, stime the 15th.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (tick(11) + tick(12)) * 1000 / USER_HZ
}

/// The `load` object for these workers' counters.
pub fn json(workers: &[ServeStats]) -> String {
    static START: OnceLock<Instant> = OnceLock::new();
    let at = START.get_or_init(Instant::now).elapsed().as_millis() as u64;
    let (open, requests) = workers
        .iter()
        .fold((0u64, 0u64), |(o, r), w| (o + w.open_connections, r + w.requests));
    format!(
        "{{\"open_connections\":{open},\"requests\":{requests},\"cpu_ms\":{},\"at_ms\":{at}}}",
        cpu_ms()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_the_workers_and_reads_cpu() {
        let w = [
            ServeStats {
                open_connections: 2,
                requests: 5,
                ..Default::default()
            },
            ServeStats {
                open_connections: 1,
                requests: 7,
                ..Default::default()
            },
        ];
        let j = json(&w);
        assert!(
            j.starts_with("{\"open_connections\":3,\"requests\":12,\"cpu_ms\":"),
            "{j}"
        );
        // Burn a little CPU: the reading does not go backwards.
        let a = cpu_ms();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(cpu_ms() >= a || x == 0);
    }
}
