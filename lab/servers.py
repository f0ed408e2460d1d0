"""Starting and stopping the servers under test: weft and the anchors.

Every server runs in its own session (process group) so the whole tree (nginx's
master and worker) can be signalled and, if it ignores SIGTERM, killed. A
`ServerPool` remembers what it started and stops all of it on exit, on error
and on Ctrl-C. Ports are picked free on 127.0.0.1 (weft binds port 0 itself and
prints the address). Anchor configurations come from `lab/anchors/` (copies of
the shared templates with `@PORT@` added) rendered into a scratch directory.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field

from . import proc

LAB_DIR = os.path.dirname(os.path.abspath(__file__))
ANCHOR_DIR = os.path.join(LAB_DIR, "anchors")

# How each anchor program runs: its command line and Debian package, by binary.
_PROGRAMS = {
    "nginx": (["nginx", "-c", "{conf}", "-p", "{run}"], "nginx-light"),
    "h2o": (["h2o", "-c", "{conf}"], "h2o"),
    "lighttpd": (["lighttpd", "-D", "-f", "{conf}"], "lighttpd"),
    "haproxy": (["haproxy", "-f", "{conf}", "-db"], "haproxy"),
    "varnishd": (["varnishd", "-F", "-a", "127.0.0.1:{port}", "-f", "{conf}", "-s", "malloc,256m", "-p", "thread_pools=1", "-n", "{run}/varnish"], "varnish"),
    "squid": (["squid", "-N", "-f", "{conf}"], "squid"),
}


def _anchor(binary: str, template: str) -> dict:
    """An anchor server: `binary` (see _PROGRAMS) run on the config `template`."""
    cmd, package = _PROGRAMS[binary]
    return {"template": template, "cmd": list(cmd), "package": package, "binary": binary}


# Anchor kinds: config template, command line, Debian package, version command.
ANCHORS = {
    "nginx": _anchor("nginx", "nginx_static_w1.conf"),
    "nginx-nosendfile": _anchor("nginx", "nginx_static_w1_nosendfile.conf"),
    "h2o": _anchor("h2o", "h2o_static.conf"),
    "lighttpd": _anchor("lighttpd", "lighttpd_static.conf"),
    # Proxy runs: the origin, and the proxies weft is measured against. The
    # proxies' templates name their upstream with @ORIGIN_HOST@/@ORIGIN_PORT@
    # (ServerSpec options "origin": (host, port)).
    "nginx-origin": _anchor("nginx", "nginx_origin.conf"),
    "nginx-proxy": _anchor("nginx", "nginx_proxy.conf"),
    "haproxy-splice": _anchor("haproxy", "haproxy_splice.cfg"),
    "haproxy-copy": _anchor("haproxy", "haproxy_nosplice.cfg"),
    "haproxy-tcp-splice": _anchor("haproxy", "haproxy_tcp_splice.cfg"),
    "haproxy-tcp-copy": _anchor("haproxy", "haproxy_tcp_nosplice.cfg"),
    # Cluster front-ends (lard-cluster): @SERVERS@ holds the back-ends'
    # `server` lines (ServerSpec options "values").
    "haproxy-front-rr": _anchor("haproxy", "haproxy_front_roundrobin.cfg"),
    "haproxy-front-uri": _anchor("haproxy", "haproxy_front_uri.cfg"),
    "nginx-front-hash": _anchor("nginx", "nginx_front_hash.conf"),
    "varnish-hit": _anchor("varnishd", "varnish_hit.vcl"),
    "varnish-pass": _anchor("varnishd", "varnish_pass.vcl"),
    "squid-forward": _anchor("squid", "squid_forward.conf"),
    "squid-reverse": _anchor("squid", "squid_reverse.conf"),
}

# weft's own servers: the subcommand each ServerSpec kind runs.
WEFT_KINDS = {"weft": "serve", "weft-proxy": "proxy", "weft-origin": "origin", "weft-front": "front"}


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the kernel's choice for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def render_template(text: str, values: dict[str, str]) -> str:
    """Replace @KEY@ placeholders; every placeholder must have a value."""
    out = text
    for k, v in values.items():
        out = out.replace(f"@{k}@", str(v))
    left = re.findall(r"@[A-Z_]+@", out)
    if left:
        raise ValueError(f"unreplaced placeholders: {sorted(set(left))}")
    return out


def slug(label: str) -> str:
    """A file-name-safe form of a server label."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-") or "server"


def edit_config(text: str, edits) -> str:
    """Apply (old, new) replacements to a rendered configuration; each `old`
    must occur (a template that changed under an experiment fails loudly
    instead of silently measuring the default)."""
    for old, new in edits:
        if old not in text:
            raise ValueError(f"configuration edit: {old!r} not found")
        text = text.replace(old, new)
    return text


def wait_for_port(host: str, port: int, timeout_s: float, popen: subprocess.Popen | None = None) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if popen is not None and popen.poll() is not None:
            return False
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


@dataclass
class ServerSpec:
    """One configuration to measure: a label, the server kind, and its options.

    kind is "weft" (`weft serve`; options: event, send, workers, extra = list
    of flags), "weft-proxy" / "weft-origin" (`weft proxy` / `weft origin`;
    options: workers, event, extra), an anchor name from ANCHORS (options:
    origin = (host, port) for the proxies' upstream, values = {KEY: text}
    for further @KEY@ placeholders of the template, binary = another build
    of the same server, edits = [(old, new), ...] applied to the rendered
    configuration, see `edit_config`), or "process" (started with
    `ServerPool.start_process`)."""

    label: str
    kind: str
    options: dict = field(default_factory=dict)

    def describe(self) -> str:
        o = self.options
        if self.kind == "weft":
            return f"weft serve --event {o.get('event', 'epoll')} --send {o.get('send', 'auto')}"
        if self.kind in WEFT_KINDS:
            return " ".join([f"weft {WEFT_KINDS[self.kind]}"] + list(o.get("extra", [])))
        if o.get("binary") or o.get("edits"):
            return f"{self.kind} (variant: {self.label})"
        return self.kind


@dataclass
class RunningServer:
    spec: ServerSpec
    popen: subprocess.Popen
    port: int
    command: list[str]
    admin: tuple[str, int] | None = None
    log_path: str = ""

    @property
    def pid(self) -> int:
        return self.popen.pid

    def cpu_ticks(self) -> int:
        return proc.tree_cpu_ticks(self.pid)

    def cpu_sample(self) -> proc.CpuSample:
        """CPU time of the server's process tree, in ns and ticks."""
        return proc.tree_cpu_sample(self.pid)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log_text(self) -> str:
        """What the server has printed on stderr so far (its log file)."""
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def admin_stats(self) -> dict | None:
        """weft's /stats document (None for anchors or without --admin)."""
        if not self.admin:
            return None
        url = f"http://{self.admin[0]}:{self.admin[1]}/stats"
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read())

    def alive(self) -> bool:
        return self.popen.poll() is None


class ServerError(RuntimeError):
    pass


class ServerPool:
    """Starts servers and guarantees they are stopped (context manager)."""

    def __init__(self, run_dir: str, www: str, weft_binary: str, log=print):
        self.run_dir = run_dir
        self.www = www
        self.weft_binary = weft_binary
        self.log = log
        self.running: list[RunningServer] = []

    def __enter__(self) -> "ServerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.stop_all()

    def start(self, spec: ServerSpec, timeout_s: float = 15.0, retries: int = 3) -> RunningServer:
        """Start `spec`; a bind that failed with EADDRINUSE is tried again
        after a pause: on a machine shared with other load runs, loopback can
        hold so many TIME_WAIT sockets that even port 0 finds no free port
        for a moment (seen: 131,072 TIME_WAIT, `Address already in use` on
        weft's admin port)."""
        for attempt in range(retries + 1):
            try:
                if spec.kind in WEFT_KINDS:
                    return self._start_weft(spec, timeout_s)
                return self._start_anchor(spec, timeout_s)
            except ServerError as e:
                if "Address already in use" not in str(e) or attempt == retries:
                    raise
                self.log(f"  {spec.label}: address in use, starting again in 5 s ({e})")
                time.sleep(5)
        raise AssertionError("unreachable")

    def _spawn(self, cmd: list[str], log_path: str, capture_stdout: bool = False) -> subprocess.Popen:
        logf = open(log_path, "wb")
        try:
            return subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if capture_stdout else logf,
                stderr=logf,
                start_new_session=True,
            )
        finally:
            logf.close()

    def _start_weft(self, spec: ServerSpec, timeout_s: float) -> RunningServer:
        cmd = weft_command(self.weft_binary, spec, self.www)
        wants_admin = "--admin" in cmd
        log_path = os.path.join(self.run_dir, f"{slug(spec.label)}.log")
        p = self._spawn(cmd, log_path, capture_stdout=True)
        rs = RunningServer(spec, p, 0, cmd, log_path=log_path)
        self.running.append(rs)
        # weft prints `listening on ADDR` then `admin on ADDR` on stdout.
        deadline = time.monotonic() + timeout_s
        assert p.stdout is not None
        os.set_blocking(p.stdout.fileno(), False)
        buf = b""
        while time.monotonic() < deadline and (rs.port == 0 or (wants_admin and rs.admin is None)):
            if p.poll() is not None:
                raise ServerError(f"{spec.label} exited with {p.returncode}: {_tail(log_path)}")
            chunk = p.stdout.read()
            if chunk:
                buf += chunk
                m = re.search(rb"listening on 127\.0\.0\.1:(\d+)", buf)
                if m:
                    rs.port = int(m.group(1))
                a = re.search(rb"admin on ([\d.]+):(\d+)", buf)
                if a:
                    rs.admin = (a.group(1).decode(), int(a.group(2)))
            else:
                time.sleep(0.02)
        if rs.port == 0:
            raise ServerError(f"{spec.label} did not report its address in {timeout_s:g}s")
        return rs

    def _start_anchor(self, spec: ServerSpec, timeout_s: float) -> RunningServer:
        a = ANCHORS.get(spec.kind)
        if a is None:
            raise ServerError(f"unknown server kind {spec.kind!r}")
        run = os.path.join(self.run_dir, slug(spec.label))
        os.makedirs(run, exist_ok=True)
        # Anchors started as root write pid and log files after dropping to
        # an unprivileged user (h2o): their scratch directory is open to it.
        os.chmod(run, 0o777)
        port = free_port()
        with open(os.path.join(ANCHOR_DIR, a["template"])) as f:
            text = f.read()
        conf = os.path.join(run, a["template"])
        values = {"WWW": self.www, "RUN": run, "CONF": run, "PORT": str(port)}
        origin = spec.options.get("origin")
        if origin:
            values.update({"ORIGIN_HOST": origin[0], "ORIGIN_PORT": str(origin[1])})
        # Further placeholders of an experiment's own templates (e.g. a
        # front-end's list of back-ends, @SERVERS@).
        values.update(spec.options.get("values", {}))
        rendered = render_template(text, values)
        with open(conf, "w") as f:
            f.write(edit_config(rendered, spec.options.get("edits", ())))
        cmd = [c.format(conf=conf, run=run, port=port) for c in a["cmd"]]
        if spec.options.get("binary"):
            cmd[0] = spec.options["binary"]
        log_path = os.path.join(run, "stdout-stderr.log")
        p = self._spawn(cmd, log_path)
        rs = RunningServer(spec, p, port, cmd, log_path=log_path)
        self.running.append(rs)
        if not wait_for_port("127.0.0.1", port, timeout_s, p):
            if p.poll() is not None:
                raise ServerError(f"{spec.label} exited with {p.returncode}: {_tail(log_path)}")
            raise ServerError(f"{spec.label} is not listening on {port} after {timeout_s:g}s: {_tail(log_path)}")
        return rs

    def start_process(self, label: str, cmd: list[str]) -> RunningServer:
        """Any other process the pool must stop with the servers (e.g. a
        `weft load --idle` holding connections); stdout and stderr go to a log."""
        log_path = os.path.join(self.run_dir, f"{slug(label)}.log")
        p = self._spawn(cmd, log_path)
        rs = RunningServer(ServerSpec(label, "process"), p, 0, cmd, log_path=log_path)
        self.running.append(rs)
        return rs

    def stop(self, rs: RunningServer, timeout_s: float = 10.0) -> str:
        """SIGTERM the server's process group, SIGKILL it if it lingers.
        Returns what the server printed on stderr (weft: the exit counters)."""
        if rs in self.running:
            self.running.remove(rs)
        if rs.alive():
            _signal_group(rs.pid, signal.SIGTERM)
            try:
                rs.popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.log(f"  {rs.spec.label} ignored SIGTERM for {timeout_s:g}s: killing it")
                _signal_group(rs.pid, signal.SIGKILL)
                rs.popen.wait(timeout=5)
        # The group may hold children that outlived the leader (nginx workers).
        _signal_group(rs.pid, signal.SIGKILL)
        if rs.popen.stdout:
            rs.popen.stdout.close()
        return rs.log_text()

    def stop_all(self) -> None:
        for rs in list(self.running):
            try:
                self.stop(rs)
            except Exception as e:  # keep stopping the others
                self.log(f"  could not stop {rs.spec.label}: {e}")


def weft_command(binary: str, spec: ServerSpec, www: str = "") -> list[str]:
    """The command line that starts a weft ServerSpec on a free port (weft
    prints `listening on ADDR`, and `admin on ADDR` when it has --admin)."""
    o = spec.options
    sub = WEFT_KINDS[spec.kind]
    workers = ["--workers", str(o.get("workers", 1))]
    event = ["--event", o.get("event", "epoll")]
    if sub == "serve":
        head = [binary, "serve", www, "--listen", "127.0.0.1:0", *workers, *event, "--send", o.get("send", "auto"),
                "--admin", "127.0.0.1:0", "--stats-on-exit"]  # fmt: skip
    elif sub == "front":
        head = [binary, "front", "--listen", "127.0.0.1:0", *workers, *event, "--admin", "127.0.0.1:0"]
    elif sub == "proxy":
        head = [binary, "proxy", "--listen", "127.0.0.1:0", *workers, *event, "--admin", "127.0.0.1:0", "--stats-on-exit"]
    else:
        head = [binary, "origin", "--listen", "127.0.0.1:0", *workers, *event, "--stats-on-exit"]
    return head + list(o.get("extra", []))


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: str, n: int = 600) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:].strip()
    except OSError:
        return ""


def weft_exit_stats(stderr_text: str) -> dict | None:
    """The JSON line `weft serve --stats-on-exit` prints at exit."""
    for line in reversed(stderr_text.splitlines()):
        line = line.strip()
        if line.startswith("{") and '"syscalls"' in line:
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def stats_delta(before: dict, after: dict) -> dict:
    """Counters that moved between two weft /stats totals (nested dicts)."""
    out: dict = {}
    for k, v in after.items():
        b = before.get(k)
        if isinstance(v, dict):
            out[k] = stats_delta(b if isinstance(b, dict) else {}, v)
        elif isinstance(v, (int, float)):
            out[k] = v - (b if isinstance(b, (int, float)) else 0)
    return out
