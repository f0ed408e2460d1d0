//! The four architectures of `weft serve --arch` (issue 24, thesis 004 §4.2)
//! on the cases `tests/flash.rs` does not cover: CGI and FastCGI requests
//! (with a local redirect, an error and keep-alive after them) on every
//! architecture (`per_arch!`), and MP's supervision: a serving process that
//! dies is started again, `/stats` lists the processes and sums them, a
//! connection queued on the processes' shared listener outlives them, and a
//! process whose server was killed ends even while it holds a connection.
//! A stop drains MT's threads and MP's processes and counts every request.

use crate::common;
use crate::fcgi_app;

use common::*;
use fcgi_app::app_bin;
use std::time::Duration;

/// `per_arch!(a, b)` defines `mod amped { #[test] fn a() ... }` and so on.
macro_rules! per_arch {
    ($($scenario:ident),* $(,)?) => {
        scenario_tests!(amped, &["--arch", "amped"], $($scenario),*);
        scenario_tests!(sped, &["--arch", "sped"], $($scenario),*);
        scenario_tests!(mt, &["--arch", "mt", "--pool", "4"], $($scenario),*);
        scenario_tests!(mp, &["--arch", "mp", "--pool", "2"], $($scenario),*);
    };
}

mod scenarios {
    use super::*;

    fn site() -> TempDir {
        let d = TempDir::new("arch-cgi");
        d.write("f.txt", b"static file\n");
        d
    }

    /// Byte-exact CGI bodies through the supervised pool, a local redirect
    /// to a file, a 502, and static files between them on one connection.
    pub fn cgi_pool(arch: &[&str]) {
        let site = site();
        let route = format!("/app={}", app_bin());
        let args = [path_str(&site.path), "--workers", "1", "--cgi", &route];
        let w = Weft::serve(&[&args[..], arch].concat());
        let mut r = Reader::new(w.connect());
        for size in [0usize, 5000, 65_536, 300_000] {
            let resp = get_on(&mut r, &format!("/app/x?size={size}"));
            assert_eq!(resp.status, 200, "size {size}");
            assert!(resp.body == pattern(size), "size {size}: body differs");
        }
        assert_eq!(get_on(&mut r, "/f.txt").body, b"static file\n");
        assert_eq!(get_on(&mut r, "/app/x?local=/f.txt").body, b"static file\n");
        assert_eq!(get_on(&mut r, "/app/x?badhead=1").status, 502);
        // Pipelined: a CGI reply, then a file, then CGI again.
        r.send(b"GET /app/a?size=70000 HTTP/1.1\r\nHost: t\r\n\r\nGET /f.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /app/b?size=9 HTTP/1.1\r\nHost: t\r\n\r\n");
        assert!(r.response(false).body == pattern(70_000));
        assert_eq!(r.response(false).body, b"static file\n");
        assert!(r.response(false).body == pattern(9));
    }

    /// An external FastCGI application over TCP.
    pub fn fastcgi_tcp(arch: &[&str]) {
        let (_app, addr) = fcgi_app::on_tcp();
        let route = format!("/t={addr}");
        let w = Weft::serve(&[&["--workers", "1", "--fastcgi", &route][..], arch].concat());
        for size in [1usize, 65_536, 1 << 20] {
            let resp = get(&w, &format!("/t?size={size}"));
            assert!(resp.body == pattern(size), "size {size}");
        }
    }
}

per_arch!(cgi_pool, fastcgi_tcp);

fn total_requests(stats: &str) -> u64 {
    let total = stats.split("\"total\":").nth(1).unwrap_or("");
    total
        .split("\"requests\":")
        .nth(1)
        .and_then(|v| v.split([',', '}']).next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A document root with `f.txt`, and a server on it with `--arch ARCH
/// --pool N` and `extra`.
fn blocking_server(name: &str, arch: &str, pool: &str, extra: &[&str]) -> (TempDir, Weft) {
    let site = TempDir::new(name);
    site.write("f.txt", b"static file\n");
    let w = Weft::serve(&[&[path_str(&site.path), "--arch", arch, "--pool", pool][..], extra].concat());
    (site, w)
}

#[test]
fn mp_restarts_a_dead_process_and_sums_their_stats() {
    let (_site, w) = blocking_server("arch-mp", "mp", "2", &["--admin", "127.0.0.1:0"]);
    let admin = w.admin.expect("admin address").to_string();
    let pid = w.child.id();
    let before = children(pid);
    assert_eq!(before.len(), 2, "{before:?}");
    for _ in 0..10 {
        assert_eq!(get(&w, "/f.txt").body, b"static file\n");
    }
    // Each process reports to the parent: /stats has one entry per process
    // and their sum.
    let ok = wait_until(Duration::from_secs(5), || {
        total_requests(&fetch(&admin, "/stats")) >= 10
    });
    let stats = fetch(&admin, "/stats");
    assert!(ok, "{stats}");
    assert!(stats.contains("\"worker\":1,"), "{stats}");
    // One dies: it is started again, and the counters do not go back.
    std::process::Command::new("kill")
        .args(["-9", &before[0].to_string()])
        .status()
        .unwrap();
    let ok = wait_until(Duration::from_secs(10), || {
        let now = children(pid);
        now.len() == 2 && !now.contains(&before[0])
    });
    assert!(ok, "not replaced: {:?}", children(pid));
    // Every connection is answered, from the first one after the restart
    // (the replacement may not accept yet: the survivor does).
    for _ in 0..10 {
        assert_eq!(get(&w, "/f.txt").body, b"static file\n");
    }
    let ok = wait_until(Duration::from_secs(15), || {
        total_requests(&fetch(&admin, "/stats")) >= 20
    });
    assert!(ok, "{}", fetch(&admin, "/stats"));
}

/// A connection waiting in the accept queue is answered even if every
/// serving process dies before accepting it: the processes share the
/// parent's listener, so the queue outlives them and their replacements
/// accept from it.
#[test]
fn mp_connection_queued_while_its_processes_die_is_answered() {
    let (_site, w) = blocking_server("arch-mp-queue", "mp", "2", &[]);
    let pid = w.child.id();
    let before = children(pid);
    assert_eq!(before.len(), 2, "{before:?}");
    // Both processes busy: each serves one kept-alive connection at a time
    // (idle timeout 60 s), and each of these has had its answer.
    let mut busy = Vec::new();
    for _ in 0..2 {
        let mut r = Reader::new(w.connect());
        r.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(r.response(false).body, b"static file\n");
        busy.push(r);
    }
    // So this one waits in the queue, request and all.
    let mut queued = Reader::new(w.connect());
    queued.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    for p in &before {
        std::process::Command::new("kill")
            .args(["-9", &p.to_string()])
            .status()
            .unwrap();
    }
    // The busy connections die with their processes; the queued one is
    // answered by a replacement.
    assert_eq!(queued.response(false).body, b"static file\n");
    // (A process finishes the connection it serves before it looks at its
    // parent: none is left open.)
    drop((busy, queued));
    // The replacements end with the server, killed (as the harness does)
    // whether or not they have started serving yet.
    let replaced = wait_until(Duration::from_secs(10), || {
        let now = children(pid);
        now.len() == 2 && !now.iter().any(|p| before.contains(p))
    });
    let serving = children(pid);
    assert!(replaced, "{before:?} {serving:?}");
    drop(w);
    let ended = wait_until(Duration::from_secs(10), || serving.iter().all(|&p| ended(p)));
    assert!(ended, "still running after the server was killed: {serving:?}");
}

/// Whether process `pid` has exited (gone, or a zombie not yet reaped).
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// MT and MP show the requests of a connection that is still open: a
/// keep-alive connection lasts as long as its client wants, and `/stats`
/// (for MP, the server's sum of its processes) used to count them only once
/// it closed.
#[test]
fn mt_and_mp_report_the_requests_of_an_open_connection() {
    for arch in ["mt", "mp"] {
        let (_site, w) = blocking_server("arch-open", arch, "2", &["--admin", "127.0.0.1:0"]);
        let admin = w.admin.expect("admin address").to_string();
        let mut open = Reader::new(w.connect());
        for _ in 0..5 {
            open.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\n\r\n");
            assert_eq!(open.response(false).body, b"static file\n", "{arch}");
        }
        // The connection stays open, idle, while the counters are read.
        let ok = wait_until(Duration::from_secs(5), || total_requests(&fetch(&admin, "/stats")) >= 5);
        assert!(ok, "{arch}: {}", fetch(&admin, "/stats"));
        drop(open);
    }
}

/// A stop drains MT's threads and MP's processes as it drains an event
/// loop: an idle keep-alive connection does not hold the server until its
/// idle timeout (60 s here), a response in flight finishes whole, and
/// `--stats-on-exit` counts every request answered (MP's processes write
/// their last counters as they exit; the parent reads them before summing).
#[test]
fn mt_and_mp_stop_gracefully_and_count_every_request() {
    let big = 4 << 20;
    for arch in ["mt", "mp"] {
        let extra = ["--idle-timeout", "60s", "--stats-on-exit"];
        let (site, mut w) = blocking_server("arch-stop", arch, "2", &extra);
        site.write("big.bin", &pattern(big));
        for _ in 0..7 {
            assert_eq!(get(&w, "/f.txt").body, b"static file\n", "{arch}");
        }
        // One thread (process) holds an idle keep-alive connection...
        let mut idle = Reader::new(w.connect());
        idle.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(idle.response(false).body, b"static file\n", "{arch}");
        // ...the other sends a body larger than the socket buffers hold.
        let mut s = w.connect();
        weft_io::sys::set_rcvbuf(std::os::fd::AsRawFd::as_raw_fd(&s), 16 * 1024).unwrap();
        std::io::Write::write_all(&mut s, b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let t0 = std::time::Instant::now();
        let body = body_across_stop(&mut s, || w.terminate());
        assert_eq!(body.len(), big, "{arch}: the response in flight finished");
        assert!(body == pattern(big), "{arch}");
        assert_eq!(w.wait_exit(Duration::from_secs(15)), Some(0), "{arch}: {}", w.stderr());
        let took = t0.elapsed();
        assert!(
            took < Duration::from_secs(10),
            "{arch}: stopped after {took:?}: the idle connection held it"
        );
        let err = w.stderr();
        let stats = err
            .lines()
            .find(|l| l.starts_with("{\"accepted\""))
            .unwrap_or_else(|| panic!("{arch}: no stats in {err}"));
        assert_eq!(counter(stats, "requests"), 9, "{arch}: {stats}");
        drop(idle);
    }
}

/// An MP process serving a kept-alive connection when its server is killed
/// (SIGKILL: no stop request reaches it) closes that connection and ends,
/// rather than waiting out `--idle-timeout`.
#[test]
fn mp_process_with_a_kept_alive_connection_ends_with_its_server() {
    let (_site, w) = blocking_server("arch-mp-orphan", "mp", "1", &["--idle-timeout", "60s"]);
    let serving = children(w.child.id());
    assert_eq!(serving.len(), 1, "{serving:?}");
    let mut kept = Reader::new(w.connect());
    kept.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(kept.response(false).body, b"static file\n");
    drop(w); // SIGKILL
    kept.stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert!(kept.closed(), "the orphan closed the kept-alive connection");
    let ended = wait_until(Duration::from_secs(10), || ended(serving[0]));
    assert!(ended, "{serving:?} still running after its server was killed");
}

/// Voluntary context switches of every thread of `pids` so far.
fn sleeps(pids: &[u32]) -> u64 {
    let mut n = 0;
    for pid in pids {
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            n += status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    n
}

/// An idle MT or MP server sleeps: its threads (MT's 64 by default, MP's
/// processes) wait on their listener, their socket and their stop notice
/// with no timeout of their own, and MP's supervisor waits for its
/// processes' exits, so a second of idleness costs no wake-up. (Until Nov
/// 29 each thread woke every 200 ms to look at the stop switch: about 320
/// wake-ups a second for MT's 64 threads; the supervisor ten a second.) A kept-alive idle connection
/// sleeps too, and the stop still ends it at once.
#[test]
fn idle_mt_and_mp_servers_do_not_wake() {
    for (arch, pool) in [("mt", "64"), ("mp", "4")] {
        let (_site, mut w) = blocking_server("arch-idle", arch, pool, &["--idle-timeout", "60s"]);
        let mut kept = Reader::new(w.connect());
        kept.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(kept.response(false).body, b"static file\n", "{arch}");
        // MT: the server's threads; MP: its serving processes and the
        // server, whose supervisor waits for their exits on pidfds.
        let mut pids = children(w.child.id());
        pids.push(w.child.id());
        if arch == "mt" {
            assert_eq!(pids.len(), 1, "MT starts no process: {pids:?}");
        }
        std::thread::sleep(Duration::from_millis(300));
        let before = sleeps(&pids);
        std::thread::sleep(Duration::from_secs(1));
        let woke = sleeps(&pids) - before;
        assert!(woke <= 10, "{arch}: {woke} wake-ups in a second of idleness");
        let t0 = std::time::Instant::now();
        w.terminate();
        assert_eq!(w.wait_exit(Duration::from_secs(10)), Some(0), "{arch}: {}", w.stderr());
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{arch}: the kept connection held the stop"
        );
        drop(kept);
    }
}
