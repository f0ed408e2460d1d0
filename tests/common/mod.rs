//! Test support: start the real `weft` binary on port 0 and talk to it over
//! raw sockets, byte for byte.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Path to the weft binary under test.
pub fn weft_bin() -> &'static str {
    env!("CARGO_BIN_EXE_weft")
}

/// A scratch directory removed on drop.
pub struct TempDir {
    pub path: PathBuf,
}

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "weft-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir { path }
    }

    pub fn write(&self, rel: &str, data: &[u8]) -> PathBuf {
        let p = self.path.join(rel);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(&p, data).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Deterministic test content (shared with `weft-fcgi-app`).
pub use weft_load::content::sized_pattern as pattern;

/// A running `weft` process, stopped (SIGKILL) on drop if still alive.
pub struct Weft {
    pub child: Child,
    pub addr: SocketAddr,
    /// The admin endpoint's address, when started with `--admin`.
    pub admin: Option<SocketAddr>,
    stderr_path: PathBuf,
    _log_dir: TempDir,
    /// After [`Weft::kill_keeping_port`]: its port, held closed until drop.
    port_hold: Option<ClosedPort>,
}

impl Weft {
    /// Start `weft serve <args> --listen 127.0.0.1:0` and wait for its address.
    pub fn serve(args: &[&str]) -> Weft {
        Weft::role("serve", args)
    }

    /// Start `weft <args>`; the process must print `listening on ADDR`.
    pub fn start(args: &[&str]) -> Weft {
        Weft::start_program(weft_bin(), args)
    }

    /// Start `weft <role> --listen 127.0.0.1:0 <args>` and wait for its address.
    pub fn role(role: &str, args: &[&str]) -> Weft {
        let mut full = vec![role, "--listen", "127.0.0.1:0"];
        full.extend_from_slice(args);
        Weft::start(&full)
    }

    /// Start `program <args>` (weft under a wrapper: `chroot ROOT
    /// /usr/bin/weft serve ...`); as [`Weft::start`].
    pub fn start_program(program: &str, args: &[&str]) -> Weft {
        let log_dir = TempDir::new("stderr");
        let stderr_path = log_dir.path.join("stderr.txt");
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start weft");
        let stdout = child.stdout.take().unwrap();
        // From here on the guard owns the child: any panic kills and reaps it.
        let mut w = Weft {
            child,
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            admin: None,
            stderr_path,
            _log_dir: log_dir,
            port_hold: None,
        };
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            line.clear();
            let n = reader.read_line(&mut line).unwrap_or(0);
            if n == 0 {
                let _ = w.child.wait();
                panic!("weft exited before listening: {}", w.stderr());
            }
            if let Some(a) = line.trim().strip_prefix("admin on ") {
                w.admin = Some(a.parse().expect("admin address"));
            }
            if let Some(a) = line.trim().strip_prefix("listening on ") {
                w.addr = a.parse().expect("address");
            }
            // With `--admin`, its line follows the listening one.
            if w.addr.port() != 0 && (w.admin.is_some() || !args.contains(&"--admin")) {
                // Keep draining stdout so the child never blocks on a full pipe.
                std::thread::spawn(move || {
                    let mut sink = Vec::new();
                    let _ = reader.read_to_end(&mut sink);
                });
                return w;
            }
            assert!(Instant::now() < deadline, "weft did not report its address");
        }
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Kill the process (SIGKILL) and reap it, keeping its port closed
    /// until this guard is dropped: a test that kills a server while
    /// something still connects to it (a front's health checks, a proxy's
    /// retries) must not reach another test's server that bound the freed
    /// port with bind(0) meanwhile. That happened: an idle MT server beside
    /// the suite counted 28 wake-ups in a second, the ten health checks a
    /// second of a front whose killed back-end's port it had been given.
    pub fn kill_keeping_port(&mut self) {
        // Bound while the process still listens (weft turns SO_REUSEPORT
        // on once it holds its port), so the port is never free between the
        // kill and the hold.
        self.port_hold = Some(ClosedPort::on(self.addr));
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Send SIGTERM.
    pub fn terminate(&self) {
        self.signal("TERM");
    }

    /// Send the signal `name` (`HUP`, `USR1`...); panics if `kill` fails.
    pub fn signal(&self, name: &str) {
        let sent = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{name}");
    }

    /// Wait for exit up to `limit`; returns the exit code (None if killed or still running).
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        wait_child_exit(&mut self.child, limit)
    }
}

/// Wait up to `limit` for `child` to exit; its exit code (None if killed
/// by a signal or still running).
pub fn wait_child_exit(child: &mut std::process::Child, limit: Duration) -> Option<i32> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code();
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Weft {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP port held closed: a socket bound to it that never listens.
/// Connections to it are refused, as to a port nobody holds, and no other
/// process's bind to port 0 is given it while the guard lives (a port
/// merely freed can be, within milliseconds, to another test of the suite,
/// which would then answer what was meant to be refused).
pub struct ClosedPort {
    pub addr: SocketAddr,
    _socket: weft_io::sys::Fd,
}

impl ClosedPort {
    /// A fresh port on 127.0.0.1, held closed.
    pub fn new() -> ClosedPort {
        ClosedPort::on(SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// `addr` held closed; SO_REUSEPORT lets the socket bind beside a weft
    /// that still listens there (every weft turns it on once it holds its
    /// port), and bind(0) never shares a port with a bound socket.
    pub fn on(addr: SocketAddr) -> ClosedPort {
        use weft_io::sys;
        let socket = sys::tcp_socket(&addr).expect("socket");
        sys::set_reuseport(&socket, true).expect("SO_REUSEPORT");
        sys::bind(&socket, &addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        let addr = sys::local_addr(&socket).expect("getsockname");
        ClosedPort { addr, _socket: socket }
    }
}

/// A parsed response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The body was ended by the connection closing ([`Reader::response_any`]).
    pub close_delimited: bool,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The event backends every build has (`--event NAME`), in `weft backends` order.
pub const BACKENDS: [&str; 10] = [
    "select",
    "poll",
    "epoll",
    "epoll-et",
    "epoll-once",
    "epoll-batched",
    "uring",
    "tracked",
    "tracked:epoll-et",
    "tracked:select",
];

/// Status and fields of an HTTP/1.1 response head (through its blank line).
pub fn parse_head(head: &[u8]) -> (u16, Vec<(String, String)>) {
    let head = String::from_utf8_lossy(head);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    assert!(status_line.starts_with("HTTP/1.1 "), "status line {status_line:?}");
    let status: u16 = status_line[9..12].parse().unwrap();
    let headers = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.trim().to_string(), v.trim().to_string())
        })
        .collect();
    (status, headers)
}

/// Reads responses from a stream, keeping leftover bytes between calls.
pub struct Reader {
    pub stream: TcpStream,
    pub buf: Vec<u8>,
    /// A read ended in ECONNRESET ([`Reader::fill`] reports it as the end of
    /// stream): the peer's kernel reset the connection, which may have
    /// discarded bytes it had not sent yet.
    pub reset: bool,
}

/// Why [`Reader::response_any`] has no response.
#[derive(Debug)]
pub enum ReadErr {
    /// The connection closed (or reset) before the response was complete.
    Truncated,
}

impl Reader {
    pub fn new(stream: TcpStream) -> Reader {
        Reader {
            stream,
            buf: Vec::new(),
            reset: false,
        }
    }

    pub fn send(&mut self, data: &[u8]) {
        self.stream.write_all(data).unwrap();
    }

    /// Read what is there into the buffer; 0 at EOF or reset (`reset` tells).
    pub fn fill(&mut self) -> usize {
        let mut tmp = [0u8; 65536];
        match self.stream.read(&mut tmp) {
            Ok(n) => {
                self.buf.extend_from_slice(&tmp[..n]);
                n
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                self.reset = true;
                0
            }
            Err(e) => panic!("read: {e}"),
        }
    }

    /// Fill until the buffer holds `n` bytes.
    fn need(&mut self, n: usize) -> Result<(), ReadErr> {
        while self.buf.len() < n {
            if self.fill() == 0 {
                return Err(ReadErr::Truncated);
            }
        }
        Ok(())
    }

    /// The next CRLF-ended line, taken from the buffer.
    fn line(&mut self) -> Result<String, ReadErr> {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let l = String::from_utf8_lossy(&self.buf[..i]).into_owned();
                self.buf.drain(..i + 2);
                return Ok(l);
            }
            if self.fill() == 0 {
                return Err(ReadErr::Truncated);
            }
        }
    }

    /// A response head; whether a body follows it.
    fn head(&mut self, head_request: bool) -> Result<(Response, bool), ReadErr> {
        let head_end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if self.fill() == 0 {
                return Err(ReadErr::Truncated);
            }
        };
        let (status, headers) = parse_head(&self.buf[..head_end]);
        self.buf.drain(..head_end);
        let no_body = head_request || status == 204 || status == 304 || (100..200).contains(&status);
        let r = Response {
            status,
            headers,
            body: Vec::new(),
            close_delimited: false,
        };
        Ok((r, !no_body))
    }

    /// Read one response with a Content-Length body (weft's own answers
    /// always have one). `head_request`: no body follows.
    pub fn response(&mut self, head_request: bool) -> Response {
        let (mut r, body) = self.head(head_request).unwrap_or_else(|_| {
            panic!(
                "connection closed before a full response head: {:?}",
                String::from_utf8_lossy(&self.buf)
            )
        });
        if body {
            let len: usize = r
                .header("content-length")
                .expect("weft always sends Content-Length")
                .parse()
                .unwrap();
            if self.need(len).is_err() {
                panic!("connection closed after {} of {len} body bytes", self.buf.len());
            }
            r.body = self.buf.drain(..len).collect();
        }
        r
    }

    /// Read one response whatever its framing: Content-Length, chunked (no
    /// trailers expected), or until the connection closes.
    pub fn response_any(&mut self, head_request: bool) -> Result<Response, ReadErr> {
        let (mut r, body) = self.head(head_request)?;
        if !body {
            return Ok(r);
        }
        if let Some(len) = r.header("content-length") {
            let len: usize = len.parse().unwrap();
            self.need(len)?;
            r.body = self.buf.drain(..len).collect();
        } else if r
            .header("transfer-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
        {
            loop {
                let size_line = self.line()?;
                let size = usize::from_str_radix(size_line.split(';').next().unwrap().trim(), 16).unwrap();
                if size == 0 {
                    assert_eq!(self.line()?, "", "trailers are not expected in these tests");
                    break;
                }
                self.need(size + 2)?;
                r.body.extend(self.buf.drain(..size));
                assert_eq!(self.buf.drain(..2).as_slice(), b"\r\n");
            }
        } else {
            while self.fill() > 0 {}
            r.body = std::mem::take(&mut self.buf);
            r.close_delimited = true;
        }
        Ok(r)
    }

    /// True when the peer closed (EOF, or reset) within the read timeout, with no more bytes.
    pub fn closed(&mut self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        let mut tmp = [0u8; 4096];
        loop {
            match self.stream.read(&mut tmp) {
                Ok(0) => return true,
                Ok(_) => return false,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
        }
    }
}

/// One request on a fresh connection; returns the response.
pub fn get(w: &Weft, path: &str) -> Response {
    let mut r = Reader::new(w.connect());
    r.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
    r.response(false)
}

/// Send raw bytes on a fresh connection; returns the response and whether the
/// server closed the connection afterwards.
pub fn raw(w: &Weft, request: &[u8]) -> (Response, bool) {
    let (mut r, resp) = ask(w.addr, request, false);
    // A response that announces the close gets 5 s for it; one that does
    // not is expected to stay open, and a server that closes anyway does so
    // right after its write, so a second shows it without every such call
    // waiting out the full timeout.
    if resp.header("connection") != Some("close") {
        r.stream.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    }
    let closed = r.closed();
    (resp, closed)
}

/// The body of a response that a stop overtakes: reads the first 1,000
/// bytes of the answer to the request already sent on `s` (so the response
/// is surely in flight), calls `stop`, then reads to the end of the stream
/// (20 s at most); returns what follows the head.
pub fn body_across_stop(s: &mut TcpStream, stop: impl FnOnce()) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut all = vec![0u8; 1000];
    s.read_exact(&mut all).unwrap();
    stop();
    std::thread::sleep(Duration::from_millis(200));
    s.read_to_end(&mut all).unwrap();
    let head_end = all.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head") + 4;
    all.split_off(head_end)
}

/// One request (raw bytes) on a fresh connection; its response, without
/// waiting to see whether the server closes ([`raw`] does).
pub fn raw_response(w: &Weft, request: &[u8]) -> Response {
    ask(w.addr, request, false).1
}

/// `request` on a fresh connection to `addr` (reads time out after 5 s):
/// the connection and its response, read as the answer to a HEAD when
/// `head`.
pub fn ask(addr: std::net::SocketAddr, request: &[u8], head: bool) -> (Reader, Response) {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_nodelay(true).unwrap();
    let mut r = Reader::new(s);
    r.send(request);
    let resp = r.response(head);
    (r, resp)
}

/// A document root with the files most tests use.
pub fn site() -> TempDir {
    let d = TempDir::new("site");
    d.write("index.html", b"<h1>home</h1>\n");
    d.write("hello.txt", b"hello, weft\n");
    d.write("one.bin", b"x");
    d.write("empty.bin", b"");
    d.write("sub/index.html", b"<p>sub</p>\n");
    d.write("sub/page.css", b"body{}\n");
    d.write("noindex/a.txt", b"a\n");
    d.write("noindex/b <odd>.txt", b"b\n");
    d.write("big.bin", &pattern(3 * 1024 * 1024 + 17));
    d
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Send `data` and a FIN in the same segment (TCP_CORK holds the data until
/// shutdown(SHUT_WR) puts the FIN on it), so the server sees both in one
/// readiness event: the case an edge-triggered backend reports only once.
pub fn send_with_fin(stream: &mut TcpStream, data: &[u8]) {
    use std::os::fd::AsRawFd;
    weft_io::sys::set_cork(stream.as_raw_fd(), true).expect("TCP_CORK");
    stream.write_all(data).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
}

/// `scenario_tests!(module, arg, a, b)` defines `mod module { #[test] fn a() }`
/// and so on, each calling `super::scenarios::a(arg)`: one row of the
/// matrices `per_backend!` (event backends) and the test files' `per_arch!`
/// (architectures) spell out.
#[allow(unused_macros)]
macro_rules! scenario_tests {
    ($module:ident, $arg:expr, $($scenario:ident),*) => {
        mod $module {
            $(
                #[test]
                fn $scenario() {
                    super::scenarios::$scenario($arg);
                }
            )*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use scenario_tests;

/// Run each listed scenario under every event backend (`weft backends` lists
/// them): `per_backend!(a, b)` defines `mod epoll { #[test] fn a() }` and so on,
/// each calling `scenarios::a("epoll")`. `per_backend!(untracked: a, b)`
/// leaves out the `tracked` backends (every role takes them now; kept for
/// scenarios about a mechanism the tracker wraps anyway).
#[allow(unused_macros)]
macro_rules! per_backend {
    (untracked: $($scenario:ident),* $(,)?) => {
        $crate::common::scenario_tests!(select, "select", $($scenario),*);
        $crate::common::scenario_tests!(poll, "poll", $($scenario),*);
        $crate::common::scenario_tests!(epoll, "epoll", $($scenario),*);
        $crate::common::scenario_tests!(epoll_et, "epoll-et", $($scenario),*);
        $crate::common::scenario_tests!(epoll_once, "epoll-once", $($scenario),*);
        $crate::common::scenario_tests!(epoll_batched, "epoll-batched", $($scenario),*);
        $crate::common::scenario_tests!(uring, "uring", $($scenario),*);
    };
    ($($scenario:ident),* $(,)?) => {
        $crate::common::per_backend!(untracked: $($scenario),*);
        $crate::common::scenario_tests!(tracked, "tracked", $($scenario),*);
        $crate::common::scenario_tests!(tracked_epoll_et, "tracked:epoll-et", $($scenario),*);
        $crate::common::scenario_tests!(tracked_select, "tracked:select", $($scenario),*);
    };
}
#[allow(unused_imports)]
pub(crate) use per_backend;

// ---------------------------------------------------------------------------
// Cluster front-end tests (tests/front.rs, tests/handoff.rs): back-ends that
// write their index into every body.

/// The flags every test front-end starts with: two workers under `event`,
/// on a port of its own choosing, and its admin endpoint on another (read
/// back as `Weft::admin`). The caller adds its back-ends and the rest.
pub fn front_args(event: &str) -> Vec<&str> {
    vec![
        "front",
        "--listen",
        "127.0.0.1:0",
        "--admin",
        "127.0.0.1:0",
        "--event",
        event,
        "--workers",
        "2",
    ]
}

/// `GET path` on a persistent connection, as a client of the cluster.
pub fn get_on(r: &mut Reader, path: &str) -> Response {
    r.send(format!("GET {path} HTTP/1.1\r\nHost: cluster\r\n\r\n").as_bytes());
    r.response(false)
}

/// Which back-end wrote a target's body (its second word).
pub fn who(body: &[u8]) -> usize {
    let s = String::from_utf8_lossy(body);
    s.split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("body {s:?}"))
}

/// The body back-end `b` serves for target `k` (`/tK.txt`).
pub fn target_body(b: usize, k: usize) -> Vec<u8> {
    format!("backend {b} target {k}\n").into_bytes()
}

/// `GET /tK.txt` on `r`, answered whole by back-end `b`.
pub fn get_from(r: &mut Reader, k: usize, b: usize) {
    assert_eq!(get_on(r, &format!("/t{k}.txt")).body, target_body(b, k), "target {k}");
}

/// `GET /tK.txt` on `r`: answered whole (`backend B target K`) by back-end B,
/// the one that answered target K before if any (`owner`, set on first
/// use: placement by target does not move a target at light load). B.
pub fn get_target(r: &mut Reader, k: usize, owner: &mut Option<usize>, round: usize) -> usize {
    let resp = get_on(r, &format!("/t{k}.txt"));
    assert_eq!(resp.status, 200, "round {round} target {k}");
    let b = who(&resp.body);
    assert_eq!(resp.body, target_body(b, k));
    match *owner {
        None => *owner = Some(b),
        Some(o) => assert_eq!(o, b, "target {k} moved at light load"),
    }
    b
}

/// The children of `pid` (MP's serving processes, a CGI pool's), sorted.
#[allow(dead_code)]
pub fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        out.extend(text.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
    }
    out.sort_unstable();
    out
}

/// Sockets process `pid` holds open (its descriptors that are sockets).
#[allow(dead_code)]
pub fn open_sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:")))
        .count()
}

/// CPU time of process `pid` and its children, in /proc's ticks (USER_HZ,
/// 100 a second): utime + stime.
#[allow(dead_code)]
pub fn cpu_ticks_with_children(pid: u32) -> u64 {
    let ticks = |p: u32| -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        // Fields after the command name (in parentheses): utime and stime
        // are the 12th and 13th.
        let rest: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
        rest.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
            + rest.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
    };
    ticks(pid) + children(pid).into_iter().map(ticks).sum::<u64>()
}

/// A test server on a free loopback port: every accepted connection is
/// handed to `serve` on a thread of its own. The accept loop lives as long
/// as the test process.
pub fn tcp_server<F>(serve: F) -> SocketAddr
where
    F: Fn(TcpStream) + Send + Sync + 'static,
{
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let serve = std::sync::Arc::new(serve);
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            let serve = serve.clone();
            std::thread::spawn(move || serve(s));
        }
    });
    addr
}

/// Does this test run as root (for mounts and privilege drops)?
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
}

/// `GET path` with Connection: close on a fresh connection; the whole reply.
pub fn fetch(addr: &str, path: &str) -> String {
    exchange_until_close(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n"),
    )
}

/// Send `request` on a fresh connection to `addr`; all the server sends
/// until it closes (or 10 s pass without a byte).
pub fn exchange_until_close(addr: &str, request: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// Poll `f` every 10 ms until it holds or `limit` passes.
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Stop a role with SIGTERM and return its `--stats-on-exit` JSON total.
pub fn stop_stats(mut p: Weft) -> String {
    p.terminate();
    assert_eq!(p.wait_exit(Duration::from_secs(15)), Some(0), "{}", p.stderr());
    let err = p.stderr();
    err.lines()
        .find(|l| l.starts_with("{\"total\""))
        .unwrap_or_else(|| panic!("no stats in: {err}"))
        .to_string()
}

/// `weft proxy --collapse` in front of `upstream`: two workers, the `event`
/// backend, an admin endpoint and counters at exit, and `extra` flags.
pub fn collapsing_proxy(upstream: &str, event: &str, extra: &[&str]) -> Weft {
    let mut args = vec![
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "2",
        "--event",
        event,
        "--upstream",
        upstream,
        "--admin",
        "127.0.0.1:0",
        "--stats-on-exit",
        "--collapse",
    ];
    args.extend_from_slice(extra);
    Weft::start(&args)
}

/// A counter of a running role, summed over its workers (from its admin
/// endpoint's `/stats`, whose document lists each worker first).
pub fn admin_total(w: &Weft, name: &str) -> u64 {
    let doc = fetch(&w.admin.expect("admin").to_string(), "/stats");
    let total = doc
        .find("\"total\":")
        .unwrap_or_else(|| panic!("no \"total\" in /stats: {doc:?}"));
    counter(&doc[total..], name)
}

/// A number-valued key of a JSON text (the first one of that name).
pub fn counter(json: &str, name: &str) -> u64 {
    let key = format!("\"{name}\":");
    let i = json.find(&key).unwrap_or_else(|| panic!("{name} not in {json}")) + key.len();
    json[i..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// The next request head read from `s` (as text, with its blank line),
/// `buf` keeping whatever came behind it; None at the end of the stream.
/// For the scripted upstreams of the tests.
pub fn next_head(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    let mut chunk = [0u8; 16384];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    buf.drain(..end);
    Some(head)
}

/// A WebSocket-style upstream for the upgrade tests: a request head with
/// `Upgrade: websocket` gets `101` (with `hello` behind it), then every byte
/// after the head is echoed until the client half-closes; `GET /decline`
/// with it gets a plain `200 plain`; a request without it `426 nope`. Every
/// request head received is kept in `heads`.
pub fn websocket_upstream(heads: std::sync::Arc<std::sync::Mutex<Vec<String>>>) -> SocketAddr {
    tcp_server(move |mut s| {
        let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
        let mut buf = Vec::new();
        loop {
            let Some(head) = next_head(&mut s, &mut buf) else {
                return;
            };
            heads.lock().unwrap().push(head.clone());
            if !head.to_ascii_lowercase().contains("\r\nupgrade: websocket\r\n") {
                let _ = s.write_all(b"HTTP/1.1 426 Upgrade Required\r\nContent-Length: 4\r\n\r\nnope");
                continue;
            }
            if head.starts_with("GET /decline ") {
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nplain");
                continue;
            }
            let _ = s.write_all(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                  Sec-WebSocket-Accept: a\r\n\r\nhello",
            );
            let _ = s.write_all(&buf);
            let mut r = s.try_clone().unwrap();
            let _ = std::io::copy(&mut r, &mut s);
            let _ = s.shutdown(std::net::Shutdown::Write);
            return;
        }
    })
}

/// A WebSocket-style upgrade request for `path`.
pub fn upgrade_request(path: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Key: k\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
}

/// Send an upgrade for `/chat` with `early` behind it on `r`, expect the
/// 101, then push `big` through the tunnel and half-close: the bytes back
/// must be `hello`, `early` and `big`, in order and whole.
pub fn upgrade_and_echo(r: &mut Reader, early: &[u8], big: &[u8], what: &str) {
    let mut req = upgrade_request("/chat").into_bytes();
    req.extend_from_slice(early);
    r.send(&req);
    let resp = r.response_any(true).unwrap();
    assert_eq!(resp.status, 101, "{what}");
    assert_eq!(resp.header("upgrade"), Some("websocket"), "{what}");
    assert!(
        resp.header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("upgrade")),
        "{what}"
    );
    assert_eq!(resp.header("sec-websocket-accept"), Some("a"), "{what}");
    let writer = {
        let mut s = r.stream.try_clone().unwrap();
        let big = big.to_vec();
        std::thread::spawn(move || {
            s.write_all(&big).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
        })
    };
    let mut got = std::mem::take(&mut r.buf);
    r.stream.read_to_end(&mut got).unwrap();
    writer.join().unwrap();
    let mut want = b"hello".to_vec();
    want.extend_from_slice(early);
    want.extend_from_slice(big);
    assert_eq!(got.len(), want.len(), "{what}");
    assert!(got == want, "tunnel bytes differ ({what})");
}
