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
