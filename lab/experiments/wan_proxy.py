"""wan-proxy: splice vs copy through `weft proxy` under WAN conditions
(paper 001, Figs. 6–10 and 18–20), with the no-proxy baseline.

Three namespaces joined by `weft wan` (lab/netlab.py), as 001's Figure 3:
client — proxy — server, plus a direct client — server link for the
baseline. Table II's settings: client–proxy 10 ms (corporate) or 50 ms and
56 kbit/s down / 28 kbit/s up per connection (modem), proxy–server 90 ms;
two-state loss, first-loss 0.1, 1 or 2 %, 40 % after a loss, on both links;
the baseline link sums the delays and the first-loss rates. Clients run
Reno with SACK off (NewReno and Limited Transmit are Linux's defaults).
`weft origin` serves uncacheable bodies (every request is a miss, the path
splicing changes); `weft load` opens one connection per request at a fixed
rate. Reported per point: response time mean, p99, its coefficient of
variation, the server's ACK ratio (segments in / segments out) and its
retransmissions and RTOs (nstat in the server's namespace).

Full form: 2 settings x 3 first-loss rates x 3 paths x 6 runs, each 20 s
warm-up + 120 s (corporate) or 20·size/1024 s (modem) sampling: about
4.5 hours. `--quick`: 1 % loss, one run, 2 s + 6 s per path, both settings
(about 70 s).
"""

from __future__ import annotations

import json
import os
import time

from .. import core, netlab, report

NAME = "wan-proxy"
DESCRIPTION = "001 Figs. 6-10, 18-20: splice vs copy through weft proxy under corporate and modem WAN settings, no-proxy baseline"

SETTINGS = {
    # name: (client-proxy delay ms, down rate, up rate, object size)
    "corporate": (10, None, None, 16 << 10),
    "modem": (50, "56kbit", "28kbit", 4 << 10),
}
PROXY_SERVER_MS = 90
AFTER_LOSS = 0.40
PATHS = ["no proxy", "proxy splice", "proxy copy"]


def links(setting: str, first_loss: float) -> list[dict]:
    cp_ms, down, up, _ = SETTINGS[setting]
    loss = {"loss": f"{first_loss * 100:g}%", "loss_after_loss": f"{AFTER_LOSS * 100:g}%"}
    cp = {"a": "client", "b": "proxy", "delay": f"{cp_ms}ms", **loss}
    cs = {"a": "client", "b": "server", "delay": f"{cp_ms + PROXY_SERVER_MS}ms", "loss": f"{2 * first_loss * 100:g}%", "loss_after_loss": f"{AFTER_LOSS * 100:g}%"}
    if down:
        for l in (cp, cs):
            l.update({"rate_per": "flow", "up": {"rate": up}, "down": {"rate": down}})
    ps = {"a": "proxy", "b": "server", "delay": f"{PROXY_SERVER_MS}ms", **loss}
    return [cp, ps, cs]


def load(lab, net, path: str, url: str, proxy: str | None, rate: float, seconds: float, out: str):
    argv = [lab.weft, "load", url, "--rate", str(rate), "--duration", f"{seconds}s", "--timeout", "60s", "--quiet", "--json", out]
    if proxy:
        argv += ["--proxy", proxy]
    p = net.run("client", argv, timeout=seconds + 180)
    if p.returncode != 0 or not os.path.exists(out):
        raise RuntimeError(f"weft load ({path}) failed: {p.stderr.strip()[-300:]}")
    with open(out) as f:
        return json.load(f)


def one_point(lab, setting: str, first_loss: float, sack: bool, reps: int, warm: float, window: float, rate: float) -> list[dict]:
    hosts = [{"name": "client", "sack": sack, "congestion": "reno"}, {"name": "proxy"}, {"name": "server"}]
    size = SETTINGS[setting][3]
    rows = []
    with netlab.WanNet(lab.weft, hosts, links(setting, first_loss), log=lab.log) as net:
        procs = [net.popen("server", [lab.weft, "origin", "--listen", "0.0.0.0:8080", "--cache-control", "no-store"], stdout=open(os.devnull, "w"), stderr=open(os.devnull, "w"))]
        for port, splice in ((3128, "on"), (3129, "off")):
            procs.append(net.popen("proxy", [lab.weft, "proxy", "--listen", f"0.0.0.0:{port}", "--splice", splice, "--cache-size", "0", "--allow", "0.0.0.0/0", "--log-level", "error"], stdout=open(os.devnull, "w"), stderr=open(os.devnull, "w")))
        time.sleep(0.5)
        try:
            url = f"http://{net.addr('server')}:8080/size/{size}/nc/obj"
            proxies = {"no proxy": None, "proxy splice": f"{net.addr('proxy')}:3128", "proxy copy": f"{net.addr('proxy')}:3129"}
            for rep in range(reps):
                for path in PATHS:
                    tmp = os.path.join(lab.scratch, "load.json")
                    load(lab, net, path, url, proxies[path], rate, warm, tmp)
                    before = {h: net.nstat(h) for h in ("server", "client")}
                    t0 = time.monotonic()
                    j = load(lab, net, path, url, proxies[path], rate, window, tmp)
                    el = time.monotonic() - t0
                    srv = netlab.delta(net.nstat("server"), before["server"])
                    cli = netlab.delta(net.nstat("client"), before["client"])
                    rt = j["response_time_ms"]
                    row = {
                        "setting": setting, "first_loss_pct": first_loss * 100, "sack": sack, "path": path, "rep": rep + 1,
                        "size": size, "replies_2xx": j["replies"]["2xx"], "requests": j["requests"],
                        "rt_mean_ms": rt["mean"], "rt_p50_ms": rt["p50"], "rt_p99_ms": rt["p99"], "rt_cv": rt.get("cv"),
                        "server_ack_ratio": srv["TcpInSegs"] / srv["TcpOutSegs"] if srv["TcpOutSegs"] else None,
                        "server_out_segs": srv["TcpOutSegs"], "server_retrans": srv["TcpRetransSegs"], "server_rtos": srv["TcpExtTCPTimeouts"],
                        "client_retrans": cli["TcpRetransSegs"], "client_rtos": cli["TcpExtTCPTimeouts"], "wall_s": el,
                    }  # fmt: skip
                    rows.append(row)
                    lab.log(f"  {setting} loss {first_loss * 100:g}% sack {'on' if sack else 'off'} {path:<13} rep {rep + 1}: mean {rt['mean']:.0f} ms cv {row['rt_cv'] or 0:.2f} ack ratio {row['server_ack_ratio'] or 0:.2f} retrans {srv['TcpRetransSegs']} RTOs {srv['TcpExtTCPTimeouts']}")
        finally:
            for p in procs:
                netlab.stop(p)
    return rows


def run(lab: core.Lab) -> dict:
    lab.prepare()
    if lab.quick:
        plan = [("corporate", 0.01, False), ("modem", 0.01, False)]
        reps, warm = 1, 2.0
    else:
        plan = [(s, l, sack) for s in SETTINGS for l in (0.001, 0.01, 0.02) for sack in (False, True)]
        reps, warm = 6, 20.0
    rows = []
    for setting, loss, sack in plan:
        size = SETTINGS[setting][3]
        window = 6.0 if lab.quick else (120.0 if setting == "corporate" else 20.0 * size / 1024)
        rate = 5 if setting == "corporate" else 1
        rows += one_point(lab, setting, loss, sack, reps, warm, window, rate)
    keys = ["setting", "first_loss_pct", "sack", "path"]
    fields = ["rt_mean_ms", "rt_p99_ms", "rt_cv", "server_ack_ratio", "server_retrans", "server_rtos", "replies_2xx"]
    med = report.group_medians(rows, keys, fields)
    report.write_json(os.path.join(lab.results_dir, "runs.json"), {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "runs": rows})
    report.write_csv(os.path.join(lab.results_dir, "runs.csv"), rows)
    report.write_csv(os.path.join(lab.results_dir, "medians.csv"), med)
    fmt = lambda v, d=1: "–" if v is None else f"{v:.{d}f}"  # noqa: E731
    table = [[m["setting"], f"{m['first_loss_pct']:g} %", "on" if m["sack"] else "off", m["path"], fmt(m["rt_mean_ms"], 0), fmt(m["rt_p99_ms"], 0), fmt(m["rt_cv"], 2), fmt(m["server_ack_ratio"], 2), fmt(m["server_retrans"], 0), fmt(m["server_rtos"], 0), fmt(m["replies_2xx"], 0)] for m in med]
    problems = [r for r in rows if r["replies_2xx"] < r["requests"] * 0.9]
    md = [f"# {NAME}", "", f"{'Quick' if lab.quick else 'Full'} run, {reps} run(s) per point, median. Anchor: the no-proxy path of the same network.", ""]
    md += [report.markdown_table(["setting", "first loss", "client SACK", "path", "mean ms", "p99 ms", "CV", "server ACK ratio", "server retrans", "server RTOs", "2xx"], table), ""]
    md += ["## Checks", "", f"- {len(problems)} run(s) with fewer than 90 % 2xx replies" if problems else "- every run had at least 90 % 2xx replies", ""]
    md += ["## Versions", ""] + [f"- {k}: {v}" for k, v in lab.versions.items()] + [""]
    with open(os.path.join(lab.results_dir, "summary.md"), "w") as f:
        f.write("\n".join(md))
    return {"medians": med, "problems": len(problems)}
