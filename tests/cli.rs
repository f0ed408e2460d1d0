//! The command line: help, bad flags, config files, `weft backends`, `weft check`.

use crate::common;

use common::*;
use std::process::Command;

fn weft(args: &[&str]) -> std::process::Output {
    Command::new(weft_bin()).args(args).output().unwrap()
}

#[test]
fn help_lists_every_serve_flag() {
    let out = weft(&["serve", "--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--listen",
        "--event",
        "--workers",
        "--accept-limit",
        "--idle-timeout",
        "--header-timeout",
        "--send-timeout",
        "--max-requests",
        "--send",
        "--autoindex",
        "--follow-symlinks",
        "--access-log",
        "--grace",
        "--config",
    ] {
        assert!(text.contains(flag), "missing {flag} in help");
    }
}

#[test]
fn bad_flag_values_are_one_line_errors_with_status_2() {
    for args in [
        vec!["serve", "--event", "kqueue"],
        vec!["serve", "--workers", "0"],
        vec!["serve", "--accept-limit", "-3"],
        vec!["serve", "--send", "mmap"],
        vec!["serve", "--idle-timeout", "soon"],
        vec!["serve", "--no-such-flag"],
        vec!["proxy", "--notsent-lowat", "1GiB"],
        vec!["proxy", "--rcv-lowat", "1GiB"],
        vec!["proxy", "--rcv-lowat", "lots"],
        vec!["proxy", "--cache-dir-size", "0"],
        vec!["serve", "--wake-interval", "1s"],
        vec!["serve", "--wake-interval", "soon"],
        vec!["proxy", "--wake-interval", "1s"],
        vec!["proxy", "--max-pass", "-1"],
        vec!["proxy", "--forward-ports", "25-24"],
        vec!["proxy", "--connect-ports", "443,x"],
        vec!["origin", "--event", "tracked:kqueue"],
        vec!["proxy", "--event", "tracked:"],
        vec!["load", "http://127.0.0.1:9/", "--event", "untracked"],
    ] {
        let out = weft(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err.lines().next().unwrap();
        assert!(first.starts_with("weft: "), "{args:?}: {err}");
    }
    let out = weft(&["serve", "--event", "kqueue"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("kqueue") && err.contains("select|poll|epoll|epoll-et|epoll-once|epoll-batched|uring"),
        "{err}"
    );
}

#[test]
fn config_file_errors_name_the_key() {
    let d = TempDir::new("cfg");
    let p = d.write("weft.toml", b"[serve]\nworkers = 1\nevnt = \"poll\"\n");
    let out = weft(&["serve", "--config", path_str(&p)]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("key `serve.evnt`"), "{err}");
    let p = d.write("bad.toml", b"[serve]\nidle-timeout = \"forever\"\n");
    let out = weft(&["serve", "-c", path_str(&p)]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("key `serve.idle-timeout`"), "{err}");
    let out = weft(&["check", "-c", path_str(&p)]);
    assert_eq!(out.status.code(), Some(2));
    let p = d.write("good.toml", b"[serve]\nworkers = 1\nevent = \"poll\"\n");
    let out = weft(&["check", "-c", path_str(&p)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn config_file_settings_are_used() {
    let site = site();
    let d = TempDir::new("cfg");
    let p = d.write(
        "weft.toml",
        format!(
            "[serve]\nroot = \"{}\"\nevent = \"poll\"\nworkers = 1\nautoindex = true\n",
            site.path.display()
        )
        .as_bytes(),
    );
    let w = Weft::serve(&["--config", path_str(&p)]);
    let r = get(&w, "/noindex/");
    assert_eq!(r.status, 200, "autoindex from the file");
    let body = String::from_utf8_lossy(&r.body);
    assert!(body.contains("a.txt"));
    assert!(body.contains("b &lt;odd&gt;.txt"), "names are escaped: {body}");
}

#[test]
fn backends_reports_event_mechanisms_and_features() {
    let out = weft(&["backends"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for name in common::BACKENDS.into_iter().chain([
        "sendfile",
        "splice",
        "tee",
        "io_uring",
        "SO_REUSEPORT",
        "RWF_NOWAIT",
        "TCP_REPAIR",
    ]) {
        assert!(text.contains(name), "missing {name}: {text}");
    }
}

#[test]
fn missing_root_is_a_clear_error() {
    let out = weft(&["serve", "/nonexistent/dir", "--listen", "127.0.0.1:0"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/dir"), "{err}");
}

#[test]
fn cache_dir_errors_name_the_key() {
    let d = TempDir::new("cachedir");
    let file = d.write("not-a-dir", b"x");
    for args in [
        vec![
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--cache-dir",
            path_str(&d.path),
            "--cache-size",
            "0",
        ],
        vec!["proxy", "--listen", "127.0.0.1:0", "--cache-dir", path_str(&file)],
    ] {
        let out = weft(&args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("weft: cache-dir: "), "{args:?}: {err}");
    }
    // A directory another proxy owns.
    let owned = d.path.join("owned");
    let first = Weft::role("proxy", &["--cache-dir", path_str(&owned)]);
    let out = weft(&["proxy", "--listen", "127.0.0.1:0", "--cache-dir", path_str(&owned)]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cache-dir: ") && err.contains("in use by another weft proxy"),
        "{err}"
    );
    drop(first);
}
