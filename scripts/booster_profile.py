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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lab import boostlab, core, netlab, perfshares  # noqa: E402
from lab.experiments import booster as lab_booster  # noqa: E402

# The kernel paths whose shares of the origin's samples the table shows.
PATHS = [("xmit", ["tcp_write_xmit"]), ("ipi-send", ["net_rps_send_ipi"]), ("tcp-rcv", ["tcp_v4_rcv"]), ("read", ["ksys_read"]), ("recv", ["__sys_recvfrom"]), ("epoll", ["do_epoll_wait"])]


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
        head += "".join(f" {name:>8}" for name, _ in PATHS) + f" {'user':>6}"
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
                rec = None if a.no_perf else perfshares.record(data, ["-C", str(boostlab.ORIGIN_CPU)], 2.5, a.secs - 4)
                before = boostlab.interrupts(boostlab.OTHER_CPU)["CAL"]
                row, _ = lab_booster.one(lab, net, kind, www, a.ues, a.secs, a.think)
                ipis = boostlab.interrupts(boostlab.OTHER_CPU)["CAL"] - before
                done += 1
                n = max(row["rps"] * a.secs, 1)
                line = f"{kind:<14} {row['rps']:>7.0f} {row['cpu_us_per_req']:>13.1f} {row['user_us']:>5.1f} {row['system_us']:>5.1f} {row['pkts_in_per_req']:>6.2f} {row['pkts_out_per_req']:>7.2f} {ipis / n:>7.2f}"
                if rec is not None:
                    rec.join()
                    s = perfshares.shares(data, PATHS, "nginx" if kind.startswith("nginx") else "weft-worker-0")
                    os.remove(data)
                    line += "".join(f" {s.get(name, 0.0):>7.1f}%" for name, _ in PATHS) + f" {s['user']:>5.1f}%"
                print(f"{line}   [{done}/{total}]" + (f" {row['errors']} failed" if row["errors"] else ""), flush=True)


if __name__ == "__main__":
    sys.exit(main())
