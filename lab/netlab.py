"""The lab network: hosts in network namespaces, joined by `weft wan`.

`WanNet(weft, hosts, links)` starts `weft wan --config FILE --hold` (TUN
router: delay, loss, rate per direction; or `mode="veth"`: plain veth
pairs, MTU 1500, offloads off — real packet sizes, no emulation), waits
until it is ready and gives each host's namespace and address; `run()` and
`popen()` start commands inside a host; `nstat()` reads a namespace's TCP
counters. Leaving the `with` block stops weft wan, which removes every
namespace (and a run killed with SIGKILL is cleaned up by the next start).

Loopback has a 64 KiB MTU and coalesces segments, so packets, ACKs and
retransmissions per request mean nothing there: experiments that count them
(wan-proxy, booster, IO-Lite) run on this network instead.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time

from . import proc

# The TCP counters the WAN experiments report (nstat names; weft wan's
# `tcp` block in --stats reads the same, crates/weft-wan/src/counters.rs).
TCP_COUNTERS = ("TcpInSegs", "TcpOutSegs", "TcpRetransSegs", "TcpExtTCPTimeouts", "TcpExtDelayedACKs", "TcpExtTCPSackRecovery", "TcpExtTCPRenoRecovery",
                "TcpExtTCPOrigDataSent", "TcpExtTCPPureAcks", "TcpExtTCPHPAcks", "TcpExtTCPBacklogCoalesce")  # fmt: skip


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    return json.dumps(str(v))


def topology(hosts: list[dict], links: list[dict], mode: str = "tun", seed: int = 1) -> str:
    """The TOML of a topology: hosts are dicts with `name` (+ sack, congestion,
    sysctl), links dicts with a, b and the direction keys (docs/wan.md)."""
    out = ["[wan]", f'mode = "{mode}"', f"seed = {seed}", ""]
    for h in hosts:
        out.append("[[host]]")
        out += [f"{k} = {toml_value(v)}" for k, v in h.items()]
        out.append("")
    for link in links:
        out.append("[[link]]")
        out += [f"{k} = {toml_value(v)}" for k, v in link.items()]
        out.append("")
    return "\n".join(out)


class WanNet:
    def __init__(self, weft: str, hosts: list[dict], links: list[dict], mode: str = "tun", seed: int = 1, log=print):
        self.weft, self.log = weft, log
        self.dir = tempfile.mkdtemp(prefix="weft-netlab-")
        self.config = os.path.join(self.dir, "wan.toml")
        with open(self.config, "w") as f:
            f.write(topology(hosts, links, mode, seed))
        self.ready = os.path.join(self.dir, "ready.json")
        self.stats_file = os.path.join(self.dir, "stats.json")
        self.proc = None
        self.hosts: dict = {}
        self.router_stats: dict = {}

    def __enter__(self) -> "WanNet":
        cmd = [self.weft, "wan", "-c", self.config, "--hold", "--quiet", "--ready", self.ready, "--stats", self.stats_file]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + 30
        while not os.path.exists(self.ready):
            if self.proc.poll() is not None:
                raise RuntimeError(f"weft wan failed: {self.proc.stderr.read().strip()}")
            if time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError("weft wan did not become ready in 30 s")
            time.sleep(0.05)
        with open(self.ready) as f:
            ready = json.load(f)
        self.hosts = ready["hosts"]
        if ready.get("offloads") == "on":
            # Packets and ACKs per request are what the veth network is for:
            # with GSO/GRO/TSO on they count 64 KiB segments, not packets.
            self.__exit__(None, None, None)
            raise RuntimeError("weft wan: GSO/GRO/TSO stayed on on the veth pairs (" + "; ".join(ready.get("notes", [])) + ")")
        return self

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if os.path.exists(self.stats_file):
            with open(self.stats_file) as f:
                self.router_stats = json.load(f)

    def addr(self, host: str) -> str:
        return self.hosts[host]["addr"]

    def ns(self, host: str) -> str:
        return self.hosts[host]["ns"]

    def argv(self, host: str, argv: list[str]) -> list[str]:
        ns = self.hosts[host]["ns"]
        return ["ip", "netns", "exec", ns] + list(argv) if ns else list(argv)

    def popen(self, host: str, argv: list[str], **kw) -> subprocess.Popen:
        kw.setdefault("start_new_session", True)
        return subprocess.Popen(self.argv(host, argv), **kw)

    def run(self, host: str, argv: list[str], timeout: float = 600, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(host, argv), timeout=timeout, capture_output=True, text=True, **kw)

    def wait_port(self, host: str, port: int, p: subprocess.Popen | None = None, timeout_s: float = 15) -> None:
        """Wait until `host` listens on `port` (probed from inside `host`'s
        namespace); RuntimeError when `p` exits first or time runs out."""
        probe = f"import socket,sys\ntry:\n socket.create_connection(('{self.addr(host)}', {port}), 1).close()\nexcept OSError:\n sys.exit(1)"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if p is not None and p.poll() is not None:
                raise RuntimeError(f"{' '.join(p.args[-8:]) if isinstance(p.args, list) else p.args} exited with {p.returncode}")
            if self.run(host, ["python3", "-c", probe], timeout=5).returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"nothing listens on {self.addr(host)}:{port}")

    def measured_load(self, host: str, pid: int, argv: list[str], out: str, timeout_s: float, what: str) -> tuple[dict, float, float, dict]:
        """Run `argv` (a weft load writing JSON to `out`) in the client's
        namespace while measuring process `pid`'s CPU (its tree) and `host`'s
        TCP counters: (the JSON, CPU s, wall s, TCP counter deltas)."""
        before, cpu0 = self.nstat(host), proc.tree_cpu_sample(pid)
        t0 = time.monotonic()
        r = self.run("client", argv, timeout=timeout_s)
        wall = time.monotonic() - t0
        cpu = proc.cpu_seconds_between(cpu0, proc.tree_cpu_sample(pid))
        tcp = delta(self.nstat(host), before)
        if r.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(f"weft load {what} failed: {r.stderr.strip()[-300:]}")
        with open(out) as f:
            return json.load(f), cpu, wall, tcp

    def nstat(self, host: str) -> dict:
        """Absolute TCP counters of the host's namespace (nstat -az)."""
        p = self.run(host, ["nstat", "-asz", "--json"], timeout=30)
        if p.returncode != 0:
            return {}
        try:
            d = json.loads(p.stdout)
        except json.JSONDecodeError:
            return {}
        d = d.get("kernel", d)
        return {k: int(v) for k, v in d.items() if k.startswith("Tcp")}


def delta(after: dict, before: dict, keys=TCP_COUNTERS) -> dict:
    """Counter differences, with the derived ACK and data counts (`derived`)."""
    d = {k: after.get(k, 0) - before.get(k, 0) for k in keys}
    return {**d, **derived(d)} if keys is TCP_COUNTERS else d


def derived(c: dict) -> dict:
    """Data segments and ACKs from nstat counters (pure; as weft wan's
    counters.rs): data_segs_out = new data + retransmissions (OutSegs leaves
    retransmissions out), acks_out = segments sent without data (pure ACKs,
    and SYN-ACKs/FINs/resets without data), acks_in = ACKs received on the
    slow path without data + on the fast path + merged into the one before
    in a busy socket's backlog (on a data sender, all ACKs)."""
    orig = c.get("TcpExtTCPOrigDataSent", 0)
    return {
        "data_segs_out": orig + c.get("TcpRetransSegs", 0),
        "acks_out": max(c.get("TcpOutSegs", 0) - orig, 0),
        "acks_in": c.get("TcpExtTCPPureAcks", 0) + c.get("TcpExtTCPHPAcks", 0) + c.get("TcpExtTCPBacklogCoalesce", 0),
    }


def stop(p: subprocess.Popen, timeout: float = 2) -> None:
    """SIGTERM a process group started with popen(), then SIGKILL."""
    if p.poll() is not None:
        return
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=timeout)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
