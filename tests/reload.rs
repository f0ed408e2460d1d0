//! Graceful reload (SIGHUP, `weft reload --pid-file`): a new configuration
//! takes effect on the same listening sockets while `weft load` runs and no
//! request is lost; a bad configuration leaves the running server untouched
//! and logs one line naming the key. For serve, proxy and front.

mod common;

use common::{path_str, TempDir, Weft};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

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

/// Reload three times while 8 clients run (persistent connections and a
/// connection per request), then check nothing was lost.
fn reload_under_load(w: &Weft, url: &str, pid: &str, dir: &TempDir, extra: &[&str]) -> u64 {
    let json = dir.path.join(format!("load-{}.json", extra.len()));
    let child = load(url, 3, &json, extra);
    let start = Instant::now();
    for k in 1..=3 {
        while start.elapsed() < Duration::from_millis(700 * k) {
            std::thread::sleep(Duration::from_millis(20));
        }
        reload(pid);
        wait_for(w, &format!("generation {k})"));
    }
    let (ok, total, errors) = outcome(child, &json);
    assert!(total > 100, "the load ran: {total}");
    let report = std::fs::read_to_string(&json).unwrap();
    let errs = &report[report.find("\"errors\"").unwrap()..];
    assert_eq!(
        (ok, errors),
        (total, 0),
        "every request answered 2xx through the reloads: {}",
        &errs[..200.min(errs.len())]
    );
    total
}

#[test]
fn serve_reloads_under_load_without_losing_a_request() {
    let site = common::site();
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
    reload_under_load(&w, &url, &pid, &dir, &[]);
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
    wait_for(&w, "generation 4)");
    let body = common::fetch(&w.addr.to_string(), "/hello.txt");
    assert!(body.contains("hello, weft"), "{body}");
    let mut r = common::Reader::new(w.connect());
    r.send(b"GET /hello.txt HTTP/1.1\r\nHost: new.example\r\n\r\n");
    assert_eq!(r.response(false).body, b"the new site\n");
}

#[test]
fn a_bad_config_leaves_the_server_untouched() {
    let site = common::site();
    let dir = TempDir::new("reload-bad");
    let pid = dir.path.join("weft.pid");
    let cfg = dir.write(
        "weft.toml",
        format!("[serve]\nroot = \"{}\"\n", path_str(&site.path)).as_bytes(),
    );
    let mut w = Weft::serve(&["--workers", "1", "-c", path_str(&cfg), "--pid-file", path_str(&pid)]);
    let pid = path_str(&pid).to_string();
    let json = dir.path.join("load.json");
    let child = load(&format!("http://{}/hello.txt", w.addr), 2, &json, &[]);
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(&cfg, "[serve]\nwrokers = 3\n").unwrap();
    reload(&pid);
    wait_for(&w, "reload refused");
    let line = w
        .stderr()
        .lines()
        .find(|l| l.contains("reload refused"))
        .unwrap()
        .to_string();
    assert!(line.contains("key `serve.wrokers`"), "{line}");
    // A root that cannot be opened fails at start: the same.
    std::fs::write(&cfg, "[serve]\nroot = \"/nonexistent/weft-reload\"\n").unwrap();
    reload(&pid);
    assert!(common::wait_until(Duration::from_secs(10), || w
        .stderr()
        .contains("/nonexistent/weft-reload")));
    // `weft reload -c` checks the file before signalling.
    std::fs::write(&cfg, "[serve]\nwrokers = 3\n").unwrap();
    let out = weft(&["reload", "--pid-file", &pid, "-c", path_str(&cfg)]);
    assert_eq!(out.status.code(), Some(2));
    let (ok, total, errors) = outcome(child, &json);
    assert_eq!((ok, errors), (total, 0));
    assert!(!w.stderr().contains("generation 1)"), "nothing was reloaded");
    assert!(common::fetch(&w.addr.to_string(), "/hello.txt").contains("hello, weft"));
    w.terminate();
    assert_eq!(w.wait_exit(Duration::from_secs(10)), Some(0));
    assert!(!std::path::Path::new(&pid).exists(), "the pid file is removed at exit");
}

#[test]
fn proxy_and_front_reload_under_load() {
    let origin = Weft::start(&["origin", "--listen", "127.0.0.1:0"]);
    let dir = TempDir::new("reload-proxy");
    let pid = dir.path.join("proxy.pid");
    let upstream = origin.addr.to_string();
    let proxy = Weft::start(&[
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "2",
        "--upstream",
        &upstream,
        "--admin",
        "127.0.0.1:0",
        "--pid-file",
        path_str(&pid),
    ]);
    let url = format!("http://{}/size/2000/c60/a.bin", proxy.addr);
    reload_under_load(&proxy, &url, path_str(&pid), &dir, &["--calls", "5"]);
    // The admin endpoint stayed at its address and shows the new workers.
    let stats = common::fetch(&proxy.admin.unwrap().to_string(), "/stats");
    assert!(stats.contains("requests"), "{stats}");
    let fpid = dir.path.join("front.pid");
    let front = Weft::start(&[
        "front",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "1",
        "--backend",
        &upstream,
        "--pid-file",
        path_str(&fpid),
    ]);
    let url = format!("http://{}/size/100/a.bin", front.addr);
    reload_under_load(&front, &url, path_str(&fpid), &dir, &[]);
}
