"""Measurement helpers of the booster experiment (paper 003's methods on
today's Linux): CPU pinning, RPS steering on the veth pair, the per-CPU cost
split sampled at a fixed interval, and the least-squares fits of Figure 10.

The origin runs alone on CPU 1 (`taskset`), everything else (load
generator, booster, fronts, caches, this process) on CPU 0. Each veth end
steers the packets it receives to its own host's CPU with RPS, as a NIC
interrupt would land on the receiving machine: the origin's TCP receive work
is then done, and counted, on CPU 1, the clients' on CPU 0 (without RPS,
veth runs the receiver's softirq work on the sender's CPU). The RPS
hand-off is an inter-processor interrupt: the "hardware interrupt" of this
network (there is no NIC), counted per CPU in /proc/interrupts (CAL).

`Sampler` reads, every `interval` seconds, CPU 1's line of /proc/stat (irq,
softirq; user and system too, which also count other tenants' processes on a
shared machine, so the origin's user/kernel split is its own utime/stime),
its NET_RX/NET_TX softirq counts
(/proc/softirqs) and interrupts (/proc/interrupts), the origin process's own
CPU time (schedstat, utime/stime), the origin namespace's TCP counters and
interface bytes (/proc/PID/net/...), and the origin's request count (weft's
load report or nginx's stub_status, fetched from inside the client's
namespace).
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
import time
import urllib.request

from . import proc

ORIGIN_CPU = 1
OTHER_CPU = 0
CLONE_NEWNET = 0x40000000
TICK = 1.0 / proc.CLK_TCK


def pinned(cpu: int, argv: list[str]) -> list[str]:
    """`argv` on CPU `cpu` only, at nice -10: on a shared machine, other
    sessions' builds land on that CPU too and would take an equal share of
    it from the pinned origin."""
    return ["nice", "-n", "-10", "taskset", "-c", str(cpu), *argv]


def enter_netns(name: str) -> None:
    """Move the calling thread into network namespace `name` (setns(2); a
    thread's network namespace is its own)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {name}")
    finally:
        os.close(fd)


def steer_receives(net, host: str, cpu: int) -> list[str]:
    """RPS: packets arriving at `host`'s interfaces are processed on `cpu`.
    Returns the interfaces set."""
    p = net.run(host, ["ls", "/sys/class/net"], timeout=10)
    names = [n for n in p.stdout.split() if n != "lo"]
    for n in names:
        net.run(host, ["sh", "-c", f"echo {1 << cpu:x} > /sys/class/net/{n}/queues/rx-0/rps_cpus"], timeout=10)
    return names


def cpu_line(cpu: int) -> dict:
    """CPU `cpu`'s /proc/stat times, in ticks."""
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith(f"cpu{cpu} "):
                v = [int(x) for x in line.split()[1:]]
                return {"user": v[0] + v[1], "system": v[2], "idle": v[3] + v[4], "irq": v[5], "softirq": v[6], "steal": v[7] if len(v) > 7 else 0}
    return {}


def softirqs(cpu: int) -> dict:
    out = {}
    with open("/proc/softirqs") as f:
        for line in f.readlines()[1:]:
            parts = line.split()
            if parts and parts[0].rstrip(":") in ("NET_RX", "NET_TX") and len(parts) > cpu + 1:
                out[parts[0].rstrip(":")] = int(parts[cpu + 1])
    return out


def interrupts(cpu: int) -> dict:
    """Device interrupts (numbered lines), function-call IPIs (CAL: RPS
    hand-offs among them), rescheduling IPIs and local timer, on `cpu`."""
    out = {"device": 0, "CAL": 0, "RES": 0, "LOC": 0}
    with open("/proc/interrupts") as f:
        ncpu = len(f.readline().split())
        for line in f:
            parts = line.split()
            if not parts or len(parts) <= cpu + 1:
                continue
            key = parts[0].rstrip(":")
            try:
                n = int(parts[cpu + 1])
            except ValueError:
                continue
            if key.isdigit() and len(parts) > ncpu:
                out["device"] += n
            elif key in out:
                out[key] += n
    return out


def snmp(pid: int) -> dict:
    """The namespace of `pid`: Tcp InSegs/OutSegs, TcpExt DelayedACKs, and
    bytes and packets over its non-loopback interfaces."""
    out: dict = {}
    for name, prefix, keys in (("snmp", "Tcp:", ("InSegs", "OutSegs")), ("netstat", "TcpExt:", ("DelayedACKs",))):
        try:
            with open(f"/proc/{pid}/net/{name}") as f:
                lines = [ln.split() for ln in f if ln.startswith(prefix)]
        except OSError:
            continue
        if len(lines) >= 2:
            row = dict(zip(lines[0][1:], lines[1][1:]))
            for k in keys:
                out[k] = int(row.get(k, 0))
    try:
        with open(f"/proc/{pid}/net/dev") as f:
            for line in f.readlines()[2:]:
                name, rest = line.split(":", 1)
                if name.strip() == "lo":
                    continue
                v = [int(x) for x in rest.split()]
                out["rx_bytes"] = out.get("rx_bytes", 0) + v[0]
                out["rx_packets"] = out.get("rx_packets", 0) + v[1]
                out["tx_bytes"] = out.get("tx_bytes", 0) + v[8]
                out["tx_packets"] = out.get("tx_packets", 0) + v[9]
    except (OSError, ValueError, IndexError):
        pass
    return out


def origin_requests(url: str) -> int | None:
    """Requests served so far: weft's load report (`/stats`, key `load`) or
    nginx's stub_status."""
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            body = r.read().decode()
    except OSError:
        return None
    if body.startswith("{"):
        try:
            return int(json.loads(body)["load"]["requests"])
        except (ValueError, KeyError):
            return None
    lines = body.splitlines()
    try:  # "server accepts handled requests" then the three numbers
        return int(lines[2].split()[2])
    except (IndexError, ValueError):
        return None


class Sampler(threading.Thread):
    """Samples every `interval` s until stopped; `points` are the differences
    between consecutive samples (one per interval)."""

    def __init__(self, origin_pid: int, requests_url: str | None, netns: str | None, interval: float):
        super().__init__(daemon=True)
        self.pid, self.url, self.netns, self.interval = origin_pid, requests_url, netns, interval
        self.raw: list[dict] = []
        self.stopping = threading.Event()

    def sample(self) -> dict:
        ns, ut, st = 0, 0, 0
        for p in self.pids:
            ns += proc._thread_ns(p, "/proc")[0]
            try:
                with open(f"/proc/{p}/stat") as f:
                    line = proc.parse_stat(f.read())
                ut, st = ut + line.utime, st + line.stime
            except (OSError, ValueError, IndexError):
                pass
        s = {"t": time.monotonic(), "cpu": cpu_line(ORIGIN_CPU), "sirq": softirqs(ORIGIN_CPU), "intr": interrupts(ORIGIN_CPU), "net": snmp(self.pid), "origin_ns": ns, "ut": (ut, st)}
        s["requests"] = origin_requests(self.url) if self.url else None
        return s

    def run(self) -> None:
        # The origin's processes, found once (nginx: master and worker).
        stats = proc._read_all_stats()
        self.pids = sorted(proc.descendants(self.pid, {p: s.ppid for p, s in stats.items()}))
        if self.netns:
            enter_netns(self.netns)
        next_at = time.monotonic()
        while not self.stopping.is_set():
            self.raw.append(self.sample())
            next_at += self.interval
            self.stopping.wait(max(next_at - time.monotonic(), 0))
        self.raw.append(self.sample())

    def stop(self) -> list[dict]:
        self.stopping.set()
        self.join(timeout=10)
        return points(self.raw)


def points(raw: list[dict]) -> list[dict]:
    """Per-interval figures from consecutive samples: CPU 1's busy fraction
    and its split, the origin's own CPU, rates."""
    out = []
    for a, b in zip(raw, raw[1:]):
        dt = b["t"] - a["t"]
        if dt <= 0:
            continue
        total = sum(b["cpu"].values()) - sum(a["cpu"].values())
        if total <= 0:
            continue
        frac = {k: (b["cpu"][k] - a["cpu"][k]) / total for k in ("user", "system", "irq", "softirq", "idle")}
        d = {k: b["net"].get(k, 0) - a["net"].get(k, 0) for k in ("InSegs", "OutSegs", "DelayedACKs", "tx_bytes", "rx_packets", "tx_packets")}
        req = None if a["requests"] is None or b["requests"] is None else b["requests"] - a["requests"]
        # Cores (CPU-seconds per second) of each part: the origin's own
        # threads (schedstat; utime/stime ticks for the user/kernel split),
        # and CPU 1's interrupt columns (network work steered there by
        # RPS, whoever was running). CPU 1's user/system columns also hold
        # whatever else runs there (other tenants' builds on a shared
        # machine): reported as `cpu1_other`, used for nothing else.
        cores = {k: frac[k] * total * TICK / dt for k in frac}
        origin = (b["origin_ns"] - a["origin_ns"]) / 1e9 / dt
        o_user, o_sys = (b["ut"][0] - a["ut"][0]) * TICK / dt, (b["ut"][1] - a["ut"][1]) * TICK / dt
        out.append({
            "t": round(a["t"], 3), "dt": round(dt, 3),
            "load": round(origin + cores["softirq"] + cores["irq"], 4),
            "user": round(o_user, 4), "system": round(o_sys, 4), "irq": round(cores["irq"], 4), "softirq": round(cores["softirq"], 4),
            "origin": round(origin, 4), "cpu1_busy": round(1 - frac["idle"], 4),
            "cpu1_other": round(max(cores["user"] + cores["system"] - o_user - o_sys, 0), 4),
            "mb_s": round(d["tx_bytes"] / dt / 1e6, 3), "req_s": None if req is None else round(req / dt, 1),
            "in_segs": d["InSegs"], "out_segs": d["OutSegs"], "delayed_acks": d["DelayedACKs"],
            "net_rx": b["sirq"].get("NET_RX", 0) - a["sirq"].get("NET_RX", 0), "net_tx": b["sirq"].get("NET_TX", 0) - a["sirq"].get("NET_TX", 0),
            "irq_device": b["intr"]["device"] - a["intr"]["device"], "irq_cal": b["intr"]["CAL"] - a["intr"]["CAL"],
            "requests": req,
        })  # fmt: skip
    return out


def fit(xs: list[float], ys: list[float], min_spread: float = 0.0) -> tuple[float, float] | None:
    """Least squares y = a + b x; None with fewer than 3 points, or when the
    x values spread over less than `min_spread` of their mean (a line through
    one cluster says nothing about where it goes)."""
    n = len(xs)
    if n < 3:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0 or (max(xs) - min(xs)) < min_spread * abs(mx):
        return None
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return (my - b * mx, b)


def at_full_load(f: tuple[float, float] | None) -> float | None:
    """x where the fitted load reaches 1 (Figure 10's extrapolation)."""
    if not f or f[1] <= 0:
        return None
    return (1 - f[0]) / f[1]


def relief_time(series: list[tuple[float, float]], t0: float, before_s: float = 2.0, settle_s: float = 2.0, hold_s: float = 1.0, share: float = 0.5):
    """Time after `t0` until the origin's load has fallen by `share` of the
    drop it reaches at the end (mean of the last `settle_s`), and stays there
    for `hold_s` on average. `series` is [(t, load)]. Returns (seconds or
    None, load before, load after)."""
    before = [v for t, v in series if t0 - before_s <= t < t0]
    after_t = [t for t, _ in series if t >= t0]
    if not before or not after_t:
        return None, None, None
    end = max(after_t)
    settled = [v for t, v in series if t >= end - settle_s]
    b, f = sum(before) / len(before), sum(settled) / len(settled)
    if f >= b:
        return None, round(b, 4), round(f, 4)
    level = b - share * (b - f)
    for t, _ in series:
        if t < t0:
            continue
        window = [v for u, v in series if t <= u < t + hold_s]
        if window and sum(window) / len(window) <= level:
            return round(t - t0, 2), round(b, 4), round(f, 4)
    return None, round(b, 4), round(f, 4)
