"""booster: the web booster and origin accelerator (paper 003, Table 1 and
Figures 2, 4-10): origin CPU per request, packets per request at the origin,
system calls per request, under a SURGE mix, for

- direct: clients straight to `weft serve` (one connection per request,
  as SURGE's HTTP/1.0 user equivalents);
- accel: straight to `weft serve --accelerator` (ready-to-send responses);
- booster: clients to `weft front --mode booster` (2 persistent pipelined
  connections to the origin, on the proxy's event loop) in front of
  `weft serve --accelerator`;
- booster+dack: the same with `--delayed-ack` (TCP_QUICKACK off toward the
  origin after every response);
- nginx direct and nginx behind the booster: the anchor of the same run.

Network: two namespaces joined by a veth pair (lab/netlab.py, MTU 1500,
offloads off), `client` and `server` (the origin). The booster runs in the client's
namespace (so every origin-side packet crosses the veth and the origin's
namespace counters are the origin's alone); the load generator reaches it
over that namespace's loopback. Origin CPU is the origin process's on-CPU
time (every thread's /proc/PID/task/*/schedstat) over the run; the booster's
the same way; packets from the origin namespace's
`nstat` (TcpInSegs / TcpOutSegs); requests from weft load's 2xx replies;
system calls per request from `weft serve --stats-on-exit`.

Quick form: 1,200 user equivalents (OFF times x 0.05), 6 s per
configuration, one run (about 50 s). Full form: 1,200 / 2,400 / 3,600 UEs x
3 runs x 30 s.
Not done (plainly): the /proc/stat and /proc/softirqs split into user,
kernel, hard and soft interrupts sampled every 0.5 s, the least-squares
extrapolation of Figure 10, the time-to-relief against a cold caching proxy,
and nginx as the front.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

from .. import core, netlab, report
from . import wan_server

NAME = "booster"
DESCRIPTION = "003 Table 1 / Figs. 4-10: origin CPU and packets per request, direct vs accelerator vs booster vs booster+delayed ACKs, SURGE mix, nginx anchor, veth network"

CONFIGS = ["direct", "accel", "booster", "booster+dack", "nginx direct", "nginx+booster"]


def cpu_ticks(pid: int) -> float:
    """On-CPU time of every thread of `pid`, in hundredths of a second, from
    /proc/PID/task/*/schedstat (nanoseconds: precise even at low load, unlike
    the 100 Hz utime/stime ticks)."""
    total = 0
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, IndexError, ValueError):
                pass
    except OSError:
        return 0
    return total / 1e7


def start_origin(lab, net, kind: str, www: str, stats: str):
    err = open(stats, "w")
    if kind.startswith("nginx"):
        return wan_server.start_server(lab, net, "nginx", www)
    argv = [lab.weft, "serve", www, "--listen", "0.0.0.0:8080", "--workers", "1", "--stats-on-exit"]
    if kind != "direct":
        argv.append("--accelerator")
    return net.popen("server", argv, stdout=open(os.devnull, "w"), stderr=err)


def origin_pids(p) -> list[int]:
    """The origin's pids: `ip netns exec` execs it; nginx's workers are its children."""
    pids = [p.pid]
    try:
        with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
            pids += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return pids


def syscalls_per_request(stats: str, requests: int):
    try:
        with open(stats) as f:
            lines = [ln for ln in f.read().splitlines() if ln.startswith("{")]
        calls = json.loads(lines[-1]).get("syscalls", {})
        return round(sum(calls.values()) / max(requests, 1), 2)
    except (OSError, IndexError, ValueError):
        return None


def one(lab, net, kind: str, www: str, ues: int, secs: float, think: float) -> dict:
    stats = os.path.join(lab.scratch, "origin-stats.txt")
    o = start_origin(lab, net, kind, www, stats)
    front = None
    time.sleep(0.6)
    target = f"http://{net.addr('server')}:8080/"
    try:
        if "booster" in kind:
            argv = [lab.weft, "front", "--mode", "booster", "--listen", "127.0.0.1:8081", "--site", f"*={net.addr('server')}:8080", "--upstream-conns", "2"]
            if kind.endswith("dack"):
                argv.append("--delayed-ack")
            front = net.popen("client", argv, stdout=open(os.devnull, "w"), stderr=open(os.devnull, "w"))
            time.sleep(0.4)
            target = "http://127.0.0.1:8081/"
        out = os.path.join(lab.scratch, "load.json")
        pids = origin_pids(o)
        before_cpu = sum(cpu_ticks(p) for p in pids)
        front_before = cpu_ticks(front.pid) if front else 0
        before = net.nstat("server")
        argv = [lab.weft, "load", target, "--workload", "surge", "--param", "files=600", "--param", f"think_scale={think}", "--param", "max_off=2", "--clients", str(ues), "--calls", "1", "--duration", f"{secs}s", "--quiet", "--json", out]
        p = net.run("client", argv, timeout=secs + 60)
        after = net.nstat("server")
        cpu = (sum(cpu_ticks(p) for p in pids) - before_cpu) / 100.0
        front_cpu = (cpu_ticks(front.pid) - front_before) / 100.0 if front else 0.0
        if p.returncode != 0:
            raise RuntimeError(f"weft load failed: {p.stderr.strip()[-300:]}")
        with open(out) as f:
            j = json.load(f)
    finally:
        if front is not None:
            netlab.stop(front)
        netlab.stop(o)
    n = max(j["replies"]["2xx"], 1)
    d = netlab.delta(after, before)
    return {
        "config": kind,
        "ues": ues,
        "rps": round(j["replies"]["2xx"] / secs, 1),
        "errors": j.get("error_details", {}).get("total", 0),
        "cpu_us_per_req": round(cpu * 1e6 / n, 1),
        "booster_cpu_us_per_req": round(front_cpu * 1e6 / n, 1),
        "mean_kb": round(j["bytes"]["reply_body"] / n / 1000, 1) if isinstance(j.get("bytes"), dict) and "reply_body" in j["bytes"] else None,
        "pkts_in_per_req": round(d["TcpInSegs"] / n, 2),
        "pkts_out_per_req": round(d["TcpOutSegs"] / n, 2),
        "delayed_acks": d["TcpExtDelayedACKs"],
        "syscalls_per_req": None if kind.startswith("nginx") else syscalls_per_request(stats, n),
    }


def run(lab: core.Lab) -> dict:
    lab.prepare(commands=["nginx", "nstat"])
    www = os.path.join(lab.scratch, "www")
    subprocess.run([lab.weft, "load", "gen", "surge", "--out", www, "--param", "files=600"], check=True, capture_output=True, timeout=120)
    os.chmod(lab.scratch, 0o755)
    if lab.quick:
        ues_list, reps, secs, think = [1200], 1, 6.0, 0.05
    else:
        ues_list, reps, secs, think = [1200, 2400, 3600], 3, 30.0, 1.0
    rows = []
    with netlab.WanNet(lab.weft, [{"name": "client"}, {"name": "server"}], [{"a": "client", "b": "server"}], mode="veth", log=lab.log) as net:
        for ues in ues_list:
            for kind in CONFIGS:
                for rep in range(reps):
                    m = one(lab, net, kind, www, ues, secs, think)
                    m["rep"] = rep + 1
                    rows.append(m)
                    lab.log(f"  {ues} UEs {kind:<14}: {m['rps']:>7.0f} req/s, origin {m['cpu_us_per_req']:>6.1f} us CPU/req, {m['pkts_in_per_req']:.2f} in / {m['pkts_out_per_req']:.2f} out pkts/req, booster {m['booster_cpu_us_per_req']:.1f} us/req, mean {m['mean_kb']} KB, syscalls/req {m['syscalls_per_req']}, errors {m['errors']}")
    med = report.group_medians(rows, ["config", "ues"], ["rps", "cpu_us_per_req", "booster_cpu_us_per_req", "pkts_in_per_req", "pkts_out_per_req"])
    report.write_json(os.path.join(lab.results_dir, "runs.json"), {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "runs": rows})
    report.write_csv(os.path.join(lab.results_dir, "runs.csv"), rows)
    report.write_csv(os.path.join(lab.results_dir, "medians.csv"), med)
    table = [[m["config"], str(m["ues"]), f"{m['rps']:.0f}", f"{m['cpu_us_per_req']:.1f}", f"{m['pkts_in_per_req']:.2f}", f"{m['pkts_out_per_req']:.2f}", f"{m['booster_cpu_us_per_req']:.1f}"] for m in med]
    md = [f"# {NAME}", "", f"{'Quick' if lab.quick else 'Full'} run on a veth pair (MTU 1500, offloads off), booster in the client namespace; median of {reps} run(s). Anchor: nginx, same network and run.", ""]
    md += [report.markdown_table(["config", "UEs", "req/s", "origin CPU us/req", "pkts in/req", "pkts out/req", "booster CPU us/req"], table), ""]
    md += ["## Versions", ""] + [f"- {k}: {v}" for k, v in lab.versions.items()] + [""]
    with open(os.path.join(lab.results_dir, "summary.md"), "w") as f:
        f.write("\n".join(md))
    return {"medians": med, "errors": sum(r["errors"] for r in rows)}
