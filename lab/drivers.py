"""Load generators behind one interface: wrk, and `weft load`.

An experiment asks a driver for a closed-loop keep-alive run (N connections
for D seconds against one URL) and gets a `LoadResult` whatever tool ran it.

- `WrkDriver` runs Debian's wrk 4.1 with a Lua `done()` hook that prints the
  exact totals as one JSON line (no per-request Lua, so wrk keeps its fast
  path); the human summary is parsed as a fallback.
- `WeftLoadDriver` runs `weft load URL --clients N --duration D --json FILE`
  and reads the JSON contract of the brief (docs/load.md lists every key;
  `errors` holds counts only). It is deliberately small.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field

WRK_DONE_LUA = r"""
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"mean":%.2f,"stdev":%.2f,"max":%d,"p50":%d,"p90":%d,"p99":%d}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency.stdev, latency.max,
    latency:percentile(50), latency:percentile(90), latency:percentile(99)))
end
"""


@dataclass
class LoadResult:
    """What one load run measured, whichever tool ran it."""

    tool: str
    requests: int  # completed responses (any status)
    duration_s: float
    bytes_received: int
    non_2xx: int  # responses outside 2xx/3xx (wrk) or outside 2xx (weft load)
    errors: dict[str, int] = field(default_factory=dict)  # socket-level errors by kind
    latency_ms: dict[str, float] = field(default_factory=dict)  # mean, p50, p90, p99, max
    command: list[str] = field(default_factory=list)

    @property
    def rps(self) -> float:
        return self.requests / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def error_total(self) -> int:
        return sum(self.errors.values())

    def to_dict(self) -> dict:
        d = asdict(self)
        d["rps"] = self.rps
        return d


class DriverError(RuntimeError):
    pass


_UNITS_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_UNITS_B = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}


def _seconds(v: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m|h)", v)
    if not m:
        raise ValueError(f"bad duration {v!r}")
    return float(m.group(1)) * _UNITS_S[m.group(2)]


def _bytes(v: str) -> int:
    m = re.fullmatch(r"([\d.]+)(B|KB|MB|GB|TB)", v)
    if not m:
        raise ValueError(f"bad size {v!r}")
    return int(float(m.group(1)) * _UNITS_B[m.group(2)])


def parse_wrk(output: str, command: list[str] | None = None) -> LoadResult:
    """Parse wrk's output: the WRK_JSON line when present, else the summary text."""
    for line in output.splitlines():
        if line.startswith("WRK_JSON "):
            j = json.loads(line[len("WRK_JSON ") :])
            errors = dict(j["errors"])
            non_2xx = errors.pop("status")
            lat = j["latency_us"]
            return LoadResult(
                tool="wrk",
                requests=j["requests"],
                duration_s=j["duration_us"] / 1e6,
                bytes_received=j["bytes"],
                non_2xx=non_2xx,
                errors=errors,
                latency_ms={k: lat[k] / 1000.0 for k in ("mean", "p50", "p90", "p99", "max")},
                command=command or [],
            )
    m = re.search(r"^\s*(\d+) requests in ([\d.]+\w+), ([\d.]+\w+) read", output, re.M)
    if not m:
        raise DriverError(f"cannot parse wrk output:\n{output[-2000:]}")
    errors = {"connect": 0, "read": 0, "write": 0, "timeout": 0}
    e = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    if e:
        errors = dict(zip(("connect", "read", "write", "timeout"), map(int, e.groups())))
    n = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    lat: dict[str, float] = {}
    lm = re.search(r"Latency\s+([\d.]+\w+)\s+([\d.]+\w+)\s+([\d.]+\w+)", output)
    if lm:
        lat = {"mean": _seconds(lm.group(1)) * 1e3, "max": _seconds(lm.group(3)) * 1e3}
    return LoadResult(
        tool="wrk",
        requests=int(m.group(1)),
        duration_s=_seconds(m.group(2)),
        bytes_received=_bytes(m.group(3)),
        non_2xx=int(n.group(1)) if n else 0,
        errors=errors,
        latency_ms=lat,
        command=command or [],
    )


def parse_weft_load(doc: dict, command: list[str] | None = None) -> LoadResult:
    """Map the `weft load --json` contract onto a LoadResult."""
    replies = doc["replies"]
    total = int(replies["total"])
    ok = int(replies.get("2xx", 0))
    rt = doc.get("response_time_ms", {})
    return LoadResult(
        tool="weft-load",
        requests=total,
        duration_s=float(doc["duration_s"]),
        bytes_received=int(doc.get("bytes", {}).get("received", 0)),
        non_2xx=total - ok,
        errors={k: int(v) for k, v in doc.get("errors", {}).items()},
        latency_ms={k: float(rt[k]) for k in ("mean", "p50", "p90", "p99", "max") if k in rt},
        command=command or [],
    )



def run_client(what: str, cmd: list[str], duration_s: float) -> subprocess.CompletedProcess:
    """Run a load client for a `duration_s` run (30 s of slack); a hang or a
    failure becomes a DriverError naming `what`."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=duration_s + 30)
    except subprocess.TimeoutExpired as e:
        raise DriverError(f"{what} did not finish: {' '.join(cmd)}") from e
    if p.returncode != 0:
        raise DriverError(f"{what} exited {p.returncode}: {p.stderr.strip()[-500:]}")
    return p


class WrkDriver:
    """Closed-loop keep-alive load with wrk."""

    name = "wrk"

    def __init__(self, binary: str = "wrk"):
        self.binary = binary

    def available(self) -> bool:
        return shutil.which(self.binary) is not None

    def command(self, url: str, *, connections: int, duration_s: float, threads: int = 1, script: str | None = None) -> list[str]:
        cmd = [self.binary, f"-t{threads}", f"-c{connections}", f"-d{duration_s:g}s"]
        if script:
            cmd += ["-s", script]
        return cmd + [url]

    def run(self, url: str, *, connections: int, duration_s: float, threads: int = 1) -> LoadResult:
        with tempfile.TemporaryDirectory(prefix="weft-lab-wrk-") as d:
            script = os.path.join(d, "done.lua")
            with open(script, "w") as f:
                f.write(WRK_DONE_LUA)
            cmd = self.command(url, connections=connections, duration_s=duration_s, threads=threads, script=script)
            p = run_client("wrk", cmd, duration_s)
            shown = self.command(url, connections=connections, duration_s=duration_s, threads=threads)
            return parse_wrk(p.stdout, shown)


class WeftLoadDriver:
    """Closed-loop keep-alive load with `weft load` (contract-only adapter)."""

    name = "weft-load"

    def __init__(self, binary: str):
        self.binary = binary

    def available(self) -> bool:
        if not os.access(self.binary, os.X_OK):
            return False
        p = subprocess.run([self.binary, "load", "--help"], capture_output=True, timeout=10)
        return p.returncode == 0

    def command(self, url: str, *, connections: int, duration_s: float, threads: int = 1, json_path: str = "FILE") -> list[str]:
        return [
            self.binary, "load", url,
            "--clients", str(connections),
            "--duration", f"{duration_s:g}s",
            "--threads", str(threads),
            "--json", json_path,
            "--quiet",
        ]  # fmt: skip

    def run(self, url: str, *, connections: int, duration_s: float, threads: int = 1) -> LoadResult:
        with tempfile.TemporaryDirectory(prefix="weft-lab-load-") as d:
            out = os.path.join(d, "load.json")
            cmd = self.command(url, connections=connections, duration_s=duration_s, threads=threads, json_path=out)
            run_client("weft load", cmd, duration_s)
            with open(out) as f:
                doc = json.load(f)
            return parse_weft_load(doc, self.command(url, connections=connections, duration_s=duration_s, threads=threads))


def make_driver(name: str, weft_binary: str):
    if name == "wrk":
        return WrkDriver()
    if name in ("weft-load", "weft"):
        return WeftLoadDriver(weft_binary)
    raise ValueError(f"unknown driver {name!r} (expected wrk or weft-load)")
