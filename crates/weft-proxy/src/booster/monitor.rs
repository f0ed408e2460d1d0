//! The load monitor: every `interval` it reads each origin's load report
//! (`GET /stats` on the origin's admin port, key `load`: open connections,
//! requests served, CPU time used, the time of the reading; see
//! weft-server's `load_report`) and switches the site's boosting.
//!
//! How the booster learns an origin's capacity: it does not need to be told
//! a request rate. It switches in when the origin itself says it is near its
//! limit — CPU busy (cores, from the origin's own CPU time) at or above
//! `on_cpu`, or open client connections at or above `on_conns` — and records
//! the request rate the origin was serving at that moment: that rate is the
//! capacity it learned. Once boosted the origin's CPU and connection count
//! fall (that is the point), so they cannot say when to switch out; the
//! offered request rate can, because the origin counts every request,
//! boosted or not. The site switches out when the rate has stayed below
//! `off_fraction` of the learned capacity for `hold` readings in a row
//! (hysteresis), and the learned value is replaced at the next switch-in.

use super::Booster;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// When to switch a site in and out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    /// Switch in at this many busy cores on the origin.
    pub on_cpu: f64,
    /// ... or at this many open client connections on the origin.
    pub on_conns: u64,
    /// Switch out below this fraction of the request rate at switch-in.
    pub off_fraction: f64,
    /// Readings in a row below it before switching out.
    pub hold: u32,
    /// Time between two readings.
    pub interval: Duration,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            on_cpu: 0.8,
            on_conns: 256,
            off_fraction: 0.5,
            hold: 5,
            interval: Duration::from_millis(250),
        }
    }
}

/// One load report.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Reading {
    open_connections: u64,
    requests: u64,
    cpu_ms: u64,
    at_ms: u64,
}

/// A number after `"key":` in a JSON text.
fn number(doc: &str, key: &str) -> Option<u64> {
    let pat = format!("\"{key}\":");
    let at = doc.find(&pat)? + pat.len();
    let digits: String = doc[at..].chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// The `load` object of an origin's `/stats` document.
fn load_object(doc: &str) -> Option<&str> {
    let at = doc.find("\"load\":{")? + "\"load\":".len();
    let end = doc[at..].find('}')? + at + 1;
    Some(&doc[at..end])
}

fn read_load(addr: SocketAddr) -> Option<(Reading, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    let _ = s.set_read_timeout(Some(Duration::from_millis(1000)));
    s.write_all(b"GET /stats HTTP/1.1\r\nHost: load\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut doc = Vec::new();
    let _ = s.take(4 << 20).read_to_end(&mut doc);
    let doc = String::from_utf8_lossy(&doc);
    let obj = load_object(&doc)?;
    let r = Reading {
        open_connections: number(obj, "open_connections")?,
        requests: number(obj, "requests")?,
        cpu_ms: number(obj, "cpu_ms")?,
        at_ms: number(obj, "at_ms")?,
    };
    Some((r, obj.to_string()))
}

/// Per-site switching state.
#[derive(Default)]
struct State {
    last: Option<Reading>,
    /// Request rate when the site was switched in.
    capacity: f64,
    below: u32,
}

/// Decide from two readings; returns the new boosting state.
fn decide(t: &Thresholds, st: &mut State, now: Reading, boosting: bool) -> bool {
    let Some(prev) = st.last.replace(now) else {
        return boosting;
    };
    let dt = now.at_ms.saturating_sub(prev.at_ms) as f64 / 1000.0;
    if dt <= 0.0 {
        return boosting;
    }
    let rate = now.requests.saturating_sub(prev.requests) as f64 / dt;
    let cpu = now.cpu_ms.saturating_sub(prev.cpu_ms) as f64 / 1000.0 / dt;
    if !boosting {
        if cpu >= t.on_cpu || now.open_connections >= t.on_conns {
            st.capacity = rate.max(1.0);
            st.below = 0;
            return true;
        }
        return false;
    }
    if rate < t.off_fraction * st.capacity {
        st.below += 1;
        if st.below >= t.hold {
            st.below = 0;
            return false;
        }
    } else {
        st.below = 0;
    }
    true
}

/// Start the monitor thread.
pub fn start(b: Arc<Booster>, shutdown: weft_io::Shutdown) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("booster-monitor".into())
        .spawn(move || {
            let mut states: Vec<State> = b.sites.iter().map(|_| State::default()).collect();
            while !shutdown.requested() {
                for (site, st) in b.sites.iter().zip(states.iter_mut()) {
                    let Some(addr) = site.spec.load else { continue };
                    let Some((r, doc)) = read_load(addr) else { continue };
                    if let Ok(mut l) = site.last_load.lock() {
                        *l = doc;
                    }
                    let was = site.boosting.load(Ordering::Relaxed);
                    let now = decide(&b.cfg.thresholds, st, r, was);
                    if now != was {
                        site.boosting.store(now, Ordering::Relaxed);
                        super::BoosterStats::bump(&b.stats.switches);
                        weft_core::info!(
                            "booster: site {} {} (capacity learned {:.0} req/s)",
                            site.spec.host,
                            if now { "boosted" } else { "passed straight through" },
                            st.capacity
                        );
                    }
                }
                std::thread::sleep(b.cfg.thresholds.interval);
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(conns: u64, requests: u64, cpu_ms: u64, at_ms: u64) -> Reading {
        Reading {
            open_connections: conns,
            requests,
            cpu_ms,
            at_ms,
        }
    }

    #[test]
    fn switches_in_near_capacity_and_out_with_hysteresis() {
        let t = Thresholds {
            on_conns: 10,
            hold: 2,
            ..Thresholds::default()
        };
        let mut st = State::default();
        assert!(!decide(&t, &mut st, r(1, 0, 0, 0), false));
        assert!(!decide(&t, &mut st, r(2, 100, 100, 1000), false));
        // CPU 0.9 of a core: in, capacity 1000 req/s.
        assert!(decide(&t, &mut st, r(2, 1100, 1000, 2000), false));
        // 600 req/s: above half, stays; 400 twice: out.
        assert!(decide(&t, &mut st, r(2, 1700, 1100, 3000), true));
        assert!(decide(&t, &mut st, r(2, 2100, 1150, 4000), true));
        assert!(!decide(&t, &mut st, r(2, 2500, 1200, 5000), true));
        // Connections alone switch in too.
        assert!(decide(&t, &mut st, r(12, 2600, 1200, 6000), false));
    }

    #[test]
    fn load_object_and_numbers() {
        let doc =
            "{\"total\":{\"requests\":9},\"load\":{\"open_connections\":3,\"requests\":7,\"cpu_ms\":5,\"at_ms\":11}}";
        let o = load_object(doc).unwrap();
        assert_eq!(number(o, "requests"), Some(7));
        assert_eq!(number(o, "at_ms"), Some(11));
    }
}
