"""wan-polymix: PolyMix with the PolyMix-4 WAN settings (issue 25; the
Polygraph workload's own network: workloads.md §3).

Three namespaces joined by `weft wan` (lab/netlab.py): client — proxy —
server. As PolyMix-4 prescribes, the server side has 40 ms of delay and
0.05 % loss in both directions (80 ms added RTT) and the client side none:
the client–proxy link still crosses the router (real 1500-byte packets) but
is neither delayed nor lossy. `weft origin` (think time norm(2.5 s, 1 s),
zipf(16) requests per server connection) runs in the server's namespace,
`weft load --workload polymix` in the client's, and the proxy in its own:
`weft proxy --splice on` / `--splice off` and Squid (the anchor,
squid_forward.conf listening on the proxy's address), each on a fresh,
empty cache and the same request stream (same seed).

Reported per proxy: the hit ratio the client saw, mean hit and miss
response times (a miss now pays the WAN's round trips on top of the think
time; a hit pays none), the proxy's CPU µs per request (/proc), and the
proxy namespace's TCP counters (retransmissions and RTOs: the server-side
loss) — the same figures as `polymix`, whose loopback runs are the
"no WAN" reference (the full form runs that condition here too).

Full form: WAN and no-WAN, 200 and 500 requests/s, 3 proxies, 40 s each
(about 10 min). `--quick`: WAN only, 150 requests/s, 8 s per proxy (about
60 s).
"""

from __future__ import annotations

import os
import time

from .. import core, netlab, report, servers

NAME = "wan-polymix"
DESCRIPTION = "PolyMix through weft proxy (splice/copy) and Squid with PolyMix-4's WAN: 40 ms + 0.05 % loss each way server-side, clean client side"

PROXIES = ["weft splice", "weft copy", "Squid"]
ORIGIN_ARGS = ["--think", "norm(2.5s,1s)", "--conn-requests", "zipf(16)"]
CONDITIONS = {
    # name: proxy-server link keys (both directions)
    "PolyMix-4 WAN": {"delay": "40ms", "loss": "0.05%"},
    "no WAN": {},
}
PORT = 3128


def links(condition: str) -> list[dict]:
    """client-proxy clean, proxy-server as the condition says (pure)."""
    return [{"a": "client", "b": "proxy"}, {"a": "proxy", "b": "server", **CONDITIONS[condition]}]


def squid_conf(run: str) -> str:
    with open(os.path.join(servers.ANCHOR_DIR, "squid_forward.conf")) as f:
        text = servers.render_template(f.read(), {"RUN": run, "PORT": str(PORT)})
    return servers.edit_config(text, [(f"http_port 127.0.0.1:{PORT}", f"http_port 0.0.0.0:{PORT}")])


def start_proxy(lab, net, label: str):
    devnull = open(os.devnull, "w")
    if label == "Squid":
        run = os.path.join(lab.scratch, f"squid-{time.monotonic_ns()}")
        os.makedirs(run)
        os.chmod(run, 0o777)
        conf = os.path.join(run, "squid.conf")
        with open(conf, "w") as f:
            f.write(squid_conf(run))
        return net.popen("proxy", ["squid", "-N", "-f", conf], stdout=devnull, stderr=devnull)
    splice = "on" if label == "weft splice" else "off"
    argv = [lab.weft, "proxy", "--listen", f"0.0.0.0:{PORT}", "--splice", splice, "--workers", "1", "--allow", "0.0.0.0/0", "--log-level", "error"]
    return net.popen("proxy", argv, stdout=devnull, stderr=devnull)


def one_run(lab, net, label: str, rate: int, secs: float, seed: int) -> dict:
    p = start_proxy(lab, net, label)
    try:
        net.wait_port("proxy", PORT, p)
        out = os.path.join(lab.scratch, "load.json")
        argv = [lab.weft, "load", f"http://{net.addr('server')}:8080/", "--workload", "polymix", "--rate", str(rate), "--proxy", f"{net.addr('proxy')}:{PORT}",
                "--http10", "--duration", f"{secs:g}s", "--timeout", "10s", "--seed", str(seed), "--quiet", "--json", out]  # fmt: skip
        doc, cpu, wall, tcp = net.measured_load("proxy", p.pid, argv, out, secs + 120, f"through {label}")
    finally:
        netlab.stop(p, timeout=5)
    c, rep = doc.get("cache", {}), doc.get("replies", {})
    total, hits = rep.get("total", 0), c.get("hits", 0)
    n = doc.get("requests", 0)
    return {
        "requests": n, "replies": total, "errors": doc.get("errors", 0) if isinstance(doc.get("errors"), int) else sum((doc.get("errors") or {}).values()),
        "replies_5xx": rep.get("5xx", 0), "hit_ratio": hits / total if total else None,
        "hit_ms": c.get("hit_response_time_ms", {}).get("mean") if hits else None,
        "miss_ms": c.get("miss_response_time_ms", {}).get("mean") if c.get("misses") else None,
        "rt_cv": doc.get("response_time_ms", {}).get("cv"), "proxy_us": cpu * 1e6 / n if n else None, "proxy_util": cpu / wall,
        "proxy_retrans": tcp["TcpRetransSegs"], "proxy_rtos": tcp["TcpExtTCPTimeouts"], "proxy_out_segs": tcp["TcpOutSegs"],
    }  # fmt: skip


def run(lab: core.Lab) -> dict:
    lab.prepare(commands=["squid"])
    if lab.quick:
        conds, rates, secs = ["PolyMix-4 WAN"], [150], 8.0
    else:
        conds, rates, secs = list(CONDITIONS), [200, 500], 40.0
    rows = []
    for cond in conds:
        hosts = [{"name": "client"}, {"name": "proxy"}, {"name": "server"}]
        with netlab.WanNet(lab.weft, hosts, links(cond), log=lab.log) as net:
            origin = net.popen("server", [lab.weft, "origin", "--listen", "0.0.0.0:8080", *ORIGIN_ARGS], stdout=open(os.devnull, "w"), stderr=open(os.devnull, "w"))
            try:
                net.wait_port("server", 8080, origin)
                for rate in rates:
                    for label in PROXIES:
                        m = one_run(lab, net, label, rate, secs, seed=1 + rate)
                        rows.append({"condition": cond, "rate": rate, "proxy": label, **m})
                        lab.log(f"  {cond:<13} {rate:>4}/s {label:<11}: hits {100 * (m['hit_ratio'] or 0):.0f} %  hit {report.fmt_num(m['hit_ms'], 2)} ms  "
                                f"miss {report.fmt_num(m['miss_ms'])} ms  proxy {report.fmt_num(m['proxy_us'])} µs/req  retrans {m['proxy_retrans']} RTOs {m['proxy_rtos']}")  # fmt: skip
            finally:
                netlab.stop(origin)
            router = net.router_stats
        lab.log(f"  router ({cond}): own added delay p99 {router.get('lateness_us', {}).get('p99', 0):.1f} us")
    return summarize(lab, rows, secs)


def summarize(lab, rows: list[dict], secs: float) -> dict:
    d = lab.results_dir
    report.write_json(os.path.join(d, "runs.json"), {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "runs": rows})
    report.write_csv(os.path.join(d, "runs.csv"), rows)
    problems = [r for r in rows if not r["replies"] or r["replies_5xx"] > 0.01 * r["replies"]]
    f = report.fmt_num
    table = [[r["condition"], r["rate"], r["proxy"], f(100 * r["hit_ratio"] if r["hit_ratio"] is not None else None), f(r["hit_ms"], 2), f(r["miss_ms"]),
              f(r["rt_cv"], 2), f(r["proxy_us"]), f(100 * r["proxy_util"]), r["proxy_retrans"], r["proxy_rtos"], r["replies_5xx"]] for r in rows]  # fmt: skip
    md = [f"# {NAME}", "", f"{'Quick' if lab.quick else 'Full'} run, {secs:g} s per proxy on a fresh cache, one run each. "
          "Server side: 40 ms each way and 0.05 % loss each way; client side clean. Anchor: Squid on the same network and request stream.", ""]  # fmt: skip
    md += [report.markdown_table(["condition", "req/s", "proxy", "hit %", "hit ms", "miss ms", "CV", "proxy µs/req", "proxy CPU %", "retrans", "RTOs", "5xx"], table), ""]
    md += ["## Checks", "", f"- {len(problems)} run(s) without replies or with over 1 % 5xx" if problems else "- every run had replies and at most 1 % 5xx", ""]
    md += report.versions_section(lab.versions)
    report.write_summary(d, md)
    return {"runs": rows, "problems": len(problems)}
