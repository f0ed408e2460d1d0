//! Access-log replay (Common and Combined Log Format) and a synthesizer of
//! such logs (workloads.md §5).
//!
//! Replay has two timings:
//! - `timing=fast` (default): `--clients N` closed-loop clients take the next
//!   line as soon as their previous request is answered, on keep-alive
//!   connections — as fast as N clients can go;
//! - `timing=logged`: each line is sent at its logged offset divided by
//!   `speed` (2 = twice as fast), by one agent per client host holding up to
//!   `conns` persistent connections.
//!
//! `map=asis` (default) requests the logged URI; `map=size` asks `weft
//! origin` for a body of the logged size (`/size/BYTES/t/URI`), so a real log
//! can be replayed against the origin emulator. Only GET and HEAD lines are
//! replayed; other methods and malformed lines are counted and skipped.

use super::{Arrival, Next, Out, Params, Prepared, ReqMeta};
use crate::dist::{Dist, Table};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use weft_http::date::civil_from_days;
use weft_http::Method;

/// Longest URI replayed.
const MAX_URI: usize = 8192;

/// One parsed log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line<'a> {
    /// Remote host.
    pub host: &'a str,
    /// Seconds since the epoch (UTC).
    pub time: i64,
    /// Method token.
    pub method: &'a str,
    /// Request target (origin form).
    pub uri: &'a str,
    /// Final status.
    pub status: u16,
    /// Body bytes (`-` = 0).
    pub bytes: u64,
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp as i64 + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn num(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 4 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `10/Oct/2000:13:55:36 -0700` → seconds since the epoch, UTC.
pub fn parse_clf_time(s: &str) -> Option<i64> {
    let (dt, tz) = s.split_once(' ')?;
    let mut parts = dt.split([':', '/']);
    let day = num(parts.next()?)?;
    let mname = parts.next()?;
    let mon = MONTHS.iter().position(|m| *m == mname)? as u32 + 1;
    let year = num(parts.next()?)? as i64;
    let (h, mi, sec) = (num(parts.next()?)?, num(parts.next()?)?, num(parts.next()?)?);
    if parts.next().is_some() || !(1..=31).contains(&day) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let tzb = tz.as_bytes();
    if tzb.len() != 5 || !(tzb[0] == b'+' || tzb[0] == b'-') {
        return None;
    }
    let tzh = num(&tz[1..3])? as i64;
    let tzm = num(&tz[3..5])? as i64;
    let offset = (tzh * 3600 + tzm * 60) * if tzb[0] == b'-' { -1 } else { 1 };
    let local = days_from_civil(year, mon, day) * 86_400 + (h * 3600 + mi * 60 + sec) as i64;
    Some(local - offset)
}

/// Parse one CLF or Combined line; `Err` names what is wrong.
pub fn parse_line(line: &str) -> Result<Line<'_>, &'static str> {
    let line = line.trim_end_matches(['\r', '\n']);
    let (host, rest) = line.split_once(' ').ok_or("no fields")?;
    if host.is_empty() {
        return Err("empty host");
    }
    let open = rest.find('[').ok_or("no [time]")?;
    let close = rest[open..].find(']').ok_or("unterminated [time]")? + open;
    let time = parse_clf_time(&rest[open + 1..close]).ok_or("bad time")?;
    let after = rest[close + 1..].trim_start();
    let req = after.strip_prefix('"').ok_or("no quoted request")?;
    // The request ends at the quote followed by ` STATUS `.
    let mut end = None;
    let b = req.as_bytes();
    let mut i = 0;
    while let Some(q) = req[i..].find('"') {
        let at = i + q;
        if b.get(at + 1) == Some(&b' ') && b.get(at + 2).is_some_and(|c| c.is_ascii_digit()) {
            end = Some(at);
            break;
        }
        i = at + 1;
    }
    let end = end.ok_or("unterminated request")?;
    let request = &req[..end];
    let mut tail = req[end + 2..].split(' ');
    let status: u16 = tail
        .next()
        .filter(|s| s.len() == 3)
        .and_then(|s| s.parse().ok())
        .filter(|s| (100..=599).contains(s))
        .ok_or("bad status")?;
    let bytes = match tail.next() {
        Some("-") => 0,
        Some(s) => weft_http::parse_decimal(s.as_bytes()).ok_or("bad byte count")?,
        None => return Err("no byte count"),
    };
    let mut rp = request.split(' ').filter(|s| !s.is_empty());
    let method = rp.next().ok_or("empty request")?;
    let uri = rp.next().ok_or("no URI")?;
    if let Some(p) = rp.next() {
        if !p.starts_with("HTTP/") {
            return Err("bad protocol");
        }
    }
    if rp.next().is_some() {
        return Err("spaces in URI");
    }
    let uri = match weft_http::split_absolute(uri.as_bytes()) {
        Some((_, auth, _)) => &uri[uri.find(std::str::from_utf8(auth).unwrap_or("")).unwrap_or(0) + auth.len()..],
        None => uri,
    };
    let uri = if uri.is_empty() { "/" } else { uri };
    if !uri.starts_with('/') || uri.len() > MAX_URI || uri.bytes().any(|c| c <= b' ' || c == 0x7f) {
        return Err("bad URI");
    }
    Ok(Line {
        host,
        time,
        method,
        uri,
        status,
        bytes,
    })
}

/// A replayable entry.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// Seconds since the first entry.
    pub t: f64,
    /// Interned host.
    pub host: u32,
    /// GET or HEAD.
    pub head: bool,
    /// URI in the arena.
    pub uri: (u32, u32),
    /// Logged bytes.
    pub bytes: u64,
}

/// A parsed log.
#[derive(Debug, Default)]
pub struct Trace {
    /// Entries in time order.
    pub entries: Vec<Entry>,
    arena: Vec<u8>,
    /// Distinct hosts.
    pub hosts: usize,
    /// Lines read.
    pub lines: u64,
    /// Malformed lines skipped.
    pub malformed: u64,
    /// Well-formed lines with a method other than GET/HEAD, skipped.
    pub other_methods: u64,
    /// The first malformed line: (line number, reason).
    pub first_malformed: Option<(u64, &'static str)>,
}

impl Trace {
    /// Parse a whole log.
    pub fn parse(text: &str) -> Trace {
        let mut t = Trace::default();
        let mut hosts: HashMap<&str, u32> = HashMap::new();
        let mut raw: Vec<(i64, Entry)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            t.lines += 1;
            match parse_line(line) {
                Ok(l) => {
                    let head = match l.method {
                        "GET" => false,
                        "HEAD" => true,
                        _ => {
                            t.other_methods += 1;
                            continue;
                        }
                    };
                    let n = hosts.len() as u32;
                    let host = *hosts.entry(l.host).or_insert(n);
                    let start = t.arena.len() as u32;
                    t.arena.extend_from_slice(l.uri.as_bytes());
                    raw.push((
                        l.time,
                        Entry {
                            t: 0.0,
                            host,
                            head,
                            uri: (start, l.uri.len() as u32),
                            bytes: l.bytes,
                        },
                    ));
                }
                Err(why) => {
                    t.malformed += 1;
                    if t.first_malformed.is_none() {
                        t.first_malformed = Some((i as u64 + 1, why));
                    }
                }
            }
        }
        raw.sort_by_key(|(time, _)| *time);
        let first = raw.first().map(|r| r.0).unwrap_or(0);
        t.entries = raw
            .into_iter()
            .map(|(time, mut e)| {
                e.t = (time - first) as f64;
                e
            })
            .collect();
        t.hosts = hosts.len();
        t
    }

    /// Read and parse a file; a one-line error when unreadable or empty.
    pub fn load(path: &Path) -> Result<Trace, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("cannot read trace {}: {e}", path.display()))?;
        let text = String::from_utf8_lossy(&bytes);
        let t = Trace::parse(&text);
        if t.entries.is_empty() {
            return Err(format!(
                "trace {} has no replayable GET/HEAD lines ({} lines, {} malformed{})",
                path.display(),
                t.lines,
                t.malformed,
                t.first_malformed
                    .map(|(n, why)| format!(", first at line {n}: {why}"))
                    .unwrap_or_default()
            ));
        }
        Ok(t)
    }

    /// The URI of an entry.
    pub fn uri(&self, e: &Entry) -> &[u8] {
        &self.arena[e.uri.0 as usize..(e.uri.0 + e.uri.1) as usize]
    }

    /// Seconds from the first to the last entry.
    pub fn span(&self) -> f64 {
        self.entries.last().map(|e| e.t).unwrap_or(0.0)
    }
}

/// A trace with its replay settings.
#[derive(Debug)]
pub struct Replay {
    /// The log.
    pub trace: Trace,
    /// Logged timing (else as fast as the clients go).
    pub logged: bool,
    /// Speed-up factor of logged timing.
    pub speed: f64,
    /// Ask the origin for the logged size.
    pub map_size: bool,
    /// Start over at the end.
    pub looping: bool,
    /// Connections per host (logged timing).
    pub conns: usize,
    /// The file replayed.
    pub file: PathBuf,
}

impl Replay {
    /// From `trace:FILE` or `--param file=`, and `timing=`, `speed=`, `map=`, `loop=`, `conns=`.
    pub fn from_params(p: &mut Params, file: Option<PathBuf>) -> Result<Replay, String> {
        let file = match (file, p.take("file")) {
            (Some(f), _) => f,
            (None, Some(f)) => PathBuf::from(f),
            (None, None) => return Err("workload trace needs a log: --workload trace:FILE or --param file=FILE".into()),
        };
        let logged = match p.take("timing").as_deref() {
            None | Some("fast") => false,
            Some("logged") => true,
            Some(v) => return Err(format!("invalid --param timing=`{v}` (expected fast or logged)")),
        };
        let speed = p.f64("speed", 1.0)?;
        if speed <= 0.0 {
            return Err("--param speed must be positive".into());
        }
        let map_size = match p.take("map").as_deref() {
            None | Some("asis") => false,
            Some("size") => true,
            Some(v) => return Err(format!("invalid --param map=`{v}` (expected asis or size)")),
        };
        let looping = p.u64("loop", 0, 0..=1)? == 1;
        let conns = p.u64("conns", 4, 1..=64)? as usize;
        p.finish("trace", &["file", "timing", "speed", "map", "loop", "conns"])?;
        let trace = Trace::load(&file)?;
        Ok(Replay {
            trace,
            logged,
            speed,
            map_size,
            looping,
            conns,
            file,
        })
    }

    /// Replay at logged timing?
    pub fn timed(&self) -> bool {
        self.logged
    }
}

/// One thread's position in a replay.
pub struct ReplayThread {
    shared: Arc<Prepared>,
    thread: usize,
    threads: usize,
    next: usize,
    round: u64,
    exhausted: bool,
    path: Vec<u8>,
}

impl ReplayThread {
    /// Thread `thread` of `threads` replays entries (fast) or hosts (logged) congruent to it.
    pub fn new(shared: Arc<Prepared>, thread: usize, threads: usize) -> ReplayThread {
        ReplayThread {
            shared,
            thread,
            threads: threads.max(1),
            next: thread,
            round: 0,
            exhausted: false,
            path: Vec::with_capacity(256),
        }
    }

    fn replay(&self) -> &Replay {
        match &*self.shared {
            Prepared::Trace(r) => r,
            _ => unreachable!(),
        }
    }

    /// Agents (client hosts) of this thread.
    pub fn agents(&self) -> usize {
        let h = self.replay().trace.hosts;
        (h + self.threads - 1 - self.thread.min(h)) / self.threads
    }

    /// Connections per host.
    pub fn conns_per_host(&self) -> usize {
        self.replay().conns
    }

    /// Ran out of lines?
    pub fn exhausted(&self) -> bool {
        self.exhausted
    }

    fn write(&mut self, idx: usize, out: &mut Out<'_>) -> ReqMeta {
        let shared = self.shared.clone();
        let Prepared::Trace(r) = &*shared else { unreachable!() };
        let e = r.trace.entries[idx];
        let uri = r.trace.uri(&e);
        self.path.clear();
        if r.map_size {
            crate::urls::push_size_path(&mut self.path, e.bytes, crate::urls::CacheFlag::Default);
            self.path.extend_from_slice(b"/t");
        }
        self.path.extend_from_slice(uri);
        let method = if e.head { Method::Head } else { Method::Get };
        out.request(method, 0, &self.path, b"", b"", idx as u64)
    }

    /// Fast timing: the next line for a client.
    pub fn next_request(&mut self, out: &mut Out<'_>) -> Next {
        let n = self.replay().trace.entries.len();
        if self.next >= n {
            if !self.replay().looping {
                self.exhausted = true;
                return Next::Exhausted;
            }
            self.next = self.thread % n.max(1);
        }
        let idx = self.next;
        self.next += self.threads;
        Next::Request(self.write(idx, out), Duration::ZERO)
    }

    /// Logged timing: the next line of this thread's hosts, with its time.
    pub fn next_arrival(&mut self) -> Option<Arrival> {
        let shared = self.shared.clone();
        let Prepared::Trace(r) = &*shared else { unreachable!() };
        let n = r.trace.entries.len();
        loop {
            if self.next >= n {
                if !r.looping {
                    self.exhausted = true;
                    return None;
                }
                self.round += 1;
                self.next = 0;
            }
            let i = self.next;
            self.next += 1;
            let e = r.trace.entries[i];
            if e.host as usize % self.threads != self.thread {
                continue;
            }
            let base = self.round as f64 * (r.trace.span() + 1.0);
            return Some(Arrival {
                at: Some((base + e.t) / r.speed),
                agent: e.host / self.threads as u32,
                item: i as u64,
            });
        }
    }

    /// Write the request of entry `item`.
    pub fn render(&mut self, item: u64, out: &mut Out<'_>) -> ReqMeta {
        self.write(item as usize, out)
    }
}

/// Settings of a synthetic trace (`weft load gen trace`).
#[derive(Clone, Debug)]
pub struct SynthParams {
    /// Lines to write.
    pub requests: usize,
    /// Distinct objects.
    pub objects: usize,
    /// Distinct client hosts.
    pub hosts: usize,
    /// Span of the log, seconds.
    pub duration: f64,
    /// Amplitude of the daily cycle of the session arrival rate (0..1).
    pub diurnal: f64,
    /// `weft load gen` also writes the file set the log's URIs name.
    pub files: bool,
}

impl SynthParams {
    /// From `--param requests=, objects=, hosts=, duration=, diurnal=, files=`.
    pub fn from_params(p: &mut Params) -> Result<SynthParams, String> {
        let s = SynthParams {
            requests: p.u64("requests", 10_000, 1..=100_000_000)? as usize,
            objects: p.u64("objects", 1000, 1..=10_000_000)? as usize,
            hosts: p.u64("hosts", 200, 1..=10_000_000)? as usize,
            duration: match p.take("duration") {
                Some(v) => weft_core::units::parse_duration(&v)
                    .map_err(|e| format!("--param duration: {e}"))?
                    .as_secs_f64(),
                None => 3600.0,
            },
            diurnal: p.f64("diurnal", 0.5)?,
            files: p.u64("files", 1, 0..=1)? == 1,
        };
        if s.diurnal > 1.0 || s.duration < 1.0 {
            return Err("--param diurnal must be 0..1 and duration at least 1s".into());
        }
        p.finish(
            "trace",
            &["requests", "objects", "hosts", "duration", "diurnal", "files"],
        )?;
        Ok(s)
    }
}

/// Write a synthetic Common Log Format trace: Zipf(1) object popularity and
/// client hosts, SURGE sizes and OFF times, sessions arriving at a rate with a
/// daily cycle, 90 % 200 / 8 % 304 / 2 % 404. Returns the lines written.
pub fn synthesize(p: &SynthParams, seed: u64, w: &mut impl Write) -> std::io::Result<usize> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x0074_7261_6365);
    let sizes: Vec<u64> = (0..p.objects)
        .map(|_| {
            let s = if rng.gen::<f64>() < 0.07 {
                super::surge::TAIL.sample(&mut rng).min(64.0 * 1024.0 * 1024.0)
            } else {
                loop {
                    let s = super::surge::BODY.sample(&mut rng);
                    if s < super::surge::CUT {
                        break s;
                    }
                }
            };
            s as u64
        })
        .collect();
    let objects = Table::zipf(p.objects, 1.0);
    let hosts = Table::zipf(p.hosts, 1.0);
    let pages = Dist::Exp(4.0);
    // Sessions needed on average: requests / (pages × objects per page ≈ 1.4).
    let mean_session = 4.0 * 1.4;
    let rate = p.requests as f64 / mean_session / p.duration;
    let mut lines: Vec<(f64, String)> = Vec::with_capacity(p.requests + 64);
    let mut t = 0.0f64;
    let base = 804_571_200i64; // 1995-07-01 00:00:00 -0400
    while lines.len() < p.requests {
        // Thinning for a sinusoidal daily rate (peak in the afternoon).
        let max_rate = rate * (1.0 + p.diurnal);
        t += Dist::Exp(1.0 / max_rate).sample(&mut rng);
        if t >= p.duration {
            t %= p.duration;
        }
        let phase = 2.0 * std::f64::consts::PI * (t / 86_400.0) - std::f64::consts::FRAC_PI_2;
        let lambda = rate * (1.0 + p.diurnal * phase.sin());
        if rng.gen::<f64>() * max_rate > lambda {
            continue;
        }
        let host = hosts.sample(&mut rng);
        let mut at = t;
        let n_pages = (pages.sample(&mut rng).ceil() as usize).max(1);
        for page in 0..n_pages {
            if page > 0 {
                at += super::surge::INACTIVE_OFF.sample(&mut rng).min(1800.0);
            }
            let k = (super::surge::PAGE_OBJECTS.sample(&mut rng).floor() as usize).max(1);
            for j in 0..k {
                if j > 0 {
                    at += super::surge::ACTIVE_OFF.sample(&mut rng).min(60.0);
                }
                if at >= p.duration || lines.len() >= p.requests {
                    break;
                }
                let obj = objects.sample(&mut rng);
                let u: f64 = rng.gen();
                let (uri, status, bytes) = if u < 0.02 {
                    (format!("/missing/{obj}.html"), 404, "0".to_string())
                } else {
                    let ext = if j == 0 { "html" } else { "gif" };
                    let uri = format!("/size/{}/t/obj{obj}.{ext}", sizes[obj]);
                    if u < 0.10 {
                        (uri, 304, "-".to_string())
                    } else {
                        (uri, 200, sizes[obj].to_string())
                    }
                };
                let secs = base + at as i64 - 4 * 3600;
                let days = secs.div_euclid(86_400);
                let (y, m, d) = civil_from_days(days);
                let sod = secs.rem_euclid(86_400);
                lines.push((
                    at,
                    format!(
                        "client{host}.example - - [{d:02}/{}/{y}:{:02}:{:02}:{:02} -0400] \"GET {uri} HTTP/1.0\" {status} {bytes}",
                        MONTHS[m as usize - 1],
                        sod / 3600,
                        sod % 3600 / 60,
                        sod % 60
                    ),
                ));
            }
        }
    }
    lines.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
    for (_, l) in &lines {
        writeln!(w, "{l}")?;
    }
    Ok(lines.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_and_combined_lines() {
        let l = parse_line(r#"199.72.81.55 - - [01/Jul/1995:00:00:01 -0400] "GET /history/apollo/ HTTP/1.0" 200 6245"#)
            .unwrap();
        assert_eq!(l.host, "199.72.81.55");
        assert_eq!(l.time, 804_571_201);
        assert_eq!(
            (l.method, l.uri, l.status, l.bytes),
            ("GET", "/history/apollo/", 200, 6245)
        );
        let l = parse_line(
            r#"127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /a.gif HTTP/1.1" 304 - "http://x/ \"q\"" "Mozilla/4.08 [en]""#,
        )
        .unwrap();
        assert_eq!((l.uri, l.status, l.bytes), ("/a.gif", 304, 0));
        assert_eq!(l.time, 971_211_336);
        // HTTP/0.9-style request without a protocol; absolute URI.
        let l = parse_line(r#"h - - [01/Jan/2000:00:00:00 +0000] "GET http://ex.com/p?q" 200 1"#).unwrap();
        assert_eq!(l.uri, "/p?q");
        assert_eq!(l.time, 946_684_800);
    }

    #[test]
    fn malformed_lines_are_refused() {
        for (bad, why) in [
            ("", "no fields"),
            ("host", "no fields"),
            (
                r#"h - - 01/Jul/1995:00:00:01 -0400 "GET / HTTP/1.0" 200 1"#,
                "no [time]",
            ),
            (
                r#"h - - [01/Jux/1995:00:00:01 -0400] "GET / HTTP/1.0" 200 1"#,
                "bad time",
            ),
            (r#"h - - [01/Jul/1995:00:00:01] "GET / HTTP/1.0" 200 1"#, "bad time"),
            (
                r#"h - - [01/Jul/1995:00:00:01 -0400] GET / HTTP/1.0 200 1"#,
                "no quoted request",
            ),
            (
                r#"h - - [01/Jul/1995:00:00:01 -0400] "GET / HTTP/1.0 200 1"#,
                "unterminated request",
            ),
            (
                r#"h - - [01/Jul/1995:00:00:01 -0400] "GET / HTTP/1.0" 2000 1"#,
                "bad status",
            ),
            (
                r#"h - - [01/Jul/1995:00:00:01 -0400] "GET / HTTP/1.0" 200 x"#,
                "bad byte count",
            ),
            (r#"h - - [01/Jul/1995:00:00:01 -0400] "GET" 200 1"#, "no URI"),
            (
                r#"h - - [01/Jul/1995:00:00:01 -0400] "GET nopath HTTP/1.0" 200 1"#,
                "bad URI",
            ),
            (
                r#"h - - [01/Jul/1995:00:00:01 -0400] "GET / HTTP/1.0 x" 200 1"#,
                "spaces in URI",
            ),
        ] {
            assert_eq!(parse_line(bad), Err(why), "{bad}");
        }
    }

    #[test]
    fn traces_count_and_skip_bad_lines() {
        let text = "\
a - - [01/Jul/1995:00:00:05 -0400] \"GET /b HTTP/1.0\" 200 10
garbage line
b - - [01/Jul/1995:00:00:01 -0400] \"HEAD /a HTTP/1.0\" 200 -
a - - [01/Jul/1995:00:00:09 -0400] \"POST /c HTTP/1.0\" 200 1

c - - [01/Jul/1995:00:00:09 -0400] \"GET /d HTTP/1.0\" 404 0
";
        let t = Trace::parse(text);
        assert_eq!(t.lines, 5);
        assert_eq!(t.malformed, 1);
        assert_eq!(t.first_malformed, Some((2, "no [time]")));
        assert_eq!(t.other_methods, 1);
        assert_eq!(t.entries.len(), 3);
        assert_eq!(t.uri(&t.entries[0]), b"/a", "sorted by time");
        assert!(t.entries[0].head);
        assert_eq!(t.entries[1].t, 4.0);
        assert_eq!(t.hosts, 3);
        assert_eq!(t.span(), 8.0);
    }

    #[test]
    fn unreadable_and_empty_traces_are_one_line_errors() {
        let e = Trace::load(Path::new("/nonexistent/x.log")).unwrap_err();
        assert!(e.starts_with("cannot read trace /nonexistent/x.log"), "{e}");
        let p = std::env::temp_dir().join(format!("weft-empty-trace-{}.log", std::process::id()));
        std::fs::write(&p, "junk\n").unwrap();
        let e = Trace::load(&p).unwrap_err();
        std::fs::remove_file(&p).ok();
        assert!(e.contains("no replayable") && e.contains("line 1"), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn synthetic_traces_parse_cleanly() {
        let p = SynthParams {
            requests: 3000,
            objects: 200,
            hosts: 50,
            duration: 3600.0,
            diurnal: 0.5,
            files: false,
        };
        let mut out = Vec::new();
        let n = synthesize(&p, 1, &mut out).unwrap();
        assert_eq!(n, 3000);
        let text = String::from_utf8(out).unwrap();
        let t = Trace::parse(&text);
        assert_eq!(t.malformed, 0);
        assert_eq!(t.entries.len(), 3000);
        assert!(t.span() <= 3600.0);
        let e304 = text.lines().filter(|l| l.contains("\" 304 ")).count() as f64 / 3000.0;
        assert!((0.05..0.12).contains(&e304), "{e304}");
        // Sizes in the URIs match the logged bytes of 200 lines.
        for l in text.lines().take(200) {
            let l = parse_line(l).unwrap();
            if l.status == 200 {
                assert_eq!(crate::urls::parse(l.uri.as_bytes()).unwrap().size, l.bytes);
            }
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(days_from_civil(1995, 7, 1)), (1995, 7, 1));
    }
}
