//! Active health checks: one thread sends each back-end a small GET every
//! interval (with a timeout) and counts consecutive results: `fall` failures
//! in a row take an up back-end down, `rise` successes in a row bring a down
//! one back (also one the workers marked down passively). A 2xx or 3xx
//! status is a success. Blocking sockets on a thread of its own: a cold
//! path, kept off the workers' loops and their system-call counts.

use super::Front;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Settings of the active checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthConfig {
    /// Time between two checks of a back-end.
    pub interval: Duration,
    /// Longest a check may take (connect, send, first bytes).
    pub timeout: Duration,
    /// Successes in a row that bring a down back-end back.
    pub rise: u32,
    /// Failures in a row that take an up back-end down.
    pub fall: u32,
    /// The path asked for.
    pub path: String,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            interval: Duration::from_secs(2),
            timeout: Duration::from_secs(1),
            rise: 2,
            fall: 3,
            path: "/".to_string(),
        }
    }
}

/// The running checker.
pub(crate) struct Checker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Checker {
    /// Start checking `front`'s back-ends.
    pub(crate) fn start(front: Arc<Front>, cfg: HealthConfig) -> io::Result<Checker> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("weft-front-health".into())
            .spawn(move || run(&front, &cfg, &flag))?;
        Ok(Checker {
            stop,
            thread: Some(thread),
        })
    }

    /// Stop and join.
    pub(crate) fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Consecutive results of one back-end, and the state they were counted in.
#[derive(Clone, Copy, Default)]
struct Streak {
    ok: u32,
    failed: u32,
    was_up: bool,
}

/// What a streak says to do after one more result.
fn next(st: &mut Streak, up: bool, ok: bool, cfg: &HealthConfig) -> Option<bool> {
    if st.was_up != up {
        // The state changed elsewhere (passive check): count afresh.
        *st = Streak {
            was_up: up,
            ..Streak::default()
        };
    }
    if ok {
        st.ok += 1;
        st.failed = 0;
    } else {
        st.failed += 1;
        st.ok = 0;
    }
    let change = if up && st.failed >= cfg.fall.max(1) {
        Some(false)
    } else if !up && st.ok >= cfg.rise.max(1) {
        Some(true)
    } else {
        None
    };
    if let Some(u) = change {
        *st = Streak {
            was_up: u,
            ..Streak::default()
        };
    }
    change
}

fn run(front: &Front, cfg: &HealthConfig, stop: &AtomicBool) {
    let mut streaks: Vec<Streak> = (0..front.backends.len())
        .map(|_| Streak {
            was_up: true,
            ..Streak::default()
        })
        .collect();
    let mut request = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let round = Instant::now();
        for (s, st) in streaks.iter_mut().enumerate() {
            let addr = front.addr(s);
            request.clear();
            let _ = write!(
                request,
                "GET {} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: weft-front-health\r\nConnection: close\r\n\r\n",
                cfg.path
            );
            let ok = check(addr, &request, cfg.timeout);
            if !ok {
                front.backends[s].checks_failed.fetch_add(1, Ordering::Relaxed);
            }
            let up = front.is_up(s);
            if let Some(u) = next(st, up, ok, cfg) {
                weft_core::info!("back-end {addr} is {}", if u { "up" } else { "down" });
                front.set_up(s, u);
            }
        }
        // Sleep out the interval in short slices so a stop is quick.
        while !stop.load(Ordering::Relaxed) && round.elapsed() < cfg.interval {
            std::thread::sleep(
                cfg.interval
                    .saturating_sub(round.elapsed())
                    .min(Duration::from_millis(20)),
            );
        }
    }
}

/// One check: connect, send, read the status line; a status below 500 passes.
fn check(addr: SocketAddr, request: &[u8], timeout: Duration) -> bool {
    let timeout = timeout.max(Duration::from_millis(1));
    let Ok(mut s) = TcpStream::connect_timeout(&addr, timeout) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    if s.write_all(request).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    let mut got = 0;
    while got < head.len() {
        match s.read(&mut head[got..]) {
            Ok(0) | Err(_) => return false,
            Ok(n) => got += n,
        }
    }
    head.starts_with(b"HTTP/1.") && matches!(head[9], b'1'..=b'4')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rise_and_fall_count_results_in_a_row() {
        let cfg = HealthConfig {
            rise: 2,
            fall: 3,
            ..HealthConfig::default()
        };
        let mut st = Streak {
            was_up: true,
            ..Streak::default()
        };
        assert_eq!(next(&mut st, true, false, &cfg), None);
        assert_eq!(next(&mut st, true, false, &cfg), None);
        assert_eq!(next(&mut st, true, true, &cfg), None, "a success resets the failures");
        assert_eq!(next(&mut st, true, false, &cfg), None);
        assert_eq!(next(&mut st, true, false, &cfg), None);
        assert_eq!(next(&mut st, true, false, &cfg), Some(false));
        assert_eq!(next(&mut st, false, true, &cfg), None);
        assert_eq!(next(&mut st, false, true, &cfg), Some(true));
        // Marked down passively while the streak counted it up.
        assert_eq!(next(&mut st, false, true, &cfg), None);
        assert_eq!(next(&mut st, false, true, &cfg), Some(true));
    }
}
