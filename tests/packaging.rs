//! Packaging and privileges: the Debian package built by
//! `scripts/package-deb` installs with `dpkg --root` into a scratch root
//! made of the host's shell, coreutils and C library (its maintainer scripts
//! run there, chrooted, as on a real system), `weft serve` starts from that
//! root with the packaged config (dropping to www-data) and answers, and the
//! package removes cleanly; `--user` binds a port below 1024 as root and
//! then runs every thread as that user, through a reload and a log reopen.
//! Root only (skipped otherwise, saying so).

use crate::common;

use common::{fetch, get, is_root, path_str, wait_until, weft_bin, Reader, TempDir, Weft};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The absolute path of `tool` on this machine's PATH.
fn which(tool: &str) -> PathBuf {
    let o = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .unwrap();
    PathBuf::from(String::from_utf8_lossy(&o.stdout).trim())
}

/// Copy `file` (an absolute path) to the same path under `root`.
fn copy_into(root: &Path, file: &Path) {
    let to = root.join(file.strip_prefix("/").unwrap());
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(file, &to).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
}

/// Copy the program `bin` and the shared libraries `ldd` lists for it
/// (and the dynamic loader) to their paths under `root`.
fn copy_with_libraries(root: &Path, bin: &Path, to: &Path) {
    let dest = root.join(to.strip_prefix("/").unwrap());
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::copy(bin, &dest).unwrap();
    let ldd = Command::new("ldd").arg(bin).output().unwrap();
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            copy_into(root, Path::new(p));
        }
    }
}

/// A root dpkg can install into and run maintainer scripts in: an empty
/// package database (knowing the host's libc6, which the root holds), the
/// shell and the programs the scripts call, the password and group files.
fn scratch_root(root: &Path) -> bool {
    let db = root.join("var/lib/dpkg");
    for d in ["info", "updates"] {
        std::fs::create_dir_all(db.join(d)).unwrap();
    }
    let libc6 = Command::new("dpkg-query").args(["-s", "libc6"]).output().unwrap();
    std::fs::write(db.join("status"), &libc6.stdout).unwrap();
    let arch = Command::new("dpkg").arg("--print-architecture").output().unwrap();
    let arch = String::from_utf8_lossy(&arch.stdout).trim().to_string();
    std::fs::write(db.join(format!("info/libc6:{arch}.list")), b"").unwrap();
    // Scripts redirect to /dev/null.
    std::fs::create_dir_all(root.join("dev")).unwrap();
    let null = Command::new("mknod")
        .args(["-m", "666"])
        .arg(root.join("dev/null"))
        .args(["c", "1", "3"])
        .status()
        .unwrap();
    assert!(null.success(), "mknod dev/null");
    copy_with_libraries(root, &which("sh"), Path::new("/bin/sh"));
    for tool in ["mkdir", "chown", "getent", "rm"] {
        let p = which(tool);
        copy_with_libraries(root, &p, &p);
    }
    copy_with_libraries(root, Path::new(weft_bin()), Path::new("/tmp/weft-libraries"));
    std::fs::remove_file(root.join("tmp/weft-libraries")).unwrap();
    for f in ["/etc/passwd", "/etc/group", "/etc/nsswitch.conf"] {
        if Path::new(f).exists() {
            copy_into(root, Path::new(f));
        }
    }
    libc6.status.success()
}

/// `dpkg --root ROOT ARGS` with a plain PATH; its output on failure.
fn dpkg(root: &Path, args: &[&str]) -> std::process::Output {
    Command::new("dpkg")
        .arg("--root")
        .arg(root)
        .args(args)
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .unwrap()
}

fn uid_of(name: &str) -> u32 {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let line = passwd
        .lines()
        .find(|l| l.starts_with(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no user {name}"));
    line.split(':').nth(2).unwrap().parse().unwrap()
}

#[test]
fn the_debian_package_installs_into_a_root_and_serves_from_it() {
    let missing: Vec<&str> = ["dpkg", "dpkg-deb", "dpkg-query", "chroot", "ldd", "getent", "mknod"]
        .into_iter()
        .filter(|t| !have(t))
        .collect();
    if !missing.is_empty() {
        eprintln!("SKIPPED: the package test needs {missing:?}");
        return;
    }
    if !is_root() {
        eprintln!("SKIPPED: dpkg --root runs maintainer scripts chrooted, which needs root");
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
    let root = TempDir::new("root");
    let r = &root.path;
    let knows_libc = scratch_root(r);
    let mut install = vec!["-i", deb.as_str()];
    if !knows_libc {
        install.insert(0, "--force-depends");
    }
    let installed = dpkg(r, &install);
    assert!(
        installed.status.success(),
        "dpkg -i: {}{}",
        String::from_utf8_lossy(&installed.stdout),
        String::from_utf8_lossy(&installed.stderr)
    );
    let status = String::from_utf8_lossy(&dpkg(r, &["-s", "weft"]).stdout).into_owned();
    assert!(status.contains("Status: install ok installed"), "{status}");
    // The postinst ran (chrooted): the cache directory is www-data's.
    let www = uid_of("www-data");
    assert_eq!(std::fs::metadata(r.join("var/cache/weft")).unwrap().uid(), www);
    assert!(r.join("var/log/weft").is_dir());
    for page in ["weft.1.gz", "weft-serve.1.gz", "weft-proxy.1.gz", "weft-front.1.gz"] {
        assert!(r.join("usr/share/man/man1").join(page).is_file(), "{page}");
    }
    let unit = std::fs::read_to_string(r.join("lib/systemd/system/weft.service")).unwrap();
    for line in [
        "ExecStart=/usr/bin/weft serve -c /etc/weft/weft.toml --pid-file /run/weft/weft.pid",
        "ExecReload=",
        "RuntimeDirectory=weft",
        "LogsDirectory=weft",
        "ProtectSystem=strict",
    ] {
        assert!(
            unit.lines()
                .any(|l| l == line || (line.ends_with('=') && l.starts_with(line))),
            "{line}"
        );
    }
    if have("systemd-analyze") {
        // The unit as systemd reads it (its ExecStart pointed at the
        // installed binary, which this host does not have at /usr/bin).
        let units = TempDir::new("unit");
        let copy = units.write(
            "weft.service",
            unit.replace("/usr/bin/weft", path_str(&r.join("usr/bin/weft")))
                .as_bytes(),
        );
        let v = Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(&copy)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&v.stderr);
        assert!(
            v.status.success() && said.trim().is_empty(),
            "systemd-analyze verify: {said}"
        );
    }
    let rotate = std::fs::read_to_string(r.join("etc/logrotate.d/weft")).unwrap();
    assert!(
        rotate.contains("/run/weft/weft.pid") && rotate.contains("create 0640 www-data"),
        "{rotate}"
    );
    // weft from the installed root, with the packaged config (root
    // /var/www/weft, user www-data) on a loopback port instead of port 80.
    let rs = path_str(r);
    let w = Weft::start_program(
        "chroot",
        &[
            rs,
            "/usr/bin/weft",
            "serve",
            "-c",
            "/etc/weft/weft.toml",
            "--listen",
            "127.0.0.1:0",
        ],
    );
    let page = fetch(&w.addr.to_string(), "/");
    assert!(page.starts_with("HTTP/1.1 200 "), "{page}");
    let placeholder = std::fs::read_to_string(r.join("var/www/weft/index.html")).unwrap();
    assert!(page.ends_with(&placeholder), "{page}");
    let uids = thread_uids(w.child.id());
    let want = format!("{www} {www} {www} {www}");
    assert!(!uids.is_empty() && uids.iter().all(|u| *u == want), "{uids:?}");
    drop(w);
    // Removal runs the prerm; the conffile stays until purge.
    let removed = dpkg(r, &["-r", "weft"]);
    assert!(removed.status.success(), "{}", String::from_utf8_lossy(&removed.stderr));
    assert!(!r.join("usr/bin/weft").exists());
    assert!(r.join("etc/weft/weft.toml").is_file());
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

/// A free loopback port below 1024: 80 if it is free.
/// A loopback address of this test process's own (from its pid; all of
/// 127/8 is local) and a port below 1024 free on it: two test runs on one
/// host would otherwise both find 127.0.0.1:80 free and race to bind it.
fn free_privileged_port() -> Option<(std::net::Ipv4Addr, u16)> {
    let pid = std::process::id();
    let octet = |n: u32| (1 + n % 250) as u8;
    let ip = std::net::Ipv4Addr::new(127, octet(pid / 62_500), octet(pid / 250), octet(pid));
    [80u16, 81, 88]
        .into_iter()
        .chain(100..1024)
        .find(|p| std::net::TcpListener::bind((ip, *p)).is_ok())
        .map(|p| (ip, p))
}

/// Lines of `path` (empty when absent).
fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

#[test]
fn binds_a_privileged_port_as_root_then_serves_as_the_user() {
    if !is_root() {
        eprintln!("SKIPPED: binding a port below 1024 and dropping privileges need root");
        return;
    }
    let Some((ip, port)) = free_privileged_port() else {
        eprintln!("SKIPPED: no free loopback port below 1024");
        return;
    };
    let nobody = uid_of("nobody");
    let site = common::site();
    let logs = TempDir::new("root-logs");
    let log = logs.path.join("access.log");
    let pid = logs.path.join("weft.pid");
    let listen = format!("{ip}:{port}");
    let mut w = Weft::start(&[
        "serve",
        "--listen",
        &listen,
        path_str(&site.path),
        "--user",
        "nobody",
        "--workers",
        "2",
        "--access-log",
        path_str(&log),
        "--pid-file",
        path_str(&pid),
    ]);
    assert_eq!(w.addr.port(), port);
    let want = format!("{nobody} {nobody} {nobody} {nobody}");
    // While a 3 MiB response is in flight to a client that reads slowly.
    let mut slow = Reader::new(w.connect());
    slow.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n");
    slow.fill();
    let uids = thread_uids(w.child.id());
    assert!(uids.len() >= 3, "{uids:?}");
    assert!(uids.iter().all(|u| *u == want), "{uids:?}");
    assert_eq!(slow.response(false).body.len(), 3 * 1024 * 1024 + 17);
    assert_eq!(get(&w, "/hello.txt").body, b"hello, weft\n");
    // The log was opened by root and handed to the user: the reload's new
    // workers (running as nobody) open it again.
    assert_eq!(std::fs::metadata(&log).unwrap().uid(), nobody);
    let reload = Command::new(weft_bin())
        .args(["reload", "--pid-file", path_str(&pid)])
        .output()
        .unwrap();
    assert!(reload.status.success(), "{}", String::from_utf8_lossy(&reload.stderr));
    assert!(
        wait_until(Duration::from_secs(10), || w.stderr().contains("generation 1)")),
        "{}",
        w.stderr()
    );
    let before = lines(&log);
    assert_eq!(get(&w, "/hello.txt").status, 200);
    assert!(
        wait_until(Duration::from_secs(10), || lines(&log) > before),
        "{}",
        w.stderr()
    );
    let uids = thread_uids(w.child.id());
    assert!(uids.iter().all(|u| *u == want), "after the reload: {uids:?}");
    // logrotate: rename, create the new file for the user, SIGUSR1.
    std::fs::rename(&log, logs.path.join("access.log.1")).unwrap();
    std::fs::write(&log, b"").unwrap();
    std::os::unix::fs::chown(&log, Some(nobody), None).unwrap();
    w.signal("USR1");
    assert!(
        wait_until(Duration::from_secs(10), || {
            get(&w, "/index.html");
            lines(&log) > 0
        }),
        "{}",
        w.stderr()
    );
    assert!(!w.stderr().contains("cannot reopen"), "{}", w.stderr());
    w.terminate();
    assert_eq!(w.wait_exit(Duration::from_secs(15)), Some(0), "{}", w.stderr());
}
