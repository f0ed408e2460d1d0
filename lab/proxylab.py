"""What the proxy experiments share (proxy-splice, proxy-ssl, polymix, and
scripts/proxy_bench.py): the proxies as ServerSpecs, the load clients with
their own CPU time, one measured run through a proxy, and the arithmetic of
the targets.

A run through a proxy has three processes that pay for it: the proxy, the
origin behind it and the client in front. Splicing moves cost between them
(the kernel's work lands in whichever process's context runs it: with a
bounded client socket the origin's sends do the pacing), so every run records
all three:

- the proxy's and the origin's CPU from /proc (the scheduler's ns runtime of
  every thread, `proc.tree_cpu_sample`), sampled just before and just after
  the load;
- the client's own CPU from its rusage (wait4);
- weft's counters (bytes spliced, tee'd, copied, filled, served from cache;
  sessions by outcome; system calls) from its admin endpoint, as deltas.

Everything above `ProxyBed` is pure and unit-tested (lab/tests/test_proxylab.py).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from . import core, drivers, env, perfshares, proc, report, servers

KiB = 1024
MiB = 1024 * 1024

# weft counters a proxy run reports (deltas over the run), by what they say.
WEFT_BYTES = ("bytes_spliced", "bytes_teed", "bytes_copied", "bytes_filled", "bytes_cache", "tunnel_bytes_spliced", "tunnel_bytes_copied", "bytes_linked",
              "bytes_spliced_up", "sockmap_bytes", "sockmap_body_bytes")  # fmt: skip
WEFT_SESSIONS = ("sessions_splice", "sessions_keep_copy", "sessions_copy", "sessions_fallback", "sessions_no_pipe",
                 "sessions_client_abort", "sessions_orphan_fill", "sessions_upstream_abort",
                 "sockmap_sessions", "sockmap_bodies", "sockmap_declined")  # fmt: skip
WEFT_REQUESTS = ("requests", "hits", "misses", "revalidations", "revalidated", "uncacheable", "stored", "tunnels", "upstream_connects", "upstream_reused", "errors_502", "errors_504")
WEFT_SYSCALLS = ("read", "write", "writev", "send", "splice", "tee", "pipe", "accept", "connect", "close", "epoll_wait", "epoll_ctl", "setsockopt", "socket")


# ---------------------------------------------------------------------------
# Pure helpers


def size_name(n: int) -> str:
    """4096 → '4KiB', 1048576 → '1MiB', 100 → '100B' (file and URL names)."""
    if n >= MiB and n % MiB == 0:
        return f"{n // MiB}MiB"
    if n >= KiB and n % KiB == 0:
        return f"{n // KiB}KiB"
    return f"{n}B"


def size_label(n: int) -> str:
    """Human label: '4 KiB', '1 MiB'."""
    m = re.fullmatch(r"(\d+)(MiB|KiB|B)", size_name(n))
    assert m
    return f"{m.group(1)} {m.group(2)}"


_UNITS = {"B": 1, "KiB": KiB, "K": KiB, "KB": KiB, "MiB": MiB, "M": MiB, "MB": MiB}


def parse_size(s: str) -> int:
    """'64KiB', '1MiB', '100' → bytes (ValueError otherwise)."""
    m = re.fullmatch(r"\s*(\d+)\s*(B|K|KB|KiB|M|MB|MiB)?\s*", s)
    if not m:
        raise ValueError(f"bad size {s!r} (e.g. 64KiB, 1MiB)")
    return int(m.group(1)) * _UNITS[m.group(2) or "B"]


def ms_per_mib(us_per_request: float | None, size: int) -> float | None:
    """CPU µs per request of `size`-byte objects → ms of CPU per MiB moved."""
    if us_per_request is None or size <= 0:
        return None
    return us_per_request / 1000.0 / (size / MiB)


def saving(new: float | None, old: float | None) -> float | None:
    """Relative reduction of `new` against `old` (0.4 = 40 % less)."""
    if new is None or not old:
        return None
    return 1.0 - new / old


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or not b:
        return None
    return a / b


def best_of(values: dict[str, float | None]) -> tuple[str | None, float | None]:
    """The smallest value and its name (None entries skipped)."""
    have = [(v, k) for k, v in values.items() if v is not None]
    if not have:
        return None, None
    v, k = min(have)
    return k, v


@dataclass
class Plan:
    """Rounds of measurement points, each run for `duration_s` plus
    `overhead_s` of start-up and drain (for the time estimate)."""

    rounds: int
    duration_s: float
    points: list
    overhead_s: float = 1.0

    def estimate_s(self) -> float:
        return len(self.points) * self.rounds * (self.duration_s + self.overhead_s)


class Threshold:
    """What an issue's target is, whatever it compares: a measured `value`
    (None when it was not measured) that must reach its `limit`
    (`at_least`) or stay at or under it. Subclasses say how the value is
    made and put in words (`measured`)."""

    name: str
    limit: float

    @property
    def value(self) -> float | None:
        raise NotImplementedError

    @property
    def at_least(self) -> bool:
        raise NotImplementedError

    def measured(self, v: float) -> str:
        """The value `v` and the limit, in words."""
        raise NotImplementedError

    @property
    def met(self) -> bool | None:
        v = self.value
        if v is None:
            return None
        return v >= self.limit if self.at_least else v <= self.limit

    def describe(self) -> str:
        v = self.value
        if v is None:
            return f"{self.name}: not measured"
        return f"{self.name}: {self.measured(v)} — {'met' if self.met else 'MISSED'}"


@dataclass
class Target(Threshold):
    """One of the issue's targets, checked against a same-run anchor."""

    name: str
    weft: float | None
    anchor: float | None
    anchor_name: str
    limit: float  # weft / anchor must be at most this (or, for savings, at least)
    kind: str = "ratio"  # "ratio": weft/anchor <= limit; "saving": 1 - weft/anchor >= limit
    unit: str = "µs/req"

    @property
    def value(self) -> float | None:
        if self.kind == "saving":
            return saving(self.weft, self.anchor)
        return ratio(self.weft, self.anchor)

    @property
    def at_least(self) -> bool:
        return self.kind == "saving"

    def measured(self, v: float) -> str:
        if self.kind == "saving":
            return f"saving {100 * v:.0f} % (target ≥ {100 * self.limit:.0f} %)"
        return f"{v:.2f}× {self.anchor_name} (target ≤ {self.limit:g}×)"

    def to_dict(self) -> dict:
        return {"name": self.name, "weft": self.weft, "anchor": self.anchor, "anchor_name": self.anchor_name, "limit": self.limit,
                "kind": self.kind, "unit": self.unit, "value": self.value, "met": self.met}  # fmt: skip


def unique_paths(path: str, run_id: str, n: int) -> list[str]:
    """n distinct URLs for `path` (`path?u=RUN-i`): every request a miss even
    for a cacheable object; run_id keeps runs on one proxy apart."""
    sep = "&" if "?" in path else "?"
    return [f"{path}{sep}u={run_id}-{i}" for i in range(n)]


def write_url_file(file: str, paths: Sequence[str]) -> None:
    with open(file, "w") as f:
        f.write("\n".join(paths))
        f.write("\n")


def rotate(items: Sequence, k: int) -> list:
    """items rotated left by k (so no configuration always runs first)."""
    if not items:
        return []
    k %= len(items)
    return list(items[k:]) + list(items[:k])


def weft_counters(delta: dict, requests: int) -> dict:
    """The counters a proxy run reports, from a /stats delta: bytes by path,
    sessions by outcome, request outcomes, system calls per request."""
    if not delta:
        return {}
    out: dict = {k: delta.get(k, 0) for k in WEFT_BYTES + WEFT_SESSIONS + WEFT_REQUESTS}
    calls = delta.get("syscalls", {})
    out["syscalls_per_req"] = {k: calls.get(k, 0) / requests for k in WEFT_SYSCALLS if calls.get(k)} if requests else {}
    return out


def body_paths(counters: dict) -> str:
    """Share of body bytes by path: 'splice 97% + copy 3%' (tee'd bytes are
    also spliced: KeepCopy shows as 'splice' with its tee share beside)."""
    if not counters:
        return "–"
    spliced, copied, cache = counters.get("bytes_spliced", 0), counters.get("bytes_copied", 0), counters.get("bytes_cache", 0)
    tunnel_s, tunnel_c = counters.get("tunnel_bytes_spliced", 0), counters.get("tunnel_bytes_copied", 0)
    kernel = counters.get("sockmap_body_bytes", 0) + counters.get("sockmap_bytes", 0)
    parts = [("splice", spliced + tunnel_s), ("copy", copied + tunnel_c), ("cache", cache), ("sockmap", kernel)]
    total = sum(v for _, v in parts)
    if not total:
        return "–"
    s = " + ".join(f"{name} {100 * v / total:.0f}%" for name, v in parts if v)
    teed = counters.get("bytes_teed", 0)
    if teed:
        s += f" (tee'd {100 * teed / total:.0f}%)"
    return s


def sessions_per_request(counters: dict, requests: int) -> str:
    """Splice sessions by outcome per request: 'splice 0.12, copy 0.23' ('–' for none)."""
    n = requests or 1
    s = ", ".join(f"{k.removeprefix('sessions_')} {counters[k] / n:.2f}" for k in WEFT_SESSIONS if counters.get(k))
    return s or "–"


def calls_per_request(counters: dict, floor: float = 0.01) -> str:
    """System calls per request by kind, most frequent first, those under `floor` left out."""
    spr = counters.get("syscalls_per_req", {})
    return ", ".join(f"{k} {v:.2f}" for k, v in sorted(spr.items(), key=lambda kv: -kv[1]) if v >= floor)


def weft_rows(problems: list) -> int:
    """How many of `problems` ((row, reasons) pairs) are weft's own runs, not an anchor's."""
    return sum(1 for r, _ in problems if str(r.get("proxy", "")).startswith("weft"))


def run_problems(row: dict) -> list[str]:
    """What was wrong with one run: non-2xx answers, socket errors, short bodies."""
    out = []
    if row.get("non_2xx"):
        out.append(f"{row['non_2xx']} non-2xx")
    if row.get("errors"):
        out.append(f"{row['errors']} errors")
    size = row.get("size_bytes")
    bpr = row.get("body_bytes_per_reply")
    if size and bpr is not None and bpr < size * 0.999:
        out.append(f"{bpr:.0f} body bytes per reply < {size}")
    if not row.get("requests"):
        out.append("no replies")
    return out


def median_rows(rows: Sequence[dict], keys: Sequence[str], fields: Sequence[str]) -> dict[tuple, dict]:
    """Median of `fields` per distinct `keys` tuple (None values skipped)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    out = {}
    for key, members in groups.items():
        m = {"n": len(members)}
        for f in fields:
            vals = [x[f] for x in members if x.get(f) is not None]
            m[f] = statistics.median(vals) if vals else None
        out[key] = m
    return out


def merge_parts(previous: dict | None, quick: bool, parts: list[str] | None, rows: list[dict], commands: dict) -> tuple[list[dict], dict]:
    """The rows and commands a summary covers after a run of the parts in `parts` (`--only`)
    (rows carry their part in "part"): the earlier runs.json's rows of the
    other parts (same quick/full form) and this run's. A run of every part
    (parts None) replaces everything."""
    if parts is None or not previous or bool(previous.get("quick")) != bool(quick):
        return list(rows), dict(commands)
    kept = [r for r in previous.get("runs", []) if r.get("part") not in parts]
    merged_commands = dict(previous.get("commands", {}))
    merged_commands.update(commands)
    return kept + list(rows), merged_commands


def runs_to_resummarize(lab) -> dict:
    """An experiment's runs.json for `python3 -m lab summarize NAME`, with the
    lab set to the form (quick or full) and versions it recorded."""
    doc = read_runs(lab.results_dir)
    if doc is None:
        raise FileNotFoundError(f"no readable {lab.results_dir}/runs.json")
    lab.quick = bool(doc.get("quick"))
    lab.versions = doc.get("versions", {})
    return doc


def read_runs(results_dir: str) -> dict | None:
    """An experiment's runs.json, or None when there is none (or it is unreadable)."""
    try:
        with open(os.path.join(results_dir, "runs.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class RunBook:
    """What a proxy experiment's run keeps as it goes, for its runs.json and
    summary: a row per measured run, the command line of every server it
    started (by label), and how many of its `total` runs are done, for the
    progress lines."""

    def __init__(self, total: int = 0):
        self.rows: list[dict] = []
        self.commands: dict[str, list[str]] = {}
        self.total, self.done = total, 0

    def start(self, pool: servers.ServerPool, spec: servers.ServerSpec) -> servers.RunningServer:
        """Start `spec` in `pool`, keeping its command line under its label."""
        rs = pool.start(spec)
        self.commands[spec.label] = rs.command
        return rs

    def add(self, row: dict) -> str:
        """Keep one measured run's row; its `[done/total]` progress tag."""
        self.rows.append(row)
        self.done += 1
        return f"[{self.done}/{self.total}]"

    def merged(self, lab) -> tuple[list[dict], dict]:
        """The rows and commands the summary covers: this run's, and after a
        run of some parts (`--only`) the other parts' from runs.json
        (`merge_parts`)."""
        return merge_parts(read_runs(lab.results_dir), lab.quick, lab.only, self.rows, self.commands)


# ---------------------------------------------------------------------------
# Load clients with their own CPU time


@dataclass
class ClientRun:
    """One load client run: what it measured and what it cost itself."""

    load: drivers.LoadResult
    cpu_s: float  # the client's utime + stime (wait4)
    wall_s: float
    doc: dict = field(default_factory=dict)  # weft load's JSON report (empty for wrk)


class ClientError(drivers.DriverError):
    pass


def run_command(cmd: list[str], timeout_s: float) -> tuple[str, str, int, float, float]:
    """Run `cmd`; (stdout, stderr, exit code, CPU s of the child, wall s).
    Killed (ClientError) when it outlives `timeout_s`."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    out_chunks: list[bytes] = []
    err_chunks: list[bytes] = []

    def pump(src, dst):
        for chunk in iter(lambda: src.read(65536), b""):
            dst.append(chunk)

    readers = [threading.Thread(target=pump, args=(p.stdout, out_chunks), daemon=True),
               threading.Thread(target=pump, args=(p.stderr, err_chunks), daemon=True)]  # fmt: skip
    for t in readers:
        t.start()
    killed = threading.Event()

    def kill():
        killed.set()
        try:
            os.killpg(p.pid, 9)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout_s, kill)
    timer.start()
    try:
        _, status, ru = os.wait4(p.pid, 0)
    finally:
        timer.cancel()
    for t in readers:
        t.join(timeout=5)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    if killed.is_set():
        raise ClientError(f"{os.path.basename(cmd[0])} did not finish in {timeout_s:.0f}s: {' '.join(cmd)}")
    return b"".join(out_chunks).decode(errors="replace"), b"".join(err_chunks).decode(errors="replace"), p.returncode, ru.ru_utime + ru.ru_stime, wall


def wrk_script(prelude: str = "") -> str:
    """A wrk Lua script: `prelude` (wrk.path, request(), ...) and the done()
    hook that prints exact totals as JSON."""
    return (prelude.rstrip() + "\n" if prelude else "") + drivers.WRK_DONE_LUA


def run_wrk(url: str, *, connections: int, duration_s: float, scratch: str, prelude: str = "", threads: int = 1) -> ClientRun:
    """`wrk -tT -cC -dD -s SCRIPT URL`; the script adds `prelude` to the JSON hook.
    wrk takes whole seconds only: D is rounded, and at least 1."""
    duration_s = max(1, int(round(duration_s)))
    os.makedirs(scratch, exist_ok=True)
    script = os.path.join(scratch, f"wrk-{os.getpid()}-{time.monotonic_ns()}.lua")
    with open(script, "w") as f:
        f.write(wrk_script(prelude))
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration_s:g}s", "-s", script, url]
    try:
        out, err, code, cpu, wall = run_command(cmd, duration_s + 30)
    finally:
        os.unlink(script)
    if code != 0:
        raise ClientError(f"wrk exited {code}: {err.strip()[-500:]}")
    shown = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration_s:g}s"] + (["-s", "SCRIPT.lua"] if prelude else []) + [url]
    return ClientRun(drivers.parse_wrk(out, shown), cpu, wall)


def weft_load_command(weft: str, url: str, args: Sequence[str], json_path: str) -> list[str]:
    return [weft, "load", url, *args, "--json", json_path, "--quiet"]


def run_weft_load(weft: str, url: str, args: Sequence[str], *, scratch: str, timeout_s: float) -> ClientRun:
    """`weft load URL ARGS --json F`; its JSON report is kept whole in `doc`."""
    os.makedirs(scratch, exist_ok=True)
    path = os.path.join(scratch, f"load-{os.getpid()}-{time.monotonic_ns()}.json")
    cmd = weft_load_command(weft, url, args, path)
    try:
        out, err, code, cpu, wall = run_command(cmd, timeout_s)
        if code != 0:
            raise ClientError(f"weft load exited {code}: {err.strip()[-500:]}")
        with open(path) as f:
            doc = json.load(f)
    finally:
        if os.path.exists(path):
            os.unlink(path)
    shown = weft_load_command("weft", url, args, "FILE")
    return ClientRun(drivers.parse_weft_load(doc, shown), cpu, wall, doc)


# ---------------------------------------------------------------------------
# One measured run through a proxy


@dataclass
class Sample:
    """One load run through one proxy: the three processes' CPU and weft's counters."""

    client: ClientRun
    proxy_cpu_s: float
    origin_cpu_s: float
    weft: dict  # /stats delta (weft only)
    # Every kworker and ksoftirqd thread of the machine: where the kernel
    # runs work no process is charged for (a sockmap psock's sends).
    kthreads_cpu_s: float = 0.0

    @property
    def requests(self) -> int:
        return self.client.load.requests

    def us_per_request(self, cpu_s: float) -> float | None:
        n = self.requests
        return cpu_s * 1e6 / n if n else None

    def row(self, **keys) -> dict:
        """A flat result row: keys given, then the figures of the run."""
        ld = self.client.load
        n = ld.requests
        body = self.client.doc.get("bytes", {}).get("reply_body") if self.client.doc else None
        r = dict(keys)
        r.update({
            "requests": n,
            "duration_s": ld.duration_s,
            "rps": ld.rps,
            "proxy_us": self.us_per_request(self.proxy_cpu_s),
            "origin_us": self.us_per_request(self.origin_cpu_s),
            "client_us": self.us_per_request(self.client.cpu_s),
            "kthreads_us": self.us_per_request(self.kthreads_cpu_s),
            "proxy_cpu_s": self.proxy_cpu_s,
            "origin_cpu_s": self.origin_cpu_s,
            "client_cpu_s": self.client.cpu_s,
            "proxy_util": self.proxy_cpu_s / ld.duration_s if ld.duration_s else None,
            "latency_ms_mean": ld.latency_ms.get("mean"),
            "latency_ms_p99": ld.latency_ms.get("p99"),
            "non_2xx": ld.non_2xx,
            "errors": ld.error_total,
            "body_bytes_per_reply": (body / n if body is not None else ld.bytes_received / n) if n else None,
        })  # fmt: skip
        if "size_bytes" in keys and r["proxy_us"] is not None:
            r["proxy_ms_per_mib"] = ms_per_mib(r["proxy_us"], keys["size_bytes"])
        if self.weft:
            r["weft"] = weft_counters(self.weft, n)
        return r


def measure(proxy: servers.RunningServer, origin: servers.RunningServer | None, client: Callable[[], ClientRun],
            warmup: Callable[[], object] | None = None) -> Sample:  # fmt: skip
    """Run `warmup` (unmeasured), then `client` once; the proxy's and
    origin's CPU and weft's counters sampled just before and just after
    `client` (a warm-up inside `client` would be charged to its requests)."""
    for rs in (proxy, origin):
        if rs is not None and not rs.alive():
            raise servers.ServerError(f"{rs.spec.label} is not running")
    if warmup is not None:
        warmup()
    stats0 = proxy.admin_stats()
    p0 = proxy.cpu_sample()
    o0 = origin.cpu_sample() if origin else None
    k0 = proc.kernel_threads_ns()
    run = client()
    k1 = proc.kernel_threads_ns()
    p1 = proxy.cpu_sample()
    o1 = origin.cpu_sample() if origin else None
    stats1 = proxy.admin_stats()
    delta = servers.stats_delta(stats0["total"], stats1["total"]) if stats0 and stats1 else {}
    return Sample(
        client=run,
        proxy_cpu_s=proc.cpu_seconds_between(p0, p1),
        origin_cpu_s=proc.cpu_seconds_between(o0, o1) if o0 and o1 else 0.0,
        weft=delta,
        kthreads_cpu_s=max(k1 - k0, 0) / 1e9,
    )


def fetch(url: str, proxy: str | None = None, timeout_s: float = 10.0, headers: dict | None = None) -> tuple[int, int, dict]:
    """GET `url` (through the forward proxy HOST:PORT when given):
    (status, body length, response headers)."""
    handlers = [urllib.request.ProxyHandler({"http": f"http://{proxy}"} if proxy else {})]
    opener = urllib.request.build_opener(*handlers)
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with opener.open(req, timeout=timeout_s) as r:
            return r.status, len(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, 0, dict(e.headers or {})


def check_fetch(label: str, url: str, size: int, proxy: str | None = None) -> None:
    """One GET that must give 200 and `size` body bytes (a set-up check)."""
    status, n, _ = fetch(url, proxy)
    if status != 200 or n != size:
        raise servers.ServerError(f"{label}: GET {url} gave {status} with {n} bytes (expected 200, {size})")


# ---------------------------------------------------------------------------
# The proxies, as the experiments name them


def weft_reverse(label: str, origin: str, splice: str, *extra: str) -> servers.ServerSpec:
    return servers.ServerSpec(label, "weft-proxy", {"extra": ["--upstream", origin, "--splice", splice, *extra]})


def weft_forward(label: str, splice: str = "auto", *extra: str) -> servers.ServerSpec:
    return servers.ServerSpec(label, "weft-proxy", {"extra": ["--splice", splice, *extra]})


def anchor(label: str, kind: str, origin_port: int | None = None, origin_host: str = "127.0.0.1") -> servers.ServerSpec:
    opts = {"origin": (origin_host, origin_port)} if origin_port else {}
    return servers.ServerSpec(label, kind, opts)


def anchor_script(name: str, values: dict[str, str]) -> str:
    """A wrk Lua script from lab/anchors/ with its placeholders filled."""
    with open(os.path.join(servers.ANCHOR_DIR, name)) as f:
        return servers.render_template(f.read(), values)


# ---------------------------------------------------------------------------
# Markdown pieces


def write_summary(d: str, md: list[str], commands: dict[str, list[str]], load: list[str], load_title: str, versions: dict,
                  plots: list[str]) -> None:
    """End a proxy experiment's summary (server commands, load commands,
    versions, plots) and write it to `d`/summary.md."""
    # The load commands in a code block of their own, under `load_title`.
    loads = ["```", "", load_title, "", "```"] + load
    md += report.summary_end(commands, versions, more_commands=loads, plots=plots, raw=["runs.json", "runs.csv", "medians.csv"])
    report.write_summary(d, md)


def print_median_table(med: dict, sizes: Sequence[int], names: Sequence[str], header: str,
                       row: Callable[[str, dict], str]) -> None:
    """The benchmark scripts' table: `header`, then per size and server the
    size, and `row(name, medians)`."""
    print(header)
    for n in sizes:
        for name in names:
            print(f"{size_name(n):>7} {row(name, med[(n, name)])}")


def median_ratios(med: dict, n: int, pairs, digits: int = 2, key: str = "proxy_us") -> list[str]:
    """`x / y RATIO` of the medians' `key` at size `n`, for each pair where both were measured."""
    p = lambda name: med.get((n, name), {}).get(key)  # noqa: E731
    return [f"{x} / {y} {p(x) / p(y):.{digits}f}" for x, y in pairs if p(x) and p(y)]


def size_files(scratch: str, sizes: Sequence[int]) -> str:
    """A document root under `scratch` with one file per size, named by `size_name`."""
    return core.size_site(scratch, sizes, size_name)


def bench_url(rs: servers.RunningServer, path: str | Mapping[str, str], name: str, n: int) -> str:
    """The URL of size `n` on server `name` (`rs`): its path (`path`, or
    `path[name]`) followed by the size's name, or, where the path holds
    `{bytes}`, the path with the size in bytes there (an application's
    query: `app/x?size={bytes}`)."""
    p = path if isinstance(path, str) else path[name]
    if "{bytes}" in p:
        return f"http://{rs.addr}/{p.replace('{bytes}', str(n))}"
    return f"http://{rs.addr}/{p}{size_name(n)}"


def bench_rounds(a, running: dict, names: Sequence[str], sizes: Sequence[int], *, scratch: str, path: str | Mapping[str, str],
                 origin: servers.RunningServer | None, role: str, line: Callable[[int, int, str, dict], str]) -> list[dict]:
    """The A/B loop of scripts/serve_bench.py and scripts/proxy_bench.py:
    `a.rounds` rounds; in each, every size; for each, every server of
    `running` in an order rotated by the round (no server always first). A
    run is checked with one fetch of `bench_url`, warmed with wrk for
    `a.warmup` s when asked, then measured with wrk for `a.duration` s on
    `a.conns` connections. Returns the sample rows (the server's name under
    `role`); `line(round, size, name, row)` is printed to stderr after each.
    """
    samples = []
    for r in range(a.rounds):
        for n in sizes:
            for name in rotate(names, r):
                rs = running[name]
                url = bench_url(rs, path, name, n)
                check_fetch(name, url, n)

                def warmup():
                    run_wrk(url, connections=a.conns, duration_s=a.warmup, scratch=scratch)

                def client():
                    return run_wrk(url, connections=a.conns, duration_s=a.duration, scratch=scratch)

                s = measure(rs, origin, client, warmup if a.warmup else None)
                row = s.row(round=r + 1, size=n, size_bytes=n, **{role: name})
                samples.append(row)
                print(line(r, n, name, row), file=sys.stderr)
    return samples


def profile_runs(a, scratch: str, running: dict, names: Sequence[str], sizes: Sequence[int], path: str | Mapping[str, str],
                 origin: servers.RunningServer | None, role: str, paths: perfshares.Paths) -> list[dict]:  # fmt: skip
    """`--perf` of scripts/proxy_bench.py and scripts/serve_bench.py: one
    more run per size and server after the rounds (not in the medians), with
    `perf record -g` of the server's process tree over the middle 60 % of
    it; a row each (the server's name under `role`), with the shares of its
    samples under `paths` (`shares`)."""
    rows = []
    client = os.path.join(scratch, "client")
    for n in sizes:
        for name in names:
            rs = running[name]
            url = bench_url(rs, path, name, n)
            data = os.path.join(scratch, "perf.data")
            pids = ",".join(str(p) for p in proc.tree_pids(rs.pid))
            if a.warmup:
                run_wrk(url, connections=a.conns, duration_s=a.warmup, scratch=client)
            rec = perfshares.record(data, ["-p", pids], 0.2 * a.duration, 0.6 * a.duration)
            s = measure(rs, origin, lambda: run_wrk(url, connections=a.conns, duration_s=a.duration, scratch=client))
            rec.join()
            row = s.row(size=n, **{role: name})
            row["shares"] = {}
            if os.path.exists(data):
                row["shares"] = perfshares.shares(data, paths)
                os.remove(data)
            print(f"profiled {size_name(n):>7} {name:<15} {row['proxy_us']:8.1f} µs/req", file=sys.stderr)
            rows.append(row)
    return rows


def kernel_times(rows: Sequence[dict], med: dict, role: str) -> dict[tuple, float]:
    """Each profiled server's time in the kernel, µs per request: its median
    (`med[(size, name)]["proxy_us"]`) less its time in user space. What it
    would cost if its own code cost nothing, its system calls and their work
    left as they are: a floor that no change to its own code goes below.

    The time in user space is its samples' share there times the median, or
    times the profiled run's µs where that run cost more: perf's own work
    (in the kernel, at every context switch of a profiled thread) can make a
    run of many processes and switches dearer, and a user time read from
    that run as measured keeps the floor a floor (it only lowers it)."""
    floor = {}
    for r in rows:
        m = med.get((r["size"], r[role]), {}).get("proxy_us")
        if r["shares"] and m:
            user_us = r["shares"]["user"] / 100 * max(m, r.get("proxy_us") or 0)
            floor[(r["size"], r[role])] = max(m - user_us, 0.0)
    return floor


def print_profiles(rows: Sequence[dict], med: dict, role: str, paths: perfshares.Paths) -> dict[tuple, float]:
    """The table of `profile_runs`' rows: µs of the profiled run, shares,
    and the kernel time (`kernel_times`), which it returns."""
    print(f"\nwhere each {role}'s CPU went (perf record -g, one more run each, perf running; % of the {role}'s samples)")
    print(f"{'size':>7} {role:<15} {'µs/req':>7} {'user':>6}" + "".join(f" {name:>8}" for name, _ in paths) + f" {'kernel µs':>10}")
    floor = kernel_times(rows, med, role)
    for r in rows:
        sh = r["shares"]
        kernel = floor.get((r["size"], r[role]))
        print(f"{size_name(r['size']):>7} {r[role]:<15} {r['proxy_us']:7.1f} {sh.get('user', 0):5.1f}%"
              + "".join(f" {sh.get(name, 0.0):7.1f}%" for name, _ in paths)
              + (f" {kernel:10.1f}" if kernel else ""))  # fmt: skip
    print("(kernel µs: the median less the time in user space, read from the profiled run where it cost more; copies and receive work run inside the system calls)")
    return floor


def bench_sizes(prog: str, a) -> list[int]:
    """The sizes of a bench script's `--sizes`, after checking `--rounds`,
    `--duration` and `--baseline`; a bad value ends the script with one line."""
    try:
        sizes = [parse_size(s) for s in a.sizes.split(",")]
    except ValueError as e:
        raise SystemExit(f"{prog}: --sizes: {e}")
    if a.rounds < 1 or a.duration <= 0:
        raise SystemExit(f"{prog}: --rounds and --duration must be positive")
    if a.baseline and not os.access(a.baseline, os.X_OK):
        raise SystemExit(f"{prog}: --baseline {a.baseline}: not an executable")
    return sizes


def run_bench(prog: str, commands: Sequence[str], a, body: Callable[[core.Lab, str], object]):
    """`body(lab, weft binary)` in a scratch lab, for a bench script: the
    commands it needs checked, weft built unless `--weft` names one, every
    lab error turned into one line, the scratch directory removed after."""
    lab = core.Lab(prog.replace("_", "-"), quick=False)
    try:
        env.ensure_commands(list(commands), lab.log)
        weft = a.weft or env.build_weft(lab.log)
        if not os.access(weft, os.X_OK):
            raise SystemExit(f"{prog}: {weft} missing: run `cargo build --release` or pass --weft")
        return body(lab, weft)
    except (env.EnvError, servers.ServerError, ClientError) as e:
        raise SystemExit(f"{prog}: {e}")
    finally:
        lab.cleanup()


def checks(problems: Sequence[tuple[dict, list[str]]], run_name: Callable[[dict], str], ok: str) -> list[str]:
    """A summary's "Checks" section: one line per run with problems
    (`run_name(row)`: its problems), or the one line `ok`."""
    lines = [f"- {run_name(r)}: {', '.join(p)}" for r, p in problems]
    return ["", "## Checks", ""] + (lines or [f"- {ok}"])
