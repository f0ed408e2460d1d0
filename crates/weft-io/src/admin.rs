//! The admin endpoint's listener (`--admin ADDR` of `weft serve`,
//! `weft proxy` and `weft front`): `GET /stats` answers a JSON document built
//! by the caller, `GET /metrics` the same counters as Prometheus text when the
//! caller renders them, and `GET /` (or `/status`) the status page, one HTML
//! page for every role: a small embedded script reads `/metrics` and `/stats`
//! every second and draws the request rate and mean response time of the last
//! minute as inline SVG charts (no external resource).
//!
//! The charts come from `GET /history`: when the role renders Prometheus
//! text, a sampler thread of the endpoint reads it once a second and keeps the
//! last minute of (time, requests, response-time sum and count) totals, so a
//! page opened now shows the minute before, and every role's page reads the
//! same shape whatever its counters are called.
//!
//! It runs on its own threads with blocking std sockets: a cold diagnostic
//! path, kept off the workers so their system-call counts stay exactly the
//! server's. The listener's thread hands each connection to a thread of its
//! own (up to eight being answered at once; more are answered 503), so a
//! client that sends or reads nothing holds back no other reader. Workers
//! publish their counters into atomics; the renderers read them.
//!
//! This module also registers weft-io's own counters with the metrics
//! registry ([`weft_core::metrics::Group`] for [`SysCounts`] and
//! [`TrackerStats`]): weft-core cannot name weft-io's types, so the
//! implementations live beside the endpoint that renders them.

use crate::sys::counters::{SysKind, KINDS};
use crate::{SysCounts, TrackerStats};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weft_core::metrics::{self, Group, JsonObject, Kind, Publish, Samples};

/// Builds a document the endpoint serves.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// What the endpoint serves.
#[derive(Clone)]
pub struct Pages {
    /// `GET /stats`: the JSON stats document.
    pub stats: Render,
    /// `GET /metrics`: Prometheus text (None: 404).
    pub metrics: Option<Render>,
    /// `POST ...`: the role's own controls (the booster's manual switch),
    /// given the request line; None (or a None answer): 404.
    pub control: Option<Control>,
    /// Run before `/stats` and `/metrics` are rendered: waits out the
    /// workers' batches that have not published their counters yet
    /// (`weft_core::metrics::settle`), so a document counts every response
    /// its reader had already received. None: render at once.
    pub settle: Option<Settle>,
}

/// Waits, bounded, until the role's published counters are current.
pub type Settle = Arc<dyn Fn() + Send + Sync>;

/// Answers a `POST` request line with a JSON body, or None (404).
pub type Control = Arc<dyn Fn(&[u8]) -> Option<String> + Send + Sync>;

/// The status page (`GET /`, `GET /status`), the same for every role.
pub const STATUS_PAGE: &str = include_str!("admin_status.html");

/// The Content-Type of Prometheus text exposition format 0.0.4.
const PROMETHEUS_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Start the admin listener on `addr` serving the JSON stats document only;
/// returns the bound address.
pub fn start(addr: SocketAddr, render: Render) -> io::Result<SocketAddr> {
    serve(
        addr,
        Pages {
            stats: render,
            metrics: None,
            control: None,
            settle: None,
        },
    )
}

/// Start the admin listener on `addr`; returns the bound address.
/// After a reload (`group::handover`), a kept endpoint serves the new
/// role's pages from the same listener.
pub fn serve(addr: SocketAddr, pages: Pages) -> io::Result<SocketAddr> {
    let (pages, record) = match crate::group::handover::admin(addr, pages) {
        crate::group::handover::AdminStart::Kept(bound) => return Ok(bound),
        crate::group::handover::AdminStart::Bind(p, record) => (p, record),
    };
    let l = TcpListener::bind(addr)?;
    let bound = l.local_addr()?;
    if let Some(asked) = record {
        crate::group::handover::record_admin(asked, bound, pages.clone());
    }
    let current = move |p: &RwLock<Pages>| p.read().unwrap_or_else(|e| e.into_inner()).clone();
    let history: History = Arc::new(Mutex::new(VecDeque::with_capacity(HISTORY_POINTS)));
    if current(&pages).metrics.is_some() {
        let (h, pages) = (history.clone(), pages.clone());
        std::thread::Builder::new()
            .name("weft-admin-history".into())
            .spawn(move || loop {
                if let Some(m) = current(&pages).metrics {
                    sample(&h, &m());
                }
                std::thread::sleep(Duration::from_secs(1));
            })?;
    }
    std::thread::Builder::new().name("weft-admin".into()).spawn(move || {
        let open = Arc::new(AtomicUsize::new(0));
        let lingering = Arc::new(AtomicUsize::new(0));
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            // Each connection on its own thread, so one that sends nothing
            // (or reads nothing) does not hold a scrape back for the
            // request-line wait; a few at a time, then 503 at once.
            if open.load(Ordering::Relaxed) >= OPEN_MAX {
                // No lingering here: it would hold the accept loop. What
                // the request has sent so far is read without waiting, so
                // the close does not turn the 503 into a reset (a socket
                // closed with bytes unread is reset).
                if c.set_nonblocking(true).is_ok() {
                    let _ = c.read(&mut [0u8; 2048]);
                    let _ = c.set_nonblocking(false);
                }
                reply(
                    &mut c,
                    ("503 Service Unavailable", "application/json", BUSY.to_string()),
                );
                continue;
            }
            let held = Held::new(&open);
            let (pages, history, lingering) = (pages.clone(), history.clone(), lingering.clone());
            let spawned = std::thread::Builder::new()
                .name("weft-admin-conn".into())
                .spawn(move || {
                    answer_connection(c, held, &current(&pages), &history, &lingering);
                });
            // Not spawned: the closure, the socket and the count drop here.
            drop(spawned);
        }
    })?;
    Ok(bound)
}

/// Admin connections answered at once; more wait for none of them.
const OPEN_MAX: usize = 8;

/// Answered connections waiting out their lingering close at once; past
/// it, an answered connection is closed without waiting. A slot of
/// [`OPEN_MAX`] is given back when the answer is written, not after the
/// linger: a scraper that asks again at once must not find every slot held
/// by its own earlier connections, whose threads a loaded host has not yet
/// run to see the end of stream (a test reading `/stats` in a loop beside
/// CPU hogs was told 503 that way).
const LINGER_MAX: usize = 64;

const BUSY: &str = "{\"error\":\"too many admin connections open\"}\n";

/// One admin connection counted while it is open.
struct Held(Arc<AtomicUsize>);

impl Held {
    fn new(open: &Arc<AtomicUsize>) -> Held {
        open.fetch_add(1, Ordering::Relaxed);
        Held(open.clone())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Read one request line from `c` and answer it; `held` is its slot of
/// [`OPEN_MAX`], given back once the answer is written ([`LINGER_MAX`]).
fn answer_connection(mut c: TcpStream, held: Held, pages: &Pages, history: &History, lingering: &Arc<AtomicUsize>) {
    let _ = c.set_read_timeout(Some(REQUEST_LINE_WAIT));
    let mut buf = [0u8; 2048];
    let response = match read_request_line(&mut c, &mut buf) {
        Ok(n) if buf[..n].starts_with(b"GET /history ") => ("200 OK", "application/json", history_json(history)),
        Ok(n) => answer(&buf[..n], pages),
        Err(Incomplete::Ended) => ("400 Bad Request", "application/json", INCOMPLETE.to_string()),
        Err(Incomplete::TimedOut) => ("408 Request Timeout", "application/json", INCOMPLETE.to_string()),
    };
    reply(&mut c, response);
    drop(held);
    if lingering.load(Ordering::Relaxed) < LINGER_MAX {
        let _lingers = Held::new(lingering);
        linger(c);
    }
}

/// Write a whole response (one write: `write!` on the socket would send
/// each piece of the format in its own segment) and close; a reader that
/// takes nothing is given up on after [`REQUEST_LINE_WAIT`].
fn reply(c: &mut TcpStream, (status, kind, body): (&str, &str, String)) {
    let _ = c.set_write_timeout(Some(REQUEST_LINE_WAIT));
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut all = head.into_bytes();
    all.extend_from_slice(body.as_bytes());
    let _ = c.write_all(&all);
}

/// The lingering close after [`reply`]: the end of stream first, then wait
/// (up to [`LINGER`]) for the client's. Closed at once, a socket whose
/// answer is still in flight becomes an orphan, and under TCP memory
/// pressure (measured: 800 stalled sockmap tunnels holding buffers) the
/// kernel resets orphans (`TCPAbortOnMemory`), so the scrape read a reset
/// instead of its answer; a socket closed with request bytes unread is
/// reset the same way. Each connection has its own thread, so waiting
/// holds back no other.
fn linger(mut c: TcpStream) {
    if c.shutdown(std::net::Shutdown::Write).is_err() {
        return;
    }
    let _ = c.set_read_timeout(Some(LINGER));
    let deadline = std::time::Instant::now() + LINGER;
    let mut sink = [0u8; 1024];
    while std::time::Instant::now() < deadline {
        match c.read(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// How long a lingering close waits for the client's end of stream.
const LINGER: Duration = Duration::from_secs(2);

/// Seconds of history the status page's charts show.
const HISTORY_POINTS: usize = 61;

/// One sample: unix time in ms, then the totals of requests, response-time
/// sum (seconds) and count (None when the role has no such family).
type Point = (u64, Option<f64>, Option<f64>, Option<f64>);

type History = Arc<Mutex<VecDeque<Point>>>;

/// The value of the first sample without labels (the sum over workers) whose
/// name ends with `suffix`.
fn total(text: &str, suffix: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let (name, v) = l.split_once(' ')?;
        (name.starts_with("weft_") && name.ends_with(suffix) && !name.contains('{'))
            .then(|| v.parse().ok())
            .flatten()
    })
}

/// Record one point of the Prometheus text `text`.
fn sample(history: &History, text: &str) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let p = (
        now,
        total(text, "_requests_total"),
        total(text, "_response_seconds_sum"),
        total(text, "_response_seconds_count"),
    );
    let mut h = history.lock().unwrap_or_else(|e| e.into_inner());
    if h.len() == HISTORY_POINTS {
        h.pop_front();
    }
    h.push_back(p);
}

/// `{"points":[[ms,requests,sum,count],...]}` (null for an absent family).
fn history_json(history: &History) -> String {
    let h = history.lock().unwrap_or_else(|e| e.into_inner());
    let num = |v: Option<f64>| v.map_or("null".to_string(), |v| format!("{v}"));
    let points: Vec<String> = h
        .iter()
        .map(|(t, r, s, c)| format!("[{t},{},{},{}]", num(*r), num(*s), num(*c)))
        .collect();
    format!("{{\"points\":[{}]}}\n", points.join(","))
}

/// How long the admin thread waits for a request line. It serves one
/// connection at a time, so a client that sends nothing holds the next
/// ones this long; a loaded host can hold a client (the lab's, between its
/// connect and its send) for a second or two.
const REQUEST_LINE_WAIT: Duration = Duration::from_secs(10);

/// The body of the answer to a request line that never came whole.
const INCOMPLETE: &str = "{\"error\":\"request line incomplete\"}\n";

/// Why no request line came.
#[derive(Debug, PartialEq, Eq)]
enum Incomplete {
    /// The peer ended (or failed) before the line's end.
    Ended,
    /// [`REQUEST_LINE_WAIT`] passed first.
    TimedOut,
}

/// Read until the request line is complete (a client may send it in
/// pieces) or the buffer is full; returns the bytes read. A line cut short
/// is an error, never answered as a request for a page: an answer to the
/// wrong request (a 404 for a `GET /stats` that arrived late) would look
/// like a server without the page.
fn read_request_line(c: &mut impl Read, buf: &mut [u8]) -> Result<usize, Incomplete> {
    let mut n = 0;
    while n < buf.len() && !buf[..n].contains(&b'\n') {
        match c.read(&mut buf[n..]) {
            Ok(0) => return Err(Incomplete::Ended),
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Err(Incomplete::TimedOut)
            }
            Err(_) => return Err(Incomplete::Ended),
        }
    }
    Ok(n)
}

/// Status, Content-Type and body for a request's first bytes.
fn answer(req: &[u8], pages: &Pages) -> (&'static str, &'static str, String) {
    let counters = req.starts_with(b"GET /stats ") || req.starts_with(b"GET /metrics ");
    if let (true, Some(settle)) = (counters, &pages.settle) {
        settle();
    }
    if req.starts_with(b"GET /stats ") {
        return ("200 OK", "application/json", (pages.stats)());
    }
    if let (true, Some(c)) = (req.starts_with(b"POST "), &pages.control) {
        if let Some(body) = c(req.split(|&b| b == b'\n').next().unwrap_or(req)) {
            return ("200 OK", "application/json", body);
        }
    }
    if req.starts_with(b"GET / ") || req.starts_with(b"GET /status ") {
        return ("200 OK", "text/html; charset=utf-8", STATUS_PAGE.to_string());
    }
    if let (true, Some(m)) = (req.starts_with(b"GET /metrics "), &pages.metrics) {
        return ("200 OK", PROMETHEUS_TYPE, m());
    }
    let hint = if pages.metrics.is_some() {
        "{\"error\":\"try GET /status, GET /stats or GET /metrics\"}\n"
    } else {
        "{\"error\":\"try GET /status or GET /stats\"}\n"
    };
    ("404 Not Found", "application/json", hint.to_string())
}

/// System calls by kind: JSON lists the kinds called at least once
/// (`"syscalls":{"read":3}`); Prometheus has one series per kind, zeros
/// included, so that a series does not appear halfway through a scrape history.
impl Group for SysCounts {
    const WORDS: usize = KINDS;

    fn add(&mut self, other: &Self) {
        SysCounts::add(self, other);
    }

    #[inline]
    fn publish(&self, out: &mut Publish<'_>) {
        self.0.iter().for_each(|v| out.put(*v));
    }

    fn read(input: &mut metrics::Read<'_>) -> Self {
        SysCounts(std::array::from_fn(|_| input.take()))
    }

    fn write_json(&self, out: &mut String) {
        let mut o = JsonObject::begin(out);
        for (name, n) in self.nonzero() {
            o.u64(name, n);
        }
        o.end();
    }

    fn samples(&self, name: &str, out: &mut Samples) {
        for k in SysKind::ALL {
            out.push(
                name,
                "System calls by kind.",
                Kind::Counter,
                Some(("kind", k.name())),
                self.get(*k),
            );
        }
    }
}

/// The fields of [`TrackerStats`], in JSON order, with their Prometheus help.
const TRACKER_FIELDS: [(&str, &str); 4] = [
    (
        "user_passes",
        "Passes answered from the readiness table, without the kernel.",
    ),
    (
        "user_events",
        "Events handed out by passes answered from the readiness table.",
    ),
    ("kernel_polls", "Times the tracked backend asked the kernel."),
    (
        "forced_polls",
        "Kernel polls made only because max-pass was reached while descriptors were known ready.",
    ),
];

fn tracker_values(t: &TrackerStats) -> [u64; 4] {
    [t.user_passes, t.user_events, t.kernel_polls, t.forced_polls]
}

/// What the `tracked` backend's readiness table answered.
impl Group for TrackerStats {
    const WORDS: usize = TRACKER_FIELDS.len();

    fn add(&mut self, other: &Self) {
        TrackerStats::add(self, other);
    }

    #[inline]
    fn publish(&self, out: &mut Publish<'_>) {
        tracker_values(self).iter().for_each(|v| out.put(*v));
    }

    fn read(input: &mut metrics::Read<'_>) -> Self {
        TrackerStats {
            user_passes: input.take(),
            user_events: input.take(),
            kernel_polls: input.take(),
            forced_polls: input.take(),
        }
    }

    fn write_json(&self, out: &mut String) {
        let mut o = JsonObject::begin(out);
        for ((key, _), v) in TRACKER_FIELDS.iter().zip(tracker_values(self)) {
            o.u64(key, v);
        }
        o.end();
    }

    fn samples(&self, name: &str, out: &mut Samples) {
        for ((key, help), v) in TRACKER_FIELDS.iter().zip(tracker_values(self)) {
            out.push(&format!("{name}_{key}"), help, Kind::Counter, None, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_core::metrics::Slot;

    fn get(addr: SocketAddr, path: &str) -> String {
        let mut c = TcpStream::connect(addr).unwrap();
        // In pieces, as a slow client might send it.
        for piece in ["GET ", path, " HTTP/1.1\r\nHost: x\r\n\r\n"] {
            c.write_all(piece.as_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut s = String::new();
        c.read_to_string(&mut s).unwrap();
        s
    }

    /// A client that connects and sends nothing (or reads nothing) holds
    /// back no other: the next request is answered while it waits; past
    /// eight such clients the next is told 503 at once, and once they go,
    /// requests are answered again.
    #[test]
    fn a_silent_client_holds_back_no_other() {
        let addr = start("127.0.0.1:0".parse().unwrap(), Arc::new(|| "{\"ok\":1}".to_string())).unwrap();
        let silent = TcpStream::connect(addr).unwrap();
        let mut c = TcpStream::connect(addr).unwrap();
        // Far below the 10 s a silent client may hold its own thread.
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(b"GET /stats HTTP/1.1\r\n\r\n").unwrap();
        let mut s = String::new();
        c.read_to_string(&mut s)
            .expect("answered while another client was silent");
        assert!(s.starts_with("HTTP/1.1 200 OK") && s.ends_with("{\"ok\":1}"), "{s}");
        let mut more: Vec<TcpStream> = (1..OPEN_MAX).map(|_| TcpStream::connect(addr).unwrap()).collect();
        more.push(silent);
        let mut s = String::new();
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // Its request unread would turn the 503's close into a reset.
        c.write_all(b"GET /stats HTTP/1.1\r\n\r\n").unwrap();
        c.read_to_string(&mut s).expect("told at once");
        assert!(s.starts_with("HTTP/1.1 503 "), "{s}");
        drop(more);
        // Their threads see the ends of stream and leave.
        let answered = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(20));
            get(addr, "/stats").starts_with("HTTP/1.1 200 OK")
        });
        assert!(answered, "requests are answered again");
    }

    /// Clients that have their answers but have not closed yet (their
    /// connections linger, waiting for the end of stream) hold no slot: a
    /// scraper asking again at once is answered, not told 503.
    #[test]
    fn answered_clients_that_linger_hold_no_slot() {
        let addr = start("127.0.0.1:0".parse().unwrap(), Arc::new(|| "{\"ok\":1}".to_string())).unwrap();
        let answered: Vec<TcpStream> = (0..2 * OPEN_MAX)
            .map(|_| {
                let mut c = TcpStream::connect(addr).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                c.write_all(b"GET /stats HTTP/1.1\r\n\r\n").unwrap();
                let mut s = String::new();
                c.read_to_string(&mut s).expect("answered");
                assert!(s.starts_with("HTTP/1.1 200 OK"), "{s}");
                // Kept open: its server side lingers up to LINGER.
                c
            })
            .collect();
        assert!(get(addr, "/stats").starts_with("HTTP/1.1 200 OK"));
        drop(answered);
    }

    #[test]
    fn serves_stats_and_metrics() {
        let settled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = settled.clone();
        let pages = Pages {
            stats: Arc::new(|| "{\"x\":1}\n".to_string()),
            metrics: Some(Arc::new(|| "# HELP a b\n# TYPE a gauge\na 1\n".to_string())),
            control: None,
            settle: Some(Arc::new(move || {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            })),
        };
        let addr = serve("127.0.0.1:0".parse().unwrap(), pages).unwrap();
        let stats = get(addr, "/stats");
        assert!(
            stats.starts_with("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"),
            "{stats}"
        );
        assert!(stats.ends_with("\r\n\r\n{\"x\":1}\n"), "{stats}");
        let m = get(addr, "/metrics");
        assert!(
            m.starts_with("HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4"),
            "{m}"
        );
        assert!(
            m.ends_with("\r\n\r\n# HELP a b\n# TYPE a gauge\na 1\n") && m.contains("Content-Length: 30\r\n"),
            "{m}"
        );
        assert!(get(addr, "/nope").starts_with("HTTP/1.1 404"));
        get(addr, "/");
        // The counters' documents wait for the workers' batches; the page does not.
        assert_eq!(settled.load(std::sync::atomic::Ordering::SeqCst), 2);
        // Without a Prometheus renderer, /metrics is not there.
        let addr = start("127.0.0.1:0".parse().unwrap(), Arc::new(String::new)).unwrap();
        assert!(get(addr, "/metrics").starts_with("HTTP/1.1 404"));
        let page = get(addr, "/");
        assert!(page.starts_with("HTTP/1.1 200 OK\r\nContent-Type: text/html"), "{page}");
        assert!(page.contains("<svg id=\"rate\"") && !page.contains("http://") && !page.contains("https://"));
        assert!(get(addr, "/status").ends_with(STATUS_PAGE));
        assert!(get(addr, "/history").contains("\r\n\r\n{\"points\":["));
    }

    #[test]
    fn a_request_line_cut_short_is_not_answered_as_a_page() {
        let addr = start("127.0.0.1:0".parse().unwrap(), Arc::new(String::new)).unwrap();
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /sta").unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let mut s = String::new();
        c.read_to_string(&mut s).unwrap();
        assert!(s.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{s}");
        assert!(s.ends_with(INCOMPLETE), "{s}");
        // The reader itself: an interrupted read is retried, a timeout named.
        struct Script(Vec<std::io::Result<&'static [u8]>>);
        impl Read for Script {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let next = self.0.remove(0)?;
                buf[..next.len()].copy_from_slice(next);
                Ok(next.len())
            }
        }
        let mut buf = [0u8; 64];
        let interrupted = || Err(std::io::ErrorKind::Interrupted.into());
        let mut r = Script(vec![Ok(b"GET /st"), interrupted(), Ok(b"ats HTTP/1.1\r\n")]);
        assert_eq!(read_request_line(&mut r, &mut buf), Ok(21));
        let mut r = Script(vec![Ok(b"GET /st"), Err(std::io::ErrorKind::WouldBlock.into())]);
        assert_eq!(read_request_line(&mut r, &mut buf), Err(Incomplete::TimedOut));
    }

    #[test]
    fn history_keeps_the_last_minute_of_totals() {
        let h: History = Arc::new(Mutex::new(VecDeque::new()));
        let text = "# TYPE weft_x_requests_total counter\nweft_x_requests_total{worker=\"0\"} 5\nweft_x_requests_total 7\nweft_x_response_seconds_sum 0.5\nweft_x_response_seconds_count 7\n";
        for _ in 0..HISTORY_POINTS + 3 {
            sample(&h, text);
        }
        sample(&h, "weft_y_other_total 1\n");
        let doc = history_json(&h);
        assert_eq!(doc.matches('[').count(), HISTORY_POINTS + 1, "{doc}");
        assert!(doc.contains(",7,0.5,7]"), "{doc}");
        assert!(doc.ends_with(",null,null,null]]}\n"), "{doc}");
    }

    #[test]
    fn io_counters_are_registry_groups() {
        let mut sc = SysCounts::default();
        sc.0[SysKind::Read as usize] = 3;
        sc.0[SysKind::Close as usize] = 1;
        let t = Some(TrackerStats {
            user_passes: 1,
            user_events: 2,
            kernel_polls: 3,
            forced_polls: 4,
        });
        let slot: Slot<SysCounts> = Slot::default();
        slot.publish(&sc);
        assert_eq!(slot.read(), sc);
        let slot: Slot<Option<TrackerStats>> = Slot::default();
        slot.publish(&t);
        assert_eq!(slot.read(), t);
        let mut s = String::new();
        sc.write_json(&mut s);
        assert_eq!(s, "{\"read\":3,\"close\":1}");
        s.clear();
        t.write_json(&mut s);
        assert_eq!(
            s,
            "{\"user_passes\":1,\"user_events\":2,\"kernel_polls\":3,\"forced_polls\":4}"
        );
        let text = metrics::render_prometheus("t", &[sc]);
        assert!(text.contains("weft_t_total{kind=\"read\",worker=\"0\"} 3\n"), "{text}");
        assert!(text.contains("weft_t_total{kind=\"write\"} 0\n"), "{text}");
        let text = metrics::render_prometheus("t", &[t]);
        assert!(text.contains("weft_t_forced_polls_total{worker=\"0\"} 4\n"), "{text}");
    }
}
