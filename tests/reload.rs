//! Graceful reload (SIGHUP, `weft reload --pid-file`): a new configuration
//! takes effect on the same listening sockets while `weft load` runs (on
//! persistent connections, then a connection per request) and no request is
//! lost; a response in flight on the old workers (a large body to a reader
//! that stopped reading, or an origin still thinking) completes; a bad
//! configuration leaves the running server untouched and logs one line
//! naming the key. For serve, proxy and front.

use crate::common;

use common::{path_str, Reader, TempDir, Weft};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use weft_load::content;

fn weft(args: &[&str]) -> Output {
    Command::new(common::weft_bin()).args(args).output().expect("run weft")
}

/// `weft reload --pid-file P`, which must succeed.
fn reload(pid_file: &str) {
    let out = weft(&["reload", "--pid-file", pid_file]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Start `weft load` against `url` for `secs` seconds in the background.
fn load(url: &str, secs: u32, json: &std::path::Path, extra: &[&str]) -> std::process::Child {
    Command::new(common::weft_bin())
        .args(["load", url, "--clients", "8", "--duration", &format!("{secs}s")])
        .args(extra)
        .args(["--timeout", "10s", "--json", path_str(json), "--quiet"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start weft load")
}

/// The load run's replies and errors.
fn outcome(child: std::process::Child, json: &std::path::Path) -> (u64, u64, u64) {
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = std::fs::read_to_string(json).unwrap();
    let num = |key: &str, section: &str| -> u64 {
        let s = &text[text.find(&format!("\"{section}\"")).unwrap()..];
        let s = &s[s.find(&format!("\"{key}\":")).unwrap() + key.len() + 3..];
        s[..s.find([',', '}']).unwrap()].trim().parse().unwrap()
    };
    (
        num("2xx", "replies"),
        num("total", "replies"),
        num("total", "error_details"),
    )
}

fn wait_for(w: &Weft, what: &str) {
    assert!(
        common::wait_until(Duration::from_secs(10), || w.stderr().contains(what)),
        "no `{what}` in: {}",
        w.stderr()
    );
}

/// Reload three times while 8 clients run on persistent connections, then
/// three more times while they open a connection per request (`--calls 1`),
/// and check nothing was lost. `generation` is the newest before; returns
/// the newest after.
fn reload_under_load(w: &Weft, url: &str, pid: &str, dir: &TempDir, mut generation: u64) -> u64 {
    for (mode, extra) in [
        ("persistent connections", &[][..]),
        ("a connection per request", &["--calls", "1"][..]),
    ] {
        let json = dir.path.join(format!("load-{generation}.json"));
        let child = load(url, 3, &json, extra);
        let start = Instant::now();
        for k in 1..=3 {
            while start.elapsed() < Duration::from_millis(700 * k) {
                std::thread::sleep(Duration::from_millis(20));
            }
            reload(pid);
            generation += 1;
            wait_for(w, &format!("generation {generation})"));
        }
        let (ok, total, errors) = outcome(child, &json);
        assert!(total > 100, "{mode}: the load ran: {total}");
        let report = std::fs::read_to_string(&json).unwrap();
        let errs = &report[report.find("\"errors\"").unwrap()..];
        assert_eq!(
            (ok, errors),
            (total, 0),
            "{mode}: every request answered 2xx through the reloads: {}",
            &errs[..200.min(errs.len())]
        );
    }
    generation
}

/// A response in flight on the old workers when the reload happens
/// completes: `request` is sent on a fresh connection, `started` waits until
/// it is surely being answered, the reload to `generation` happens, the old
/// generation must still be draining (the response holds it), and the whole
/// response then arrives: `body_len` bytes that `body_ok` accepts.
fn in_flight_across_reload(
    w: &Weft,
    pid: &str,
    generation: u64,
    request: &str,
    started: impl FnOnce(&mut Reader),
    body_len: usize,
    body_ok: impl Fn(&[u8]) -> bool,
) {
    let mut r = Reader::new(w.connect());
    r.send(request.as_bytes());
    started(&mut r);
    reload(pid);
    wait_for(w, &format!("generation {generation})"));
    let old_done = format!("workers of generation {} finished", generation - 1);
    assert!(
        !w.stderr().contains(&old_done),
        "the old workers finished with a response in flight: {}",
        w.stderr()
    );
    let resp = r.response(false);
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body.len(), body_len, "the whole body");
    assert!(body_ok(&resp.body), "the body's bytes");
    wait_for(w, &old_done);
}

#[test]
fn serve_reloads_under_load_without_losing_a_request() {
    let site = common::site();
    // Larger than loopback's socket buffers can hold at once.
    let large = common::pattern(32 << 20);
    site.write("large.bin", &large);
    let dir = TempDir::new("reload-serve");
    let pid = dir.path.join("weft.pid");
    let cfg = dir.write(
        "weft.toml",
        format!("[serve]\nroot = \"{}\"\n", path_str(&site.path)).as_bytes(),
    );
    let w = Weft::serve(&["--workers", "2", "-c", path_str(&cfg), "--pid-file", path_str(&pid)]);
    let pid = path_str(&pid).to_string();
    assert_eq!(std::fs::read_to_string(&pid).unwrap().trim(), w.child.id().to_string());
    let url = format!("http://{}/hello.txt", w.addr);
    let generation = reload_under_load(&w, &url, &pid, &dir, 0);
    // A 32 MiB body to a client that stopped reading after the first bytes:
    // the old worker still sends it after the reload.
    in_flight_across_reload(
        &w,
        &pid,
        generation + 1,
        "GET /large.bin HTTP/1.1\r\nHost: t\r\n\r\n",
        |r| {
            r.fill();
        },
        large.len(),
        |b| b == large.as_slice(),
    );
    // The new configuration is in force: a site added to the file answers.
    let other = TempDir::new("reload-site");
    other.write("hello.txt", b"the new site\n");
    std::fs::write(
        &cfg,
        format!(
            "[serve]\nroot = \"{}\"\n[[serve.site]]\nnames = [\"new.example\"]\nroot = \"{}\"\n",
            path_str(&site.path),
            path_str(&other.path)
        ),
    )
    .unwrap();
    reload(&pid);
    wait_for(&w, &format!("generation {})", generation + 2));
    let body = common::fetch(&w.addr.to_string(), "/hello.txt");
    assert!(body.contains("hello, weft"), "{body}");
    let mut r = Reader::new(w.connect());
    r.send(b"GET /hello.txt HTTP/1.1\r\nHost: new.example\r\n\r\n");
    assert_eq!(r.response(false).body, b"the new site\n");
}

/// A role started with `-c CFG --pid-file PID` under load: a file with an
/// unknown key, then one that fails at start (`start_error`, whose text
/// `names` shows up in the log), then `weft reload -c` on a bad file; the
/// server serves as before, nothing was reloaded, and the load lost nothing.
fn bad_configs_leave_it_untouched(mut w: Weft, url: &str, dir: &TempDir, table: &str, start_error: &str, names: &str) {
    let cfg = dir.path.join("weft.toml");
    let pid = path_str(&dir.path.join("weft.pid")).to_string();
    let json = dir.path.join("load.json");
    let child = load(url, 2, &json, &[]);
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(&cfg, format!("[{table}]\nwrokers = 3\n")).unwrap();
    reload(&pid);
    wait_for(&w, "reload refused");
    let line = w
        .stderr()
        .lines()
        .find(|l| l.contains("reload refused"))
        .unwrap()
        .to_string();
    assert!(line.contains(&format!("key `{table}.wrokers`")), "{line}");
    // A configuration that fails at start: the same.
    std::fs::write(&cfg, start_error).unwrap();
    reload(&pid);
    assert!(
        common::wait_until(Duration::from_secs(10), || w.stderr().contains(names)),
        "{table}: {}",
        w.stderr()
    );
    // `weft reload -c` checks the file before signalling.
    std::fs::write(&cfg, format!("[{table}]\nwrokers = 3\n")).unwrap();
    let out = weft(&["reload", "--pid-file", &pid, "-c", path_str(&cfg)]);
    assert_eq!(out.status.code(), Some(2));
    let (ok, total, errors) = outcome(child, &json);
    assert_eq!((ok, errors), (total, 0), "{table}");
    assert!(total > 0, "{table}: the load ran");
    assert!(!w.stderr().contains("generation 1)"), "{table}: nothing was reloaded");
    let (_, path) = url.split_once("//").unwrap();
    let path = &path[path.find('/').unwrap()..];
    assert_eq!(common::get(&w, path).status, 200, "{table}");
    w.terminate();
    assert_eq!(w.wait_exit(Duration::from_secs(10)), Some(0));
    assert!(!std::path::Path::new(&pid).exists(), "the pid file is removed at exit");
}

/// Start `role` from a config file holding `config`, with a pid file, and
/// check that bad configs leave it untouched while `path` is loaded.
fn role_survives_bad_configs(role: &str, config: &str, path: &str, start_error: &str, names: &str) {
    let dir = TempDir::new(&format!("reload-bad-{role}"));
    let cfg = dir.write("weft.toml", config.as_bytes());
    let pid = dir.path.join("weft.pid");
    let w = Weft::start(&[
        role,
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "1",
        "-c",
        path_str(&cfg),
        "--pid-file",
        path_str(&pid),
    ]);
    let url = format!("http://{}{path}", w.addr);
    bad_configs_leave_it_untouched(w, &url, &dir, role, start_error, names);
}

#[test]
fn a_bad_config_leaves_the_server_untouched() {
    let site = common::site();
    let root = format!("[serve]\nroot = \"{}\"\n", path_str(&site.path));
    // A root that cannot be opened fails at start.
    let bad_root = "[serve]\nroot = \"/nonexistent/weft-reload\"\n";
    role_survives_bad_configs("serve", &root, "/hello.txt", bad_root, "/nonexistent/weft-reload");
}

#[test]
fn a_bad_config_leaves_proxy_and_front_untouched() {
    let origin = Weft::role("origin", &[]);
    let upstream = origin.addr.to_string();
    let proxy = format!("[proxy]\nupstream = \"{upstream}\"\n");
    // The disk store needs the memory cache: refused at start.
    let scratch = TempDir::new("reload-bad-disk");
    let no_memory = format!(
        "{proxy}cache-size = 0\ncache-dir = \"{}\"\n",
        path_str(&scratch.path.join("disk"))
    );
    let needs = "the disk store needs the memory cache";
    role_survives_bad_configs("proxy", &proxy, "/size/2000/c60/a.bin", &no_memory, needs);
    let front = format!("[front]\nbackend = [\"{upstream}\"]\n");
    // Handoff mode without its sockets: refused at start.
    let handoff = format!("{front}mode = \"handoff\"\n");
    let needs = "--mode handoff needs one --handoff PATH";
    role_survives_bad_configs("front", &front, "/size/100/a.bin", &handoff, needs);
}

#[test]
fn proxy_and_front_reload_under_load() {
    let origin = Weft::role("origin", &[]);
    let dir = TempDir::new("reload-proxy");
    let pid = dir.path.join("proxy.pid");
    let upstream = origin.addr.to_string();
    let proxy = Weft::role(
        "proxy",
        &[
            "--workers",
            "2",
            "--upstream",
            &upstream,
            "--admin",
            "127.0.0.1:0",
            "--pid-file",
            path_str(&pid),
        ],
    );
    let url = format!("http://{}/size/2000/c60/a.bin", proxy.addr);
    let generation = reload_under_load(&proxy, &url, path_str(&pid), &dir, 0);
    // The admin endpoint stayed at its address and shows the new workers.
    let stats = common::fetch(&proxy.admin.unwrap().to_string(), "/stats");
    assert!(stats.contains("requests"), "{stats}");
    // The origin thinks for 2 s: the request waits on the old workers
    // through the reload and its response comes back through them.
    let think = "GET /size/100000/slow.bin HTTP/1.1\r\nHost: t\r\nX-Weft-Think: 2s\r\n\r\n";
    let settle = |_: &mut Reader| std::thread::sleep(Duration::from_millis(300));
    let origin_body = |b: &[u8]| content::matches(content::offset(b"/size/100000/slow.bin"), 0, b);
    in_flight_across_reload(
        &proxy,
        path_str(&pid),
        generation + 1,
        think,
        settle,
        100_000,
        origin_body,
    );
    let fpid = dir.path.join("front.pid");
    let front = Weft::role(
        "front",
        &["--workers", "1", "--backend", &upstream, "--pid-file", path_str(&fpid)],
    );
    let url = format!("http://{}/size/100/a.bin", front.addr);
    let generation = reload_under_load(&front, &url, path_str(&fpid), &dir, 0);
    in_flight_across_reload(
        &front,
        path_str(&fpid),
        generation + 1,
        think,
        settle,
        100_000,
        origin_body,
    );
}
