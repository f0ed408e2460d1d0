//! Integration tests of `weft proxy`: the real binary between raw-socket
//! clients (and curl) and origins — a controllable origin written here (thread
//! per connection, std::net) and nginx. Data-path scenarios run under several
//! event backends and with splicing on and off, and compare every body byte
//! for byte.

use crate::common;

use common::{
    counter, pattern, per_backend, send_with_fin, stop_stats, wait_until, weft_bin, ClosedPort, ReadErr,
    Response as Resp, TempDir, Weft,
};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// The test origin

/// A small HTTP/1.1 origin whose behaviour is chosen by the request path and
/// query: `/cl/N`, `/chunked/N`, `/close/N` answer N deterministic bytes
/// with that framing; query options (values %-encoded):
/// `cc` Cache-Control, `etag`, `lm` (Last-Modified, seconds ago), `vary`,
/// `loc` (Location), `abort` (close after that many body bytes), `slow` (ms between 64 KiB
/// blocks), `chunk` (chunk size), `close` (Connection: close). Special paths:
/// `/raw/both`, `/raw/twocl` (smuggling-style responses), `/silent` (never
/// answers), `/echo` (the request head as body), `/lang` (Vary on
/// Accept-Language). Conditional requests get 304 when the validator matches.
struct Origin {
    addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
    conns: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

fn pct_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

struct OriginRequest {
    method: String,
    path: String,
    query: HashMap<String, String>,
    headers: Vec<(String, String)>,
    head: String,
    body: Vec<u8>,
}

impl OriginRequest {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn http_date(secs_ago: u64) -> String {
    let t = std::time::SystemTime::now() - Duration::from_secs(secs_ago);
    String::from_utf8(weft_http::fmt_http_date(t).to_vec()).unwrap()
}

impl Origin {
    fn start() -> Origin {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let conns = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (log2, conns2, stop2) = (log.clone(), conns.clone(), stop.clone());
        std::thread::spawn(move || {
            for s in l.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(s) = s else { continue };
                conns2.fetch_add(1, Ordering::SeqCst);
                let log = log2.clone();
                let stop = stop2.clone();
                std::thread::spawn(move || serve_origin_conn(s, log, stop));
            }
        });
        Origin { addr, log, conns, stop }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Requests seen whose path (without query) is `path`.
    fn count(&self, path: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|h| {
                let target = h.split(' ').nth(1).unwrap_or("");
                target.split('?').next() == Some(path) || target.contains(&format!("{path}?"))
            })
            .count()
    }

    fn last_head(&self) -> String {
        self.log.lock().unwrap().last().cloned().unwrap_or_default()
    }

    fn connections(&self) -> usize {
        self.conns.load(Ordering::SeqCst)
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

fn read_origin_request(r: &mut BufReader<TcpStream>) -> Option<OriginRequest> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        let n = r.read_line(&mut line).ok()?;
        if n == 0 {
            return None;
        }
        if head.is_empty() && line == "\r\n" {
            continue;
        }
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let mut lines = head.split("\r\n");
    let first = lines.next()?;
    let mut parts = first.split(' ');
    let method = parts.next()?.to_string();
    let target = parts.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .filter_map(|l| {
            l.split_once(':')
                .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        })
        .collect();
    let (path, q) = target.split_once('?').unwrap_or((&target, ""));
    let query = q
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.to_string(), pct_decode(v))
        })
        .collect();
    let mut req = OriginRequest {
        method,
        path: path.to_string(),
        query,
        headers,
        head: head.clone(),
        body: Vec::new(),
    };
    // Read a request body (Content-Length or chunked).
    if let Some(n) = req.header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        let mut b = vec![0u8; n];
        r.read_exact(&mut b).ok()?;
        req.body = b;
    } else if req
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut line = String::new();
            r.read_line(&mut line).ok()?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or("0"), 16).ok()?;
            if size == 0 {
                let mut end = String::new();
                r.read_line(&mut end).ok()?;
                break;
            }
            let mut b = vec![0u8; size + 2];
            r.read_exact(&mut b).ok()?;
            req.body.extend_from_slice(&b[..size]);
        }
    }
    Some(req)
}

fn serve_origin_conn(s: TcpStream, log: Arc<Mutex<Vec<String>>>, stop: Arc<AtomicBool>) {
    let _ = s.set_nodelay(true);
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    while let Some(req) = read_origin_request(&mut r) {
        log.lock().unwrap().push(req.head.clone());
        if !answer(&req, &mut w, &stop) {
            break;
        }
    }
}

/// Write one response; false: the connection must close.
fn answer(req: &OriginRequest, w: &mut TcpStream, stop: &AtomicBool) -> bool {
    let q = &req.query;
    match req.path.as_str() {
        "/raw/both" => {
            let _ = w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
            return true;
        }
        "/raw/twocl" => {
            let _ = w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!");
            return true;
        }
        "/silent" => {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            return false;
        }
        _ => {}
    }
    let mut extra = String::new();
    if let Some(cc) = q.get("cc") {
        extra.push_str(&format!("Cache-Control: {cc}\r\n"));
    }
    if let Some(e) = q.get("etag") {
        extra.push_str(&format!("ETag: \"{e}\"\r\n"));
    }
    if let Some(lm) = q.get("lm") {
        extra.push_str(&format!("Last-Modified: {}\r\n", http_date(lm.parse().unwrap_or(0))));
    }
    if let Some(v) = q.get("vary") {
        extra.push_str(&format!("Vary: {v}\r\n"));
    }
    if let Some(v) = q.get("loc") {
        extra.push_str(&format!("Location: {v}\r\n"));
    }
    let close = q.contains_key("close");
    if close {
        extra.push_str("Connection: close\r\n");
    }
    extra.push_str(&format!("Date: {}\r\n", http_date(0)));
    // Conditionals.
    let etag_hit = q
        .get("etag")
        .is_some_and(|e| req.header("if-none-match") == Some(&format!("\"{e}\"")));
    let lm_hit = !q.contains_key("etag") && q.contains_key("lm") && req.header("if-modified-since").is_some();
    if etag_hit || lm_hit {
        let _ = w.write_all(format!("HTTP/1.1 304 Not Modified\r\n{extra}\r\n").as_bytes());
        return !close;
    }
    let (framing, body): (&str, Vec<u8>) = match req.path.as_str() {
        "/echo" => ("cl", req.head.clone().into_bytes()),
        "/sink" => ("cl", req.body.clone()),
        "/lang" => (
            "cl",
            format!("lang={}", req.header("accept-language").unwrap_or("none")).into_bytes(),
        ),
        p => {
            let mut it = p.trim_start_matches('/').split('/');
            let f = it.next().unwrap_or("cl");
            let n: usize = it.next().and_then(|n| n.parse().ok()).unwrap_or(0);
            let f = match f {
                "chunked" => "chunked",
                "close" => "close",
                _ => "cl",
            };
            (f, pattern(n))
        }
    };
    let status: u16 = q.get("status").and_then(|s| s.parse().ok()).unwrap_or(200);
    let head_only = req.method == "HEAD";
    // `wait`: think before answering (milliseconds).
    if let Some(ms) = q.get("wait").and_then(|w| w.parse().ok()) {
        std::thread::sleep(Duration::from_millis(ms));
    }
    let mut head = format!("HTTP/1.1 {status} X\r\n{extra}");
    match framing {
        "cl" => head.push_str(&format!("Content-Length: {}\r\n", body.len())),
        "chunked" => head.push_str("Transfer-Encoding: chunked\r\n"),
        _ => head.push_str("Connection: close\r\n"),
    }
    head.push_str("\r\n");
    if w.write_all(head.as_bytes()).is_err() {
        return false;
    }
    if head_only {
        return !close && framing != "close";
    }
    let abort: Option<usize> = q.get("abort").and_then(|a| a.parse().ok());
    // `reset`: like `abort`, but the connection ends with a RST (SO_LINGER 0).
    let reset: Option<usize> = q.get("reset").and_then(|a| a.parse().ok());
    let abort = abort.or(reset);
    let slow: u64 = q.get("slow").and_then(|a| a.parse().ok()).unwrap_or(0);
    let chunk: usize = q.get("chunk").and_then(|a| a.parse().ok()).unwrap_or(65536).max(1);
    let limit = abort.unwrap_or(body.len()).min(body.len());
    let mut sent = 0;
    while sent < limit {
        let n = chunk.min(limit - sent);
        let piece = &body[sent..sent + n];
        let r = if framing == "chunked" {
            w.write_all(format!("{n:x}\r\n").as_bytes())
                .and_then(|_| w.write_all(piece))
                .and_then(|_| w.write_all(b"\r\n"))
        } else {
            w.write_all(piece)
        };
        if r.is_err() {
            return false;
        }
        sent += n;
        if slow > 0 {
            std::thread::sleep(Duration::from_millis(slow));
        }
    }
    if abort.is_some() {
        let _ = w.flush();
        if reset.is_some() {
            // Give the bytes a moment to leave, then close with a RST.
            std::thread::sleep(Duration::from_millis(20));
            let _ = weft_io::sys::set_linger_zero(w.as_raw_fd());
        }
        return false;
    }
    if framing == "chunked" && w.write_all(b"0\r\n\r\n").is_err() {
        return false;
    }
    // `drop`: close silently after a keep-alive response (the race a pool meets).
    !close && framing != "close" && !q.contains_key("drop")
}

/// Read from `s` until a request head has arrived: all that was read, or
/// None if the peer closed (or the read failed) first.
fn read_request_head(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 16384];
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    Some(seen)
}

/// An upstream that answers `413` as soon as it has a request head, before
/// the body (with 1 MiB of body for `/big`, else 4 bytes), and then reads
/// (and drops) whatever else comes until the proxy closes: it never closes
/// with unread bytes, which would reset the connection and could destroy
/// the answer before the proxy reads it.
struct EarlyOrigin {
    addr: SocketAddr,
}

impl EarlyOrigin {
    fn start() -> EarlyOrigin {
        let addr = common::tcp_server(|mut s| {
            let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
            let Some(seen) = read_request_head(&mut s) else {
                return;
            };
            if seen.starts_with(b"POST /big ") {
                let body = pattern(1 << 20);
                let head = format!(
                    "HTTP/1.1 413 Payload Too Large\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(head.as_bytes());
                let _ = s.write_all(&body);
            } else {
                let _ = s.write_all(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 4\r\n\r\nbig!");
            }
            let mut buf = [0u8; 16384];
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        });
        EarlyOrigin { addr }
    }
}

// ---------------------------------------------------------------------------
// The client side

/// Responses from a stream: Content-Length, chunked and close-delimited bodies.
type Conn = common::Reader;

impl Conn {
    fn to(addr: SocketAddr) -> Conn {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        // A proxy that stops reading (say, one that no longer drops an
        // early-answered body) fails the test instead of hanging it.
        s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
        s.set_nodelay(true).unwrap();
        Conn::new(s)
    }

    fn get(&mut self, url: &str, extra: &str) -> Resp {
        self.send(format!("GET {url} HTTP/1.1\r\nHost: ignored\r\n{extra}\r\n").as_bytes());
        self.read(false).unwrap()
    }

    fn read(&mut self, head_request: bool) -> Result<Resp, ReadErr> {
        self.response_any(head_request)
    }
}

fn start_proxy(args: &[&str]) -> Weft {
    let mut full = vec!["proxy", "--listen", "127.0.0.1:0", "--workers", "1"];
    full.extend_from_slice(args);
    Weft::start(&full)
}

/// GET `url` through the proxy on a fresh connection.
fn fetch(p: &Weft, url: &str, extra: &str) -> Resp {
    Conn::to(p.addr).get(url, extra)
}

/// A counter of the disk store in `stop_stats` JSON.
fn disk_counter(json: &str, name: &str) -> u64 {
    let i = json
        .find("\"disk\":{")
        .unwrap_or_else(|| panic!("no disk store in {json}"));
    counter(&json[i..], name)
}

// ---------------------------------------------------------------------------
// Scenarios run per event backend

/// A forward proxy under `event` with `--splice splice` and `extra` that
/// lets CONNECT reach `echo`'s port, and a client whose CONNECT to it was
/// answered 200, with `first` sent right behind the CONNECT head.
/// An upstream that echoes what it reads until the client closes.
fn echo_server() -> SocketAddr {
    common::tcp_server(|mut s| {
        let mut r = s.try_clone().unwrap();
        let _ = r.set_read_timeout(Some(Duration::from_secs(30)));
        let _ = std::io::copy(&mut r, &mut s);
    })
}

/// The proxy closes `c` (a FIN or a reset) within `secs` seconds.
fn assert_closed_within(c: &mut Conn, secs: u64, what: &str) {
    c.stream.set_read_timeout(Some(Duration::from_secs(secs))).unwrap();
    let mut b = [0u8; 16];
    let r = c.stream.read(&mut b);
    assert!(
        matches!(r, Ok(0)) || matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "{what}: a quiet tunnel was not closed: {r:?}"
    );
}

fn open_tunnel(echo: SocketAddr, event: &str, splice: &str, extra: &[&str], first: &[u8]) -> (Weft, Conn) {
    let port = echo.port().to_string();
    let mut args = vec!["--event", event, "--splice", splice, "--connect-ports", &port];
    args.extend_from_slice(extra);
    let p = start_proxy(&args);
    let mut c = Conn::to(p.addr);
    let mut head = format!("CONNECT {echo} HTTP/1.1\r\nHost: {echo}\r\n\r\n").into_bytes();
    head.extend_from_slice(first);
    c.send(&head);
    assert_eq!(
        c.read(true).unwrap().status,
        200,
        "CONNECT {echo} under {event}, splice {splice}"
    );
    (p, c)
}

mod scenarios {
    use super::*;

    /// A response that overtakes its request's body: an upstream that
    /// answers 413 on the head. The client keeps its connection when the
    /// rest of the body is at most 1 MiB (the proxy reads and drops it, as
    /// `weft serve` does) and the next request on it is answered; a larger
    /// rest, or a chunked body, closes it after the response. Under splice
    /// on and off (the rest of the body would otherwise be spliced).
    pub fn early_answer_keeps_the_client(event: &str) {
        let early = EarlyOrigin::start();
        let o = Origin::start();
        for splice in ["on", "off"] {
            let p = start_proxy(&["--event", event, "--splice", splice, "--stats-on-exit"]);
            let url = format!("http://{}/upload", early.addr);
            let what = format!("{event} splice {splice}");
            // 300,000 bytes: 1,000 with the head, the rest after the answer,
            // with a GET right behind it in the same write.
            let mut c = Conn::to(p.addr);
            let mut first = format!("POST {url} HTTP/1.1\r\nHost: x\r\nContent-Length: 300000\r\n\r\n").into_bytes();
            first.extend_from_slice(&pattern(1000));
            c.send(&first);
            let r = c.read(false).unwrap();
            assert_eq!((r.status, r.body.as_slice()), (413, &b"big!"[..]), "{what}");
            assert_eq!(r.header("connection"), None, "{what}: the client keeps its connection");
            let mut rest = pattern(299_000);
            rest.extend_from_slice(
                format!("GET {} HTTP/1.1\r\nHost: x\r\n\r\n", o.url("/cl/700?cc=no-store")).as_bytes(),
            );
            c.send(&rest);
            let r = c.read(false).unwrap();
            assert!(
                r.status == 200 && r.body == pattern(700),
                "{what}: the GET behind the dropped body"
            );
            // A large answer (1 MiB), and a client that writes all of its
            // body (1,000,000 bytes) before it reads on: the proxy drops the
            // body while the answer waits for the client, or both would stall.
            // Small socket buffers (no autotuning) so that neither the
            // body nor the answer fits in the client's kernel buffers. The
            // client sends the rest once the answer has begun to arrive: sent
            // before the upstream answered, the whole body could go into the
            // proxy's upstream send buffer (it grows to megabytes), the
            // exchange would end with the body complete, and the proxy would
            // rightly keep that connection, which this origin never reads a
            // request from again.
            weft_io::sys::sockopt::set_sndbuf(c.stream.as_raw_fd(), 16 * 1024).unwrap();
            weft_io::sys::set_rcvbuf(c.stream.as_raw_fd(), 16 * 1024).unwrap();
            let big = format!("http://{}/big", early.addr);
            let mut first = format!("POST {big} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n").into_bytes();
            first.extend_from_slice(&pattern(1000));
            c.send(&first);
            assert!(c.fill() > 0, "{what}: the large early answer begins");
            c.send(&pattern(999_000));
            let r = c.read(false).unwrap();
            assert!(
                r.status == 413 && r.body == pattern(1 << 20),
                "{what}: the large early answer"
            );
            assert_eq!(c.get(&o.url("/cl/70?cc=no-store"), "").body, pattern(70), "{what}");
            // Over the 1 MiB cap, and chunked: answered, then closed.
            for head in ["Content-Length: 3000000", "Transfer-Encoding: chunked"] {
                let mut c = Conn::to(p.addr);
                let chunk = if head.starts_with("Transfer") { "3e8\r\n" } else { "" };
                let mut first = format!("POST {url} HTTP/1.1\r\nHost: x\r\n{head}\r\n\r\n{chunk}").into_bytes();
                first.extend_from_slice(&pattern(1000));
                c.send(&first);
                let r = c.read(false).unwrap();
                assert_eq!(r.status, 413, "{what} {head}");
                assert_eq!(r.header("connection"), Some("close"), "{what} {head}");
            }
            drop(c); // closed first: a live keep-alive connection holds the drain for a second
            let stats = stop_stats(p);
            assert_eq!(counter(&stats, "bodies_discarded"), 2, "{what}: {stats}");
        }
    }

    /// Issue 27: request bodies of known length at or above the splice
    /// threshold go client → pipe → upstream. Byte-exact under splice on
    /// and off: a POST whose first bytes came with the head (copied) and the
    /// rest spliced, a PUT pipelined right behind it and a GET behind that,
    /// all in one write; a chunked PUT (long chunks' data spliced); then a
    /// client that aborts mid-body, after which the proxy goes on serving.
    pub fn request_bodies_spliced(event: &str) {
        let o = Origin::start();
        for splice in ["on", "off"] {
            let p = start_proxy(&["--event", event, "--splice", splice, "--stats-on-exit"]);
            let url = o.url("/sink?cc=no-store");
            let (post, put) = (pattern(700_000), pattern(100_000));
            let mut c = Conn::to(p.addr);
            let mut w = c.stream.try_clone().unwrap();
            let mut first = format!(
                "POST {url} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
                post.len()
            )
            .into_bytes();
            first.extend_from_slice(&post[..1000]);
            let mut rest = post[1000..].to_vec();
            rest.extend_from_slice(
                format!("PUT {url} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", put.len()).as_bytes(),
            );
            rest.extend_from_slice(&put);
            rest.extend_from_slice(
                format!("GET {} HTTP/1.1\r\nHost: x\r\n\r\n", o.url("/cl/5000?cc=no-store")).as_bytes(),
            );
            // Written from another thread: the answers come back meanwhile.
            let writer = std::thread::spawn(move || {
                w.write_all(&first).unwrap();
                std::thread::sleep(Duration::from_millis(30));
                w.write_all(&rest).unwrap();
            });
            let r = c.read(false).unwrap();
            assert_eq!(r.status, 200, "{event} splice {splice}");
            assert!(
                r.body == post,
                "{event} splice {splice}: POST body intact ({} bytes)",
                r.body.len()
            );
            let r = c.read(false).unwrap();
            assert!(
                r.status == 200 && r.body == put,
                "{event} splice {splice}: pipelined PUT body intact"
            );
            let r = c.read(false).unwrap();
            assert!(
                r.status == 200 && r.body == pattern(5000),
                "{event} splice {splice}: the GET behind them"
            );
            writer.join().unwrap();
            // Chunked: framing decoded in user space, long chunks' data spliced.
            let sizes = [200_000usize, 10, 150_000];
            let data = pattern(sizes.iter().sum());
            let mut wire = format!("PUT {url} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n").into_bytes();
            let mut at = 0;
            for n in sizes {
                wire.extend_from_slice(format!("{n:x}\r\n").as_bytes());
                wire.extend_from_slice(&data[at..at + n]);
                wire.extend_from_slice(b"\r\n");
                at += n;
            }
            wire.extend_from_slice(b"0\r\n\r\n");
            let mut w = c.stream.try_clone().unwrap();
            let writer = std::thread::spawn(move || w.write_all(&wire).unwrap());
            let r = c.read(false).unwrap();
            assert!(
                r.status == 200 && r.body == data,
                "{event} splice {splice}: chunked PUT body intact"
            );
            writer.join().unwrap();
            // A client that goes away mid-body.
            let mut gone = Conn::to(p.addr);
            gone.send(format!("POST {url} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n").as_bytes());
            gone.send(&pattern(300_000));
            drop(gone);
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(fetch(&p, &o.url("/cl/700?cc=no-store"), "").body, pattern(700));
            drop(c); // closed first: a live keep-alive connection holds the drain for a second
            let stats = stop_stats(p);
            let up = counter(&stats, "bytes_spliced_up");
            if splice == "on" {
                assert!(up >= 699_000 + 100_000 + 300_000, "{event}: {stats}");
            } else {
                assert_eq!(up, 0, "{event}: {stats}");
            }
        }
    }

    /// Issue 27: a client that ends a chunked request body in the middle
    /// (a FIN, or a reset), with chunks long enough to be spliced (splice
    /// on) and copied (off): the origin never gets a request whose body
    /// looks complete (its log holds only whole requests), the proxy closes
    /// both connections at once rather than wait, and goes on serving.
    pub fn chunked_request_body_aborted(event: &str) {
        let o = Origin::start();
        for splice in ["on", "off"] {
            let p = start_proxy(&["--event", event, "--splice", splice, "--stats-on-exit"]);
            let url = o.url("/sink?cc=no-store");
            for reset in [false, true] {
                let mut c = Conn::to(p.addr);
                let mut wire =
                    format!("POST {url} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n").into_bytes();
                for n in [100_000usize, 10, 40_000] {
                    wire.extend_from_slice(format!("{n:x}\r\n").as_bytes());
                    wire.extend_from_slice(&pattern(n));
                    wire.extend_from_slice(b"\r\n");
                }
                // Half of a last chunk, then the client ends.
                wire.extend_from_slice(b"10000\r\n");
                wire.extend_from_slice(&pattern(30_000));
                c.send(&wire);
                std::thread::sleep(Duration::from_millis(50));
                if reset {
                    weft_io::sys::set_linger_zero(c.stream.as_raw_fd()).unwrap();
                    drop(c);
                } else {
                    c.stream.shutdown(Shutdown::Write).unwrap();
                    // Closed at once: not left waiting for the rest.
                    let t0 = Instant::now();
                    match c.read(false) {
                        Err(ReadErr::Truncated) => {}
                        Ok(r) => panic!("{event} splice {splice}: an answer to a cut body: {}", r.status),
                    }
                    assert!(
                        t0.elapsed() < Duration::from_secs(5),
                        "{event}: closed after {:?}",
                        t0.elapsed()
                    );
                }
            }
            std::thread::sleep(Duration::from_millis(100));
            assert_eq!(
                o.count("/sink"),
                0,
                "{event} splice {splice}: a cut body reached the origin whole"
            );
            assert_eq!(fetch(&p, &o.url("/cl/700?cc=no-store"), "").body, pattern(700));
            let stats = stop_stats(p);
            assert_eq!(counter(&stats, "open_connections"), 0, "{event}: {stats}");
            assert_eq!(counter(&stats, "upstream_connections"), 0, "{event}: {stats}");
        }
    }

    /// Issue 27: a client that stalls in the middle of a request body is
    /// timed out the same way whether its body is spliced or copied (the
    /// upstream's silence ends the exchange with 504), and the proxy goes
    /// on serving.
    pub fn stalled_request_body_times_out(event: &str) {
        let o = Origin::start();
        for splice in ["on", "off"] {
            let p = start_proxy(&["--event", event, "--splice", splice, "--upstream-timeout", "400ms"]);
            let url = o.url("/sink?cc=no-store");
            let mut c = Conn::to(p.addr);
            c.send(format!("POST {url} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n").as_bytes());
            c.send(&pattern(200_000));
            let r = c.read(false).unwrap();
            assert_eq!(r.status, 504, "{event} splice {splice}");
            assert_eq!(fetch(&p, &o.url("/cl/700?cc=no-store"), "").body, pattern(700));
        }
    }

    /// Bodies of many sizes and all three framings, cacheable and not,
    /// byte-exact through the proxy (misses, then hits for the cacheable ones).
    pub fn bodies_byte_exact(event: &str, splice: &str) {
        let o = Origin::start();
        let p = start_proxy(&["--event", event, "--splice", splice, "--stats-on-exit"]);
        let sizes = [0usize, 1, 100, 4095, 5000, 70_000, (1 << 20) + 3];
        let mut c = Conn::to(p.addr);
        for framing in ["cl", "chunked", "close"] {
            for &n in &sizes {
                for cacheable in [false, true] {
                    let cc = if cacheable { "max-age%3D60" } else { "no-store" };
                    let url = o.url(&format!("/{framing}/{n}?cc={cc}&chunk=20000&v={splice}"));
                    eprintln!("GET {url}");
                    let r = c.get(&url, "");
                    assert_eq!(r.status, 200, "{url}");
                    assert_eq!(r.body.len(), n, "{url}");
                    assert!(r.body == pattern(n), "{url}: body differs");
                    if r.close_delimited {
                        c = Conn::to(p.addr);
                    }
                    if cacheable {
                        let before = o.count(&format!("/{framing}/{n}"));
                        let h = fetch(&p, &url, "");
                        assert_eq!(h.status, 200);
                        assert!(h.body == pattern(n), "{url}: cached body differs");
                        assert!(h.header("age").is_some(), "{url}: a hit carries Age");
                        assert_eq!(h.header("content-length"), Some(n.to_string().as_str()));
                        assert_eq!(o.count(&format!("/{framing}/{n}")), before, "{url}: served from cache");
                    }
                }
            }
        }
        drop(c); // closed first: a live keep-alive connection holds the drain for a second
        let stats = stop_stats(p);
        if splice == "off" {
            assert_eq!(counter(&stats, "bytes_spliced"), 0, "{stats}");
            assert_eq!(counter(&stats, "bytes_teed"), 0, "{stats}");
        } else {
            assert!(counter(&stats, "bytes_spliced") > 0, "{stats}");
            assert!(counter(&stats, "bytes_teed") > 0, "{stats}");
            assert!(counter(&stats, "sessions_keep_copy") > 0, "{stats}");
        }
        assert_eq!(counter(&stats, "sessions_upstream_abort"), 0, "{stats}");
    }

    pub fn bodies_splice_on(event: &str) {
        bodies_byte_exact(event, "on");
    }

    pub fn bodies_splice_off(event: &str) {
        bodies_byte_exact(event, "off");
    }

    pub fn bodies_splice_auto(event: &str) {
        bodies_byte_exact(event, "auto");
    }

    /// Pipelined requests are answered in order: hits, misses and
    /// uncacheable responses mixed.
    pub fn pipelining(event: &str) {
        let o = Origin::start();
        let p = start_proxy(&["--event", event]);
        let cached = o.url("/cl/300?cc=max-age%3D60");
        assert_eq!(fetch(&p, &cached, "").status, 200);
        let mut c = Conn::to(p.addr);
        let mut batch = String::new();
        let urls: Vec<String> = (0..12)
            .map(|i| match i % 4 {
                0 => cached.clone(),
                1 => o.url(&format!("/cl/{}?cc=no-store", 1000 + i)),
                2 => o.url(&format!("/chunked/{}?cc=no-store&chunk=333", 50_000 + i)),
                _ => o.url(&format!("/cl/{}?cc=max-age%3D60", 70_000 + i)),
            })
            .collect();
        for u in &urls {
            batch.push_str(&format!("GET {u} HTTP/1.1\r\nHost: x\r\n\r\n"));
        }
        c.send(batch.as_bytes());
        for (i, u) in urls.iter().enumerate() {
            let r = c.read(false).unwrap();
            assert_eq!(r.status, 200, "{u}");
            let n: usize = u.split('/').nth(4).unwrap().split('?').next().unwrap().parse().unwrap();
            assert!(r.body == pattern(n), "response {i} ({u}) out of order or corrupt");
        }
    }

    /// `--accept-limit 1` still serves a burst of connections in full: a
    /// listener the limit left ready is accepted from again (an
    /// edge-triggered backend would not report it a second time).
    pub fn accept_limit_serves_a_burst(event: &str) {
        let o = Origin::start();
        let p = start_proxy(&["--event", event, "--accept-limit", "1"]);
        let url = o.url("/cl/100?cc=no-store");
        let mut conns: Vec<Conn> = (0..24).map(|_| Conn::to(p.addr)).collect();
        for c in &mut conns {
            c.send(format!("GET {url} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        }
        for (i, c) in conns.iter_mut().enumerate() {
            let r = c.read(false).unwrap_or_else(|_| panic!("connection {i} got no answer"));
            assert_eq!(r.status, 200);
            assert!(r.body == pattern(100));
        }
    }

    /// CONNECT to a local echo server: bytes both ways, a large transfer,
    /// half-close forwarding, and refused ports.
    pub fn connect_tunnel(event: &str) {
        let eaddr = common::tcp_server(|mut s| {
            let mut r = s.try_clone().unwrap();
            let _ = std::io::copy(&mut r, &mut s);
            let _ = s.shutdown(Shutdown::Write);
        });
        for splice in ["on", "off"] {
            let (p, mut c) = open_tunnel(eaddr, event, splice, &["--stats-on-exit"], b"early");
            let big = pattern(3 << 20);
            let writer = {
                let mut s = c.stream.try_clone().unwrap();
                let big = big.clone();
                std::thread::spawn(move || {
                    s.write_all(&big).unwrap();
                    s.shutdown(Shutdown::Write).unwrap();
                })
            };
            let mut got = std::mem::take(&mut c.buf);
            c.stream.read_to_end(&mut got).unwrap();
            writer.join().unwrap();
            let mut want = b"early".to_vec();
            want.extend_from_slice(&big);
            assert_eq!(got.len(), want.len(), "splice={splice}");
            assert!(got == want, "tunnel bytes differ (splice={splice})");
            // A port not in --connect-ports is refused.
            let mut c = Conn::to(p.addr);
            c.send(b"CONNECT 127.0.0.1:25 HTTP/1.1\r\nHost: 127.0.0.1:25\r\n\r\n");
            assert_eq!(c.read(false).unwrap().status, 403);
            drop(c); // closed first: a live keep-alive connection holds the drain for a second
            let stats = stop_stats(p);
            assert_eq!(counter(&stats, "tunnels"), 1, "{stats}");
            let key = if splice == "on" {
                "tunnel_bytes_spliced"
            } else {
                "tunnel_bytes_copied"
            };
            assert!(counter(&stats, key) >= 2 * (3 << 20) as u64, "{stats}");
        }
    }

    /// A WebSocket-style upgrade through the reverse proxy: the upstream sees
    /// Upgrade and `Connection: upgrade`, its 101 (and the bytes it sent
    /// behind it) reach the client, and the connection is a tunnel both ways
    /// (the client's bytes sent behind its request too), byte-exact, with
    /// half-close; an upstream that declines answers in HTTP on a connection
    /// that goes on; `--upgrade false` drops the Upgrade.
    pub fn upgrade_becomes_a_tunnel(event: &str) {
        let heads = Arc::new(Mutex::new(Vec::<String>::new()));
        let up = common::websocket_upstream(heads.clone()).to_string();
        // sockmap joins the tunnel in the kernel where BPF and the backend
        // allow it, and splices otherwise.
        for splice in ["on", "off", "sockmap"] {
            let p = start_proxy(&[
                "--event",
                event,
                "--splice",
                splice,
                "--upstream",
                &up,
                "--stats-on-exit",
            ]);
            // Declined: an HTTP answer, the connection goes on.
            let mut c = Conn::to(p.addr);
            c.send(common::upgrade_request("/decline").as_bytes());
            let r = c.read(false).unwrap();
            assert_eq!((r.status, &r.body[..]), (200, &b"plain"[..]), "{event} {splice}");
            // Accepted, with early bytes both ways.
            common::upgrade_and_echo(&mut c, b"early", &pattern(2 << 20), &format!("{event} {splice}"));
            let stats = stop_stats(p);
            assert_eq!(counter(&stats, "upgrades"), 1, "{stats}");
            assert_eq!(counter(&stats, "tunnels"), 1, "{stats}");
        }
        let forwarded: Vec<String> = heads.lock().unwrap().clone();
        let chat = forwarded
            .iter()
            .find(|h| h.starts_with("GET /chat "))
            .expect("the upgrade reached the upstream");
        assert!(
            chat.contains("\r\nUpgrade: websocket\r\n") && chat.contains("\r\nConnection: upgrade\r\n"),
            "{chat}"
        );
        assert!(!chat.contains("keep-alive"), "{chat}");
        // Switched off: Upgrade is dropped, the upstream answers in HTTP.
        let p = start_proxy(&["--event", event, "--upstream", &up, "--upgrade", "false"]);
        let mut c = Conn::to(p.addr);
        c.send(common::upgrade_request("/chat").as_bytes());
        let r = c.read(false).unwrap();
        assert_eq!((r.status, &r.body[..]), (426, &b"nope"[..]), "{event}");
    }

    /// Bytes past a response's length are never the next request's answer:
    /// an origin that answers every request with a 100,000-byte body (read
    /// to its length, so what follows stays in the socket) and then,
    /// unasked, a whole second response on the same connection. Requests
    /// pipelined behind each other through one client connection must all
    /// get the body (from fresh upstream connections), never "bad", by copy,
    /// splice and the kernel path. (Found by scripts/chaos.py's misbehaving
    /// origin: the overrun stayed in the socket of a pooled connection.)
    pub fn overrun_is_not_the_next_answer(event: &str) {
        const N: usize = 100_000;
        let addr = common::tcp_server(|mut s| {
            let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                    seen.drain(..end + 4);
                    let mut answer =
                        format!("HTTP/1.1 200 OK\r\nContent-Length: {N}\r\nCache-Control: no-store\r\n\r\n")
                            .into_bytes();
                    answer.extend_from_slice(&pattern(N));
                    answer.extend_from_slice(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nCache-Control: no-store\r\n\r\nbad",
                    );
                    if s.write_all(&answer).is_err() {
                        return;
                    }
                }
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
        });
        for splice in ["off", "on", "sockmap"] {
            let upstream = addr.to_string();
            let p = start_proxy(&["--event", event, "--splice", splice, "--upstream", &upstream]);
            let mut c = Conn::to(p.addr);
            let reqs: String = (0..4)
                .map(|i| format!("GET /o{i} HTTP/1.1\r\nHost: o\r\n\r\n"))
                .collect();
            c.send(reqs.as_bytes());
            let want = pattern(N);
            for i in 0..4 {
                let r = c.read(false).unwrap();
                assert_eq!(r.status, 200, "{event} {splice} #{i}");
                assert!(
                    r.body == want,
                    "{event} {splice} #{i}: {} bytes: the overrun answered",
                    r.body.len()
                );
            }
            // Another client, later, on whatever the pool kept.
            let r = fetch(&p, "/later", "");
            assert!(r.body == want, "{event} {splice}: a pooled connection held the overrun");
        }
    }

    /// A client that goes away during a KeepCopy transfer still leaves a
    /// complete object in the cache, with a length and chunked. (Chunked,
    /// the framing between chunks once waited for the gone client's pipe
    /// to empty, and the fill stalled for good: found by scripts/chaos.py.)
    pub fn client_abort_keep_copy_fills_cache(event: &str) {
        for framing in ["cl", "chunked"] {
            client_abort_keep_copy_fills_cache_framed(event, framing);
        }
    }

    fn client_abort_keep_copy_fills_cache_framed(event: &str, framing: &str) {
        let o = Origin::start();
        let p = start_proxy(&["--event", event, "--splice", "on", "--keep-copy", "--stats-on-exit"]);
        let n = 6 << 20;
        let url = o.url(&format!("/{framing}/{n}?cc=max-age%3D600&slow=15&chunk=100000"));
        {
            let mut c = Conn::to(p.addr);
            c.send(format!("GET {url} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
            // Read the head and a little body, then hang up.
            while !c.buf.windows(4).any(|w| w == b"\r\n\r\n") || c.buf.len() < 100_000 {
                assert!(c.fill() > 0);
            }
            let _ = c.stream.shutdown(Shutdown::Both);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r = fetch(&p, &url, "Cache-Control: only-if-cached\r\n");
            if r.status == 200 {
                let want = pattern(n);
                let first_diff = r.body.iter().zip(want.iter()).position(|(a, b)| a != b);
                assert!(
                    r.body == want,
                    "the object filled after the abort is complete: len {} first diff {first_diff:?}",
                    r.body.len()
                );
                break;
            }
            assert_eq!(r.status, 504);
            assert!(Instant::now() < deadline, "{framing}: cache never filled");
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(o.count(&format!("/{framing}/{n}")), 1, "the origin was asked once");
        let stats = stop_stats(p);
        assert_eq!(counter(&stats, "sessions_orphan_fill"), 1, "{stats}");
    }

    /// A CONNECT tunnel that goes quiet is closed at the idle timeout, under
    /// every backend. (Under epoll-once, which reports the writable sockets
    /// at every wait, each such wake-up once counted as tunnel activity, so
    /// a quiet tunnel was never closed.)
    pub fn quiet_tunnel_times_out(event: &str) {
        let eaddr = echo_server();
        for splice in ["on", "off"] {
            let (_p, mut c) = open_tunnel(eaddr, event, splice, &["--idle-timeout", "1s"], b"ping");
            while c.buf.len() < 4 {
                assert!(c.fill() > 0, "{event} {splice}: the tunnel closed before the echo");
            }
            assert_eq!(&c.buf[..4], b"ping");
            // Then nothing, either way: the proxy closes within a few idle timeouts.
            assert_closed_within(&mut c, 15, &format!("{event} {splice}"));
        }
    }

    /// A cache fill that goes on after its client left, from an upstream
    /// that then stalls, is given up at the upstream timeout: its upstream
    /// connection is closed and nothing partial is stored. (The timer once
    /// deferred to the client's send timeout, which a fill without a client
    /// does not have: the fill held its upstream for good.)
    pub fn orphan_fill_times_out(event: &str) {
        const N: usize = 1 << 20;
        let closed = Arc::new(AtomicUsize::new(0));
        let seen_close = closed.clone();
        let addr = common::tcp_server(move |mut s| {
            let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
            if read_request_head(&mut s).is_none() {
                return;
            }
            let mut buf = [0u8; 16];
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {N}\r\nCache-Control: max-age=600\r\n\r\n");
            let _ = s.write_all(head.as_bytes());
            let _ = s.write_all(&pattern(N / 2));
            // Stall, until the proxy closes (EOF) or 30 s pass (error).
            if matches!(s.read(&mut buf), Ok(0)) {
                seen_close.fetch_add(1, Ordering::SeqCst);
            }
        });
        for splice in ["off", "on"] {
            let upstream = addr.to_string();
            let p = start_proxy(&[
                "--event",
                event,
                "--splice",
                splice,
                "--keep-copy",
                "--upstream",
                &upstream,
                "--upstream-timeout",
                "1s",
                "--stats-on-exit",
            ]);
            let before = closed.load(Ordering::SeqCst);
            {
                let mut c = Conn::to(p.addr);
                c.send(b"GET /stall HTTP/1.1\r\nHost: o\r\n\r\n");
                while !c.buf.windows(4).any(|w| w == b"\r\n\r\n") || c.buf.len() < 100_000 {
                    assert!(c.fill() > 0, "{event} {splice}: the proxy closed early");
                }
                let _ = c.stream.shutdown(Shutdown::Both);
            }
            assert!(
                wait_until(Duration::from_secs(15), || closed.load(Ordering::SeqCst) > before),
                "{event} {splice}: the orphaned fill still holds its stalled upstream"
            );
            let r = fetch(&p, "/stall", "Cache-Control: only-if-cached\r\n");
            assert_eq!(r.status, 504, "{event} {splice}: a partial object was stored");
            let stats = stop_stats(p);
            assert_eq!(counter(&stats, "timeouts"), 1, "{event} {splice}: {stats}");
            assert_eq!(counter(&stats, "stored"), 0, "{event} {splice}: {stats}");
        }
    }

    /// A client that half-closes after pipelined requests still gets every
    /// answer, and the proxy closes as soon as it has answered — not at the
    /// idle timeout (edge-triggered backends report a FIN that comes with the
    /// last data only once). The FIN arrives with the requests (answered from
    /// the cache, or forwarded while the upstream thinks), and during a
    /// spliced body.
    pub fn half_close_after_pipelining(event: &str) {
        let o = Origin::start();
        let p = start_proxy(&["--event", event, "--idle-timeout", "60s", "--stats-on-exit"]);
        let cached = o.url("/cl/700?cc=max-age%3D60");
        assert_eq!(fetch(&p, &cached, "").status, 200);
        let late = o.url("/cl/1000?cc=no-store&wait=100");
        let slow = o.url("/cl/300000?cc=no-store&slow=10&chunk=60000");
        let cases: [(&[&str], bool); 3] = [
            (&[&cached, &cached], false),
            (&[&cached, &late, &slow], false),
            (&[&slow], true),
        ];
        for (urls, during_body) in cases {
            let mut c = Conn::to(p.addr);
            let batch: String = urls
                .iter()
                .map(|u| format!("GET {u} HTTP/1.1\r\nHost: x\r\n\r\n"))
                .collect();
            if during_body {
                // Let the body start flowing first.
                c.send(batch.as_bytes());
                while c.buf.len() < 1000 {
                    assert!(c.fill() > 0);
                }
                c.stream.shutdown(Shutdown::Write).unwrap();
            } else {
                // Once the proxy has accepted and found nothing to read, the
                // requests and the FIN arrive in one segment: one event.
                std::thread::sleep(Duration::from_millis(50));
                send_with_fin(&mut c.stream, batch.as_bytes());
            }
            let t0 = Instant::now();
            for (i, u) in urls.iter().enumerate() {
                let r = c
                    .read(false)
                    .unwrap_or_else(|e| panic!("{event}: response {i} ({u}): {e:?}"));
                assert_eq!(r.status, 200, "{event}: {u}");
                let n: usize = u.split('/').nth(4).unwrap().split('?').next().unwrap().parse().unwrap();
                assert!(r.body == pattern(n), "{event}: response {i} ({u}) whole and in order");
            }
            assert!(c.closed(), "{event}: the proxy closes after answering {urls:?}");
            let took = t0.elapsed();
            assert!(
                took < Duration::from_secs(10),
                "{event}: closed after {took:?}, not promptly"
            );
        }
        assert_eq!(counter(&stop_stats(p), "sessions_client_abort"), 0);
    }

    /// A close-delimited response (the client connection ends with it),
    /// too long for the sockets' buffers, and the client's next request
    /// arriving while it is relayed: the proxy closes lingering, so every
    /// byte arrives and then the end of stream, not a reset that cuts it.
    /// The reset is checked for itself: it cuts the body only when the
    /// proxy's socket still holds unsent bytes as it closes (a client slower
    /// than the relay, as on a loaded machine), but it is sent whenever the
    /// close leaves the request unread.
    pub fn close_delimited_with_a_request_behind(event: &str) {
        let o = Origin::start();
        let len = 16 << 20;
        for splice in ["on", "off"] {
            let p = start_proxy(&["--event", event, "--splice", splice]);
            let url = o.url(&format!("/close/{len}?cc=no-store&s={splice}"));
            let mut c = Conn::to(p.addr);
            c.send(format!("GET {url} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
            std::thread::sleep(Duration::from_millis(150));
            c.send(format!("GET {url} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
            std::thread::sleep(Duration::from_millis(50));
            let r = c.read(false).unwrap();
            assert!(
                !c.reset,
                "{event} splice {splice}: the response ended in a reset, not a FIN"
            );
            assert_eq!(r.body.len(), len, "{event} splice {splice}: the response is whole");
            assert!(r.body == pattern(len), "{event} splice {splice}: bytes differ");
        }
    }

    /// An upstream that closes mid-body: the client connection is closed
    /// (never a short response that looks complete) and nothing is cached.
    pub fn upstream_close_mid_body(event: &str) {
        let o = Origin::start();
        for splice in ["on", "off"] {
            let p = start_proxy(&["--event", event, "--splice", splice]);
            for framing in ["cl", "chunked"] {
                let url = o.url(&format!("/{framing}/500000?cc=max-age%3D60&abort=200000&s={splice}"));
                let mut c = Conn::to(p.addr);
                c.send(format!("GET {url} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
                match c.read(false) {
                    Err(ReadErr::Truncated) => {}
                    Ok(r) => panic!(
                        "{url}: a truncated body was relayed as complete ({} bytes)",
                        r.body.len()
                    ),
                }
                let before = o.count(&format!("/{framing}/500000"));
                let mut c = Conn::to(p.addr);
                c.send(format!("GET {url} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
                let _ = c.read(false);
                assert_eq!(
                    o.count(&format!("/{framing}/500000")),
                    before + 1,
                    "{url}: partial object not cached"
                );
            }
        }
    }

    /// Stale objects are revalidated with If-None-Match / If-Modified-Since and
    /// the 304 merged; a client's own conditional is answered from the cache.
    pub fn revalidation(event: &str) {
        let o = Origin::start();
        let p = start_proxy(&["--event", event, "--stats-on-exit"]);
        // Stale at once (max-age=0) with a validator: each use is revalidated.
        let url = o.url("/cl/2000?cc=max-age%3D0&etag=v1");
        assert_eq!(fetch(&p, &url, "").body, pattern(2000));
        let r = fetch(&p, &url, "");
        assert_eq!(r.status, 200);
        assert_eq!(r.body, pattern(2000));
        assert_eq!(o.count("/cl/2000"), 2);
        // Validated by the origin for this request: no Age (RFC 9111 §5.1).
        assert_eq!(r.header("age"), None);
        assert!(
            o.last_head().contains("If-None-Match: \"v1\""),
            "conditional request sent: {}",
            o.last_head()
        );
        // The client's own conditional is answered from the refreshed object.
        let r = fetch(&p, &url, "If-None-Match: \"v1\"\r\n");
        assert_eq!(r.status, 304);
        assert_eq!(r.header("etag"), Some("\"v1\""));
        // Last-Modified only.
        let url = o.url("/cl/2001?cc=no-cache&lm=100");
        assert_eq!(fetch(&p, &url, "").body, pattern(2001));
        assert_eq!(fetch(&p, &url, "").body, pattern(2001));
        assert!(o.last_head().contains("If-Modified-Since: "), "{}", o.last_head());
        let stats = stop_stats(p);
        assert_eq!(counter(&stats, "revalidated"), 3, "{stats}");
    }

    /// `--cache-dir`: objects evicted from memory come back from disk (the
    /// request parks while a helper reads them), in order with pipelined
    /// requests around them, byte for byte, without asking the origin again.
    pub fn disk_store(event: &str) {
        let o = Origin::start();
        let dir = TempDir::new("disk");
        let d = dir.path.to_str().unwrap();
        // Memory holds one of the two objects at a time.
        let p = start_proxy(&[
            "--event",
            event,
            "--cache-size",
            "300KiB",
            "--cache-dir",
            d,
            "--stats-on-exit",
        ]);
        let a = o.url("/cl/200000?cc=max-age%3D600");
        let b = o.url("/cl/200001?cc=max-age%3D600");
        assert_eq!(fetch(&p, &a, "").body, pattern(200_000));
        assert_eq!(fetch(&p, &b, "").body, pattern(200_001));
        // a from disk (evicting b from memory), then b from disk, then a miss.
        let nc = o.url("/cl/1000?cc=no-store");
        let mut c = Conn::to(p.addr);
        let mut batch = String::new();
        for u in [&a, &b, &nc] {
            batch.push_str(&format!("GET {u} HTTP/1.1\r\nHost: x\r\n\r\n"));
        }
        c.send(batch.as_bytes());
        for n in [200_000, 200_001, 1000] {
            let r = c.read(false).unwrap();
            assert_eq!(r.status, 200);
            assert!(r.body == pattern(n), "{n}-byte response out of order or corrupt");
        }
        assert_eq!((o.count("/cl/200000"), o.count("/cl/200001")), (1, 1));
        drop(c); // closed first: a live keep-alive connection holds the drain for a second
        let stats = stop_stats(p);
        assert_eq!(counter(&stats, "disk_loads"), 2, "{stats}");
        assert_eq!(counter(&stats, "hits"), 2, "{stats}");
        assert_eq!(
            counter(&stats, "requests"),
            5,
            "a parked request is counted once: {stats}"
        );
        assert_eq!(disk_counter(&stats, "loaded"), 2, "{stats}");
    }

    /// Vary keys variants by the named request fields; `Vary: *` is not stored.
    pub fn vary(event: &str) {
        let o = Origin::start();
        let p = start_proxy(&["--event", event]);
        let url = o.url("/lang?cc=max-age%3D60&vary=Accept-Language");
        for lang in ["en", "fr", "en", "fr", "de"] {
            let r = fetch(&p, &url, &format!("Accept-Language: {lang}\r\n"));
            assert_eq!(r.body, format!("lang={lang}").into_bytes());
        }
        assert_eq!(o.count("/lang"), 3, "one fetch per variant");
        let r = fetch(&p, &o.url("/lang?cc=max-age%3D60&vary=*"), "");
        assert_eq!(r.status, 200);
        fetch(&p, &o.url("/lang?cc=max-age%3D60&vary=*"), "");
        assert_eq!(o.count("/lang"), 5, "Vary: * is not stored");
    }

    /// Clients outside --allow get 403 and reach no origin; bad request
    /// targets, loops and client-side smuggling are refused.
    pub fn access_control(event: &str) {
        let o = Origin::start();
        let p = start_proxy(&["--event", event, "--allow", "10.0.0.0/8"]);
        let r = fetch(&p, &o.url("/cl/1"), "");
        assert_eq!(r.status, 403);
        assert_eq!(o.count("/cl/1"), 0);
        let p = start_proxy(&["--event", event]);
        // Origin-form to a forward proxy, other schemes, loops.
        let mut c = Conn::to(p.addr);
        c.send(b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(c.read(false).unwrap().status, 400);
        assert_eq!(fetch(&p, "ftp://example.com/x", "").status, 400);
        let r = fetch(&p, &format!("http://{}/loop", p.addr), "");
        assert_eq!(r.status, 508, "a request to the proxy itself is a loop");
        // Ports: a mail port is refused by default; with --forward-ports,
        // every port not listed, upgrades included, before any connection.
        assert_eq!(fetch(&p, "http://127.0.0.1:25/x", "").status, 403);
        let only80 = start_proxy(&["--event", event, "--forward-ports", "80,443"]);
        assert_eq!(fetch(&only80, &o.url("/cl/2"), "").status, 403);
        let upgrade = "Connection: upgrade\r\nUpgrade: websocket\r\n";
        assert_eq!(fetch(&only80, &o.url("/cl/2"), upgrade).status, 403);
        assert_eq!(o.count("/cl/2"), 0);
        // Request smuggling from the client side.
        let mut c = Conn::to(p.addr);
        c.send(
            format!(
                "POST {} HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                o.url("/cl/1")
            )
            .as_bytes(),
        );
        assert_eq!(c.read(false).unwrap().status, 400);
        assert!(c.closed());
    }

    /// An origin that resets the connection mid-body: the client connection
    /// is closed short (never a response that looks complete), nothing is
    /// cached, and the proxy goes on serving.
    pub fn origin_reset_mid_body(event: &str) {
        let o = Origin::start();
        for splice in ["on", "off"] {
            let p = start_proxy(&["--event", event, "--splice", splice, "--stats-on-exit"]);
            for framing in ["cl", "chunked"] {
                let path = format!("/{framing}/400000");
                let url = o.url(&format!("{path}?cc=max-age%3D60&reset=150000&s={splice}"));
                let mut c = Conn::to(p.addr);
                c.send(format!("GET {url} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
                match c.read(false) {
                    Err(ReadErr::Truncated) => {}
                    Ok(r) => panic!("{url}: a reset body was relayed as complete ({} bytes)", r.body.len()),
                }
                let before = o.count(&path);
                let r = fetch(&p, &url, "Cache-Control: only-if-cached\r\n");
                assert_eq!(r.status, 504, "{url}: the partial object was not cached");
                assert_eq!(o.count(&path), before);
            }
            // Still serving.
            let r = fetch(&p, &o.url("/cl/1000?cc=no-store"), "");
            assert_eq!(r.body, pattern(1000));
            let stats = stop_stats(p);
            if splice == "on" {
                assert!(counter(&stats, "sessions_upstream_abort") >= 1, "{stats}");
            }
        }
    }
}

per_backend!(
    overrun_is_not_the_next_answer,
    early_answer_keeps_the_client,
    request_bodies_spliced,
    chunked_request_body_aborted,
    stalled_request_body_times_out,
    half_close_after_pipelining,
    bodies_splice_on,
    bodies_splice_off,
    pipelining,
    connect_tunnel,
    upgrade_becomes_a_tunnel,
    client_abort_keep_copy_fills_cache,
    orphan_fill_times_out,
    quiet_tunnel_times_out,
    upstream_close_mid_body,
    close_delimited_with_a_request_behind,
    origin_reset_mid_body,
    revalidation,
    vary,
    access_control,
    accept_limit_serves_a_burst,
    disk_store
);

/// `--tunnel-timeout` outlasts `--idle-timeout` for tunnels (a WebSocket
/// that pings less often than keep-alive clients are let idle), and still
/// closes a tunnel that stays quiet longer.
#[test]
fn tunnel_timeout_outlasts_the_idle_timeout() {
    let eaddr = echo_server();
    let extra = ["--idle-timeout", "1s", "--tunnel-timeout", "4s"];
    let (_p, mut c) = open_tunnel(eaddr, "epoll", "on", &extra, b"ping");
    while c.buf.len() < 4 {
        assert!(c.fill() > 0, "the tunnel closed before the echo");
    }
    // Quiet for twice the idle timeout: still open.
    std::thread::sleep(Duration::from_millis(2000));
    c.stream.write_all(b"pong").unwrap();
    while c.buf.len() < 8 {
        assert!(c.fill() > 0, "the tunnel closed at the idle timeout");
    }
    assert_eq!(&c.buf[..8], b"pingpong");
    // Then quiet past the tunnel timeout: closed.
    assert_closed_within(&mut c, 20, "--tunnel-timeout");
}

/// An origin for collapsed forwarding: counts the requests per path, and
/// holds each answer until `open` is set. `/c*` are cacheable
/// (`max-age=60`), `/n*` are `no-store`; the body names the path.
struct HeldOrigin {
    addr: SocketAddr,
    seen: Arc<Mutex<HashMap<String, usize>>>,
    open: Arc<AtomicBool>,
}

impl HeldOrigin {
    fn start() -> HeldOrigin {
        let seen = Arc::new(Mutex::new(HashMap::new()));
        let open = Arc::new(AtomicBool::new(false));
        let (s2, o2) = (seen.clone(), open.clone());
        let addr = common::tcp_server(move |mut s| {
            let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
            while let Some(head) = read_request_head(&mut s) {
                let text = String::from_utf8_lossy(&head).to_string();
                let path = text.split(' ').nth(1).unwrap_or("/").to_string();
                *s2.lock().unwrap().entry(path.clone()).or_default() += 1;
                while !o2.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                let cc = if path.starts_with("/c") {
                    "max-age=60"
                } else {
                    "no-store"
                };
                let body = format!("body of {path}");
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nCache-Control: {cc}\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                if s.write_all(answer.as_bytes()).is_err() {
                    return;
                }
            }
        });
        HeldOrigin { addr, seen, open }
    }

    fn count(&self, path: &str) -> usize {
        self.seen.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    /// `n` clients GET `path` at once (each on its own connection); their
    /// bodies, once answered.
    fn clients(&self, p: &Weft, path: &str, n: usize) -> Vec<std::thread::JoinHandle<Vec<u8>>> {
        (0..n)
            .map(|_| {
                let (addr, path) = (p.addr, path.to_string());
                std::thread::spawn(move || {
                    let mut c = Conn::to(addr);
                    let r = c.get(&path, "");
                    assert_eq!(r.status, 200, "{path}");
                    r.body
                })
            })
            .collect()
    }
}

/// Collapsed forwarding: concurrent misses for one cacheable object reach
/// the origin once (the others wait for that fill, across workers, and are
/// answered from the cache); a response that may not be stored sends the
/// waiters upstream and lets the key's next misses pass without waiting;
/// without `--collapse` (the default) every miss is forwarded.
#[test]
fn concurrent_misses_are_collapsed_into_one_fill() {
    for event in ["epoll", "uring", "tracked"] {
        let o = HeldOrigin::start();
        let up = o.addr.to_string();
        let p = common::collapsing_proxy(&up, event, &[]);
        let collapsed = || common::admin_total(&p, "collapsed");
        // Cacheable: one request reaches the origin, seven wait.
        o.open.store(false, Ordering::SeqCst);
        let waiting = o.clients(&p, "/c1", 8);
        assert!(
            wait_until(Duration::from_secs(10), || collapsed() == 7),
            "{event}: {} waited, origin saw {}",
            collapsed(),
            o.count("/c1")
        );
        // The leader's request may still be on its way.
        assert!(wait_until(Duration::from_secs(10), || o.count("/c1") >= 1), "{event}");
        assert_eq!(o.count("/c1"), 1, "{event}");
        o.open.store(true, Ordering::SeqCst);
        for t in waiting {
            assert_eq!(t.join().unwrap(), b"body of /c1", "{event}");
        }
        assert_eq!(o.count("/c1"), 1, "{event}: the waiters were answered from the cache");
        // Not storable: the waiters go upstream when the head says so...
        o.open.store(false, Ordering::SeqCst);
        let waiting = o.clients(&p, "/n1", 4);
        assert!(
            wait_until(Duration::from_secs(10), || collapsed() == 10),
            "{event}: {}",
            collapsed()
        );
        assert!(wait_until(Duration::from_secs(10), || o.count("/n1") == 1), "{event}");
        o.open.store(true, Ordering::SeqCst);
        for t in waiting {
            assert_eq!(t.join().unwrap(), b"body of /n1", "{event}");
        }
        assert_eq!(o.count("/n1"), 4, "{event}");
        // ...and the key's next misses do not wait at all.
        o.open.store(false, Ordering::SeqCst);
        let waiting = o.clients(&p, "/n1", 3);
        assert!(
            wait_until(Duration::from_secs(10), || o.count("/n1") == 7),
            "{event}: {}",
            o.count("/n1")
        );
        o.open.store(true, Ordering::SeqCst);
        for t in waiting {
            assert_eq!(t.join().unwrap(), b"body of /n1", "{event}");
        }
        assert_eq!(collapsed(), 10, "{event}");
        let stats = stop_stats(p);
        assert_eq!(counter(&stats, "collapsed"), 10, "{stats}");
    }
    // A fill whose head is slower than the wait bound (--collapse-timeout,
    // 5 s by default): the waiter asks the origin itself.
    let o = HeldOrigin::start();
    let up = o.addr.to_string();
    let p = start_proxy(&["--upstream", &up, "--collapse", "true", "--collapse-timeout", "1s"]);
    let waiting = o.clients(&p, "/c3", 2);
    assert!(wait_until(Duration::from_secs(6), || o.count("/c3") >= 1));
    assert!(
        wait_until(Duration::from_secs(4), || o.count("/c3") == 2),
        "the waiter did not give up after --collapse-timeout"
    );
    o.open.store(true, Ordering::SeqCst);
    for t in waiting {
        assert_eq!(t.join().unwrap(), b"body of /c3");
    }
    drop(p);
    // Off (the default): every miss goes upstream.
    let o = HeldOrigin::start();
    let up = o.addr.to_string();
    let p = start_proxy(&["--upstream", &up]);
    let waiting = o.clients(&p, "/c2", 4);
    assert!(
        wait_until(Duration::from_secs(10), || o.count("/c2") == 4),
        "{}",
        o.count("/c2")
    );
    o.open.store(true, Ordering::SeqCst);
    for t in waiting {
        assert_eq!(t.join().unwrap(), b"body of /c2");
    }
}

/// Many clients at once over more objects than memory holds: loads from
/// disk, joined loads, evictions and parked requests interleave, and every
/// body still arrives whole, from the cache.
#[test]
fn disk_store_under_concurrent_load() {
    for event in ["epoll", "uring"] {
        let o = Origin::start();
        let dir = TempDir::new("disk-load");
        // Memory holds 2 of the 12 objects, fewer than the 6 loads that can
        // be in flight: a loaded object is often evicted by the next load
        // before its waiting request is answered again, which is then
        // answered from what the load handed over, never from the origin.
        let p = start_proxy(&[
            "--event",
            event,
            "--cache-size",
            "250KiB",
            "--cache-dir",
            dir.path.to_str().unwrap(),
            "--stats-on-exit",
        ]);
        let urls: Vec<String> = (0..12)
            .map(|i| o.url(&format!("/cl/{}?cc=max-age%3D600", 100_000 + i)))
            .collect();
        for u in &urls {
            fetch(&p, u, "");
        }
        let addr = p.addr;
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let urls = urls.clone();
                std::thread::spawn(move || {
                    let mut c = Conn::to(addr);
                    for i in 0..40 {
                        let k = (t * 7 + i * 5) % urls.len();
                        let r = c.get(&urls[k], "");
                        assert_eq!(r.status, 200);
                        assert!(r.body == pattern(100_000 + k), "{} corrupt", urls[k]);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        for k in 0..urls.len() {
            assert_eq!(
                o.count(&format!("/cl/{}", 100_000 + k)),
                1,
                "{event}: origin asked again"
            );
        }
        let stats = stop_stats(p);
        assert_eq!(counter(&stats, "hits"), 240, "{event}: {stats}");
        assert!(counter(&stats, "disk_loads") > 0, "{event}: {stats}");
    }
}

/// `--cache-dir` keeps the cache across a restart; what an unsafe method
/// invalidated stays gone.
#[test]
fn disk_store_survives_a_restart() {
    let o = Origin::start();
    let dir = TempDir::new("disk-restart");
    let args = ["--cache-dir", dir.path.to_str().unwrap(), "--stats-on-exit"];
    let kept = o.url("/cl/300000?cc=max-age%3D600");
    let gone = o.url("/cl/3000?cc=max-age%3D600");
    let p = start_proxy(&args);
    assert_eq!(fetch(&p, &kept, "").body, pattern(300_000));
    assert_eq!(fetch(&p, &gone, "").body, pattern(3000));
    let mut c = Conn::to(p.addr);
    c.send(format!("POST {gone} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi").as_bytes());
    assert_eq!(c.read(false).unwrap().status, 200);
    // Shutting down finishes the queued writes (the invalidated object's
    // write is dropped, or its file removed, depending on timing).
    drop(c); // closed first: a live keep-alive connection holds the drain for a second
    let stats = stop_stats(p);
    assert_eq!(disk_counter(&stats, "objects"), 1, "{stats}");

    let p = start_proxy(&args);
    // The index is built while the proxy already listens: until then a
    // stored object is a miss. Wait for the scan's log line.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !p.stderr().contains("objects (0 MiB) indexed in") {
        assert!(Instant::now() < deadline, "no scan line: {}", p.stderr());
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(p.stderr().contains(": 1 objects (0 MiB) indexed in"), "{}", p.stderr());
    let r = fetch(&p, &kept, "");
    assert_eq!(r.status, 200);
    assert!(r.body == pattern(300_000));
    assert!(r.header("age").is_some(), "a stored response carries Age");
    assert_eq!(o.count("/cl/300000"), 1, "answered from disk");
    assert_eq!(fetch(&p, &gone, "").body, pattern(3000));
    assert_eq!(
        o.count("/cl/3000"),
        3,
        "GET, POST, and GET again after the invalidation"
    );
    // A POST elsewhere whose Location names the kept URI invalidates it in
    // both tiers.
    let loc = "/cl/300000?cc=max-age%3D600"
        .replace('%', "%25")
        .replace('=', "%3D")
        .replace('?', "%3F");
    let form = o.url(&format!("/cl/10?loc={loc}"));
    let mut c = Conn::to(p.addr);
    c.send(format!("POST {form} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi").as_bytes());
    assert_eq!(c.read(false).unwrap().status, 200);
    assert_eq!(fetch(&p, &kept, "").body.len(), 300_000);
    assert_eq!(o.count("/cl/300000"), 2, "refetched after the Location invalidation");
    drop(c); // closed first: a live keep-alive connection holds the drain for a second
    let stats = stop_stats(p);
    assert_eq!(disk_counter(&stats, "scanned"), 1, "{stats}");
    assert_eq!(counter(&stats, "disk_loads"), 1, "{stats}");
}

#[test]
fn bodies_splice_auto_epoll() {
    scenarios::bodies_splice_auto("epoll");
}

// ---------------------------------------------------------------------------
// Single-backend scenarios

/// 64 MiB bodies, byte-exact, spliced and copied (few, to keep the suite fast).
#[test]
fn large_bodies_64mib() {
    let o = Origin::start();
    let n = 64 << 20;
    let want = pattern(n);
    for (splice, framing, cc) in [
        ("on", "cl", "no-store"),
        ("off", "cl", "no-store"),
        ("on", "chunked", "max-age%3D60"),
        ("on", "close", "no-store"),
    ] {
        let p = start_proxy(&[
            "--splice",
            splice,
            "--cache-size",
            "200MiB",
            "--max-object-size",
            "64MiB",
        ]);
        let url = o.url(&format!("/{framing}/{n}?cc={cc}&chunk=1048576"));
        let r = fetch(&p, &url, "");
        assert_eq!(r.status, 200);
        assert_eq!(r.body.len(), n, "{url}");
        assert!(r.body == want, "{url}: body differs");
        if cc != "no-store" {
            let h = fetch(&p, &url, "");
            assert!(h.body == want, "{url}: cached body differs");
            assert_eq!(o.count(&format!("/{framing}/{n}")), 1);
        }
    }
}

#[test]
fn heuristic_freshness_and_no_store() {
    let o = Origin::start();
    let p = start_proxy(&[]);
    // Each fetched twice: how many reached the origin. /cl/10 has
    // Last-Modified a day ago, no explicit freshness: fresh for ~2.4 h.
    for (path, query, fetched, why) in [
        ("/cl/10", "lm=86400", 1, "heuristically fresh"),
        ("/cl/11", "cc=no-store", 2, "no-store is never cached"),
        (
            "/cl/12",
            "cc=private%2C%20max-age%3D60",
            2,
            "private is not stored by a shared cache",
        ),
    ] {
        let url = o.url(&format!("{path}?{query}"));
        fetch(&p, &url, "");
        fetch(&p, &url, "");
        assert_eq!(o.count(path), fetched, "{why}");
    }
    // A request's no-cache forces validation; no validator means a refetch.
    let url = o.url("/cl/13?cc=max-age%3D60");
    fetch(&p, &url, "");
    fetch(&p, &url, "Cache-Control: no-cache\r\n");
    assert_eq!(o.count("/cl/13"), 2);
    fetch(&p, &url, "Pragma: no-cache\r\n");
    assert_eq!(o.count("/cl/13"), 3, "Pragma: no-cache without Cache-Control");
    // max-stale lets a stale response through; must-revalidate forbids it.
    let url = o.url("/cl/14?cc=max-age%3D0");
    fetch(&p, &url, "");
    std::thread::sleep(Duration::from_millis(1100));
    let r = fetch(&p, &url, "Cache-Control: max-stale=100\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(o.count("/cl/14"), 1, "stale served under max-stale");
    let url = o.url("/cl/15?cc=max-age%3D0%2C%20must-revalidate");
    fetch(&p, &url, "");
    fetch(&p, &url, "Cache-Control: max-stale=100\r\n");
    assert_eq!(o.count("/cl/15"), 2, "must-revalidate is never served stale");
    // only-if-cached: a 504 that keeps the connection (it answers a whole,
    // well-formed request), so the request pipelined behind it is answered.
    let mut c = Conn::to(p.addr);
    let miss = o.url("/cl/16");
    let next = o.url("/cl/17");
    c.send(
        format!(
            "GET {miss} HTTP/1.1\r\nHost: x\r\nCache-Control: only-if-cached\r\n\r\n\
             GET {next} HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        .as_bytes(),
    );
    let r = c.read(false).unwrap();
    assert_eq!(r.status, 504);
    assert_eq!(r.header("connection"), None, "{:?}", r.headers);
    assert_eq!(c.read(false).unwrap().status, 200, "the pipelined request");
    assert_eq!(o.count("/cl/16"), 0);
    assert_eq!(o.count("/cl/17"), 1);
}

#[test]
fn range_and_head_from_cache() {
    let o = Origin::start();
    let p = start_proxy(&[]);
    let url = o.url("/cl/100000?cc=max-age%3D60&etag=r1");
    fetch(&p, &url, "");
    let r = fetch(&p, &url, "Range: bytes=10-19\r\n");
    assert_eq!(r.status, 206);
    assert_eq!(r.body, pattern(100_000)[10..20].to_vec());
    assert_eq!(r.header("content-range"), Some("bytes 10-19/100000"));
    let r = fetch(&p, &url, "Range: bytes=-5\r\n");
    assert_eq!(r.body, pattern(100_000)[99_995..].to_vec());
    let r = fetch(&p, &url, "Range: bytes=200000-\r\n");
    assert_eq!(r.status, 416);
    let r = fetch(&p, &url, "Range: bytes=0-0\r\nIf-Range: \"other\"\r\n");
    assert_eq!(r.status, 200, "If-Range mismatch sends everything");
    let mut c = Conn::to(p.addr);
    c.send(format!("HEAD {url} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
    let h = c.read(true).unwrap();
    assert_eq!(h.status, 200);
    assert_eq!(h.header("content-length"), Some("100000"));
    // The connection is still in step: the next response parses.
    assert_eq!(c.get(&url, "").body.len(), 100_000);
    assert_eq!(o.count("/cl/100000"), 1);
}

#[test]
fn unsafe_methods_invalidate() {
    let o = Origin::start();
    let p = start_proxy(&[]);
    let url = o.url("/cl/50?cc=max-age%3D60");
    fetch(&p, &url, "");
    fetch(&p, &url, "");
    assert_eq!(o.count("/cl/50"), 1);
    let mut c = Conn::to(p.addr);
    c.send(format!("POST {url} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello").as_bytes());
    assert_eq!(c.read(false).unwrap().status, 200);
    fetch(&p, &url, "");
    assert_eq!(o.count("/cl/50"), 3, "POST then GET: refetched");
}

#[test]
fn request_bodies_are_streamed_upstream() {
    let o = Origin::start();
    let p = start_proxy(&[]);
    let body = pattern(3 << 20);
    let url = o.url("/sink?cc=no-store");
    // Content-Length body, written while the proxy forwards it.
    let mut c = Conn::to(p.addr);
    c.send(
        format!(
            "POST {url} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    c.send(&body);
    let r = c.read(false).unwrap();
    assert_eq!(r.status, 200);
    assert!(r.body == body, "the origin received the body intact");
    // Chunked, after Expect: 100-continue, on the same connection.
    c.send(
        format!("PUT {url} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n")
            .as_bytes(),
    );
    let interim = c.read(true).unwrap();
    assert_eq!(interim.status, 100);
    let mut wire = Vec::new();
    for part in body[..500_000].chunks(33_333) {
        wire.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        wire.extend_from_slice(part);
        wire.extend_from_slice(b"\r\n");
    }
    wire.extend_from_slice(b"0\r\n\r\n");
    c.send(&wire);
    let r = c.read(false).unwrap();
    assert_eq!(r.status, 200);
    assert!(r.body == body[..500_000], "chunked request body forwarded");
    // HEAD misses are forwarded and leave the connection in step.
    c.send(format!("HEAD {} HTTP/1.1\r\nHost: x\r\n\r\n", o.url("/cl/1234?cc=no-store")).as_bytes());
    let h = c.read(true).unwrap();
    assert_eq!(h.header("content-length"), Some("1234"));
    assert_eq!(c.get(&o.url("/cl/10?cc=no-store"), "").body, pattern(10));
}

#[test]
fn forwarded_request_headers() {
    let o = Origin::start();
    let p = start_proxy(&["--via-name", "testproxy"]);
    let r = fetch(
        &p,
        &o.url("/echo?cc=no-store"),
        "Connection: keep-alive, X-Private\r\nX-Private: secret\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\nKeep-Alive: 5\r\nX-Keep: 1\r\n",
    );
    let head = String::from_utf8(r.body).unwrap();
    assert!(
        head.starts_with("GET /echo?cc=no-store HTTP/1.1\r\n"),
        "origin-form upstream: {head}"
    );
    assert!(head.contains(&format!("Host: {}\r\n", o.addr)), "{head}");
    assert!(head.contains("Via: 1.1 testproxy (weft)\r\n"), "{head}");
    assert!(head.contains("X-Forwarded-For: 127.0.0.1\r\n"), "{head}");
    assert!(head.contains("X-Keep: 1\r\n"), "{head}");
    for gone in ["X-Private", "Proxy-Connection", "TE:", "Keep-Alive", "Connection:"] {
        assert!(!head.contains(gone), "{gone} must not be forwarded: {head}");
    }
    assert!(r.headers.iter().any(|(n, v)| n == "Via" && v == "1.1 testproxy (weft)"));
}

#[test]
fn upstream_connections_are_pooled() {
    let o = Origin::start();
    let p = start_proxy(&[]);
    for i in 0..5 {
        let r = fetch(&p, &o.url(&format!("/cl/{}?cc=no-store", 10 + i)), "");
        assert_eq!(r.status, 200);
    }
    assert_eq!(o.connections(), 1, "one upstream connection served five clients");
    // An upstream that closes an idle pooled connection: the next request
    // still succeeds (closed pooled connections are dropped or retried once).
    for pause in [0, 30, 0, 30] {
        let r = fetch(&p, &o.url("/cl/3?cc=no-store&drop=1"), "");
        assert_eq!(r.status, 200);
        assert_eq!(r.body, pattern(3));
        std::thread::sleep(Duration::from_millis(pause));
    }
    let before = o.connections();
    // An upstream that closes after a response is not reused.
    fetch(&p, &o.url("/cl/1?cc=no-store&close=1"), "");
    fetch(&p, &o.url("/cl/2?cc=no-store"), "");
    assert_eq!(o.connections(), before + 2);
}

/// A burst of concurrent requests leaves its upstream connections in the
/// pool, up to `--pool-size`, and the next burst reuses them instead of
/// connecting again (a small cap made the proxy reconnect at every peak).
#[test]
fn a_burst_of_upstream_connections_stays_pooled() {
    fn burst(p: &Weft, o: &Origin, n: usize) {
        let mut conns: Vec<Conn> = (0..n).map(|_| Conn::to(p.addr)).collect();
        for (i, c) in conns.iter_mut().enumerate() {
            // A URL each: concurrent misses of one URL would wait for the
            // first one's head instead (collapsed forwarding), not overlap.
            let url = o.url(&format!("/cl/10?cc=no-store&wait=300&i={i}"));
            c.send(format!("GET {url} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        }
        for c in &mut conns {
            assert_eq!(c.read(false).unwrap().status, 200);
        }
    }
    // 80 overlapping requests: more than the old default cap of 64.
    let o = Origin::start();
    let p = start_proxy(&[]);
    burst(&p, &o, 80);
    let first = o.connections();
    assert!(first > 64, "the burst overlapped ({first} upstream connections)");
    burst(&p, &o, 80);
    assert_eq!(o.connections(), first, "the second burst reused the pooled connections");
    // With a cap, only that many are kept; the rest are opened again.
    let o = Origin::start();
    let p = start_proxy(&["--pool-size", "4"]);
    burst(&p, &o, 12);
    let first = o.connections();
    burst(&p, &o, 12);
    assert!(o.connections() >= first + 12 - 4, "{first} then {}", o.connections());
}

#[test]
fn smuggling_responses_are_502() {
    let o = Origin::start();
    let p = start_proxy(&[]);
    for path in ["/raw/both", "/raw/twocl"] {
        let r = fetch(&p, &o.url(path), "");
        assert_eq!(r.status, 502, "{path}");
        assert!(String::from_utf8_lossy(&r.body).contains("Content-Length"), "{path}");
    }
}

#[test]
fn upstream_errors_name_the_cause() {
    let o = Origin::start();
    let p = start_proxy(&["--upstream-timeout", "300ms", "--connect-timeout", "300ms"]);
    // Refused: a port nobody listens on.
    let closed = ClosedPort::new();
    let dead = closed.addr;
    let r = fetch(&p, &format!("http://{dead}/"), "");
    assert_eq!(r.status, 502);
    assert!(String::from_utf8_lossy(&r.body).contains("refused"), "{:?}", r.body);
    // DNS failure.
    let r = fetch(&p, "http://no-such-host.invalid/", "");
    assert_eq!(r.status, 502);
    assert!(String::from_utf8_lossy(&r.body).contains("resolve"));
    // Timeout.
    let t = Instant::now();
    let r = fetch(&p, &o.url("/silent"), "");
    assert_eq!(r.status, 504);
    assert!(String::from_utf8_lossy(&r.body).contains("timed out"));
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn reverse_mode_with_routes() {
    let a = Origin::start();
    let b = Origin::start();
    let route = format!("b.example={}", b.addr);
    let p = start_proxy(&["--upstream", &a.addr.to_string(), "--route", &route]);
    let mut c = Conn::to(p.addr);
    c.send(b"GET /cl/77?cc=max-age%3D60 HTTP/1.1\r\nHost: a.example\r\n\r\n");
    assert_eq!(c.read(false).unwrap().body, pattern(77));
    c.send(b"GET /cl/77?cc=max-age%3D60 HTTP/1.1\r\nHost: b.example:80\r\n\r\n");
    assert_eq!(c.read(false).unwrap().body, pattern(77));
    c.send(b"GET /cl/77?cc=max-age%3D60 HTTP/1.1\r\nHost: a.example\r\n\r\n");
    assert_eq!(c.read(false).unwrap().body, pattern(77));
    assert_eq!(a.count("/cl/77"), 1, "cached per Host");
    assert_eq!(b.count("/cl/77"), 1);
    // CONNECT is not served by a reverse proxy.
    c.send(b"CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n");
    assert_eq!(c.read(false).unwrap().status, 405);
}

#[test]
fn only_routes_without_default_answer_421() {
    let b = Origin::start();
    let route = format!("b.example={}", b.addr);
    let p = start_proxy(&["--route", &route]);
    let mut c = Conn::to(p.addr);
    c.send(b"GET /cl/5 HTTP/1.1\r\nHost: other.example\r\n\r\n");
    assert_eq!(c.read(false).unwrap().status, 421);
}

#[test]
fn admin_endpoint_and_config_file() {
    let o = Origin::start();
    let d = TempDir::new("proxy-conf");
    let admin = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let conf = d.write(
        "weft.toml",
        format!(
            "[proxy]\nsplice = \"on\"\nadmin = \"{admin}\"\nallow = [\"127.0.0.0/8\", \"::1\"]\nupstream = \"{}\"\n",
            o.addr
        )
        .as_bytes(),
    );
    let out = std::process::Command::new(weft_bin())
        .args(["check", "-c", conf.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let p = start_proxy(&["-c", conf.to_str().unwrap()]);
    let mut c = Conn::to(p.addr);
    c.send(b"GET /cl/200000?cc=no-store HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(c.read(false).unwrap().body == pattern(200_000));
    // Workers publish their counters at the end of each loop iteration:
    // the response may reach us a moment before they do.
    let deadline = Instant::now() + Duration::from_secs(10);
    let json = loop {
        let mut a = Conn::to(admin);
        let r = a.get("/stats", "");
        assert_eq!(r.status, 200);
        let json = String::from_utf8(r.body).unwrap();
        if counter(&json, "sessions_splice") == 1 || Instant::now() > deadline {
            break json;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(json.starts_with("{\"backend\":\"epoll\""), "{json}");
    assert!(counter(&json, "bytes_spliced") >= 200_000 - 4096, "{json}");
    assert_eq!(counter(&json, "sessions_splice"), 1, "{json}");
    // A bad key in the [proxy] table is a one-line error, exit code 2.
    let bad = d.write("bad.toml", b"[proxy]\nsplice = \"sometimes\"\n");
    let out = std::process::Command::new(weft_bin())
        .args(["proxy", "-c", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("proxy.splice") && err.lines().count() == 1, "{err}");
}

#[test]
fn curl_through_forward_proxy() {
    let o = Origin::start();
    let p = start_proxy(&[]);
    let url = o.url("/chunked/300000?cc=max-age%3D60&chunk=7777");
    for _ in 0..2 {
        let out = std::process::Command::new("curl")
            .args(["-s", "--fail", "-x", &format!("http://{}", p.addr), &url])
            .output();
        let Ok(out) = out else {
            panic!("curl is required for this test (scripts/test installs it)");
        };
        assert!(out.status.success());
        assert!(out.stdout == pattern(300_000));
    }
    assert_eq!(o.count("/chunked/300000"), 1);
}

/// nginx as the origin: files with ETag and Last-Modified, through the
/// reverse proxy, byte-exact, cached heuristically and revalidated.
#[test]
fn nginx_origin() {
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("nginx is required for this test (scripts/test installs nginx-light)");
    let d = TempDir::new("nginx");
    let www = d.path.join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("small.txt"), b"small file\n").unwrap();
    std::fs::write(www.join("big.bin"), pattern(5 << 20)).unwrap();
    // Old enough for a heuristic lifetime of minutes.
    let old = std::time::SystemTime::now() - Duration::from_secs(86_400);
    for f in ["small.txt", "big.bin"] {
        std::fs::File::options()
            .write(true)
            .open(www.join(f))
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = d.path.display().to_string();
    let conf = format!(
        "daemon off; master_process off; worker_processes 1; pid {dir}/nginx.pid; error_log {dir}/error.log;\n\
         events {{ worker_connections 64; }}\n\
         http {{ access_log off; client_body_temp_path {dir}/cb; proxy_temp_path {dir}/pt; fastcgi_temp_path {dir}/ft; uwsgi_temp_path {dir}/ut; scgi_temp_path {dir}/st;\n\
         server {{ listen 127.0.0.1:{port}; root {dir}/www; }} }}\n"
    );
    let conf_path = d.write("nginx.conf", conf.as_bytes());
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _nginx = Kill(
        std::process::Command::new(nginx)
            .args([
                "-p",
                &dir,
                "-e",
                &format!("{dir}/error.log"),
                "-c",
                conf_path.to_str().unwrap(),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nginx did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let upstream = format!("127.0.0.1:{port}");
    let p = start_proxy(&["--upstream", &upstream, "--stats-on-exit"]);
    let mut c = Conn::to(p.addr);
    for _ in 0..3 {
        c.send(b"GET /big.bin HTTP/1.1\r\nHost: static.example\r\n\r\n");
        let r = c.read(false).unwrap();
        assert_eq!(r.status, 200);
        assert!(r.body == pattern(5 << 20));
        c.send(b"GET /small.txt HTTP/1.1\r\nHost: static.example\r\n\r\n");
        assert_eq!(c.read(false).unwrap().body, b"small file\n");
    }
    c.send(b"GET /small.txt HTTP/1.1\r\nHost: static.example\r\nCache-Control: no-cache\r\n\r\n");
    assert_eq!(c.read(false).unwrap().body, b"small file\n");
    c.send(b"GET /missing HTTP/1.1\r\nHost: static.example\r\n\r\n");
    assert_eq!(c.read(false).unwrap().status, 404);
    drop(c); // closed first: a live keep-alive connection holds the drain for a second
    let stats = stop_stats(p);
    assert_eq!(counter(&stats, "stored"), 3, "two files and the 404: {stats}");
    assert_eq!(counter(&stats, "hits"), 4, "{stats}");
    assert_eq!(
        counter(&stats, "revalidated"),
        1,
        "no-cache revalidated with nginx: {stats}"
    );
}

/// `--rcv-lowat` batches reads of an upstream that delivers in bulk, but a
/// sender that stalls mid-body does not have its bytes held: after a second
/// the batch is cut and the rest streams on as it arrives. The origin sends
/// 64 KiB blocks 1.5 s apart; held in a 128 KiB batch, the second block would
/// reach the client only with the third (3 s), cut it arrives at 1.5 s.
#[test]
fn a_stalled_read_batch_is_cut() {
    let o = Origin::start();
    let runs: Vec<_> = ["on", "off"]
        .into_iter()
        .map(|splice| {
            let url = o.url("/cl/200000?cc=no-store&slow=1500");
            std::thread::spawn(move || {
                let p = start_proxy(&["--splice", splice, "--rcv-lowat", "128KiB", "--stats-on-exit"]);
                let mut s = TcpStream::connect(p.addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                s.write_all(format!("GET {url} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
                    .unwrap();
                let start = Instant::now();
                let (mut got, mut buf) = (Vec::new(), vec![0u8; 65536]);
                let mut second_block_at = None;
                loop {
                    let n = s.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                    let head = got.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
                    if second_block_at.is_none() && head.is_some_and(|h| got.len() - h > 65536) {
                        second_block_at = Some(start.elapsed());
                    }
                }
                let head = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                assert!(got[head..] == pattern(200_000), "splice {splice}: body differs");
                let at = second_block_at.unwrap();
                assert!(
                    at < Duration::from_millis(2600),
                    "splice {splice}: second block held until {at:?}"
                );
                let stats = stop_stats(p);
                assert_eq!(counter(&stats, "read_batches_cut"), 1, "splice {splice}: {stats}");
                assert_eq!(counter(&stats, "timeouts"), 0, "splice {splice}: {stats}");
            })
        })
        .collect();
    for r in runs {
        r.join().unwrap();
    }
}
