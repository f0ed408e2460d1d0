#!/usr/bin/env python3
"""Where an origin's CPU goes, direct and behind the booster: the booster
lab's configurations (`python3 -m lab run booster`, lab/experiments/booster.py)
on its veth pair, with a `perf` profile of the origin's CPU and the
cross-CPU interrupts counted per request.

The lab measures how much the booster saves the origin; this tool says what
the rest is. It runs each configuration as the lab does (origin alone on
CPU 1, load generator and booster on CPU 0, RPS on each veth end, SURGE at
a fixed think-time scale), records CPU 1 with `perf record -g` in the middle
of each run, and prints, per run, the lab's figures (origin CPU per request,
its user/system split, packets in and out per request) with:

- `ipi/req`: function-call interrupts that CPU 0 received per request: the
  RPS hand-offs of the packets the origin sent (what a real client host's
  NIC interrupt would be, paid here by the sender);
- the shares of the origin's samples in the kernel's transmit path
  (`tcp_write_xmit`), in sending those interrupts (`net_rps_send_ipi`), in
  TCP receive (`tcp_v4_rcv`), in `read` and `recv`, `epoll_wait` and user
  space.

    scripts/booster_profile.py                              # direct, booster; 2 rounds of 10 s
    scripts/booster_profile.py --configs direct,accel,booster,booster+dack --rounds 3
    scripts/booster_profile.py --offload on                 # the veth pair's GSO/GRO/TSO on
    scripts/booster_profile.py --no-perf                    # the figures only

Root (network namespaces, perf of every context on CPU 1), nginx for the
nginx configurations; a release build of weft (`cargo build --release`).
Bounded: rounds x configurations runs of `--secs` each, progress per run.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lab import boostlab, core, netlab  # noqa: E402
from lab.experiments import booster as lab_booster  # noqa: E402

# Children-mode shares of these kernel functions, and what the table calls them.
PATHS = [("tcp_write_xmit", "xmit"), ("net_rps_send_ipi", "ipi-send"), ("tcp_v4_rcv", "tcp-rcv"), ("ksys_read", "read"), ("__sys_recvfrom", "recv"), ("do_epoll_wait", "epoll")]


def profile(out: str, delay: float, secs: float) -> threading.Thread:
    """`perf record -g` of CPU 1 for `secs`, starting `delay` into the run."""

    def rec():
        time.sleep(delay)
        subprocess.run(["perf", "record", "-q", "-g", "-C", str(boostlab.ORIGIN_CPU), "-o", out, "--", "sleep", f"{secs:g}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    t = threading.Thread(target=rec, daemon=True)
    t.start()
    return t


def shares(data: str, comm: str) -> dict:
    """Percent of `comm`'s samples under each of PATHS, and in user space,
    from the perf data file `data`."""
    base = ["perf", "report", "-i", data, "-q", "-g", "none"]
    own = subprocess.run(base + ["--no-children", "--sort", "comm,dso"], capture_output=True, text=True, timeout=300).stdout
    kids = subprocess.run(base + ["--children", "--sort", "comm,sym"], capture_output=True, text=True, timeout=300).stdout
    return parse_shares(own, kids, comm)


def parse_shares(own: str, kids: str, comm: str) -> dict:
    """`own`: `perf report --no-children --sort comm,dso`; `kids`: `perf
    report --children --sort comm,sym`. Both are sorted by comm rather than
    filtered with `--comm`: with that filter, perf report sometimes leaves
    the kernel's line out of a sort by dso, and every sample looks like user
    time. Shares are of `comm`'s own samples."""
    rows = [ln.split(None, 2) for ln in own.splitlines() if ln.strip()]
    rows = [(float(r[0].rstrip("%")), r[2].strip()) for r in rows if len(r) == 3 and r[1] == comm]
    total = sum(pct for pct, _ in rows) or 1.0
    got = {"user": 100.0 * sum(pct for pct, dso in rows if not dso.startswith("[kernel")) / total}
    for line in kids.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[2] == comm:
            for sym, name in PATHS:
                if parts[-1] == sym:
                    got[name] = 100.0 * float(parts[0].rstrip("%")) / total
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--configs", default="direct,booster", help=f"comma-separated, of {', '.join(lab_booster.CONFIGS)}")
    ap.add_argument("--rounds", type=int, default=2, help="rounds, each running every configuration once")
    ap.add_argument("--secs", type=float, default=10, help="seconds of load per run (at least 5)")
    ap.add_argument("--ues", type=int, default=1200, help="SURGE user equivalents")
    ap.add_argument("--think", type=float, default=0.05, help="SURGE OFF-time scale (the lab's quick form: 0.05)")
    ap.add_argument("--offload", choices=["off", "on"], default="off", help="the veth pair's GSO/GRO/TSO (the lab: off)")
    ap.add_argument("--no-perf", action="store_true", help="no profile, the figures only")
    ap.add_argument("--weft", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "target", "release", "weft"))
    a = ap.parse_args()
    configs = [c for c in a.configs.split(",") if c]
    bad = [c for c in configs if c not in lab_booster.CONFIGS]
    if bad or a.secs < 5 or a.rounds < 1:
        ap.error(f"unknown configuration {bad[0]}" if bad else "--secs is at least 5, --rounds at least 1")
    if os.geteuid() != 0 or not os.access(a.weft, os.X_OK):
        ap.error("needs root and a release build of weft (--weft)")
    if not a.no_perf and shutil.which("perf") is None:
        ap.error("perf not found (Debian: apt-get install linux-perf), or run with --no-perf")

    # Nothing is written to the results folder: the table goes to stdout.
    lab = core.Lab("booster-profile", quick=True, results_root=tempfile.gettempdir())
    lab.weft = a.weft
    try:
        run(lab, a, configs)
    finally:
        shutil.rmtree(lab.scratch, ignore_errors=True)
    return 0


def run(lab, a, configs: list[str]) -> None:
    """Every configuration `a.rounds` times, rotated, a line each."""
    www = os.path.join(lab.scratch, "www")
    lab_booster.generate(lab, www, lab_booster.SURGE)
    os.sched_setaffinity(0, {boostlab.OTHER_CPU})
    head = f"{'config':<14} {'req/s':>7} {'origin us/req':>13} {'usr':>5} {'sys':>5} {'in/req':>6} {'out/req':>7} {'ipi/req':>7}"
    if not a.no_perf:
        head += "".join(f" {name:>8}" for _, name in PATHS) + f" {'user':>6}"
    with netlab.WanNet(lab.weft, [{"name": "client"}, {"name": "server"}], [{"a": "client", "b": "server"}], mode="veth", log=lab.log) as net:
        net.run("client", ["sysctl", "-qw", "net.ipv4.tcp_tw_reuse=1", "net.ipv4.ip_local_port_range=1024 65000"], timeout=10)
        for host, cpu in (("client", boostlab.OTHER_CPU), ("server", boostlab.ORIGIN_CPU)):
            for dev in boostlab.steer_receives(net, host, cpu):
                if a.offload == "on":
                    net.run(host, ["ethtool", "-K", dev, "gso", "on", "gro", "on", "tso", "on"], timeout=10)
        print(head, flush=True)
        total, done = a.rounds * len(configs), 0
        for r in range(a.rounds):
            for kind in configs[r % len(configs):] + configs[: r % len(configs)]:
                data = os.path.join(lab.scratch, f"perf-{done}.data")
                rec = None if a.no_perf else profile(data, 2.5, a.secs - 4)
                before = boostlab.interrupts(boostlab.OTHER_CPU)["CAL"]
                row, _ = lab_booster.one(lab, net, kind, www, a.ues, a.secs, a.think)
                ipis = boostlab.interrupts(boostlab.OTHER_CPU)["CAL"] - before
                done += 1
                n = max(row["rps"] * a.secs, 1)
                line = f"{kind:<14} {row['rps']:>7.0f} {row['cpu_us_per_req']:>13.1f} {row['user_us']:>5.1f} {row['system_us']:>5.1f} {row['pkts_in_per_req']:>6.2f} {row['pkts_out_per_req']:>7.2f} {ipis / n:>7.2f}"
                if rec is not None:
                    rec.join()
                    s = shares(data, "nginx" if kind.startswith("nginx") else "weft-worker-0")
                    os.remove(data)
                    line += "".join(f" {s.get(name, 0.0):>7.1f}%" for _, name in PATHS) + f" {s['user']:>5.1f}%"
                print(f"{line}   [{done}/{total}]" + (f" {row['errors']} failed" if row["errors"] else ""), flush=True)


if __name__ == "__main__":
    sys.exit(main())
