//! Virtual hosts in `weft serve`: `[[serve.site]]` tables and `--site`,
//! exact names before wildcards, the default site, an absolute-form target's
//! authority ahead of Host, per-site index, autoindex and Cache-Control, and
//! one-line errors naming the key.

use crate::common;

use common::{path_str, Reader, TempDir, Weft};
use std::process::Command;

/// Three roots: the top-level one, `a` and `b`.
fn roots() -> (TempDir, TempDir, TempDir) {
    let top = TempDir::new("vh-top");
    top.write("index.html", b"top\n");
    top.write("who.txt", b"top\n");
    let a = TempDir::new("vh-a");
    a.write("index.html", b"site a\n");
    a.write("who.txt", b"a\n");
    a.write("sub/home.htm", b"a sub home\n");
    let b = TempDir::new("vh-b");
    b.write("who.txt", b"b\n");
    b.write("list/x.txt", b"x\n");
    (top, a, b)
}

fn ask(w: &Weft, request: &str) -> common::Response {
    let mut r = Reader::new(w.connect());
    r.send(request.as_bytes());
    r.response(false)
}

fn body_for(w: &Weft, host: &str, path: &str) -> String {
    let resp = ask(w, &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n"));
    format!("{} {}", resp.status, String::from_utf8_lossy(&resp.body).trim())
}

fn config(dir: &TempDir, text: &str) -> String {
    let p = dir.write("weft.toml", text.as_bytes());
    path_str(&p).to_string()
}

/// AMPED (helpers open the files) and SPED (the loop does).
#[test]
fn sites_from_the_config_file_amped() {
    sites_from_the_config_file("amped");
}

#[test]
fn sites_from_the_config_file_sped() {
    sites_from_the_config_file("sped");
}

fn sites_from_the_config_file(arch: &str) {
    let (top, a, b) = roots();
    let cfgdir = TempDir::new("vh-cfg");
    let file = config(
        &cfgdir,
        &format!(
            "[serve]\n\
             [[serve.site]]\nnames = [\"a.example\", \"www.a.example\"]\nroot = \"{}\"\nindex = \"home.htm\"\ncache-control = \"max-age=60\"\n\
             [[serve.site]]\nnames = [\"*.b.example\"]\nroot = \"{}\"\nautoindex = true\n",
            path_str(&a.path),
            path_str(&b.path)
        ),
    );
    let w = Weft::serve(&["--arch", arch, "--workers", "1", "-c", &file, path_str(&top.path)]);
    assert_eq!(body_for(&w, "a.example", "/who.txt"), "200 a");
    assert_eq!(
        body_for(&w, "WWW.A.EXAMPLE:8080", "/who.txt"),
        "200 a",
        "case and port do not matter"
    );
    assert_eq!(body_for(&w, "x.b.example", "/who.txt"), "200 b");
    assert_eq!(body_for(&w, "y.x.b.example", "/who.txt"), "200 b");
    assert_eq!(
        body_for(&w, "b.example", "/who.txt"),
        "200 top",
        "*.b.example is not b.example"
    );
    assert_eq!(
        body_for(&w, "unknown.example", "/who.txt"),
        "200 top",
        "the top-level root is the default"
    );
    // Per-site options: a's index file, b's listing, a's Cache-Control.
    assert_eq!(body_for(&w, "a.example", "/sub/"), "200 a sub home");
    assert_eq!(body_for(&w, "a.example", "/list/").split(' ').next(), Some("404"));
    let listing = body_for(&w, "z.b.example", "/list/");
    assert!(listing.starts_with("200") && listing.contains("x.txt"), "{listing}");
    assert!(
        listing.contains("/list/") && !listing.contains('\0'),
        "no site prefix shows: {listing}"
    );
    let r = ask(&w, "GET /who.txt HTTP/1.1\r\nHost: a.example\r\n\r\n");
    assert_eq!(r.header("cache-control"), Some("max-age=60"));
    let r = ask(&w, "GET /who.txt HTTP/1.1\r\nHost: top\r\n\r\n");
    assert_eq!(r.header("cache-control"), None);
    // A site's files never reach another's: the same path, each its own.
    assert_eq!(body_for(&w, "top", "/"), "200 top");
    let a_root = body_for(&w, "a.example", "/");
    assert!(
        a_root.starts_with("403"),
        "a's index is home.htm, not index.html: {a_root}"
    );
    assert_eq!(
        body_for(&w, "c.b.example", "/").split(' ').next(),
        Some("200"),
        "b lists its root"
    );
}

#[test]
fn absolute_form_authority_wins_over_host() {
    let (top, a, b) = roots();
    let sa = format!("a.example={}", path_str(&a.path));
    let sb = format!("b.example={}", path_str(&b.path));
    let w = Weft::serve(&["--workers", "1", "--site", &sa, "--site", &sb, path_str(&top.path)]);
    let r = ask(&w, "GET http://a.example/who.txt HTTP/1.1\r\nHost: b.example\r\n\r\n");
    assert_eq!((r.status, &r.body[..]), (200, &b"a\n"[..]));
    let r = ask(
        &w,
        "GET http://b.example:80/who.txt HTTP/1.1\r\nHost: b.example\r\n\r\n",
    );
    assert_eq!(&r.body[..], b"b\n");
}

#[test]
fn without_a_top_root_the_default_is_marked_or_first() {
    let (_top, a, b) = roots();
    let cfgdir = TempDir::new("vh-cfg2");
    let text = format!(
        "[[serve.site]]\nnames = [\"a.example\"]\nroot = \"{}\"\n[[serve.site]]\nnames = [\"b.example\"]\nroot = \"{}\"\n",
        path_str(&a.path),
        path_str(&b.path)
    );
    let w = Weft::serve(&["--workers", "1", "-c", &config(&cfgdir, &text)]);
    assert_eq!(body_for(&w, "nothing", "/who.txt"), "200 a", "the first site");
    drop(w);
    let marked = text
        .replace("root = \"", "default = true\nroot = \"")
        .replacen("default = true\n", "", 1);
    let w = Weft::serve(&["--workers", "1", "-c", &config(&cfgdir, &marked)]);
    assert_eq!(body_for(&w, "nothing", "/who.txt"), "200 b", "the one marked default");
}

#[test]
fn bad_sites_are_one_line_errors_naming_the_key() {
    let (_top, a, _b) = roots();
    let cfgdir = TempDir::new("vh-cfg3");
    let root = path_str(&a.path);
    let cases = [
        (format!("[[serve.site]]\nnames = [\"a\"]\nroot = \"{root}\"\nautoindx = true\n"), "autoindx"),
        (format!("[[serve.site]]\nnames = [\"a b\"]\nroot = \"{root}\"\n"), "names"),
        ("[[serve.site]]\nnames = [\"a\"]\n".to_string(), "root"),
        (
            format!("[[serve.site]]\nnames = [\"a\"]\nroot = \"{root}\"\n[[serve.site]]\nnames = [\"A\"]\nroot = \"{root}\"\n"),
            "`a` is given twice",
        ),
        ("[[serve.site]]\nnames = [\"a\"]\nroot = \"/nonexistent/weft-vhost\"\n".to_string(), "/nonexistent/weft-vhost"),
    ];
    for (text, needle) in cases {
        let file = config(&cfgdir, &text);
        let out = Command::new(common::weft_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "-c", &file])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}");
        assert!(err.contains(needle), "{needle}: {err}");
        assert_eq!(
            err.trim_end().lines().filter(|l| !l.starts_with("(see")).count(),
            1,
            "{err}"
        );
    }
}
