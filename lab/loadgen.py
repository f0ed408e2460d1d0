"""`weft load` as the lab's open-loop instrument (httperf semantics).

The drivers in drivers.py answer "N keep-alive connections for D seconds";
the event-mechanism experiments need more of `weft load`'s JSON: the offered
rate the client actually kept (sessions started per second), the reply rate
in steady state (per-second samples inside the arrival period, not the drain
after it), errors by kind, response times, the client's own CPU, and idle
connections held. This module runs `weft load` (to completion, or in the
background until stopped with SIGTERM, which makes it finish in-flight
requests and still write its JSON) and turns the document into one row.

Everything except the process handling is pure and unit-tested.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
from dataclasses import dataclass

LOCAL_ADDRS = "127.0.0.2-127.0.0.17"  # docs/load.md: past ~10k conn/s one source address is not enough


class LoadError(RuntimeError):
    pass


def steady(samples: list[float], duration_s: float) -> float | None:
    """Mean of the per-second samples wholly inside the arrival period,
    skipping the first (start-up): samples[1 : floor(D)]. Falls back to all
    samples of the arrival period for runs of two seconds or less."""
    n = int(math.floor(duration_s + 1e-9))
    inside = samples[1:n] if n >= 3 else samples[:max(n, 1)]
    return sum(inside) / len(inside) if inside else None


CLIENT_ERRORS = ("fd_unavailable", "addr_unavailable")


def point(doc: dict, *, target: float, duration_s: float, calls_per_session: float = 1.0, processes: int = 1) -> dict:
    """One open-loop run as a flat row.

    target: offered requests/s; sessions are offered at target / calls_per_session.
    offered: sessions the client started per second of the arrival period,
    times calls_per_session (what the client really offered)."""
    errors = {k: int(v) for k, v in doc.get("errors", {}).items()}
    replies = doc["replies"]
    cpu = doc.get("cpu", {})
    client_cpu = float(cpu.get("user_s", 0.0)) + float(cpu.get("sys_s", 0.0))
    sessions = int(doc.get("sessions", doc.get("connections", 0)))
    rt = doc.get("response_time_ms", {})
    row = {
        "target": target,
        "offered": sessions * calls_per_session / duration_s if duration_s > 0 else None,
        "request_rate": steady(doc.get("request_rate", {}).get("samples", []), duration_s),
        "reply_rate": steady(doc.get("reply_rate", {}).get("samples", []), duration_s),
        "replies": int(replies.get("total", 0)),
        "replies_2xx": int(replies.get("2xx", 0)),
        "requests": int(doc.get("requests", 0)),
        "sessions": sessions,
        "errors": sum(errors.values()),
        "timeouts": errors.get("timeout", 0),
        "client_errors": sum(errors.get(k, 0) for k in CLIENT_ERRORS),
        "rt_mean_ms": rt.get("mean"),
        "rt_p50_ms": rt.get("p50"),
        "rt_p99_ms": rt.get("p99"),
        "client_cpu_s": client_cpu,
        "run_s": float(doc.get("duration_s", duration_s)),
        "max_open": doc.get("max_open_connections"),
        "idle_held": doc.get("idle", {}).get("held", 0),
        "idle_reopened": doc.get("idle", {}).get("reopened", 0),
        "processes": processes,
    }
    row["client_limited"] = client_limited(row, duration_s)
    return row


def client_limited(row: dict, duration_s: float) -> str:
    """Why this point may measure the client rather than the server ('' when
    it does not): it ran out of descriptors or ports, started fewer sessions
    than offered, or its processes (one thread each) were busy most of the run."""
    why = []
    if row["client_errors"]:
        why.append(f"{row['client_errors']} client-side errors (descriptors/ports)")
    if row["offered"] is not None and row["target"] and row["offered"] < 0.98 * row["target"]:
        why.append(f"offered {row['offered']:.0f}/s of {row['target']:.0f}/s")
    if row["client_cpu_s"] > 0.9 * row.get("processes", 1) * max(row["run_s"], duration_s):
        why.append(f"client CPU {row['client_cpu_s']:.1f}s in {row['run_s']:.1f}s")
    return "; ".join(why)


def sweep_rates(peak: float, fractions, step: int = 500) -> list[int]:
    """Offered rates as fractions of a probed peak, rounded to `step`, distinct, ascending."""
    out = sorted({max(step, int(round(peak * f / step)) * step) for f in fractions})
    return out


def peak_of(rows: list[dict], key: str = "reply_rate") -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return max(vals) if vals else None


def count_established(proc_net_tcp: str, port: int) -> int:
    """ESTABLISHED sockets whose local port is `port` in /proc/net/tcp text
    (the server's side of its connections, accepted or still queued)."""
    n = 0
    for line in proc_net_tcp.splitlines()[1:]:
        f = line.split()
        if len(f) > 3 and f[3] == "01" and f[1].rsplit(":", 1)[-1] == f"{port:04X}":
            n += 1
    return n


def established(port: int) -> int:
    with open("/proc/net/tcp") as f:
        return count_established(f.read(), port)


def shown(cmd: list[str]) -> list[str]:
    """A load command as the summary shows it: URL, --json FILE and --quiet
    left out, the binary as `weft`."""
    out, skip = [], False
    for i, c in enumerate(cmd):
        if skip:
            skip = False
            continue
        if c == "--json":
            skip = True
            continue
        if c == "--quiet":
            continue
        out.append("weft" if i == 0 else ("URL" if c.startswith("http://") else c))
    return out


def command(weft: str, url: str, args: list[str], json_path: str) -> list[str]:
    return [weft, "load", url, *args, "--quiet", "--json", json_path]


def run(weft: str, url: str, args: list[str], json_path: str, timeout_s: float) -> dict:
    """Run `weft load` to completion; its JSON document (with the command)."""
    cmd = command(weft, url, args, json_path)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, start_new_session=True)
    except subprocess.TimeoutExpired as e:
        raise LoadError(f"weft load did not finish in {timeout_s:.0f}s: {' '.join(cmd)}") from e
    if p.returncode != 0:
        raise LoadError(f"weft load exited {p.returncode}: {p.stderr.strip()[-500:]}")
    return _read(json_path, cmd)


def _read(json_path: str, cmd: list[str]) -> dict:
    try:
        with open(json_path) as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise LoadError(f"no JSON from {' '.join(cmd)}: {e}") from e
    doc["_command"] = cmd
    return doc


@dataclass
class Background:
    """`weft load` running in its own session until `finish()`."""

    popen: subprocess.Popen
    cmd: list[str]
    json_path: str

    @classmethod
    def start(cls, weft: str, url: str, args: list[str], json_path: str) -> "Background":
        cmd = command(weft, url, args, json_path)
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)  # fmt: skip
        return cls(p, cmd, json_path)

    def finish(self, timeout_s: float) -> dict:
        """SIGTERM (stop starting sessions, finish what is in flight, write
        the JSON), wait; SIGKILL the group past `timeout_s`."""
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            _, err = self.popen.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise LoadError(f"weft load ignored SIGTERM for {timeout_s:.0f}s: {' '.join(self.cmd)}")
        if self.popen.returncode not in (0, 130, -signal.SIGTERM):
            raise LoadError(f"weft load exited {self.popen.returncode}: {(err or '').strip()[-500:]}")
        return _read(self.json_path, self.cmd)

    def kill(self) -> None:
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.popen.wait(timeout=10)


def wait_established(port: int, want: int, timeout_s: float, poll_s: float = 0.25, settle_s: float = 3.0) -> int:
    """Wait until `want` connections to `port` are established, the count
    stops growing for `settle_s` (a server that holds no more), or the time
    is up; the count reached."""
    deadline = time.monotonic() + timeout_s
    n = established(port)
    last_growth = time.monotonic()
    while n < want and time.monotonic() < deadline and time.monotonic() - last_growth < settle_s:
        time.sleep(poll_s)
        m = established(port)
        if m > n:
            last_growth = time.monotonic()
        n = m
    return n


def _sum_samples(lists: list[list[float]]) -> list[float]:
    n = max((len(x) for x in lists), default=0)
    return [sum(x[i] for x in lists if i < len(x)) for i in range(n)]


def merge(docs: list[dict]) -> dict:
    """Several `weft load` processes that drove one server together, as one
    document: counts, per-second samples and CPU add up; the run lasts as
    long as the longest; the mean response time is weighted by replies, the
    percentiles are the worst process's (an upper bound)."""
    if len(docs) == 1:
        return docs[0]
    out: dict = {"requests": sum(d.get("requests", 0) for d in docs)}
    out["replies"] = {k: sum(d["replies"].get(k, 0) for d in docs) for k in docs[0]["replies"]}
    out["errors"] = {k: sum(d.get("errors", {}).get(k, 0) for d in docs) for k in docs[0].get("errors", {})}
    for key in ("reply_rate", "request_rate"):
        out[key] = {"samples": _sum_samples([d.get(key, {}).get("samples", []) for d in docs])}
    for key in ("sessions", "connections", "max_open_connections"):
        out[key] = sum(d.get(key, 0) or 0 for d in docs)
    out["duration_s"] = max(float(d.get("duration_s", 0)) for d in docs)
    out["cpu"] = {k: sum(float(d.get("cpu", {}).get(k, 0)) for d in docs) for k in ("user_s", "sys_s")}
    total = out["replies"].get("total", 0)
    rts = [d.get("response_time_ms", {}) for d in docs]
    rt: dict = {}
    if total:
        rt["mean"] = sum((r.get("mean") or 0) * d["replies"].get("total", 0) for r, d in zip(rts, docs)) / total
    for k in ("p50", "p90", "p99", "p999", "max"):
        vals = [r[k] for r in rts if r.get(k) is not None]
        if vals:
            rt[k] = max(vals)
    out["response_time_ms"] = rt
    out["idle"] = {k: sum(d.get("idle", {}).get(k, 0) for d in docs) for k in ("held", "reopened")}
    out["processes"] = len(docs)
    return out


def split_args(args: list[str], processes: int, index: int) -> list[str]:
    """One process's share of a load: `--rate R` and `--clients N` divided
    (rates evenly, clients as evenly as integers go), its own `--seed`."""
    out = list(args)
    for flag in ("--rate", "--clients"):
        if flag in out:
            i = out.index(flag) + 1
            if flag == "--rate":
                out[i] = f"{float(out[i]) / processes:g}"
            else:
                n = int(out[i])
                out[i] = str(n // processes + (1 if index < n % processes else 0))
    return out + ["--seed", str(index + 1)]


def run_split(weft: str, url: str, args: list[str], json_dir: str, tag: str, processes: int, timeout_s: float) -> dict:
    """The same load from `processes` weft load processes at once (each with
    its own 20,000 descriptors and its own core to run on), merged."""
    if processes == 1:
        return run(weft, url, args, os.path.join(json_dir, f"{tag}.json"), timeout_s)
    bgs = [Background.start(weft, url, split_args(args, processes, i), os.path.join(json_dir, f"{tag}-{i}.json"))
           for i in range(processes)]  # fmt: skip
    docs = []
    try:
        for b in bgs:
            try:
                b.popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                raise LoadError(f"weft load did not finish in {timeout_s:.0f}s: {' '.join(b.cmd)}")
            err = b.popen.stderr.read() if b.popen.stderr else ""
            if b.popen.returncode != 0:
                raise LoadError(f"weft load exited {b.popen.returncode}: {err.strip()[-500:]}")
            docs.append(_read(b.json_path, b.cmd))
    finally:
        for b in bgs:
            b.kill()
    doc = merge(docs)
    doc["_command"] = docs[0]["_command"] + [f"(x{processes} processes, each with its share of --rate/--clients)"]
    return doc
