"""booster: the web booster and origin accelerator (paper 003, Table 1 and
Figures 2, 4-10; the time to relief of sections 1 and 6).

Parts `configs-1200`, `configs-2400`, `configs-3600` (one per load level):
origin CPU per request, its split (user, kernel in process
context, hard and soft interrupts), packets and interrupts per packet and
system calls per request at the origin, under a SURGE mix, for

- direct: clients straight to `weft serve` (one connection per request,
  as SURGE's HTTP/1.0 user equivalents);
- accel: straight to `weft serve --accelerator` (ready-to-send responses);
- booster: clients to `weft front --mode booster` (2 persistent pipelined
  connections to the origin, on the proxy's event loop) in front of
  `weft serve --accelerator --booster-from` (the origin takes the target the
  booster parsed);
- booster+dack: the same with `--delayed-ack`;
- nginx direct, nginx behind the booster, and (full form) nginx as the front
  (lab/anchors/nginx_proxy.conf: proxy_pass, keepalive upstream) before
  `weft serve --accelerator`: the anchors of the same run.

Network: two namespaces joined by a veth pair (lab/netlab.py, MTU 1500,
offloads off), `client` and `server` (the origin). The origin runs alone on
CPU 1, everything else on CPU 0, and each veth end steers what it receives
to its host's CPU with RPS (lab/boostlab.py), so CPU 1's /proc/stat line is
the origin's cost: sampled every 0.5 s (as the paper) into user, system
(process context), irq and softirq, with the origin's own CPU time, its
data rate (veth bytes) and request rate (weft's load report, nginx's
stub_status). Per configuration: the least-squares line of load against
data rate and request rate and its extrapolation to 100 % load (Figure 10);
per request: CPU, packets in and out (the origin namespace's TCP counters),
RPS inter-processor interrupts and NET_RX/NET_TX softirqs per packet (Table
1's interrupts: there is no NIC), delayed ACKs, and the booster's own CPU
per request with how many origins one booster core carries at that cost.

Part `relief` (full form only): SURGE's files at a fixed rate of
one-request connections, the origin's CPU capped (cgroup cpu quota) so that
this load sent straight to it is about 85 % of its capacity, sampled every
100 ms. `booster in path`: the clients go through the booster, passing
straight through, switched in by hand at t0 (`POST /boost/*/on`) and out
6 s later; `booster`, `weft-proxy`, `varnish`: at t0 the load moves from the
origin to the booster (boosted) or to a cold caching reverse proxy. Reported:
the time until half and 90 % of the eventual relief, and failed requests
across switching in and out (target: none).

Quick form (CI): part `configs-1200` only, 1,200 user equivalents (OFF times x
0.05), 6 s per configuration, one run (about 75 s with set-up). Full form:
1,200 / 2,400 / 3,600 UEs (OFF times x 0.15) x 3 runs x 20 s x 7
configurations (about 25 minutes), then `relief` (about 80 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import time

from .. import boostlab, core, netlab, report, servers

NAME = "booster"
DESCRIPTION = "003 Table 1 / Figs. 4-10 and relief time: origin CPU split, packets and interrupts per request, direct vs accelerator vs booster vs booster+delayed ACKs, nginx origin and front, cold caches, veth network"
UES = [1200, 2400, 3600]
PARTS = [f"configs-{u}" for u in UES] + ["relief"]

CONFIGS = ["direct", "accel", "booster", "booster+dack", "nginx direct", "nginx+booster"]
FULL_CONFIGS = CONFIGS + ["nginx front"]
WEFT_CONFIGS = {"direct", "accel", "booster", "booster+dack"}
# The SURGE set: 600 files; the mean response is set by the request-size
# model (Pareto k=1000, alpha=1: no finite mean) and the largest file drawn,
# so `max_size` is the knob that brings it to the paper's 11.4 KB (see
# docs/booster.md "The SURGE mix").
SURGE = ["files=600", "max_size=1M"]
ORIGIN_PORT, ADMIN_PORT, FRONT_PORT = 8080, 9090, 8081


def nginx_conf(lab, template: str, values: dict, edits: list, name: str) -> tuple[str, str]:
    run = os.path.join(lab.scratch, name)
    os.makedirs(run, exist_ok=True)
    with open(os.path.join(servers.ANCHOR_DIR, template)) as f:
        text = servers.render_template(f.read(), {"RUN": run, "CONF": run, **values})
    conf = os.path.join(run, "nginx.conf")
    with open(conf, "w") as f:
        f.write(servers.edit_config(text, edits))
    return conf, run


def start_origin(lab, net, kind: str, www: str, stats: str, booster_ip: str):
    """The origin on CPU 1 and the URL of its request count."""
    server = net.addr("server")
    if kind.startswith("nginx") and kind != "nginx front":
        conf, run = nginx_conf(lab, "nginx_static_w1.conf", {"WWW": www, "PORT": str(ORIGIN_PORT)}, [
            (f"listen 127.0.0.1:{ORIGIN_PORT} backlog=4096;", f"listen 0.0.0.0:{ORIGIN_PORT} backlog=4096;\n        location = /nginx_status {{ stub_status; }}"),
        ], "nginx-origin")  # fmt: skip
        p = net.popen("server", boostlab.pinned(boostlab.ORIGIN_CPU, ["nginx", "-c", conf, "-p", run]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return p, f"http://{server}:{ORIGIN_PORT}/nginx_status"
    argv = [lab.weft, "serve", www, "--listen", f"0.0.0.0:{ORIGIN_PORT}", "--workers", "1", "--stats-on-exit", "--admin", f"0.0.0.0:{ADMIN_PORT}"]
    if kind != "direct":
        argv += ["--accelerator", "--booster-from", booster_ip]
    p = net.popen("server", boostlab.pinned(boostlab.ORIGIN_CPU, argv), stdout=subprocess.DEVNULL, stderr=open(stats, "w"))
    return p, f"http://{server}:{ADMIN_PORT}/stats"


def start_front(lab, net, kind: str, extra=()):
    """The front in the client namespace on CPU 0 (None: clients go direct)."""
    origin = f"{net.addr('server')}:{ORIGIN_PORT}"
    if kind == "nginx front":
        conf, run = nginx_conf(lab, "nginx_proxy.conf", {"PORT": str(FRONT_PORT), "ORIGIN_HOST": net.addr("server"), "ORIGIN_PORT": str(ORIGIN_PORT)}, [], "nginx-front")
        return net.popen("client", boostlab.pinned(boostlab.OTHER_CPU, ["nginx", "-c", conf, "-p", run]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if "booster" not in kind:
        return None
    argv = [lab.weft, "front", "--mode", "booster", "--listen", f"127.0.0.1:{FRONT_PORT}", "--site", f"*={origin}", "--upstream-conns", "2", "--admin", "127.0.0.1:9091", *extra]
    if kind.endswith("dack"):
        argv.append("--delayed-ack")
    return net.popen("client", boostlab.pinned(boostlab.OTHER_CPU, argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def syscalls_per_request(stats: str, requests: int):
    try:
        with open(stats) as f:
            lines = [ln for ln in f.read().splitlines() if ln.startswith("{")]
        calls = json.loads(lines[-1]).get("syscalls", {})
        return round(sum(calls.values()) / max(requests, 1), 2)
    except (OSError, IndexError, ValueError):
        return None


def booster_stats(net) -> dict:
    p = net.run("client", ["python3", "-c", "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:9091/stats',timeout=3).read().decode())"], timeout=10)
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {}


def load_argv(lab, target: str, ues: int, secs: float, think: float, out: str, surge=SURGE) -> list[str]:
    params = [x for kv in surge for x in ("--param", kv)]
    return boostlab.pinned(boostlab.OTHER_CPU, [lab.weft, "load", target, "--workload", "surge", *params, "--param", f"think_scale={think}", "--param", "max_off=2", "--clients", str(ues), "--calls", "1", "--duration", f"{secs:g}s", "--quiet", "--json", out])


def one(lab, net, kind: str, www: str, ues: int, secs: float, think: float) -> tuple[dict, list[dict]]:
    stats = os.path.join(lab.scratch, "origin-stats.txt")
    o, count_url = start_origin(lab, net, kind, www, stats, net.addr("client"))
    front = None
    time.sleep(0.6)
    target = f"http://{net.addr('server')}:{ORIGIN_PORT}/"
    try:
        front = start_front(lab, net, kind)
        if front is not None:
            time.sleep(0.4)
            target = f"http://127.0.0.1:{FRONT_PORT}/"
        out = os.path.join(lab.scratch, "load.json")
        front_before = front and proc_cpu(front.pid)
        sampler = boostlab.Sampler(o.pid, count_url, net.ns("client"), 0.5)
        sampler.start()
        time.sleep(0.05)
        p = net.run("client", load_argv(lab, target, ues, secs, think, out), timeout=secs + 60)
        pts = sampler.stop()
        front_cpu = proc_cpu(front.pid) - front_before if front else 0.0
        bst = booster_stats(net) if "booster" in kind else {}
        if p.returncode != 0:
            raise RuntimeError(f"weft load failed: {p.stderr.strip()[-300:]}")
        with open(out) as f:
            j = json.load(f)
    finally:
        if front is not None:
            netlab.stop(front)
        netlab.stop(o)
    n = max(j["replies"]["2xx"], 1)
    tot = {k: sum(p[k] or 0 for p in pts) for k in ("in_segs", "out_segs", "delayed_acks", "net_rx", "net_tx", "irq_device", "irq_cal")}
    span = sum(p["dt"] for p in pts)
    share = lambda k: sum(p[k] * p["dt"] for p in pts)  # noqa: E731  (CPU-seconds of CPU 1)
    us = lambda sec: round(sec * 1e6 / n, 1)  # noqa: E731
    pkts = max(tot["in_segs"] + tot["out_segs"], 1)
    lane = bst.get("origin_segments_per_request", {}) if bst else {}
    row = {
        "config": kind, "ues": ues,
        "rps": round(j["replies"]["2xx"] / secs, 1),
        "errors": j.get("error_details", {}).get("total", 0),
        "cpu_us_per_req": us(share("origin")),
        "user_us": us(share("user")), "system_us": us(share("system")), "irq_us": us(share("irq")), "softirq_us": us(share("softirq")),
        "load_us_per_req": us(share("load")), "cpu1_other_us": us(share("cpu1_other")),
        "booster_cpu_us_per_req": round(front_cpu * 1e6 / n, 1),
        "mean_kb": round(j["bytes"]["reply_body"] / n / 1000, 1) if isinstance(j.get("bytes"), dict) and "reply_body" in j["bytes"] else None,
        "pkts_in_per_req": round(tot["in_segs"] / n, 2), "pkts_out_per_req": round(tot["out_segs"] / n, 2),
        "ipi_per_pkt": round(tot["irq_cal"] / pkts, 3), "device_irq_per_pkt": round(tot["irq_device"] / pkts, 4),
        "softirq_per_pkt": round((tot["net_rx"] + tot["net_tx"]) / pkts, 3),
        "delayed_acks_per_req": round(tot["delayed_acks"] / n, 3),
        "lane_segs_received_per_req": lane.get("received"), "lane_segs_sent_per_req": lane.get("sent"),
        "syscalls_per_req": None if kind.startswith("nginx") and kind != "nginx front" else syscalls_per_request(stats, n),
        "sampled_s": round(span, 1),
    }  # fmt: skip
    for p in pts:
        p["config"], p["ues"] = kind, ues
    return row, pts


def proc_cpu(pid: int) -> float:
    from .. import proc

    return proc.tree_cpu_sample(pid).ns / 1e9


# The request rates of a configuration's intervals must spread over at least
# this share of their mean before a line is fitted through them (the quick
# form's one load level does not; the full form's three do).
MIN_SPREAD = 0.3
# The full form's OFF-time scale: the paper's 1,200 / 2,400 / 3,600 user
# equivalents then span light to saturated load here (CPU 0, where the
# clients and the booster run, saturates near 7,000 requests/s), and a 20 s
# run makes 50,000-150,000 requests, enough of SURGE's heavy-tailed sequence
# for its mean response (with 1.0, 1,200 UEs made 880 requests/s, and 17,000
# requests averaged 6.4 KB).
FULL_THINK = 0.15


def fits(points: list[dict], configs: list[str]) -> list[dict]:
    """Per configuration: load (CPU 1 busy, and each component) against data
    rate and request rate, least squares over the 0.5 s intervals; where the
    line reaches 100 % load."""
    out = []
    for c in configs:
        pts = [p for p in points if p["config"] == c and p["req_s"] is not None and p["req_s"] > 0]
        if not pts:
            continue
        row = {"config": c, "intervals": len(pts)}
        for x, unit in (("mb_s", "mb_s"), ("req_s", "req_s")):
            f = boostlab.fit([p[x] for p in pts], [p["load"] for p in pts], MIN_SPREAD)
            row[f"max_{unit}"] = None if boostlab.at_full_load(f) is None else round(boostlab.at_full_load(f), 1)
            row[f"fit_{unit}"] = f and [round(f[0], 4), round(f[1], 6)]
        for comp in ("user", "system", "irq", "softirq"):
            f = boostlab.fit([p["req_s"] for p in pts], [p[comp] for p in pts], MIN_SPREAD)
            row[f"{comp}_fit"] = f and [round(f[0], 4), round(f[1], 8)]
        out.append(row)
    return out


def carry(med: list[dict], fit_rows: list[dict]) -> list[dict]:
    """How many origins one booster core carries: the booster's capacity at
    its CPU per request, over one origin's extrapolated maximum request rate
    through it."""
    out = []
    for m in med:
        if "booster" not in m["config"] or not m.get("booster_cpu_us_per_req"):
            continue
        cap = 1e6 / m["booster_cpu_us_per_req"]
        origin_max = next((f["max_req_s"] for f in fit_rows if f["config"] == m["config"]), None)
        out.append({"config": m["config"], "ues": m["ues"], "booster_us_per_req": m["booster_cpu_us_per_req"], "booster_core_req_s": round(cap), "origin_max_req_s": origin_max, "origins_per_booster_core": round(cap / origin_max, 2) if origin_max else None})
    return out


# ---------------------------------------------------------------------------
# Relief: switching in at near capacity, against cold caches.


class CpuCap:
    """A cgroup (v1 cpu controller) capping the origin at `cores`."""

    ROOT = "/sys/fs/cgroup/cpu"

    def __init__(self, cores: float):
        self.path = os.path.join(self.ROOT, f"weft-lab-booster-{os.getpid()}")
        os.makedirs(self.path, exist_ok=True)
        period = 20000
        with open(os.path.join(self.path, "cpu.cfs_period_us"), "w") as f:
            f.write(str(period))
        with open(os.path.join(self.path, "cpu.cfs_quota_us"), "w") as f:
            f.write(str(max(int(cores * period), 1000)))

    def add(self, pid: int) -> None:
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(pid))

    def remove(self) -> None:
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                left = f.read().split()
            for pid in left:
                with open(os.path.join(self.ROOT, "cgroup.procs"), "w") as f:
                    f.write(pid)
            os.rmdir(self.path)
        except OSError:
            pass


def post(net, url: str) -> str:
    p = net.run("client", ["python3", "-c", f"import urllib.request as u;print(u.urlopen(u.Request({url!r},method='POST'),timeout=3).read().decode())"], timeout=10)
    return p.stdout.strip()


def relief_load(lab, target: str, secs: float, out: str) -> list[str]:
    """SURGE user equivalents whose think times (OFF x 0.2, a few hundred ms)
    dwarf a response time: the offered rate hardly depends on the path that
    serves it, so relief shows as the origin's CPU falling."""
    return load_argv(lab, target, RELIEF_UES, secs, RELIEF_THINK, out, SURGE_RELIEF)


def relief_run(lab, net, www: str, how: str, cap: float, t1: float, t2: float, t3: float) -> tuple[dict, list[dict]]:
    """One relief run, the origin capped at `cap` cores.
    `how`: `booster in path` (load through the booster from the start,
    passing straight through — over the proxy's pooled origin connections,
    so most of the connection work is already gone from the origin —
    switched in by hand at t1 and out at t1+t2), or the load moving at t1 from the
    origin to `booster` (already boosted), a cold `weft proxy` (reverse,
    caching) or a cold `varnish`."""
    stats = os.path.join(lab.scratch, "origin-stats.txt")
    o, count_url = start_origin(lab, net, "accel", www, stats, net.addr("client"))
    cg = CpuCap(cap)
    procs = []
    try:
        time.sleep(0.5)
        cg.add(o.pid)
        origin = f"http://{net.addr('server')}:{ORIGIN_PORT}/"
        second = f"http://127.0.0.1:{FRONT_PORT}/"
        if how == "booster in path":
            procs.append(start_front(lab, net, "booster", ["--boost", "never"]))
            first, second = second, None
        elif how == "booster":
            procs.append(start_front(lab, net, "booster"))
            first = origin
        else:
            if how == "weft-proxy":
                argv = [lab.weft, "proxy", "--listen", f"127.0.0.1:{FRONT_PORT}", "--upstream", f"{net.addr('server')}:{ORIGIN_PORT}", "--workers", "1"]
            else:
                conf = os.path.join(lab.scratch, "varnish.vcl")
                with open(os.path.join(servers.ANCHOR_DIR, "varnish_hit.vcl")) as f:
                    text = servers.render_template(f.read(), {"ORIGIN_HOST": net.addr("server"), "ORIGIN_PORT": str(ORIGIN_PORT)})
                with open(conf, "w") as f:
                    f.write(text)
                argv = ["varnishd", "-F", "-a", f"127.0.0.1:{FRONT_PORT}", "-f", conf, "-s", "malloc,512m", "-p", "thread_pools=1", "-n", os.path.join(lab.scratch, "varnish")]
            procs.append(net.popen("client", boostlab.pinned(boostlab.OTHER_CPU, argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            first = origin
        time.sleep(1.5)
        sampler = boostlab.Sampler(o.pid, count_url, net.ns("client"), 0.1)
        sampler.start()
        outs = [os.path.join(lab.scratch, f"relief-{k}.json") for k in (1, 2)]
        total = t1 + t2 + t3
        on = off = ""
        t_off = None
        if second is None:
            load = [net.popen("client", relief_load(lab, first, total, outs[0]), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)]
            time.sleep(t1)
            t0 = time.monotonic()
            on = post(net, "http://127.0.0.1:9091/boost/*/on")
            time.sleep(t2)
            t_off = time.monotonic()
            off = post(net, "http://127.0.0.1:9091/boost/*/off")
        else:
            load = [net.popen("client", relief_load(lab, first, t1, outs[0]), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)]
            time.sleep(t1)
            t0 = time.monotonic()
            load.append(net.popen("client", relief_load(lab, second, t2 + t3, outs[1]), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        for p in load:
            p.wait(timeout=total + 60)
        pts = sampler.stop()
        errors, replies = 0, 0
        for out in outs[: len(load)]:
            with open(out) as f:
                j = json.load(f)
            errors += j.get("error_details", {}).get("total", 0)
            replies += j["replies"]["2xx"]
    finally:
        for p in procs:
            netlab.stop(p)
        netlab.stop(o)
        cg.remove()
    # Up to the switch out (booster in path) or as long (the others): the relief phase.
    series = [(p["t"], p["origin"]) for p in pts if p["t"] < t0 + t2]
    half, before, after = boostlab.relief_time(series, t0, settle_s=min(2.0, t2 / 2), share=0.5)
    ninety, _, _ = boostlab.relief_time(series, t0, settle_s=min(2.0, t2 / 2), share=0.9)
    for p in pts:
        p["relief"], p["since_switch_s"] = how, round(p["t"] - t0, 2)
    row = {"relief": how, "ues": RELIEF_UES, "think_scale": RELIEF_THINK, "cap_cores": cap, "origin_load_before": before, "origin_load_after": after,
           "relief_half_s": half, "relief_90_s": ninety, "errors": errors, "replies": replies,
           "switched": (bool(on), bool(off)) if how == "booster in path" else None,
           "switch_out_s": None if t_off is None else round(t_off - t0, 2)}  # fmt: skip
    return row, pts


SURGE_RELIEF = ["files=2000", "max_size=1M"]
RELIEF_WAYS = ["booster in path", "booster", "weft-proxy", "varnish"]
RELIEF_UES, RELIEF_THINK = 1200, 0.2


def relief(lab, net, www_relief: str) -> tuple[list[dict], list[dict]]:
    t1, t2, t3 = 3.0, 6.0, 3.0
    # Calibrate: the origin's CPU at this rate straight from the clients,
    # uncapped; the cap puts that load at about 85 % of its capacity.
    row, _ = relief_run(lab, net, www_relief, "weft-proxy", 1.0, 2.0, 0.5, 0.0)
    used = row["origin_load_before"] or 0.1
    cap = round(max(used / 0.85, 0.03), 3)
    lab.log(f"  relief: origin uses {used:.3f} cores direct ({row['replies'] / 2.5:.0f} req/s); capped at {cap:.3f}")
    rows, pts = [], []
    for how in RELIEF_WAYS:
        r, p = relief_run(lab, net, www_relief, how, cap, t1, t2, t3)
        rows.append(r)
        pts += p
        lab.log(f"  relief {how:<15}: origin {r['origin_load_before']} -> {r['origin_load_after']} cores, half relief {r['relief_half_s']} s, 90% {r['relief_90_s']} s, errors {r['errors']} of {r['replies']}")
    return rows, pts


# ---------------------------------------------------------------------------


def age(www: str) -> None:
    """Files a year old: caches find them fresh for a day (heuristic freshness)."""
    then = time.time() - 365 * 86400
    for d, _, names in os.walk(www):
        for n in names:
            os.utime(os.path.join(d, n), (then, then))


def generate(lab, www: str, surge) -> None:
    params = [x for kv in surge for x in ("--param", kv)]
    subprocess.run([lab.weft, "load", "gen", "surge", "--out", www, *params], check=True, capture_output=True, timeout=300)
    age(www)


def run(lab: core.Lab) -> dict:
    lab.prepare(commands=["nginx", "nstat"] + ([] if lab.quick else ["varnishd"]))
    parts = lab.parts(["configs-1200"] if lab.quick else PARTS)
    www = os.path.join(lab.scratch, "www")
    generate(lab, www, SURGE)
    os.chmod(lab.scratch, 0o755)
    if lab.quick:
        ues_list, reps, secs, think, configs = [1200], 1, 6.0, 0.05, CONFIGS
    else:
        ues_list, reps, secs, think, configs = UES, 3, 20.0, FULL_THINK, FULL_CONFIGS
    rows, points, relief_rows, relief_pts = [], [], [], []
    affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {boostlab.OTHER_CPU})
    try:
        with netlab.WanNet(lab.weft, [{"name": "client"}, {"name": "server"}], [{"a": "client", "b": "server"}], mode="veth", log=lab.log) as net:
            # The client namespace opens tens of thousands of connections a
            # minute to one address (weft load direct, nginx as the front):
            # without reusing TIME_WAIT ports, a run after the nginx front's
            # found its ports taken and collapsed to ~100 requests/s.
            net.run("client", ["sysctl", "-qw", "net.ipv4.tcp_tw_reuse=1", "net.ipv4.ip_local_port_range=1024 65000"], timeout=10)
            boostlab.steer_receives(net, "client", boostlab.OTHER_CPU)
            boostlab.steer_receives(net, "server", boostlab.ORIGIN_CPU)
            if any(p.startswith("configs-") for p in parts):
                started = time.monotonic()
                for ues in [u for u in ues_list if f"configs-{u}" in parts]:
                    for rep in range(reps):
                        for kind in configs[rep % len(configs):] + configs[: rep % len(configs)]:
                            m, pts = one(lab, net, kind, www, ues, secs, think)
                            m["rep"] = rep + 1
                            rows.append(m)
                            points += pts
                            lab.log(f"  {ues} UEs {kind:<14}: {m['rps']:>7.0f} req/s, origin {m['cpu_us_per_req']:>6.1f} us/req (usr {m['user_us']} sys {m['system_us']} sirq {m['softirq_us']}), {m['pkts_in_per_req']:.2f} in / {m['pkts_out_per_req']:.2f} out pkts/req, booster {m['booster_cpu_us_per_req']:.1f} us/req, mean {m['mean_kb']} KB, syscalls/req {m['syscalls_per_req']}, errors {m['errors']}")
                lab.log(f"  configs took {time.monotonic() - started:.0f} s")
            if "relief" in parts:
                www_relief = os.path.join(lab.scratch, "www-relief")
                generate(lab, www_relief, SURGE_RELIEF)
                relief_rows, relief_pts = relief(lab, net, www_relief)
    finally:
        os.sched_setaffinity(0, affinity)
    doc = {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "runs": rows, "points": points, "relief": relief_rows, "relief_points": relief_pts}
    prev = lab.previous_runs()
    if prev:
        # `--only`: the parts not run keep their rows from the previous run.
        for key in ("runs", "points"):
            doc[key] = [r for r in prev.get(key, []) if f"configs-{r['ues']}" not in parts] + doc[key]
        if "relief" not in parts:
            doc["relief"], doc["relief_points"] = prev.get("relief", []), prev.get("relief_points", [])
        doc["parts"] = {**prev.get("parts", {}), **{p: {"at": core.utc_now(), "weft": lab.versions.get("weft")} for p in parts}}
    report.write_json(os.path.join(lab.results_dir, "runs.json"), doc)
    summarize(lab, doc)
    weft_errors = sum(r["errors"] for r in doc["runs"] if r["config"] in WEFT_CONFIGS) + sum(r["errors"] for r in doc["relief"] if r["relief"] != "varnish")
    return {"problems": sum(r["errors"] for r in doc["runs"]) + sum(r["errors"] for r in doc["relief"]), "weft_problems": weft_errors}


def resummarize(lab: core.Lab) -> None:
    with open(os.path.join(lab.results_dir, "runs.json")) as f:
        summarize(lab, json.load(f))


MED_FIELDS = ["rps", "cpu_us_per_req", "user_us", "system_us", "irq_us", "softirq_us", "load_us_per_req", "cpu1_other_us", "booster_cpu_us_per_req", "mean_kb",
              "pkts_in_per_req", "pkts_out_per_req", "ipi_per_pkt", "device_irq_per_pkt", "softirq_per_pkt", "delayed_acks_per_req",
              "lane_segs_received_per_req", "lane_segs_sent_per_req", "syscalls_per_req", "errors"]  # fmt: skip


def summarize(lab: core.Lab, doc: dict) -> None:
    rows, points = doc["runs"], doc.get("points", [])
    configs = [c for c in FULL_CONFIGS if any(r["config"] == c for r in rows)]
    med = report.group_medians(rows, ["config", "ues"], MED_FIELDS) if rows else []
    fit_rows = fits(points, configs)
    carried = carry(med, fit_rows)
    if rows:
        report.write_csv(os.path.join(lab.results_dir, "runs.csv"), rows)
        report.write_csv(os.path.join(lab.results_dir, "medians.csv"), med)
        report.write_csv(os.path.join(lab.results_dir, "fits.csv"), [report.flatten(f) for f in fit_rows])
    f = report.fmt_num
    md = [f"# {NAME}", "", f"{'Quick' if doc['quick'] else 'Full'} run on a veth pair (MTU 1500, offloads off, RPS to each host's CPU): origin alone on CPU 1, clients/booster/fronts on CPU 0; median of the runs per point. Anchors: nginx as origin, behind the booster and as the front, same network and run.", ""]
    if med:
        direct = {m["ues"]: m["cpu_us_per_req"] for m in med if m["config"] == "direct"}
        table = [[m["config"], str(m["ues"]), f(m["rps"], 0), f(m["cpu_us_per_req"]), f(m["user_us"]), f(m["system_us"]), f(m["irq_us"]), f(m["softirq_us"]), f(m["cpu1_other_us"]),
                  f(m["cpu_us_per_req"] / direct[m["ues"]], 2) if direct.get(m["ues"]) and m["cpu_us_per_req"] else "–",
                  f(m["pkts_in_per_req"], 2), f(m["pkts_out_per_req"], 2), f(m["ipi_per_pkt"], 3), f(m["softirq_per_pkt"], 3), f(m["delayed_acks_per_req"], 3),
                  f(m["booster_cpu_us_per_req"]), f(m["mean_kb"]), f(m["syscalls_per_req"], 2), f(m["errors"], 0)] for m in med]  # fmt: skip
        md += ["## Per request at the origin (Table 1, Figs. 6-9)", "", report.markdown_table(
            ["config", "UEs", "req/s", "origin CPU µs/req", "user", "system", "irq", "softirq", "other on CPU 1", "× direct", "pkts in/req", "pkts out/req", "IPIs/pkt", "NET softirqs/pkt", "delayed ACKs/req", "booster µs/req", "mean KB", "syscalls/req", "failed"], table), ""]  # fmt: skip
        md += ["origin CPU: the origin's own threads (schedstat), split into user and system (kernel in process context, with the softirqs that interrupted it) by its utime/stime; irq and softirq: CPU 1's /proc/stat columns per request (network work RPS steered to the origin's CPU, whoever was running; irq is 0 on this kernel: tick accounting without IRQ_TIME_ACCOUNTING never lands in a hard interrupt). other on CPU 1: CPU 1's user+system time that was not the origin's (other tenants of a shared machine). IPIs: function-call interrupts on CPU 1 per packet at the origin (RPS hand-offs: this network's hardware interrupt; veth has no device interrupt).", ""]
    if fit_rows:
        slope = {r["config"]: r["fit_req_s"][1] * 1e6 for r in fit_rows if r.get("fit_req_s")}
        ft = [[r["config"], str(r["intervals"]), f(r["max_mb_s"]), f(r["max_req_s"], 0), f(slope.get(r["config"])),
               f(slope[r["config"]] / slope["direct"], 2) if r["config"] in slope and slope.get("direct") else "–"] for r in fit_rows]  # fmt: skip
        md += ["## Extrapolated to 100 % load (Figure 10)", "", "Least squares over the 0.5 s intervals of the origin's load (its own CPU plus CPU 1's softirq and irq time, in cores) against its data rate (veth bytes sent) and request rate; where the line reaches one core. A configuration whose intervals do not spread in rate (one load level: the quick form) gets no line.", "",
               "The line's slope against request rate is the marginal CPU per request (the paper's figures are such lines): it leaves out what a configuration costs whatever the rate.", "",
               report.markdown_table(["config", "intervals", "max MB/s", "max req/s", "marginal µs/req", "× direct"], ft), ""]  # fmt: skip
    if carried:
        md += ["## The booster's own cost", "", report.markdown_table(["config", "UEs", "booster µs/req", "one booster core, req/s", "origin max req/s", "origins per booster core"],
               [[c["config"], str(c["ues"]), f(c["booster_us_per_req"]), f(c["booster_core_req_s"], 0), f(c["origin_max_req_s"], 0), f(c["origins_per_booster_core"], 2)] for c in carried]), ""]  # fmt: skip
    if doc.get("relief"):
        rt = [[r["relief"], f(r["cap_cores"], 3), f(r["origin_load_before"], 3), f(r["origin_load_after"], 3), f(r["relief_half_s"], 1), f(r["relief_90_s"], 1), f(r["errors"], 0), f(r["replies"], 0)] for r in doc["relief"]]
        md += ["## Time to relief (100 ms samples)", "", f"SURGE (2,000 files, Zipf popularity), {doc['relief'][0].get('ues')} user equivalents with OFF times x {doc['relief'][0].get('think_scale')} (think times far above response times: the offered rate hardly depends on the path), one connection per request; the origin capped (cgroup CPU quota) so that this load sent straight to it is about 85 % of its capacity. `booster in path`: the clients go through the booster from the start, passed straight through (one request at a time per origin connection, over the proxy's pooled connections) and switched in by hand at t0 (`POST /boost/*/on`), out again 6 s later; the others: at t0 the load moves from the origin to the booster (boosted) or to a cold cache. Relief time: until the origin's CPU (100 ms samples, 1 s mean) has fallen by half (90 %) of the drop it reaches 5-6 s later.", "",
               report.markdown_table(["path at t0", "origin cap (cores)", "origin cores before", "after", "half relief (s)", "90 % (s)", "failed", "replies"], rt), ""]  # fmt: skip
    md += report.versions_section(doc.get("versions", {}))
    report.write_summary(lab.results_dir, md)
    # The quick form (CI) draws nothing: one load level has no lines to
    # draw, and matplotlib would add seconds to a form that must not grow.
    if not doc["quick"]:
        plots(lab.results_dir, points, fit_rows, doc.get("relief_points", []))


def plots(d: str, points: list[dict], fit_rows: list[dict], relief_pts: list[dict]) -> None:
    if not points and not relief_pts:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if points:
        # Figs. 4 and 5: direct, load against data rate and request rate.
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
        pts = [p for p in points if p["config"] == "direct" and p["req_s"]]
        for ax, x, label in ((axes[0], "mb_s", "data rate sent (MB/s)"), (axes[1], "req_s", "requests/s")):
            ax.scatter([p[x] for p in pts], [p["load"] for p in pts], s=6)
            fr = boostlab.fit([p[x] for p in pts], [p["load"] for p in pts])
            if fr and pts:
                hi = max(p[x] for p in pts)
                ax.plot([0, hi], [fr[0], fr[0] + fr[1] * hi], color="k", linewidth=0.8)
            ax.set_xlabel(label)
            ax.set_ylabel("origin load (cores)")
            ax.grid(alpha=0.3)
        fig.suptitle("direct: load per 0.5 s against data rate (Fig. 4) and request rate (Fig. 5)", fontsize=10)
        fig.tight_layout()
        fig.savefig(os.path.join(d, "fig4_5_direct.png"), dpi=80)
        plt.close(fig)
        # Figs. 6-9: the split against request rate, fitted lines.
        cfgs = [r["config"] for r in fit_rows]
        fig, axes = plt.subplots(1, len(cfgs), figsize=(3.2 * len(cfgs), 3.4), sharey=True, squeeze=False)
        for ax, r in zip(axes[0], fit_rows):
            hi = max((p["req_s"] for p in points if p["config"] == r["config"] and p["req_s"]), default=1)
            for comp in ("user", "system", "irq", "softirq"):
                fr = r.get(f"{comp}_fit")
                if fr:
                    ax.plot([0, hi], [fr[0], fr[0] + fr[1] * hi], label=comp)
            ax.set_title(r["config"], fontsize=9)
            ax.set_xlabel("requests/s")
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel("share of CPU 1")
        if axes[0][0].get_legend_handles_labels()[0]:
            axes[0][0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(d, "fig6_9_split.png"), dpi=80)
        plt.close(fig)
        # Fig. 10: data rate against load, extrapolated to 100 %.
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        for i, r in enumerate(fit_rows):
            pts = [p for p in points if p["config"] == r["config"] and p["req_s"]]
            color = f"C{i}"
            ax.scatter([p["load"] for p in pts], [p["mb_s"] for p in pts], s=4, color=color)
            fr = r.get("fit_mb_s")
            if fr and fr[1] > 0:
                lo = min((p["load"] for p in pts), default=0)
                ax.plot([lo, 1.0], [(lo - fr[0]) / fr[1], (1 - fr[0]) / fr[1]], color=color, label=f"{r['config']} ({r['max_mb_s']} MB/s)")
        ax.set_xlabel("origin load (cores)")
        ax.set_ylabel("data rate (MB/s)")
        ax.set_xlim(0, 1.02)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        ax.set_title("Fig. 10: maximum data rate (least squares to 100 % load)", fontsize=10)
        fig.tight_layout()
        fig.savefig(os.path.join(d, "fig10_max_rate.png"), dpi=80)
        plt.close(fig)
    if relief_pts:
        fig, ax = plt.subplots(figsize=(7, 3.8))
        for how in RELIEF_WAYS:
            pts = [p for p in relief_pts if p.get("relief") == how]
            ax.plot([p["since_switch_s"] for p in pts], [p["origin"] for p in pts], label=how, linewidth=1)
        ax.axvline(0, color="k", linewidth=0.6)
        ax.set_xlabel("seconds since switching in")
        ax.set_ylabel("origin CPU (cores, 100 ms)")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(d, "relief.png"), dpi=80)
        plt.close(fig)
