//! Packaging and privileges: the Debian package built by
//! `scripts/package-deb` unpacks into a temporary root and its weft runs
//! (`--version`, `check` on the packaged config, the man pages are there);
//! `--user` drops every thread to that user after binding (as root only).

mod common;

use common::{get, is_root, weft_bin, TempDir, Weft};
use std::path::Path;
use std::process::Command;

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn the_debian_package_installs_into_a_temporary_root_and_runs() {
    if !have("dpkg-deb") {
        eprintln!("SKIPPED: dpkg-deb is not installed");
        return;
    }
    let out = TempDir::new("deb");
    let built = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/package-deb"))
        .args(["--binary", weft_bin(), "--out"])
        .env("DEB_COMPRESS", "none")
        .arg(&out.path)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    let deb = String::from_utf8(built.stdout).unwrap().trim().to_string();
    let info = Command::new("dpkg-deb")
        .args(["--field", &deb, "Package"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&info.stdout).trim(), "weft");
    let root = TempDir::new("root");
    let x = Command::new("dpkg-deb")
        .args(["-x", &deb])
        .arg(&root.path)
        .status()
        .unwrap();
    assert!(x.success());
    let weft = root.path.join("usr/bin/weft");
    let v = Command::new(&weft).arg("--version").output().unwrap();
    assert!(v.status.success());
    assert!(String::from_utf8_lossy(&v.stdout).starts_with("weft "), "{v:?}");
    let conf = root.path.join("etc/weft/weft.toml");
    let c = Command::new(&weft).arg("check").arg("-c").arg(&conf).output().unwrap();
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
    for page in ["weft.1.gz", "weft-serve.1.gz", "weft-proxy.1.gz", "weft-front.1.gz"] {
        assert!(root.path.join("usr/share/man/man1").join(page).is_file(), "{page}");
    }
    let unit = std::fs::read_to_string(root.path.join("lib/systemd/system/weft.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/weft serve -c /etc/weft/weft.toml"));
    assert!(unit.contains("ExecReload="));
}

#[test]
fn an_unknown_user_is_a_one_line_error() {
    let o = Command::new(weft_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--user", "no-such-user-weft"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("--user") && e.contains("no-such-user-weft"), "{e}");
}

/// Uid lines of every thread of `pid`.
fn thread_uids(pid: u32) -> Vec<String> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let s = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        if let Some(l) = s.lines().find(|l| l.starts_with("Uid:")) {
            out.push(l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "));
        }
    }
    out
}

#[test]
fn user_drops_every_thread_after_binding() {
    if !is_root() {
        eprintln!("SKIPPED: privilege drop needs root");
        return;
    }
    let site = TempDir::new("site");
    site.write("hello.txt", b"hello\n");
    let w = Weft::serve(&[site.path.to_str().unwrap(), "--user", "nobody", "--workers", "2"]);
    let uids = thread_uids(w.child.id());
    assert!(uids.len() >= 3, "{uids:?}");
    assert!(uids.iter().all(|u| u == "65534 65534 65534 65534"), "{uids:?}");
    assert_eq!(get(&w, "/hello.txt").body, b"hello\n");
}
