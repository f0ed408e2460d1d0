//! Flash and IO-Lite in `weft serve` (issue 24): every architecture passes the
//! same suite (`per_arch!`), the AMPED loop never waits on the disk, caches
//! follow file changes, and a file rewritten mid-send never arrives as a
//! complete response.

use crate::common;

use common::*;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// Run each listed scenario under every architecture: `per_arch!(a)` defines
/// `mod amped { #[test] fn a() }` and so on, each calling `scenarios::a(&[flags])`.
/// `amped_miss` forces every file read through a helper (`--test-miss`).
macro_rules! per_arch {
    ($($scenario:ident),* $(,)?) => {
        scenario_tests!(amped, &["--arch", "amped"], $($scenario),*);
        scenario_tests!(amped_miss, &["--arch", "amped", "--test-miss", "--helpers", "2"], $($scenario),*);
        scenario_tests!(amped_nowait, &["--arch", "amped", "--residency", "nowait"], $($scenario),*);
        scenario_tests!(amped_mincore, &["--arch", "amped", "--residency", "mincore"], $($scenario),*);
        scenario_tests!(amped_no_residency, &["--arch", "amped", "--residency", "none"], $($scenario),*);
        scenario_tests!(sped, &["--arch", "sped"], $($scenario),*);
        scenario_tests!(mt, &["--arch", "mt", "--pool", "8"], $($scenario),*);
        scenario_tests!(mp, &["--arch", "mp", "--pool", "4"], $($scenario),*);
        scenario_tests!(no_caches, &["--path-cache", "0", "--head-cache", "off", "--file-cache", "0"], $($scenario),*);
        scenario_tests!(object_cache, &["--object-cache", "64MiB"], $($scenario),*);
        scenario_tests!(object_cache_miss, &["--object-cache", "64MiB", "--test-miss"], $($scenario),*);
        scenario_tests!(object_cache_notify, &["--object-cache", "64MiB", "--snapshot-check", "notify"], $($scenario),*);
    };
}

/// Overwrite `rel` in `site` with `data` (same inode: no rename).
fn rewrite_in_place(site: &TempDir, rel: &str, data: &[u8]) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(site.path.join(rel))
        .unwrap()
        .write_all(data)
        .unwrap();
}

fn serve(site: &TempDir, arch: &[&str], extra: &[&str]) -> Weft {
    let args = [path_str(&site.path), "--workers", "1"];
    Weft::serve(&[&args[..], arch, extra].concat())
}

mod scenarios {
    use super::*;

    /// Bodies byte for byte: small (memory), large (file range), ranges,
    /// conditionals, HEAD, directories, errors; twice, so the second round
    /// comes from the warm caches.
    pub fn byte_exact(arch: &[&str]) {
        let site = site();
        site.write("mid.bin", &pattern(100 * 1024 + 3));
        let w = serve(&site, arch, &[]);
        for round in 0..2 {
            let r = get(&w, "/hello.txt");
            assert_eq!((r.status, &r.body[..]), (200, &b"hello, weft\n"[..]), "round {round}");
            let r = get(&w, "/big.bin");
            assert_eq!(r.status, 200);
            assert!(r.body == pattern(3 * 1024 * 1024 + 17), "{arch:?}: big body whole");
            let r = get(&w, "/mid.bin");
            assert!(r.body == pattern(100 * 1024 + 3), "{arch:?}: mid body whole");
            assert_eq!(get(&w, "/").body, b"<h1>home</h1>\n");
            assert_eq!(get(&w, "/sub/").body, b"<p>sub</p>\n");
            assert_eq!(get(&w, "/sub").status, 301);
            assert_eq!(get(&w, "/missing").status, 404);
            assert_eq!(get(&w, "/empty.bin").body, b"");
            let mut c = Reader::new(w.connect());
            c.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=1000-1999\r\n\r\n");
            let r = c.response(false);
            assert_eq!(r.status, 206);
            assert!(r.body == pattern(3 * 1024 * 1024 + 17)[1000..2000]);
            let etag = r.header("etag").unwrap().to_string();
            c.send(format!("GET /big.bin HTTP/1.1\r\nHost: t\r\nIf-None-Match: {etag}\r\n\r\n").as_bytes());
            assert_eq!(c.response(false).status, 304);
            c.send(b"HEAD /mid.bin HTTP/1.1\r\nHost: t\r\n\r\n");
            let h = c.response(true);
            assert_eq!(h.header("content-length"), Some("102403"));
        }
    }

    /// Pipelined requests on one connection, mixing cached and uncached
    /// paths: answered in order.
    pub fn pipelined(arch: &[&str]) {
        let site = site();
        let w = serve(&site, arch, &[]);
        let mut c = Reader::new(w.connect());
        let mut req = Vec::new();
        for p in [
            "/hello.txt",
            "/one.bin",
            "/sub/page.css",
            "/big.bin",
            "/hello.txt",
            "/missing",
        ] {
            req.extend_from_slice(format!("GET {p} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        }
        c.send(&req);
        assert_eq!(c.response(false).body, b"hello, weft\n");
        assert_eq!(c.response(false).body, b"x");
        assert_eq!(c.response(false).body, b"body{}\n");
        assert!(c.response(false).body == pattern(3 * 1024 * 1024 + 17));
        assert_eq!(c.response(false).body, b"hello, weft\n");
        assert_eq!(c.response(false).status, 404);
    }

    /// A changed file is served changed once the cache revalidates (here at
    /// once: `--file-cache-valid 0s`), with a new ETag.
    pub fn invalidation(arch: &[&str]) {
        let site = site();
        site.write("v.txt", b"version one\n");
        let w = serve(&site, arch, &["--file-cache-valid", "0s"]);
        let a = get(&w, "/v.txt");
        assert_eq!(a.body, b"version one\n");
        assert_eq!(get(&w, "/v.txt").body, b"version one\n");
        std::thread::sleep(Duration::from_millis(20));
        site.write("v.txt", b"version two, longer\n");
        let b = get(&w, "/v.txt");
        assert_eq!(b.body, b"version two, longer\n", "{arch:?}");
        assert_ne!(a.header("etag"), b.header("etag"));
        // Replaced by rename (new inode), same size.
        let tmp = site.write("v.tmp", b"version 3, longer!!\n");
        std::fs::rename(tmp, site.path.join("v.txt")).unwrap();
        assert_eq!(get(&w, "/v.txt").body, b"version 3, longer!!\n", "{arch:?}");
    }

    /// A file rewritten in place while it is being sent never reaches the
    /// client as a complete response: the connection is cut short, and the
    /// server counts the abort (`snapshot_aborts`).
    pub fn snapshot(arch: &[&str]) {
        let site = site();
        let len = 48 * 1024 * 1024;
        let old = pattern(len);
        site.write("large.bin", &old);
        let w = serve(&site, arch, &["--admin", "127.0.0.1:0"]);
        let admin = w.admin.expect("admin address").to_string();
        let mut s = w.connect();
        s.write_all(b"GET /large.bin HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let mut got = vec![0u8; 1 << 20];
        s.read_exact(&mut got).unwrap();
        // The server is blocked on a full socket; rewrite the file in place.
        std::thread::sleep(Duration::from_millis(100));
        rewrite_in_place(&site, "large.bin", &old.iter().map(|b| b ^ 0x55).collect::<Vec<u8>>());
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        got.extend_from_slice(&rest);
        let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let body = &got[head_end..];
        assert!(
            body.len() < len,
            "{arch:?}: a complete response of {} bytes after the file changed (old file: {})",
            body.len(),
            body == &old[..]
        );
        let aborts = || {
            let stats = fetch(&admin, "/stats");
            stats
                .split_once("\"total\":")
                .map_or(0, |(_, total)| counter(total, "snapshot_aborts"))
        };
        // MP's processes report to the parent every 250 ms.
        assert!(
            wait_until(Duration::from_secs(5), || aborts() > 0),
            "{arch:?}: no snapshot abort counted"
        );
    }

    /// `--precompressed br,gzip`: a client that accepts a coding gets the
    /// sidecar (byte for byte, the file's type, the sidecar's validators,
    /// Content-Encoding), with its ranges and conditionals; others get the
    /// file; files without sidecars are plain; every file response says
    /// Vary. Twice, the second round from the warm caches.
    pub fn precompressed(arch: &[&str]) {
        let site = site();
        let js = pattern(40_000);
        let coded = |n: usize, k: u8| pattern(n).iter().map(|b| b ^ k).collect::<Vec<u8>>();
        let (gz, br, index_gz) = (coded(3_000, 1), coded(2_000, 2), coded(500, 3));
        site.write("app.js", &js);
        site.write("app.js.gz", &gz);
        site.write("app.js.br", &br);
        site.write("sub/index.html.gz", &index_gz);
        let w = serve(&site, arch, &["--precompressed", "br,gzip"]);
        let ask = |method: &str, path: &str, extra: &str| {
            let mut c = Reader::new(w.connect());
            c.send(format!("{method} {path} HTTP/1.1\r\nHost: t\r\n{extra}\r\n").as_bytes());
            c.response(method == "HEAD")
        };
        let ae = |codings: &str| format!("Accept-Encoding: {codings}\r\n");
        for round in 0..2 {
            let r = ask("GET", "/app.js", &ae("gzip, deflate, br"));
            assert_eq!(r.status, 200, "{arch:?} round {round}");
            assert!(r.body == br, "{arch:?}: the br sidecar, preferred");
            assert_eq!(r.header("content-encoding"), Some("br"));
            assert!(r.header("content-type").unwrap().starts_with("text/javascript"));
            assert_eq!(r.header("vary"), Some("Accept-Encoding"));
            let gz_tag = {
                let r = ask("GET", "/app.js", &ae("x-gzip"));
                assert!(r.body == gz, "{arch:?}: the gzip sidecar");
                assert_eq!(r.header("content-encoding"), Some("gzip"));
                r.header("etag").unwrap().to_string()
            };
            for refused in ["br;q=0, gzip;q=0", "identity", ""] {
                let extra = if refused.is_empty() { String::new() } else { ae(refused) };
                let r = ask("GET", "/app.js", &extra);
                assert!(r.body == js, "{arch:?} {refused:?}: the file itself");
                assert_eq!(r.header("content-encoding"), None);
                assert_eq!(r.header("vary"), Some("Accept-Encoding"));
                assert_ne!(r.header("etag"), Some(gz_tag.as_str()), "a representation of its own");
            }
            let r = ask("GET", "/sub/", &ae("gzip"));
            assert!(r.body == index_gz, "{arch:?}: an index's sidecar");
            assert!(r.header("content-type").unwrap().starts_with("text/html"));
            let r = ask("GET", "/hello.txt", &ae("gzip, br"));
            assert_eq!(
                (r.body.as_slice(), r.header("vary")),
                (&b"hello, weft\n"[..], Some("Accept-Encoding"))
            );
            // Ranges and conditionals apply to the coded bytes.
            let r = ask("GET", "/app.js", &format!("{}Range: bytes=100-199\r\n", ae("gzip")));
            assert_eq!(r.status, 206);
            assert!(r.body == gz[100..200]);
            assert_eq!(r.header("content-range"), Some("bytes 100-199/3000"));
            let r = ask("GET", "/app.js", &format!("{}If-None-Match: {gz_tag}\r\n", ae("gzip")));
            assert_eq!((r.status, r.header("vary")), (304, Some("Accept-Encoding")));
            let r = ask("HEAD", "/app.js", &ae("gzip"));
            assert_eq!(r.header("content-length"), Some("3000"));
        }
    }
}

per_arch!(byte_exact, pipelined, invalidation, snapshot, precompressed);

/// A file without sidecars costs no open per request for them: their
/// absence is remembered (SPED opens in the loop, where it is counted).
#[test]
fn a_missing_sidecar_is_remembered() {
    let site = site();
    let mut w = serve(
        &site,
        &["--arch", "sped"],
        &["--precompressed", "br,gzip", "--stats-on-exit"],
    );
    let mut c = Reader::new(w.connect());
    for _ in 0..40 {
        c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip, br\r\n\r\n");
        let r = c.response(false);
        assert_eq!(
            (r.body.as_slice(), r.header("content-encoding")),
            (&b"hello, weft\n"[..], None)
        );
    }
    drop(c);
    w.terminate();
    assert_eq!(w.wait_exit(Duration::from_secs(15)), Some(0));
    let err = w.stderr();
    let stats = err
        .lines()
        .find(|l| l.starts_with("{\"accepted\""))
        .expect("stats at exit");
    // hello.txt, hello.txt.br and hello.txt.gz once, and again per second
    // of revalidation: not 80 failed opens.
    assert!(counter(stats, "open") <= 12, "{stats}");
    assert_eq!(counter(stats, "precompressed"), 0, "{stats}");
}

/// A sidecar older than its file was made from an earlier version of it:
/// passed over and counted (the next accepted coding, or the file itself,
/// goes out) until a sidecar as new as the file is written.
#[test]
fn a_sidecar_older_than_its_file_is_passed_over() {
    let site = site();
    let js = pattern(20_000);
    site.write("app.js", &js);
    let gz = site.write("app.js.gz", b"gzip bytes of an earlier app.js");
    site.write("app.js.br", b"brotli bytes of this app.js");
    let an_hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    let f = std::fs::File::options().write(true).open(&gz).unwrap();
    f.set_modified(an_hour_ago).unwrap();
    drop(f);
    let w = serve(&site, &[], &["--precompressed", "br,gzip", "--admin", "127.0.0.1:0"]);
    let ask = |codings: &str| {
        let mut c = Reader::new(w.connect());
        c.send(format!("GET /app.js HTTP/1.1\r\nHost: t\r\nAccept-Encoding: {codings}\r\n\r\n").as_bytes());
        c.response(false)
    };
    let r = ask("gzip");
    assert!(r.body == js, "the stale gzip sidecar was sent");
    assert_eq!(
        (r.header("content-encoding"), r.header("vary")),
        (None, Some("Accept-Encoding"))
    );
    assert_eq!(admin_total(&w, "precompressed_stale"), 1);
    // br is preferred and in step; asked for both, br goes out.
    let r = ask("gzip, br");
    assert_eq!(
        (r.body.as_slice(), r.header("content-encoding")),
        (&b"brotli bytes of this app.js"[..], Some("br"))
    );
    // Made again from this file, the gzip sidecar is sent (once the file
    // cache has looked at it again: at least a second).
    site.write("app.js.gz", b"gzip bytes of this app.js");
    let fresh = wait_until(Duration::from_secs(10), || {
        ask("gzip").body == b"gzip bytes of this app.js"
    });
    assert!(fresh, "the new gzip sidecar never went out");
    assert_eq!(admin_total(&w, "precompressed"), 2);
}

/// The AMPED loop never waits on the disk: with every read sent to a helper
/// and each helper job slowed to half a second, a request for a file the worker
/// holds in memory is answered while a large file's request still waits for
/// its helper. (The same run under SPED would answer both only after the
/// slow read: its loop does the reading.)
#[test]
fn amped_loop_never_waits_on_disk() {
    let site = site();
    let flags = [
        "--arch",
        "amped",
        "--test-miss",
        "--test-disk-delay",
        "500ms",
        "--helpers",
        "2",
        "--file-cache-valid",
        "120s",
    ];
    let w = serve(&site, &flags, &[]);
    // Warm: the small file's open goes through a (slow) helper once; its
    // bytes then live in the worker's file cache.
    assert_eq!(get(&w, "/hello.txt").body, b"hello, weft\n");
    let addr = w.addr;
    let t0 = Instant::now();
    let big = std::thread::spawn(move || {
        let mut r = Reader::new(std::net::TcpStream::connect(addr).unwrap());
        r.stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        r.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n");
        let resp = r.response(false);
        (resp.body == pattern(3 * 1024 * 1024 + 17), t0.elapsed())
    });
    std::thread::sleep(Duration::from_millis(200));
    let r = get(&w, "/hello.txt");
    let small_done = t0.elapsed();
    assert_eq!(r.body, b"hello, weft\n");
    let (whole, big_done) = big.join().unwrap();
    assert!(whole, "the large body arrives whole after its helper");
    assert!(
        small_done < big_done,
        "the cached file ({small_done:?}) was answered before the one waiting on the disk ({big_done:?})"
    );
    // The big request waited for at least two slow helper jobs (open, then
    // its first load), each held 500 ms by --test-disk-delay.
    assert!(big_done >= Duration::from_secs(1), "big took {big_done:?}");
}

/// Bytes the task `tid` of `pid` (or the whole process, `tid` None) made
/// the block layer read (`read_bytes` of /proc/PID[/task/TID]/io).
fn read_bytes(pid: u32, tid: Option<&str>) -> u64 {
    let path = match tid {
        Some(t) => format!("/proc/{pid}/task/{t}/io"),
        None => format!("/proc/{pid}/io"),
    };
    let io = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    io.lines()
        .find_map(|l| l.strip_prefix("read_bytes: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no read_bytes in {path}"))
}

/// The thread of `pid` named `name`.
fn thread_named(pid: u32, name: &str) -> String {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|t| std::fs::read_to_string(format!("/proc/{pid}/task/{t}/comm")).is_ok_and(|c| c.trim() == name))
        .unwrap_or_else(|| panic!("no thread {name} in {pid}"))
}

/// Write `data` to `rel` in `site`, flushed to the disk and dropped from
/// the page cache: the next read of it must go to the disk.
fn write_cold(site: &TempDir, rel: &str, data: &[u8]) {
    let path = site.write(rel, data);
    let f = std::fs::File::open(&path).unwrap();
    f.sync_all().unwrap();
    weft_io::sys::residency::advise_dontneed(&f, 0, 0).unwrap();
}

/// The AMPED loop never reads a cold file itself: the block-layer reads a
/// cold file's requests cause (`read_bytes` per thread) are all made by
/// helper threads, none by the worker thread running the event loop, for a
/// body sent whole (the `nowait` probe) and one fed as mapped chunks (the
/// per-chunk `mincore` test). Under SPED the same requests make the worker
/// thread read, which shows the measurement sees a loop that reads.
/// (`amped_loop_never_waits_on_disk` shows the consequence with a slowed
/// helper; this shows the cause without any test flag.)
#[test]
fn amped_loop_never_reads_a_cold_file() {
    let files = [
        ("cold-whole.bin", 200 * 1024 + 5),
        ("cold-chunks.bin", 3 * 1024 * 1024 + 7),
    ];
    for arch in ["amped", "sped"] {
        let site = site();
        let w = serve(&site, &["--arch", arch, "--helpers", "2"], &[]);
        assert_eq!(get(&w, "/hello.txt").body, b"hello, weft\n");
        for (name, len) in files {
            write_cold(&site, name, &pattern(len));
        }
        let pid = w.child.id();
        let worker = thread_named(pid, "weft-worker-0");
        let (loop0, all0) = (read_bytes(pid, Some(&worker)), read_bytes(pid, None));
        for (name, len) in files {
            assert!(
                get(&w, &format!("/{name}")).body == pattern(len),
                "{arch}: {name} byte-exact"
            );
        }
        let by_loop = read_bytes(pid, Some(&worker)) - loop0;
        let by_all = read_bytes(pid, None) - all0;
        let cold: u64 = files.iter().map(|(_, n)| *n as u64).sum();
        // Nothing else read these files: the whole process read them once.
        assert!(
            by_all >= cold / 2,
            "{arch}: the process read {by_all} of {cold} cold bytes"
        );
        if arch == "amped" {
            assert_eq!(by_loop, 0, "the AMPED loop read {by_loop} bytes from the disk itself");
        } else {
            assert!(by_loop > 0, "SPED's loop reads the cold file itself (read {by_loop})");
        }
    }
}

/// A file rewritten in place (same size, same inode) while its entry is
/// cached and not yet due for revalidation: with the check before the head
/// (`on`: fstat; `notify`: the inotify change notice, then fstat) the next
/// request never gets the new bytes under the old ETag; the connection is
/// aborted and counted. With the check off it does get them, which shows
/// the scenario can tear.
#[test]
fn a_rewrite_is_caught_before_the_head_with_fstat_or_notices() {
    for mode in ["on", "notify", "off"] {
        let site = site();
        site.write("page.bin", &pattern(8192));
        let w = serve(
            &site,
            &[
                "--object-cache",
                "64MiB",
                "--file-cache-valid",
                "120s",
                "--snapshot-check",
                mode,
                "--stats-on-exit",
            ],
            &[],
        );
        let first = get(&w, "/page.bin");
        assert!(first.body == pattern(8192));
        let etag = first.header("etag").unwrap().to_string();
        let new: Vec<u8> = pattern(8192).iter().map(|b| b ^ 0x33).collect();
        std::thread::sleep(Duration::from_millis(20));
        rewrite_in_place(&site, "page.bin", &new);
        let mut c = Reader::new(w.connect());
        c.stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.send(b"GET /page.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        // An aborted answer: the connection closes with no response.
        let torn = c
            .response_any(false)
            .is_ok_and(|r| r.status == 200 && r.body == new && r.header("etag") == Some(etag.as_str()));
        let err = exit_stats(w);
        if mode == "off" {
            assert!(torn, "off: the rewrite was expected to tear");
        } else {
            assert!(!torn, "{mode}: new bytes under the old ETag");
            assert!(stat(&err, "snapshot_aborts") >= 1, "{mode}: {err}");
        }
    }
}

/// A bad flag value is a one-line error naming the flag.
#[test]
fn bad_flags_name_the_key() {
    for (flag, value) in [
        ("--arch", "threads"),
        ("--residency", "maybe"),
        ("--helpers", "0"),
        ("--cache-policy", "fifo"),
        ("--gds-cost", "2"),
        ("--head-cache", "sometimes"),
        ("--snapshot-check", "later"),
        ("--page-cache-admit", "lru"),
        ("--helper-load", "mmap"),
    ] {
        let out = std::process::Command::new(weft_bin())
            .args(["serve", flag, value])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{flag}: {err}");
    }
}

/// The object cache answers the second request from its mappings and says
/// so in the counters: one lookup hit, the body bytes sent from it, body
/// bytes held as mappings and only the header fields on the heap.
#[test]
fn object_cache_counts_hits_and_holds_no_heap_body() {
    let site = site();
    let w = serve(&site, &["--object-cache", "64MiB", "--stats-on-exit"], &[]);
    for _ in 0..2 {
        assert!(get(&w, "/big.bin").body == pattern(3 * 1024 * 1024 + 17));
    }
    let err = exit_stats(w);
    let num = |key: &str| stat(&err, key);
    assert_eq!((num("object_lookups"), num("object_hits")), (2, 1), "{err}");
    assert_eq!(num("bytes_object"), 2 * (3 * 1024 * 1024 + 17));
    assert_eq!(num("object_mapped_bytes"), 3 * 1024 * 1024 + 17);
    assert!(num("object_heap_bytes") < 400, "only the header fields are on the heap");
    // A body of 32 KiB and more goes by sendfile of the same file range,
    // not by a writev that copies it out of the mappings.
    assert!(num("sendfile") >= 2, "{err}");
}

/// With `--send copy` the object cache writes its bodies from the mappings
/// (one copy, no sendfile), byte for byte.
#[test]
fn object_cache_send_copy_writes_from_the_mappings() {
    let site = site();
    let w = serve(
        &site,
        &["--object-cache", "64MiB", "--send", "copy", "--stats-on-exit"],
        &[],
    );
    for _ in 0..2 {
        assert!(get(&w, "/big.bin").body == pattern(3 * 1024 * 1024 + 17));
    }
    let err = exit_stats(w);
    assert_eq!(stat(&err, "object_hits"), 1, "{err}");
    assert!(!err.contains("\"sendfile\":"), "no sendfile: {err}");
    assert!(stat(&err, "writev") >= 2, "{err}");
}

/// `--page-cache-admit reuse`: a large file seen for the first time has its
/// pages dropped once its response is out; requested again within the
/// horizon (the `--file-cache` budget of disk inflow) it is kept; small files
/// are never dropped; every body byte-exact. With `--send auto` big.bin is
/// streamed from mapped chunks (unmapped before the drop), with `sendfile`
/// it goes whole.
fn page_cache_admission(send: &str) {
    let site = site();
    site.write("mid.bin", &pattern(100 * 1024));
    let flags = ["--send", send, "--page-cache-admit", "reuse"];
    let w = serve(&site, &flags, &["--stats-on-exit", "--admin", "127.0.0.1:0"]);
    let admin = w.admin.expect("admin address").to_string();
    let big = pattern(3 * 1024 * 1024 + 17);
    assert!(get(&w, "/big.bin").body == big);
    assert_eq!(get(&w, "/hello.txt").body, b"hello, weft\n");
    // The drop waits until the response has left and the kernel has had
    // time to send it (two looks, 20 ms apart).
    let stats = || fetch(&admin, "/stats");
    assert!(
        wait_until(Duration::from_secs(10), || stat(&stats(), "admit_dropped_files") == 1),
        "big.bin dropped: {}",
        stats()
    );
    // Its chunks were unmapped first (the kernel keeps mapped pages).
    assert_eq!(stat(&stats(), "file_mapped_bytes"), 0, "{}", stats());
    // Again, within the horizon: kept, and no drop this time.
    assert!(get(&w, "/big.bin").body == big);
    // mid.bin, first sight: condemned; its second request before the drop
    // calls the drop off. Pipelined, so the second is answered before the
    // drop's two looks (20 ms apart) however slowly this test is scheduled.
    let mut r = Reader::new(w.connect());
    r.send(b"GET /mid.bin HTTP/1.1\r\nHost: t\r\n\r\nGET /mid.bin HTTP/1.1\r\nHost: t\r\n\r\n");
    for _ in 0..2 {
        assert!(r.response(false).body == pattern(100 * 1024));
    }
    std::thread::sleep(Duration::from_millis(500));
    let err = exit_stats(w);
    assert_eq!(
        stat(&err, "admit_dropped_files"),
        1,
        "only big.bin's first response: {err}"
    );
    assert_eq!(stat(&err, "admit_dropped_bytes"), 3 * 1024 * 1024 + 17);
}

#[test]
fn page_cache_admission_with_sendfile() {
    page_cache_admission("sendfile");
}

#[test]
fn page_cache_admission_with_streamed_chunks() {
    page_cache_admission("auto");
}

/// The change notices' descriptor is read to EAGAIN and a readiness-tracking
/// backend is told so: after the first change it offered the descriptor at
/// every pass of its table, and each offer cost a read (32 per request under
/// load, 2026-12-02). 200 requests on one connection after a change: about
/// one read each (the request's own).
#[test]
fn change_notices_are_not_offered_again_under_tracked() {
    let site = site();
    site.write("page.bin", &pattern(8192));
    site.write("other.bin", &pattern(100));
    let args = [
        "--event",
        "tracked",
        "--object-cache",
        "64MiB",
        "--snapshot-check",
        "notify",
        "--stats-on-exit",
    ];
    let w = serve(&site, &args, &[]);
    assert!(get(&w, "/page.bin").body == pattern(8192));
    assert!(get(&w, "/other.bin").body == pattern(100));
    // A change notice for a watched file, taken while the loop waits.
    rewrite_in_place(&site, "other.bin", &[b'x'; 100]);
    std::thread::sleep(Duration::from_millis(200));
    let mut c = Reader::new(w.connect());
    for _ in 0..200 {
        c.send(b"GET /page.bin HTTP/1.1\r\nHost: t\r\n\r\n");
        assert!(c.response(false).body == pattern(8192));
    }
    drop(c);
    let err = exit_stats(w);
    let (reads, requests) = (stat(&err, "read"), stat(&err, "requests"));
    assert!(reads <= 3 * requests, "{reads} reads for {requests} requests: {err}");
}

/// A number from `--stats-on-exit` output.
fn stat(err: &str, key: &str) -> u64 {
    let at = err
        .find(&format!("\"{key}\":"))
        .unwrap_or_else(|| panic!("{key} in {err}"));
    let rest = &err[at + key.len() + 3..];
    rest[..rest.find(|c: char| !c.is_ascii_digit()).unwrap()]
        .parse()
        .unwrap()
}

/// Stop `w` and return what `--stats-on-exit` printed.
fn exit_stats(mut w: Weft) -> String {
    w.terminate();
    assert_eq!(w.wait_exit(Duration::from_secs(20)), Some(0));
    w.stderr()
}

/// Large files go out as mapped chunks under the file cache's one byte
/// budget: every body byte-exact, the mapped chunks and entries kept within
/// the budget by evicting the least recently used, a changed file mapped
/// afresh.
#[test]
fn mapped_chunks_stay_within_the_file_cache_budget() {
    let site = site();
    let sizes = [1_500_000usize, 1_048_576 + 1, 2_000_003, 700_001];
    for (i, n) in sizes.iter().enumerate() {
        site.write(&format!("l{i}.bin"), &pattern(*n));
    }
    let budget = 1u64 << 20;
    let w = serve(
        &site,
        &["--file-cache", "1MiB", "--file-cache-valid", "0s", "--stats-on-exit"],
        &[],
    );
    for round in 0..2 {
        for (i, n) in sizes.iter().enumerate() {
            let r = get(&w, &format!("/l{i}.bin"));
            assert!(r.body == pattern(*n), "round {round}: l{i}.bin byte-exact");
        }
    }
    // A range inside one chunk and one across chunks.
    let mut c = Reader::new(w.connect());
    c.send(b"GET /l2.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=200000-1300000\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.status, 206);
    assert!(r.body == pattern(2_000_003)[200_000..1_300_001]);
    // The file changes (same size, new bytes, by rename): served changed.
    let new: Vec<u8> = pattern(1_500_000).iter().map(|b| b ^ 0x5a).collect();
    let tmp = site.write("l0.tmp", &new);
    std::fs::rename(tmp, site.path.join("l0.bin")).unwrap();
    assert!(get(&w, "/l0.bin").body == new, "a changed file is mapped afresh");
    // A new small file's entry makes the cache check its budget once more.
    assert_eq!(get(&w, "/hello.txt").body, b"hello, weft\n");
    let err = exit_stats(w);
    let total: u64 = 2 * sizes.iter().sum::<usize>() as u64 + 1_100_001 + 1_500_000;
    assert_eq!(stat(&err, "bytes_mapped"), total, "{err}");
    let held = stat(&err, "file_cache_bytes") + stat(&err, "file_mapped_bytes");
    assert!(held <= budget, "{held} bytes held over the {budget}-byte budget: {err}");
    assert!(stat(&err, "file_cache_evictions") > 0, "{err}");
}

/// AMPED tests residency per chunk while a large body is sent: with every
/// test made to miss, each chunk is loaded by a helper (one job per 256 KiB
/// chunk, besides the open) and the body still arrives byte-exact.
#[test]
fn each_chunk_miss_goes_to_a_helper() {
    let site = site();
    let w = serve(
        &site,
        &["--arch", "amped", "--test-miss", "--helpers", "2", "--stats-on-exit"],
        &[],
    );
    let n = 3 * 1024 * 1024 + 17;
    assert!(get(&w, "/big.bin").body == pattern(n));
    let err = exit_stats(w);
    let chunks = n.div_ceil(256 * 1024) as u64;
    assert!(stat(&err, "residency_misses") >= chunks, "{err}");
    // (helper_jobs can lag the last job by a moment; parked counts each.)
    assert!(stat(&err, "parked") > chunks, "one load per chunk and the open: {err}");
    assert_eq!(stat(&err, "bytes_mapped"), n as u64, "{err}");
}

/// This thread's id and its v1 memory cgroup directory.
fn thread_cgroup() -> Option<(String, std::path::PathBuf)> {
    let tid = std::fs::read_link("/proc/thread-self").ok()?;
    let tid = tid.file_name()?.to_str()?.to_string();
    let own = std::fs::read_to_string("/proc/thread-self/cgroup").ok()?;
    let path = own.lines().find_map(|l| {
        let mut f = l.splitn(3, ':').skip(1);
        let (ctl, p) = f.next().zip(f.next())?;
        ctl.split(',').any(|c| c == "memory").then(|| p.to_string())
    })?;
    Some((
        tid,
        std::path::Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/')),
    ))
}

/// The caches follow memory pressure: weft runs in a 160 MiB v1 memory
/// cgroup with `--memory-pressure cgroup:low`; after its file cache holds
/// mapped chunks, a writer in the same cgroup fills it with page cache, the
/// kernel reclaims and notifies, and the worker drops the chunks and entries
/// no response uses. Skipped (with a message) where no cgroup can be made.
#[test]
fn caches_shrink_on_memory_pressure_in_a_cgroup() {
    let Some((tid, home)) = thread_cgroup() else {
        eprintln!("SKIP: no v1 memory cgroup here");
        return;
    };
    let cg = std::path::Path::new("/sys/fs/cgroup/memory").join(format!("weft-flash-{}", std::process::id()));
    if std::fs::create_dir(&cg).is_err() || std::fs::write(cg.join("memory.limit_in_bytes"), "167772160").is_err() {
        eprintln!("SKIP: cannot create a memory cgroup at {}", cg.display());
        let _ = std::fs::remove_dir(&cg);
        return;
    }
    let site = site();
    site.write("l.bin", &pattern(8 << 20));
    // Children of this thread start in the cgroup; the thread goes home after.
    std::fs::write(cg.join("tasks"), &tid).unwrap();
    let started = std::panic::catch_unwind(|| {
        let args = [
            path_str(&site.path),
            "--workers",
            "1",
            "--memory-pressure",
            "cgroup:low",
            "--admin",
            "127.0.0.1:0",
        ];
        let w = Weft::serve(&args);
        let hog = std::process::Command::new("dd")
            .args(["if=/dev/zero", "bs=1M", "count=400", "status=none"])
            .arg(format!("of={}", site.path.join("hog").display()))
            .spawn();
        (w, hog)
    });
    std::fs::write(home.join("tasks"), &tid).unwrap();
    let (w, hog) = started.unwrap();
    let admin = w.admin.unwrap().to_string();
    assert!(get(&w, "/l.bin").body == pattern(8 << 20));
    let mapped = stat(&fetch(&admin, "/stats"), "file_mapped_bytes");
    assert!(mapped > 0, "chunks stay mapped after the send");
    let _ = hog.map(|mut h| h.wait());
    let shrunk = wait_until(Duration::from_secs(10), || {
        assert_eq!(get(&w, "/hello.txt").status, 200);
        std::thread::sleep(Duration::from_millis(200));
        stat(&fetch(&admin, "/stats"), "pressure_shrinks") > 0
    });
    let doc = fetch(&admin, "/stats");
    drop(w);
    let _ = std::fs::remove_file(site.path.join("hog"));
    let _ = std::fs::remove_dir(&cg);
    assert!(shrunk, "no shrink after the cgroup reclaimed: {doc}");
    assert!(stat(&doc, "pressure_released_bytes") >= mapped, "{doc}");
    assert_eq!(stat(&doc, "file_mapped_bytes"), 0, "{doc}");
}

/// `--zero-copy-send`: large chunks go out with MSG_ZEROCOPY, held until the
/// kernel's completion; on loopback the kernel reports copies, so each
/// connection falls back to plain writes after its first completion. Bodies
/// stay byte-exact either way, on several connections in turn.
#[test]
fn zero_copy_send_is_byte_exact_and_falls_back_on_copies() {
    let site = site();
    let w = serve(&site, &["--zero-copy-send", "--stats-on-exit"], &[]);
    let n = 3 * 1024 * 1024 + 17;
    for _ in 0..3 {
        let mut c = Reader::new(w.connect());
        for _ in 0..3 {
            assert!(get_on(&mut c, "/big.bin").body == pattern(n));
        }
    }
    let err = exit_stats(w);
    assert!(stat(&err, "bytes_zerocopy") > 0, "{err}");
    assert!(stat(&err, "zerocopy_copied") >= 1, "loopback copies: {err}");
    assert_eq!(stat(&err, "bytes_mapped"), 9 * n as u64, "{err}");
}
