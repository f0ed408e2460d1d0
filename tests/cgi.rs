//! `weft serve --cgi` / `--fastcgi` (issue 24): byte-exact bodies through the
//! spliced and copied paths, request bodies, keep-alive and pipelining after
//! a CGI response, and every way a program can misbehave (crash, hang,
//! malformed head, too much output), plus CGI/1.1 with a shell script.
//! The application is `weft-fcgi-app` (src/bin), so no php-fpm is needed.

use crate::common;
use crate::fcgi_app;

use common::{pattern, wait_until, Reader, Response as Resp, TempDir, Weft};
use fcgi_app::{app_bin, App};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A connection whose responses are read by their framing: Content-Length,
/// chunked, or until close.
struct Conn(Reader);

impl Conn {
    fn new(w: &Weft) -> Conn {
        Conn(Reader::new(w.connect()))
    }

    fn send(&mut self, b: &[u8]) {
        self.0.send(b);
    }

    fn response(&mut self, head_request: bool) -> Resp {
        self.0.response_any(head_request).expect("a whole response")
    }

    fn get(&mut self, path: &str) -> Resp {
        self.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        self.response(false)
    }

    fn closed(&mut self) -> bool {
        self.0.closed()
    }
}

fn get(w: &Weft, path: &str) -> Resp {
    Conn::new(w).get(path)
}

/// Four keep-alive clients, `each` requests apiece, every answer checked by
/// `check`; then weft's admin `/stats` document (the server needs
/// `--admin`) and, from its `syscalls`, the count of `call`.
fn four_clients(w: &Weft, each: usize, path: &str, check: impl Fn(&Resp) + Sync, call: &str) -> (String, u64) {
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let mut c = Conn::new(w);
                for _ in 0..each {
                    check(&c.get(path));
                }
            });
        }
    });
    let stats = common::fetch(&w.admin.expect("admin address").to_string(), "/stats");
    let syscalls = &stats[stats.find("\"syscalls\":").expect("syscall counters")..];
    let n = common::counter(syscalls, call);
    (stats, n)
}

fn serve_pool(extra: &[&str]) -> Weft {
    let route = format!("/app={}", app_bin());
    let mut args = vec!["--workers", "1", "--cgi", &route, "--cgi-workers", "2"];
    args.extend_from_slice(extra);
    Weft::serve(&args)
}

/// One worker serving a site whose `f.txt` holds "static file\n", with the
/// test application at `/app`; the site is removed when its TempDir drops.
fn serve_site_with_cgi(tag: &str) -> (TempDir, Weft) {
    let site = TempDir::new(tag);
    site.write("f.txt", b"static file\n");
    let route = format!("/app={}", app_bin());
    let root = site.path.to_str().unwrap();
    let w = Weft::serve(&[root, "--workers", "1", "--cgi", &route]);
    (site, w)
}

#[test]
fn pool_bodies_are_byte_exact() {
    for send in ["splice", "auto"] {
        pool_bodies(send);
    }
}

fn pool_bodies(send: &str) {
    let w = serve_pool(&["--cgi-send", send]);
    for size in [0usize, 1, 100, 4095, 4096, 5000, 65_536, 1 << 20] {
        let r = get(&w, &format!("/app/x?size={size}"));
        assert_eq!(r.status, 200, "size {size}");
        assert_eq!(r.header("content-length"), Some(size.to_string().as_str()));
        assert!(r.body == pattern(size), "size {size}: body differs");
        // No Content-Length: chunked, each record one chunk; small records too.
        let r = get(&w, &format!("/app/x?size={size}&nolen=1&record=3000"));
        assert_eq!((r.status, r.header("transfer-encoding")), (200, Some("chunked")));
        assert!(r.body == pattern(size), "size {size} chunked: body differs");
    }
}

#[test]
fn http10_without_length_is_close_delimited() {
    let w = serve_pool(&[]);
    let mut c = Conn::new(&w);
    c.send(b"GET /app/x?size=70000&nolen=1 HTTP/1.0\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.status, 200);
    assert!(r.header("transfer-encoding").is_none());
    assert!(r.body == pattern(70_000));
}

#[test]
fn copy_mode_and_head_requests() {
    let w = serve_pool(&["--cgi-send", "copy"]);
    for size in [10usize, 65_536, 300_000] {
        let r = get(&w, &format!("/app/x?size={size}"));
        assert!(r.body == pattern(size), "size {size}");
    }
    let mut c = Conn::new(&w);
    c.send(b"HEAD /app/x?size=100000 HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response(true);
    assert_eq!((r.status, r.header("content-length")), (200, Some("100000")));
    // The connection is still in step after the discarded body.
    assert!(c.get("/app/x?size=7").body == pattern(7));
}

#[test]
fn keep_alive_and_pipelining_after_cgi() {
    let (_site, w) = serve_site_with_cgi("cgi-site");
    let mut c = Conn::new(&w);
    c.send(
        b"GET /app/a?size=70000 HTTP/1.1\r\nHost: t\r\n\r\nGET /f.txt HTTP/1.1\r\nHost: t\r\n\r\n\
          GET /app/b?size=5&nolen=1 HTTP/1.1\r\nHost: t\r\n\r\nGET /app/c?size=200000 HTTP/1.1\r\nHost: t\r\n\r\n",
    );
    assert!(c.response(false).body == pattern(70_000));
    assert_eq!(c.response(false).body, b"static file\n");
    assert!(c.response(false).body == pattern(5));
    assert!(c.response(false).body == pattern(200_000));
    // And one more, later, on the same connection.
    assert!(c.get("/app/d?size=3").body == pattern(3));
    // Outside the prefix: a file lookup, not CGI.
    assert_eq!(c.get("/apple").status, 404);
}

#[test]
fn request_bodies_and_413() {
    let w = serve_pool(&["--cgi-max-body", "200000"]);
    let body = pattern(150_000);
    let mut c = Conn::new(&w);
    let head = format!(
        "POST /app/x?echo=1 HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    c.send(head.as_bytes());
    // The body in two parts, the second after a pause.
    c.send(&body[..1000]);
    std::thread::sleep(Duration::from_millis(50));
    c.send(&body[1000..]);
    let r = c.response(false);
    assert_eq!(r.status, 200);
    assert!(r.body == body);
    let r = c.get("/app/x?size=9");
    assert!(r.body == pattern(9));
    // Too large: refused before the application sees it. One process,
    // which counts the requests it read (`seen=1`): the refused one is not
    // among them.
    let w = serve_pool(&["--cgi-max-body", "200000", "--cgi-workers", "1"]);
    let mut a = Conn::new(&w);
    let seen = |a: &mut Conn| {
        let r = a.get("/app/x?seen=1");
        let n: u64 = String::from_utf8_lossy(&r.body).parse().unwrap();
        (r.header("x-pid").unwrap().to_string(), n)
    };
    let (pid, n) = seen(&mut a);
    let mut c = Conn::new(&w);
    c.send(b"POST /app/x?echo=1 HTTP/1.1\r\nHost: t\r\nContent-Length: 300000\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.status, 413);
    assert!(c.closed());
    assert_eq!(seen(&mut a), (pid, n + 1), "the application saw the refused request");
}

#[test]
fn crash_is_502_and_the_process_is_replaced() {
    let w = serve_pool(&["--cgi-workers", "1"]);
    let before = get(&w, "/app/x?size=1").header("x-pid").unwrap().to_string();
    let r = get(&w, "/app/x?crash=1");
    assert_eq!(r.status, 502);
    let ok = wait_until(Duration::from_secs(10), || {
        let r = get(&w, "/app/x?size=2");
        r.status == 200 && r.header("x-pid").is_some_and(|p| p != before)
    });
    assert!(ok, "no new process answered");
}

#[test]
fn hang_is_504_and_the_process_is_replaced() {
    let w = serve_pool(&["--cgi-workers", "1", "--cgi-timeout", "500ms"]);
    let before = get(&w, "/app/x?size=1").header("x-pid").unwrap().to_string();
    let mut c = Conn::new(&w);
    let r = c.get("/app/x?hang=1");
    assert_eq!(r.status, 504);
    // The connection stays usable; a new process answers.
    let r = c.get("/app/x?size=3");
    assert_eq!(r.status, 200);
    assert_ne!(r.header("x-pid").unwrap(), before);
}

#[test]
fn malformed_head_is_502_and_overlong_output_is_cut() {
    let w = serve_pool(&["--cgi-workers", "1"]);
    let mut c = Conn::new(&w);
    assert_eq!(c.get("/app/x?badhead=1").status, 502);
    let pid = c.get("/app/x?size=1").header("x-pid").unwrap().to_string();
    let r = c.get("/app/x?size=1000&over=100000");
    assert_eq!(r.status, 200);
    assert!(r.body == pattern(1000));
    // The process that overran is replaced.
    let replaced = wait_until(Duration::from_secs(10), || {
        let r = get(&w, "/app/x?size=2");
        r.status == 200 && r.header("x-pid").is_some_and(|p| p != pid)
    });
    assert!(replaced, "the process {pid} that overran still answers");
    // Nothing of the excess leaks into the next response.
    let r = c.get("/app/x?size=100000&over=7");
    assert!(r.body == pattern(100_000));
    let r = c.get("/app/x?size=5");
    assert!(r.body == pattern(5));
}

#[test]
fn fastcgi_to_an_external_application() {
    let dir = TempDir::new("cgi-ext");
    let sock = dir.path.join("app.sock");
    let _app = App(Command::new(app_bin())
        .args(["--listen", &format!("unix:{}", sock.display())])
        .stdout(Stdio::null())
        .spawn()
        .unwrap());
    assert!(wait_until(Duration::from_secs(5), || sock.exists()));
    let route = format!("/php=unix:{}", sock.display());
    let w = Weft::serve(&["--workers", "2", "--fastcgi", &route, "--admin", "127.0.0.1:0"]);
    let mut c = Conn::new(&w);
    for size in [0usize, 65_536, 1 << 20] {
        assert!(c.get(&format!("/php/i.php?size={size}")).body == pattern(size));
    }
    let r = c.get("/php/i.php/extra/path?env=1&q=1");
    let env = String::from_utf8_lossy(&r.body).into_owned();
    for want in [
        "GATEWAY_INTERFACE=CGI/1.1",
        "REQUEST_METHOD=GET",
        "SCRIPT_NAME=/php",
        "PATH_INFO=/i.php/extra/path",
        "QUERY_STRING=env=1&q=1",
        "HTTP_HOST=t",
    ] {
        assert!(env.lines().any(|l| l == want), "{want} missing in {env}");
    }
}

#[test]
fn cgi1_mode_runs_a_shell_script() {
    let dir = TempDir::new("cgi1");
    let script = dir.write(
        "env.sh",
        b"#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\n'\n\
          echo \"method=$REQUEST_METHOD query=$QUERY_STRING info=$PATH_INFO len=$CONTENT_LENGTH\"\ncat\n",
    );
    let big = dir.write(
        "big.sh",
        b"#!/bin/sh\nprintf 'Status: 201 Created\\r\\nContent-Length: 300000\\r\\n\\r\\n'\nhead -c 300000 /dev/zero\n",
    );
    for p in [&script, &big] {
        let _ = Command::new("chmod").arg("+x").arg(p).status();
    }
    let r1 = format!("/env={}", script.display());
    let r2 = format!("/big={}", big.display());
    let w = Weft::serve(&["--workers", "1", "--cgi-mode", "cgi1", "--cgi", &r1, "--cgi", &r2]);
    let mut c = Conn::new(&w);
    c.send(b"POST /env/more?a=b HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello");
    let r = c.response(false);
    assert_eq!(r.status, 200);
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        "method=POST query=a=b info=/more len=5\nhello"
    );
    let r = c.get("/big");
    assert_eq!((r.status, r.body.len()), (201, 300_000));
    assert!(r.body.iter().all(|&b| b == 0));
    let r = c.get("/env");
    assert!(String::from_utf8_lossy(&r.body).starts_with("method=GET"));
}

/// CGI/1.1 under load does not wake a level-triggered loop for descriptors
/// it has closed: a child holds a reference to every descriptor of weft's
/// from its vfork until its exec has closed them, so a closed pipe's or
/// client socket's registration outlived the close, its hang-up reported at
/// every wait until the child got the CPU (pipes: 31-40 epoll_wait calls per
/// request with four clients, where 2 do; client sockets, closed as the first
/// clients finish while the others' children start: 14-22 in 3 of 8 runs).
/// Four clients, 40 requests each; the program writes its body in one write
/// that fits the pipe, so that the wake-ups it causes do not depend on how
/// the machine schedules it (about 2.2 per request in all).
#[test]
fn cgi1_children_do_not_wake_the_loop_for_closed_descriptors() {
    let dir = TempDir::new("cgi1-load");
    let script = dir.write(
        "out.sh",
        b"#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\n'\ndd if=/dev/zero bs=60000 count=1 status=none\n",
    );
    let _ = Command::new("chmod").arg("+x").arg(&script).status();
    let route = format!("/out={}", script.display());
    let w = Weft::serve(&[
        "--workers",
        "1",
        "--event",
        "epoll",
        "--cgi-mode",
        "cgi1",
        "--cgi",
        &route,
        "--admin",
        "127.0.0.1:0",
    ]);
    let ok = |r: &Resp| assert_eq!((r.status, r.body.len()), (200, 60_000));
    let (stats, waits) = four_clients(&w, 40, "/out", ok, "epoll_wait");
    assert!(waits <= 10 * 160, "{waits} epoll_wait calls for 160 requests: {stats}");
}

#[test]
fn counters_reach_the_admin_stats() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let admin = format!("127.0.0.1:{port}");
    let w = serve_pool(&["--admin", &admin]);
    let _ = get(&w, "/app/x?size=100000");
    let _ = get(&w, "/app/x?badhead=1");
    let ok = wait_until(Duration::from_secs(5), || {
        let stats = common::fetch(&admin, "/stats");
        stats.contains("\"cgi\":{\"requests\":2") && stats.contains("\"status_502\":1")
    });
    assert!(ok, "{}", common::fetch(&admin, "/stats"));
    // The 100,000-byte body went out by splice (`--cgi-send auto`).
    let stats = common::fetch(&admin, "/stats");
    let spliced = common::counter(&stats, "bytes_spliced");
    assert!(spliced > 0 && spliced <= 100_000, "bytes_spliced {spliced}: {stats}");
}

/// A stop lets a CGI request in flight finish. While the application works,
/// the client's connection has nothing read or queued, so it looked idle:
/// the stop closed it after the drain's quiet second like an idle one, and
/// the answer (2 s later) was lost.
#[test]
fn a_stop_lets_a_cgi_request_in_flight_finish() {
    let mut w = serve_pool(&["--cgi-workers", "1", "--admin", "127.0.0.1:0"]);
    let admin = w.admin.expect("admin address").to_string();
    let mut c = Conn::new(&w);
    c.send(b"GET /app/x?wait=2000&size=5 HTTP/1.1\r\nHost: t\r\n\r\n");
    let passed = wait_until(Duration::from_secs(5), || {
        common::fetch(&admin, "/stats").contains("\"cgi\":{\"requests\":1")
    });
    assert!(passed, "the request never reached the application");
    w.terminate();
    let r = c.response(false);
    assert_eq!((r.status, r.body.as_slice()), (200, pattern(5).as_slice()));
    assert_eq!(w.wait_exit(Duration::from_secs(10)), Some(0));
}

/// A client that does not read its answer does not hold the application:
/// with one process in the pool, the next client's request is answered while
/// the first's 600,000 bytes wait in weft's pipe (1 MiB: the whole reply fits,
/// so its END_REQUEST is read and the process is free), and the slow client
/// is not taken for a hung application (no restart). Under every
/// architecture (`--arch`): each once left the application's readable event
/// unanswered and spun on it.
fn slow_client_does_not_hold_the_pool_process(arch: &str) {
    // A small send buffer keeps the reply in the pipe, not in the socket.
    let args = [
        "--arch",
        arch,
        "--cgi-workers",
        "1",
        "--cgi-timeout",
        "60s",
        "--send-buffer",
        "16384",
        "--admin",
        "127.0.0.1:0",
    ];
    let w = serve_pool(&args);
    let admin = w.admin.expect("admin address").to_string();
    let mut slow = Conn::new(&w);
    weft_io::sys::set_rcvbuf(&slow.0.stream, 16 * 1024).unwrap();
    slow.send(b"GET /app/x?size=600000 HTTP/1.1\r\nHost: t\r\n\r\n");
    // The first bytes of the answer: the application took the request.
    assert!(slow.0.fill() > 0, "{arch}");
    // Before the process was released at END_REQUEST, this waited for the
    // slow client (here past the test connection's 20 s read timeout).
    assert!(get(&w, "/app/x?size=100").body == pattern(100), "{arch}");
    // While the slow client does not read, the server sleeps. It spun on
    // the application's unanswered readable event, a whole CPU (100 ticks
    // a second) under every architecture.
    let before = common::cpu_ticks_with_children(w.child.id());
    std::thread::sleep(Duration::from_secs(1));
    let used = common::cpu_ticks_with_children(w.child.id()) - before;
    assert!(used < 20, "{arch}: {used} ticks of CPU in 1 s with nothing to do");
    let r = slow.response(false);
    assert!(r.body == pattern(600_000), "{arch}");
    // Both requests counted (MT and MP publish theirs at most 250 ms late),
    // and the slow one was not taken for a hung application.
    let total = |stats: &str| stats.split("\"total\":").nth(1).unwrap_or("").to_string();
    let mut stats = String::new();
    let counted = common::wait_until(Duration::from_secs(5), || {
        stats = total(&common::fetch(&admin, "/stats"));
        stats.contains("\"requests\":") && common::counter(&stats, "requests") >= 2
    });
    assert!(counted, "{arch}: {stats}");
    assert_eq!(common::counter(&stats, "restarts"), 0, "{arch}: {stats}");
}

/// A client that never reads a whole, queued reply is cut at
/// `--send-timeout`, as for a file: under MT and MP the thread waited for
/// it in slices with no end.
fn a_client_that_never_reads_is_cut_at_the_send_timeout(arch: &str) {
    let args = [
        "--arch",
        arch,
        "--cgi-workers",
        "1",
        "--send-buffer",
        "16384",
        "--send-timeout",
        "1s",
    ];
    let w = serve_pool(&args);
    let mut stuck = w.connect();
    weft_io::sys::set_rcvbuf(&stuck, 16 * 1024).unwrap();
    std::io::Write::write_all(&mut stuck, b"GET /app/x?size=600000 HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let mut got = Vec::new();
    let _ = std::io::Read::read_to_end(&mut stuck, &mut got);
    assert!(
        got.len() < 600_000,
        "{arch}: the whole answer waited {} bytes",
        got.len()
    );
}

#[test]
fn a_client_that_never_reads_is_cut_mt() {
    a_client_that_never_reads_is_cut_at_the_send_timeout("mt");
}

#[test]
fn a_client_that_never_reads_is_cut_mp() {
    a_client_that_never_reads_is_cut_at_the_send_timeout("mp");
}

#[test]
fn a_client_that_never_reads_is_cut_amped() {
    a_client_that_never_reads_is_cut_at_the_send_timeout("amped");
}

#[test]
fn a_slow_client_does_not_hold_the_pool_process_amped() {
    slow_client_does_not_hold_the_pool_process("amped");
}

#[test]
fn a_slow_client_does_not_hold_the_pool_process_mt() {
    slow_client_does_not_hold_the_pool_process("mt");
}

#[test]
fn a_slow_client_does_not_hold_the_pool_process_mp() {
    slow_client_does_not_hold_the_pool_process("mp");
}

/// A client that does not read a reply larger than weft queues (3 MB over
/// TCP; weft queues 1 MiB) costs no CPU: the pipe fills by its slots (a TCP
/// segment takes one each) before its bytes, and weft took that full pipe
/// for an empty socket, kept listening to the application and spun.
#[test]
fn a_slow_client_of_a_large_reply_costs_no_cpu() {
    let (_app, addr) = fcgi_app::on_tcp();
    let route = format!("/t={addr}");
    let w = Weft::serve(&["--workers", "1", "--send-buffer", "16384", "--fastcgi", &route]);
    let mut slow = Conn::new(&w);
    weft_io::sys::set_rcvbuf(&slow.0.stream, 16 * 1024).unwrap();
    slow.send(b"GET /t?size=3000000 HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(slow.0.fill() > 0);
    let before = common::cpu_ticks_with_children(w.child.id());
    std::thread::sleep(Duration::from_secs(1));
    let used = common::cpu_ticks_with_children(w.child.id()) - before;
    assert!(used < 20, "{used} ticks of CPU in 1 s with nothing to do");
    assert!(slow.response(false).body == pattern(3_000_000));
}

#[test]
fn fastcgi_over_tcp_and_a_slow_client() {
    let (_app, addr) = fcgi_app::on_tcp();
    let route = format!("/t={addr}");
    let w = Weft::serve(&["--workers", "1", "--fastcgi", &route]);
    let mut c = Conn::new(&w);
    assert!(c.get("/t?size=12345").body == pattern(12_345));
    // A client that reads 4 MiB slowly: weft holds back, then delivers it all.
    c.send(b"GET /t?size=4194304 HTTP/1.1\r\nHost: t\r\n\r\n");
    std::thread::sleep(Duration::from_millis(300));
    let r = c.response(false);
    assert!(r.body == pattern(4 << 20));
    assert!(c.get("/t?size=1").body == pattern(1));
}

#[test]
fn local_redirect_is_served_by_the_server() {
    let (_site, w) = serve_site_with_cgi("cgi-redirect");
    let mut c = Conn::new(&w);
    // RFC 3875 §6.2.2: `Location: /path` without Status is answered with
    // that path, not sent to the client.
    let r = c.get("/app/x?local=/f.txt");
    assert_eq!((r.status, r.header("location")), (200, None));
    assert_eq!(r.body, b"static file\n");
    // To another CGI path; the connection stays in step.
    let r = c.get("/app/x?local=/app/y?size=5000");
    assert_eq!(r.status, 200);
    assert!(r.body == pattern(5000));
    // Pipelined behind a redirect.
    c.send(b"GET /app/x?local=/f.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /app/z?size=7 HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).body, b"static file\n");
    assert!(c.response(false).body == pattern(7));
    // A HEAD stays a HEAD.
    c.send(b"HEAD /app/x?local=/f.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response(true);
    assert_eq!((r.status, r.header("content-length")), (200, Some("12")));
    // A redirect to itself ends, bounded, in a 500.
    assert_eq!(c.get("/app/x?loop=1").status, 500);
    assert!(c.get("/app/y?size=3").body == pattern(3));
    // An absolute URL is a client redirect: 302 with its Location.
    let r = c.get("/app/x?local=http://example.com/");
    assert_eq!((r.status, r.header("location")), (302, Some("http://example.com/")));
}

#[test]
fn cgi_requests_are_in_the_access_log() {
    let dir = TempDir::new("cgi-log");
    let log = dir.path.join("access.log");
    let log_arg = log.to_str().unwrap();
    let w = serve_pool(&[
        "--cgi-workers",
        "1",
        "--access-log",
        log_arg,
        "--access-log-format",
        "json",
    ]);
    let mut c = Conn::new(&w);
    assert_eq!(c.get("/app/x?size=70000").status, 200);
    assert_eq!(c.get("/app/x?badhead=1").status, 502);
    let r = c.get("/app/x?size=10&nolen=1");
    assert_eq!(r.status, 200);
    let mut text = String::new();
    let ok = wait_until(Duration::from_secs(5), || {
        text = std::fs::read_to_string(&log).unwrap_or_default();
        text.lines().count() >= 3
    });
    assert!(ok, "log: {text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].contains("\"request\":\"GET /app/x?size=70000 HTTP/1.1\""),
        "{}",
        lines[0]
    );
    // Bytes: the body's, without the head, as for a static file (Combined
    // Log Format's and nginx's `$body_bytes_sent`).
    let bytes = |line: &str| -> u64 {
        let field = line.split("\"bytes\":").nth(1).unwrap_or_else(|| panic!("{line}"));
        field.split(',').next().unwrap().parse().unwrap()
    };
    assert!(lines[0].contains("\"status\":200"), "{}", lines[0]);
    assert_eq!(bytes(lines[0]), 70_000, "{}", lines[0]);
    assert!(lines[0].contains("\"request_time\":"), "{}", lines[0]);
    // weft's own 502: its short text body.
    assert!(lines[1].contains("\"status\":502"), "{}", lines[1]);
    let why = "502 Bad Gateway: the CGI program's answer was unusable\n";
    assert_eq!(bytes(lines[1]), why.len() as u64, "{}", lines[1]);
    // Chunked: the chunk framing is counted, as nginx counts it
    // ("a\r\n" + 10 bytes + "\r\n" + "0\r\n\r\n").
    assert!(lines[2].contains("\"status\":200"), "{}", lines[2]);
    assert_eq!(bytes(lines[2]), 3 + 10 + 2 + 5, "{}", lines[2]);
}

mod scenarios {
    use super::*;

    /// Connections to a FastCGI application are kept from request to request
    /// under `event`: a readable event on an idle one that finds nothing to
    /// read (uring can post a poll's completion for bytes the exchange has
    /// since read) is not taken for a close. Four keep-alive clients, 150
    /// requests of 64 KiB each: never more than four requests at the
    /// application at once, so never more than four connections to it.
    /// And the loop does not spin on them: under `tracked` an application
    /// connection whose EAGAIN went unreported was handed out again at every
    /// pass of the readiness table (18.7 reads per request, against 3 under
    /// epoll).
    pub fn application_connections_are_kept(event: &str) {
        let (_app, addr) = fcgi_app::on_tcp();
        let route = format!("/t={addr}");
        let w = Weft::serve(&[
            "--workers",
            "1",
            "--event",
            event,
            "--fastcgi",
            &route,
            "--admin",
            "127.0.0.1:0",
        ]);
        let ok = |r: &Resp| assert!(r.body == pattern(65_536), "{event}");
        let (stats, reads) = four_clients(&w, 150, "/t?size=65536", ok, "read");
        let cgi = &stats[stats.find("\"cgi\":").expect("cgi counters")..];
        assert_eq!(common::counter(cgi, "requests"), 600, "{event}: {stats}");
        let connects = common::counter(cgi, "connects");
        assert!(
            connects <= 4,
            "{event}: {connects} connections for 600 requests from 4 clients: {stats}"
        );
        assert!(reads <= 8 * 600, "{event}: {reads} reads for 600 requests: {stats}");
    }
}

common::per_backend!(application_connections_are_kept);
