"""The lab's environment: Python requirements, the weft binary, the anchor
servers and load tools, and the versions of everything measured.

Everything here installs what is missing rather than failing: pip for the
pinned Python packages (user site, or the active virtualenv), `cargo build
--release` for weft (a no-op when it is up to date), apt-get for the Debian
packages (as root; otherwise the command to run is printed).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import platform
import re
import shutil
import site
import subprocess
import sys

LAB_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(LAB_DIR)
REQUIREMENTS = os.path.join(LAB_DIR, "requirements.txt")

# Debian package for each command the lab may run.
APT_PACKAGES = {
    "nginx": "nginx-light",
    "h2o": "h2o",
    "lighttpd": "lighttpd",
    "wrk": "wrk",
    "strace": "strace",
    "haproxy": "haproxy",
    "squid": "squid",
    "varnishd": "varnish",
    "fusermount": "fuse",  # flash-arch's slow disk (lab/slowdisk.py; libfuse2 with it)
}


class EnvError(RuntimeError):
    pass


def in_virtualenv() -> bool:
    return sys.prefix != getattr(sys, "base_prefix", sys.prefix)


def ensure_python_requirements(log=print, modules=("matplotlib",)) -> None:
    """Import `modules`; when one is missing, pip-install requirements.txt."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return
    log(f"installing Python requirements ({', '.join(missing)} missing) with pip ...")
    base = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", REQUIREMENTS]
    # User site first; then the interpreter's own site; then, for a Debian
    # python that refuses both (PEP 668), past its guard.
    attempts = [base] if in_virtualenv() else [base[:4] + ["--user"] + base[4:], base, base + ["--break-system-packages"]]
    last = None
    for cmd in attempts:
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            raise EnvError("pip install timed out after 15 minutes")
        if p.returncode == 0:
            break
        last = p.stderr.strip()[-800:]
    else:
        raise EnvError(f"pip install -r {REQUIREMENTS} failed: {last}")
    # A fresh user site is not on sys.path until the next interpreter start.
    user_site = site.getusersitepackages()
    if os.path.isdir(user_site) and user_site not in sys.path:
        sys.path.append(user_site)
    importlib.invalidate_caches()
    still = [m for m in modules if importlib.util.find_spec(m) is None]
    if still:
        raise EnvError(f"still missing after pip install: {', '.join(still)}")


def build_weft(log=print, timeout_s: float = 1800) -> str:
    """`cargo build --release` (incremental: quick when nothing changed);
    returns the binary's path."""
    binary = os.path.join(REPO_DIR, "target", "release", "weft")
    if shutil.which("cargo") is None:
        if os.access(binary, os.X_OK):
            log("cargo not found: using the existing release binary")
            return binary
        raise EnvError("cargo not found and no release binary at target/release/weft")
    log("building weft (cargo build --release) ...")
    try:
        p = subprocess.run(
            ["cargo", "build", "--release", "--quiet", "--bin", "weft"],
            cwd=REPO_DIR,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        raise EnvError(f"cargo build --release took more than {timeout_s:.0f}s")
    if p.returncode != 0:
        raise EnvError(f"cargo build --release failed:\n{p.stderr[-3000:]}")
    return binary


def ensure_commands(commands, log=print) -> None:
    """Install the Debian packages of missing commands with apt-get (as root)."""
    missing = [c for c in commands if shutil.which(c) is None]
    if not missing:
        return
    pkgs = sorted({APT_PACKAGES.get(c, c) for c in missing})
    if os.geteuid() != 0:
        raise EnvError(f"missing {', '.join(missing)}: run `sudo apt-get install -y {' '.join(pkgs)}`")
    log(f"installing {' '.join(pkgs)} with apt-get ...")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *pkgs]):
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        if p.returncode != 0:
            raise EnvError(f"{' '.join(cmd)} failed: {p.stderr.strip()[-800:]}")
    # Debian starts services on install; the lab runs its own instances.
    services = {"nginx": "nginx", "lighttpd": "lighttpd", "h2o": "h2o", "haproxy": "haproxy", "squid": "squid", "varnishd": "varnish"}
    for cmd_name, svc in services.items():
        if any(APT_PACKAGES.get(c) == APT_PACKAGES.get(cmd_name) for c in missing):
            subprocess.run(["service", svc, "stop"], capture_output=True, timeout=60)
    still = [c for c in commands if shutil.which(c) is None]
    if still:
        raise EnvError(f"still missing after apt-get: {', '.join(still)}")


def _first_line(cmd: list[str]) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"
    text = (p.stdout + p.stderr).strip()
    return text.splitlines()[0] if text else "unknown"


def package_version(pkg: str) -> str:
    try:
        p = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return p.stdout.strip() if p.returncode == 0 else "not installed"


def git_describe() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_DIR, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_DIR, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if rev.returncode != 0:
        return "unknown"
    return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def versions(weft_binary: str, commands) -> dict:
    """What was measured: tool versions, Debian package versions, the machine."""
    v = {
        "weft": _first_line([weft_binary, "--version"]) + f" (git {git_describe()})",
        "kernel": platform.release(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    probes = {
        "nginx": ["nginx", "-v"],
        "h2o": ["h2o", "--version"],
        "lighttpd": ["lighttpd", "-v"],
        "wrk": ["wrk", "-v"],
        "haproxy": ["haproxy", "-v"],
        "squid": ["squid", "-v"],
        "varnishd": ["varnishd", "-V"],
    }
    for c in commands:
        if c in probes:
            v[c] = _first_line(probes[c])
            pkg = APT_PACKAGES.get(c)
            if pkg:
                v[f"{c} (Debian package {pkg})"] = package_version(pkg)
    return v


# --- nginx with the select and poll event modules --------------------------
#
# Debian builds nginx without `--with-select_module --with-poll_module`, so
# `use select;` and `use poll;` are "invalid event type" there. The lab builds
# the same upstream release from Debian's own source package (fetched with
# apt-get through a private deb-src list: the system's apt configuration is
# left alone), with Debian's compiler flags and those two modules, once, into
# the lab's cache. Experiments run it beside the Debian binary (`use epoll` in
# both) so a difference between the builds would show.
#
# The cache is per user, not per checkout ($WEFT_LAB_CACHE, else
# $XDG_CACHE_HOME/weft-lab, else ~/.cache/weft-lab): CI runs from a fresh
# clone every time and rebuilt nginx (about 25 s) in each.

CACHE_DIR = os.environ.get("WEFT_LAB_CACHE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "weft-lab")
NGINX_CC_OPT = "-g -O2 -fstack-protector-strong -Wformat -Werror=format-security -fPIC -Wdate-time -D_FORTIFY_SOURCE=2"
NGINX_LD_OPT = "-Wl,-z,relro -Wl,-z,now -fPIC"


def nginx_upstream_version(text: str) -> str | None:
    """`nginx version: nginx/1.22.1` -> `1.22.1`."""
    m = re.search(r"nginx/(\d+\.\d+\.\d+)", text)
    return m.group(1) if m else None


def deb_src_lines(deb822: str) -> list[str]:
    """One-line `deb-src` entries for every `Types: deb` stanza of a deb822
    sources file (the system's URIs, suites, components and keyring)."""
    out = []
    for stanza in re.split(r"\n\s*\n", deb822):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line:
                continue
            k, v = line.split(":", 1)
            fields[k.strip()] = v.strip()
        if "deb" not in fields.get("Types", "").split() or fields.get("Enabled", "yes") == "no":
            continue
        opts = f"[signed-by={fields['Signed-By']}] " if fields.get("Signed-By", "").startswith("/") else ""
        for uri in fields.get("URIs", "").split():
            for suite in fields.get("Suites", "").split():
                out.append(f"deb-src {opts}{uri} {suite} {fields.get('Components', 'main')}")
    return out


def _run(cmd, log, timeout_s, cwd=None, what=None) -> subprocess.CompletedProcess:
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise EnvError(f"{what or cmd[0]} took more than {timeout_s:.0f}s")
    return p


def ensure_nginx_select_poll(log=print) -> str:
    """Path of an nginx binary with the select and poll modules (built once)."""
    installed = _first_line(["nginx", "-v"])
    ver = nginx_upstream_version(installed)
    if not ver:
        raise EnvError(f"cannot tell the installed nginx version from {installed!r}")
    home = os.path.join(CACHE_DIR, f"nginx-{ver}-select-poll")
    binary = os.path.join(home, f"nginx-{ver}", "objs", "nginx")
    if os.access(binary, os.X_OK) and "--with-poll_module" in _run([binary, "-V"], log, 10).stderr:
        return binary
    ensure_commands(["gcc", "make", "tar"], log)
    os.makedirs(home, exist_ok=True)
    tarball = os.path.join(home, f"nginx_{ver}.orig.tar.gz")
    if not os.path.exists(tarball):
        if os.geteuid() != 0:
            raise EnvError("building nginx with select/poll needs apt-get source as root (or put "
                           f"nginx_{ver}.orig.tar.gz in {home})")
        log(f"fetching nginx {ver} source (Debian source package, private deb-src list) ...")
        apt = os.path.join(home, "apt")
        os.makedirs(os.path.join(apt, "lists", "partial"), exist_ok=True)
        lines = []
        for path in ("/etc/apt/sources.list.d/debian.sources",):
            if os.path.exists(path):
                with open(path) as f:
                    lines += deb_src_lines(f.read())
        if os.path.exists("/etc/apt/sources.list"):
            with open("/etc/apt/sources.list") as f:
                lines += [ln.replace("deb ", "deb-src ", 1) for ln in f if ln.startswith("deb ")]
        if not lines:
            raise EnvError("no Debian apt sources found to fetch nginx's source package from")
        with open(os.path.join(apt, "sources.list"), "w") as f:
            f.write("\n".join(lines) + "\n")
        opts = ["-o", f"Dir::Etc::SourceList={apt}/sources.list", "-o", "Dir::Etc::SourceParts=/nonexistent",
                "-o", f"Dir::State::Lists={apt}/lists"]  # fmt: skip
        p = _run(["apt-get", "-qq", *opts, "update"], log, 600, what="apt-get update (deb-src)")
        if p.returncode != 0:
            raise EnvError(f"apt-get update (deb-src) failed: {p.stderr.strip()[-500:]}")
        p = _run(["apt-cache", *opts, "showsrc", "nginx"], log, 60)
        versions = [v for v in re.findall(r"^Version: (\S+)", p.stdout, re.M) if v.split("-")[0] == ver]
        # The newest first; a version the index lists but the mirror lacks
        # may still leave its (shared) upstream tarball behind.
        for v in sorted(set(versions), key=versions.index, reverse=True):
            _run(["apt-get", "-qq", *opts, "source", "--download-only", f"nginx={v}"], log, 600, cwd=home)
            if os.path.exists(tarball):
                break
        if not os.path.exists(tarball):
            raise EnvError(f"could not fetch nginx_{ver}.orig.tar.gz with apt-get source (versions tried: {versions})")
    log(f"building nginx {ver} with --with-select_module --with-poll_module (once, into {home}) ...")
    p = _run(["tar", "xzf", tarball], log, 120, cwd=home)
    if p.returncode != 0:
        raise EnvError(f"tar xzf {tarball} failed: {p.stderr.strip()[-300:]}")
    src = os.path.join(home, f"nginx-{ver}")
    configure = ["./configure", f"--prefix={home}/prefix", "--with-select_module", "--with-poll_module",
                 "--without-http_rewrite_module", "--without-http_gzip_module", "--without-http_auth_basic_module",
                 f"--with-cc-opt={NGINX_CC_OPT}", f"--with-ld-opt={NGINX_LD_OPT}"]  # fmt: skip
    for cmd in (configure, ["make", f"-j{os.cpu_count() or 2}"]):
        p = _run(cmd, log, 1200, cwd=src)
        if p.returncode != 0:
            raise EnvError(f"{' '.join(cmd[:1])} for nginx failed: {(p.stdout + p.stderr).strip()[-1500:]}")
    if not os.access(binary, os.X_OK):
        raise EnvError(f"nginx build left no binary at {binary}")
    return binary
