//! What a run measured: counters, HDR histograms, one-second samples, and the
//! statistics the papers report (min/avg/max/stddev over samples; means with
//! 90 % confidence intervals from Student's t across repeated runs).
//!
//! Each engine thread fills its own [`Stats`] with no sharing; the runner
//! merges them at the end. Recording a reply is a few additions and one
//! histogram increment: nothing allocates except the per-second sample vectors,
//! which grow once a second.

use hdrhistogram::Histogram;
use std::time::Duration;
use weft_io::sys::Errno;

/// Errors by kind (httperf's classes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Errors {
    /// Connection refused (ECONNREFUSED).
    pub refused: u64,
    /// Connection reset by the server, or closed by it before any byte of an
    /// awaited reply arrived.
    pub reset: u64,
    /// No progress for `--timeout` (httperf's client-timo).
    pub timeout: u64,
    /// Out of descriptors (EMFILE/ENFILE): results are meaningless.
    pub fd_unavailable: u64,
    /// Out of local ports (EADDRNOTAVAIL).
    pub addr_unavailable: u64,
    /// Malformed or truncated reply.
    pub bad_response: u64,
    /// Body bytes (or length) differ from the origin's deterministic content.
    pub verify: u64,
    /// Anything else (the first errno is kept in `Stats::other_errno`).
    pub other: u64,
}

impl Errors {
    /// Sum of all kinds.
    pub fn total(&self) -> u64 {
        self.refused
            + self.reset
            + self.timeout
            + self.fd_unavailable
            + self.addr_unavailable
            + self.bad_response
            + self.verify
            + self.other
    }

    fn add(&mut self, o: &Errors) {
        self.refused += o.refused;
        self.reset += o.reset;
        self.timeout += o.timeout;
        self.fd_unavailable += o.fd_unavailable;
        self.addr_unavailable += o.addr_unavailable;
        self.bad_response += o.bad_response;
        self.verify += o.verify;
        self.other += o.other;
    }
}

/// Histogram of microseconds, 3 significant digits, up to one hour.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

/// One thread's (or the merged) measurements.
#[derive(Clone, Debug)]
pub struct Stats {
    /// Requests written completely.
    pub requests: u64,
    /// Replies by status class 1xx..5xx.
    pub replies: [u64; 5],
    /// Connections opened (socket + connect attempted).
    pub connections: u64,
    /// Connections that were established.
    pub connected: u64,
    /// Sessions started (open-loop arrivals, closed-loop client cycles).
    pub sessions: u64,
    /// Errors by kind.
    pub errors: Errors,
    /// First errno counted as `other`.
    pub other_errno: Option<i32>,
    /// Request bytes sent.
    pub bytes_sent: u64,
    /// Reply bytes received (heads and bodies).
    pub bytes_received: u64,
    /// Reply head bytes.
    pub head_bytes: u64,
    /// Reply body bytes.
    pub body_bytes: u64,
    /// Replies whose body was checked against the deterministic content.
    pub verified: u64,
    /// Response times (request written → reply complete), µs.
    pub response_us: Histogram<u64>,
    /// Response times of replies that carried an `Age` field, µs: answers a
    /// cache served (RFC 9111 §5.1: Age means "not generated or validated
    /// by the origin for this request"). Through a proxy these are its hits;
    /// `response_us` minus these are its misses.
    pub cached_us: Histogram<u64>,
    /// Connect times (connect → established), µs.
    pub connect_us: Histogram<u64>,
    /// Connection lifetimes (connect → close) of connections that carried a reply, µs.
    pub conn_life_us: Histogram<u64>,
    /// Replies completed in each second since the start.
    pub reply_samples: Vec<u64>,
    /// Requests sent in each second since the start.
    pub request_samples: Vec<u64>,
    /// Most connections open at once.
    pub max_open: u64,
    /// Idle connections opened (`--idle`).
    pub idle_opened: u64,
    /// Idle connections the server closed (each was reopened while the run lasted).
    pub idle_closed_by_server: u64,
    /// Transactions the client aborted on purpose (PolyMix robots' aborts).
    pub aborted: u64,
    /// Emulated SSL handshakes completed: (full, abbreviated).
    pub ssl_handshakes: (u64, u64),
    /// Requests the workload could not send (e.g. the trace ran out).
    pub workload_exhausted: bool,
    /// The descriptor limit, when `fd_unavailable` was hit.
    pub fd_limit: Option<u64>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            requests: 0,
            replies: [0; 5],
            connections: 0,
            connected: 0,
            sessions: 0,
            errors: Errors::default(),
            other_errno: None,
            bytes_sent: 0,
            bytes_received: 0,
            head_bytes: 0,
            body_bytes: 0,
            verified: 0,
            response_us: histogram(),
            cached_us: histogram(),
            connect_us: histogram(),
            conn_life_us: histogram(),
            reply_samples: Vec::new(),
            request_samples: Vec::new(),
            max_open: 0,
            idle_opened: 0,
            idle_closed_by_server: 0,
            aborted: 0,
            ssl_handshakes: (0, 0),
            workload_exhausted: false,
            fd_limit: None,
        }
    }
}

#[inline]
fn bump_sample(v: &mut Vec<u64>, second: usize) {
    if v.len() <= second {
        v.resize(second + 1, 0);
    }
    v[second] += 1;
}

#[inline]
fn micros(d: Duration) -> u64 {
    (d.as_micros() as u64).clamp(1, 3_600_000_000)
}

impl Stats {
    /// Total replies.
    pub fn replies_total(&self) -> u64 {
        self.replies.iter().sum()
    }

    /// A reply with `status` completed `second` seconds into the run;
    /// `cached`: it carried an `Age` field.
    #[inline]
    pub fn record_reply(&mut self, status: u16, response: Duration, second: usize, cached: bool) {
        let class = (status / 100).clamp(1, 5) as usize - 1;
        self.replies[class] += 1;
        let us = micros(response);
        let _ = self.response_us.record(us);
        if cached {
            let _ = self.cached_us.record(us);
        }
        bump_sample(&mut self.reply_samples, second);
    }

    /// Response times of the replies without an `Age` field (a proxy's
    /// misses), µs: all replies less the cached ones.
    pub fn uncached_us(&self) -> Histogram<u64> {
        let mut h = self.response_us.clone();
        let _ = h.subtract(&self.cached_us);
        h
    }

    /// A request was written.
    #[inline]
    pub fn record_request(&mut self, bytes: usize, second: usize) {
        self.requests += 1;
        self.bytes_sent += bytes as u64;
        bump_sample(&mut self.request_samples, second);
    }

    /// A connection was established after `d`.
    #[inline]
    pub fn record_connect(&mut self, d: Duration) {
        self.connected += 1;
        let _ = self.connect_us.record(micros(d));
    }

    /// Count an I/O error by errno.
    pub fn record_errno(&mut self, errno: Option<i32>) {
        match errno.map(Errno::from_raw) {
            Some(Errno::ConnRefused) => self.errors.refused += 1,
            Some(Errno::ConnReset | Errno::BrokenPipe | Errno::ConnAborted) => self.errors.reset += 1,
            Some(Errno::TimedOut) => self.errors.timeout += 1,
            Some(e) if e.is_fd_exhaustion() => self.errors.fd_unavailable += 1,
            Some(Errno::AddrNotAvailable) => self.errors.addr_unavailable += 1,
            _ => {
                self.errors.other += 1;
                if self.other_errno.is_none() {
                    self.other_errno = errno;
                }
            }
        }
    }

    /// Add another thread's (or run's) measurements.
    pub fn merge(&mut self, o: &Stats) {
        self.requests += o.requests;
        for (a, b) in self.replies.iter_mut().zip(o.replies.iter()) {
            *a += b;
        }
        self.connections += o.connections;
        self.connected += o.connected;
        self.sessions += o.sessions;
        self.errors.add(&o.errors);
        if self.other_errno.is_none() {
            self.other_errno = o.other_errno;
        }
        self.bytes_sent += o.bytes_sent;
        self.bytes_received += o.bytes_received;
        self.head_bytes += o.head_bytes;
        self.body_bytes += o.body_bytes;
        self.verified += o.verified;
        let _ = self.response_us.add(&o.response_us);
        let _ = self.cached_us.add(&o.cached_us);
        let _ = self.connect_us.add(&o.connect_us);
        let _ = self.conn_life_us.add(&o.conn_life_us);
        merge_samples(&mut self.reply_samples, &o.reply_samples);
        merge_samples(&mut self.request_samples, &o.request_samples);
        self.max_open += o.max_open;
        self.idle_opened += o.idle_opened;
        self.idle_closed_by_server += o.idle_closed_by_server;
        self.aborted += o.aborted;
        self.ssl_handshakes.0 += o.ssl_handshakes.0;
        self.ssl_handshakes.1 += o.ssl_handshakes.1;
        self.workload_exhausted |= o.workload_exhausted;
        self.fd_limit = self.fd_limit.or(o.fd_limit);
    }
}

fn merge_samples(a: &mut Vec<u64>, b: &[u64]) {
    if a.len() < b.len() {
        a.resize(b.len(), 0);
    }
    for (x, y) in a.iter_mut().zip(b.iter()) {
        *x += y;
    }
}

/// min/avg/max/stddev of per-second samples.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RateSummary {
    /// Smallest sample.
    pub min: f64,
    /// Mean of the samples (the overall rate when there is no complete sample).
    pub avg: f64,
    /// Largest sample.
    pub max: f64,
    /// Sample standard deviation.
    pub stddev: f64,
    /// The samples (complete seconds only).
    pub samples: Vec<f64>,
}

impl RateSummary {
    /// Summarise the first `complete` one-second samples; `overall` is the
    /// rate over the whole run, used when no second was complete.
    pub fn of(samples: &[u64], complete: usize, overall: f64) -> RateSummary {
        let s: Vec<f64> = (0..complete)
            .map(|i| samples.get(i).copied().unwrap_or(0) as f64)
            .collect();
        if s.is_empty() {
            return RateSummary {
                min: overall,
                avg: overall,
                max: overall,
                stddev: 0.0,
                samples: s,
            };
        }
        let (m, sd) = mean_sd(&s);
        RateSummary {
            min: s.iter().cloned().fold(f64::INFINITY, f64::min),
            avg: m,
            max: s.iter().cloned().fold(0.0, f64::max),
            stddev: sd,
            samples: s,
        }
    }
}

/// Mean and sample standard deviation (n−1).
pub fn mean_sd(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (m, 0.0);
    }
    let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0);
    (m, var.sqrt())
}

/// Student's t quantile t(0.95, df): the multiplier of a two-sided 90 %
/// confidence interval.
pub fn t90(df: usize) -> f64 {
    const T: [f64; 30] = [
        6.3138, 2.9200, 2.3534, 2.1318, 2.0150, 1.9432, 1.8946, 1.8595, 1.8331, 1.8125, 1.7959, 1.7823, 1.7709, 1.7613,
        1.7531, 1.7459, 1.7396, 1.7341, 1.7291, 1.7247, 1.7207, 1.7171, 1.7139, 1.7109, 1.7081, 1.7056, 1.7033, 1.7011,
        1.6991, 1.6973,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => T[df - 1],
        _ => {
            // Between tabulated points the quantile is close to linear in 1/df:
            // 30 → 1.6973, 60 → 1.6706, 120 → 1.6577, ∞ → 1.6449.
            let pts = [(30.0, 1.6973), (60.0, 1.6706), (120.0, 1.6577), (f64::INFINITY, 1.6449)];
            let x = 1.0 / df as f64;
            for w in pts.windows(2) {
                let (d0, t0) = w[0];
                let (d1, t1) = w[1];
                if (df as f64) <= d1 {
                    let (x0, x1) = (1.0 / d0, if d1.is_infinite() { 0.0 } else { 1.0 / d1 });
                    return t1 + (t0 - t1) * (x - x1) / (x0 - x1);
                }
            }
            1.6449
        }
    }
}

/// Mean and the half-width of its 90 % confidence interval (Student's t, n−1
/// degrees of freedom), as the papers report across runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ci {
    /// The mean.
    pub mean: f64,
    /// Half-width: the interval is mean ± half.
    pub half: f64,
}

/// 90 % confidence interval of the mean of `v`.
pub fn ci90(v: &[f64]) -> Ci {
    let (m, sd) = mean_sd(v);
    let half = if v.len() < 2 {
        f64::NAN
    } else {
        t90(v.len() - 1) * sd / (v.len() as f64).sqrt()
    };
    Ci { mean: m, half }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confidence_intervals_match_known_values() {
        // 1..5: mean 3, s = sqrt(2.5) = 1.5811, t(0.95,4) = 2.1318,
        // half = 2.1318 · 1.5811 / sqrt(5) = 1.5074.
        let c = ci90(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        assert!((c.mean - 3.0).abs() < 1e-12);
        assert!((c.half - 1.5074).abs() < 1e-3, "{c:?}");
        // Two runs: t(0.95,1) = 6.3138; s = 0.7071; half = 6.3138·0.7071/1.4142 = 3.1569.
        let c = ci90(&[10.0, 11.0]);
        assert!((c.half - 3.1569).abs() < 1e-3, "{c:?}");
        // Identical runs: zero width.
        assert_eq!(ci90(&[7.0, 7.0, 7.0]).half, 0.0);
        assert!(ci90(&[1.0]).half.is_nan());
        assert!((t90(1000) - 1.6464).abs() < 2e-3, "{}", t90(1000));
        assert!((t90(40) - 1.6839).abs() < 2e-3, "{}", t90(40));
        assert!(t90(31) < t90(30) && t90(31) > t90(60));
    }

    #[test]
    fn rate_summaries() {
        let r = RateSummary::of(&[10, 20, 30, 5], 3, 99.0);
        assert_eq!(r.samples, vec![10.0, 20.0, 30.0]);
        assert_eq!((r.min, r.avg, r.max), (10.0, 20.0, 30.0));
        assert!((r.stddev - 10.0).abs() < 1e-12);
        let r = RateSummary::of(&[3], 0, 42.0);
        assert_eq!((r.min, r.avg, r.max, r.stddev), (42.0, 42.0, 42.0, 0.0));
    }

    #[test]
    fn recording_and_merging() {
        let mut a = Stats::default();
        a.record_reply(200, Duration::from_millis(2), 0, false);
        a.record_reply(404, Duration::from_millis(4), 1, true);
        a.record_request(100, 0);
        a.record_errno(Some(Errno::ConnRefused.raw()));
        a.record_errno(Some(Errno::TooManyOpenFiles.raw()));
        a.record_errno(Some(Errno::BadFd.raw()));
        let mut b = Stats::default();
        b.record_reply(304, Duration::from_millis(6), 1, true);
        b.record_errno(Some(Errno::AddrNotAvailable.raw()));
        a.merge(&b);
        assert_eq!(a.replies, [0, 1, 1, 1, 0]);
        assert_eq!(a.reply_samples, vec![1, 2]);
        assert_eq!(a.errors.refused, 1);
        assert_eq!(a.errors.fd_unavailable, 1);
        assert_eq!(a.errors.addr_unavailable, 1);
        assert_eq!(a.errors.other, 1);
        assert_eq!(a.other_errno, Some(Errno::BadFd.raw()));
        assert_eq!(a.errors.total(), 4);
        assert_eq!(a.response_us.len(), 3);
        let p50 = a.response_us.value_at_quantile(0.5);
        assert!((3990..=4010).contains(&p50), "{p50}");
        assert!((a.response_us.mean() - 4000.0).abs() < 10.0);
        // Cached (Age) replies: 4 and 6 ms; the uncached one: 2 ms.
        assert_eq!(a.cached_us.len(), 2);
        assert!((a.cached_us.mean() - 5000.0).abs() < 10.0);
        let miss = a.uncached_us();
        assert_eq!(miss.len(), 1);
        assert!((miss.mean() - 2000.0).abs() < 10.0);
    }
}
