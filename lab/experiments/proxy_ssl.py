"""proxy-ssl: CONNECT tunnels carrying emulated SSL exchanges, splice vs copy
(issue 5; paper 001 Figures 12-15).

`weft origin` is the server; `weft load --workload ssl-emulation` the
clients: each of N closed-loop clients opens a connection, sends `CONNECT`
through the proxy, runs paper 001's Table III handshake (message sizes of a
full or, 60 % of the time, an abbreviated SSL handshake; no cryptography),
then one GET of an object of the chosen size in the tunnel, and closes. The
response time of that GET counts from the connection's start (handshake
included), as in the paper.

Proxies, one worker each: `weft splice` (`weft proxy --splice on`: both
directions of every tunnel go socket → pipe → socket) and `weft copy`
(`--splice off`), Squid as a forward proxy (copies), and HAProxy in TCP mode
with and without splicing — the tunnel's data path without the CONNECT (its
clients connect to it as to the origin), so it does a little less work per
tunnel than a CONNECT proxy.

Clients 20, 80 and 140, objects of 1, 16 and 64 KiB; proxy CPU per tunnel (Figures
12, 13), mean response time (14), proxy CPU utilisation (15). Median of 2
interleaved rounds of 3 s (1 round of 2 s with --quick: 16 KiB, 20 and
140 clients).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass

from .. import core, proxylab as pl, report, servers

NAME = "proxy-ssl"
DESCRIPTION = "issue 5: CONNECT tunnels, SSL-emulation exchanges, weft splice vs copy vs Squid and HAProxy (TCP), 20-140 clients"

WS, WC, SF, HS, HC = "weft splice", "weft copy", "Squid", "HAProxy tcp splice", "HAProxy tcp copy"
PROXIES = [WS, WC, SF, HS, HC]
LOCAL_ADDRS = "127.0.0.2-127.0.0.17"  # the client's source addresses: ports never run out


@dataclass(frozen=True)
class Point:
    proxy: str
    size: int
    clients: int


SIZES = (1 * pl.KiB, 16 * pl.KiB, 64 * pl.KiB)
PARTS = tuple(pl.size_name(s) for s in SIZES)  # one object size per part (about three minutes each)


def plan(quick: bool, parts: list[str] | None = None) -> pl.Plan:
    if quick:
        pn = pl.Plan(1, 2.0, [Point(p, 16 * pl.KiB, c) for c in (20, 140) for p in PROXIES])
    else:
        pn = pl.Plan(2, 3.0, [Point(p, s, c) for s in SIZES for c in (20, 80, 140) for p in PROXIES])
    if parts is not None:
        pn.points = [p for p in pn.points if pl.size_name(p.size) in parts]
    return pn


def specs(origin_port: int) -> dict[str, servers.ServerSpec]:
    ports = ["--connect-ports", str(origin_port)]
    return {
        WS: pl.weft_forward(WS, "on", *ports),
        WC: pl.weft_forward(WC, "off", *ports),
        SF: pl.anchor(SF, "squid-forward"),
        HS: pl.anchor(HS, "haproxy-tcp-splice", origin_port),
        HC: pl.anchor(HC, "haproxy-tcp-copy", origin_port),
    }


def load_args(p: Point, duration_s: float, proxy_addr: str | None) -> list[str]:
    """weft load's arguments for one point (pure)."""
    args = ["--workload", "ssl-emulation", "--param", f"size={p.size}", "--clients", str(p.clients), "--calls", "1",
            "--duration", f"{duration_s:g}s", "--timeout", "5s", "--local-addrs", LOCAL_ADDRS]  # fmt: skip
    if proxy_addr:
        args += ["--proxy", proxy_addr]
    return args


def run(lab: core.Lab) -> dict:
    pn = plan(lab.quick, lab.only)
    lab.prepare(commands=["haproxy", "squid"])
    scratch = os.path.join(lab.scratch, "client")
    lab.log(f"{NAME}: {len(pn.points)} configurations x {pn.rounds} round(s), about {pn.estimate_s() / 60:.0f} min of load")
    book = pl.RunBook(len(pn.points) * pn.rounds)
    load_shown = ""
    with lab.pool(lab.scratch) as pool:
        origin = book.start(pool, servers.ServerSpec("weft origin", "weft-origin"))
        running = {label: book.start(pool, spec) for label, spec in specs(origin.port).items()}
        for rnd in range(pn.rounds):
            for p in pl.rotate(pn.points, rnd * 2):
                rs = running[p.proxy]
                tunnel = p.proxy.startswith("HAProxy")
                url = f"http://{rs.addr}/" if tunnel else f"http://{origin.addr}/"
                args = load_args(p, pn.duration_s, None if tunnel else rs.addr)
                if not load_shown and not tunnel:
                    load_shown = " ".join(pl.weft_load_command("weft", "http://ORIGIN/", load_args(p, pn.duration_s, "PROXY"), "FILE"))
                s = pl.measure(rs, origin, lambda: pl.run_weft_load(lab.weft, url, args, scratch=scratch, timeout_s=pn.duration_s + 60))
                row = s.row(part=pl.size_name(p.size), proxy=p.proxy, size=pl.size_label(p.size), size_bytes=p.size, clients=p.clients, round=rnd + 1)
                ssl = s.client.doc.get("ssl", {})
                row["handshakes"] = ssl.get("full", 0) + ssl.get("abbreviated", 0)
                tag = book.add(row)
                lab.log(f"  {tag} r{rnd + 1} {p.proxy:<19} {pl.size_label(p.size):>7} {p.clients:>4} clients: {row['rps']:>8,.0f} tunnels/s"
                        f"  proxy {report.fmt_num(row['proxy_us']):>6}  origin {report.fmt_num(row['origin_us']):>6}  client {report.fmt_num(row['client_us']):>6} µs/tunnel"
                        f"  {report.fmt_num(row['latency_ms_mean'], 2)} ms")  # fmt: skip
        for rs in list(running.values()):
            pool.stop(rs)
    rows, commands = book.merged(lab)
    return summarize(lab, plan(lab.quick), rows, commands, load_shown)


def resummarize(lab: core.Lab) -> dict:
    """Summary and plots again from runs.json (`python3 -m lab summarize proxy-ssl`)."""
    doc = pl.runs_to_resummarize(lab)
    return summarize(lab, plan(lab.quick), doc["runs"], doc.get("commands", {}), doc.get("load_command", ""))


FIELDS = ["rps", "proxy_us", "origin_us", "client_us", "proxy_util", "latency_ms_mean"]


def summarize(lab: core.Lab, pn: pl.Plan, rows: list[dict], commands: dict, load_shown: str) -> dict:
    med = pl.median_rows(rows, ["proxy", "size_bytes", "clients"], FIELDS)
    d = lab.results_dir
    problems = [(r, pl.run_problems(r)) for r in rows]
    problems = [(r, p) for r, p in problems if p]
    short = [r for r in rows if r["requests"] and r["handshakes"] < r["requests"]]
    report.write_json(os.path.join(d, "runs.json"), {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "commands": commands,
                                                    "load_command": load_shown, "runs": rows})  # fmt: skip
    report.write_csv(os.path.join(d, "runs.csv"), rows)
    report.write_csv(os.path.join(d, "medians.csv"), [dict(zip(["proxy", "size_bytes", "clients"], k), **v) for k, v in med.items()])
    sizes = sorted({k[1] for k in med})
    clients = sorted({k[2] for k in med})

    md = [f"# {NAME}", "", f"{'Quick' if lab.quick else 'Full'} run: {pn.rounds} round(s) of {pn.duration_s:g} s per point, interleaved, median shown. "
          "A request = one tunnel: connect, CONNECT, emulated SSL handshake (001 Table III), one GET, close. Proxy/origin CPU from "
          "/proc (ns), client CPU from rusage; response time of the GET from the connection's start.", ""]  # fmt: skip
    md += ["## Proxy CPU µs per tunnel (Figure 12)", ""]
    hdr = ["proxy", "size"] + [f"{c} clients" for c in clients]
    tab = [[p, pl.size_label(s)] + [report.fmt_num(med.get((p, s, c), {}).get("proxy_us")) for c in clients] for s in sizes for p in PROXIES if (p, s, clients[0]) in med]
    md.append(report.markdown_table(hdr, tab, "ll" + "r" * len(clients)))
    md += ["", "## CPU saved per tunnel by splicing (Figure 13)", ""]
    tab = []
    for s in sizes:
        for a, b, what in ((WS, WC, "weft"), (HS, HC, "HAProxy")):
            vals = [pl.saving(med.get((a, s, c), {}).get("proxy_us"), med.get((b, s, c), {}).get("proxy_us")) for c in clients]
            tab.append([what, pl.size_label(s)] + ["–" if v is None else f"{100 * v:.0f} %" for v in vals])
    md.append(report.markdown_table(["proxy", "size"] + [f"{c} clients" for c in clients], tab, "ll" + "r" * len(clients)))
    md += ["", "## Mean response time, ms, and its reduction by splicing (Figure 14)", ""]
    tab = []
    for s in sizes:
        for p in PROXIES:
            if (p, s, clients[0]) in med:
                tab.append([p, pl.size_label(s)] + [report.fmt_num(med.get((p, s, c), {}).get("latency_ms_mean"), 2) for c in clients])
        vals = [pl.saving(med.get((WS, s, c), {}).get("latency_ms_mean"), med.get((WC, s, c), {}).get("latency_ms_mean")) for c in clients]
        tab.append(["weft splice vs copy", pl.size_label(s)] + ["–" if v is None else f"{100 * v:.0f} % less" for v in vals])
    md.append(report.markdown_table(["proxy", "size"] + [f"{c} clients" for c in clients], tab, "ll" + "r" * len(clients)))
    md += ["", "## All figures (medians)", ""]
    tab = []
    for (p, s, c), m in med.items():
        tot = sum(x for x in (m["proxy_us"], m["origin_us"], m["client_us"]) if x is not None)
        tab.append([p, pl.size_label(s), c, report.fmt_num(m["rps"]), report.fmt_num(100 * m["proxy_util"] if m["proxy_util"] is not None else None),
                    report.fmt_num(m["proxy_us"]), report.fmt_num(m["origin_us"]), report.fmt_num(m["client_us"]), report.fmt_num(tot),
                    report.fmt_num(m["latency_ms_mean"], 2)])  # fmt: skip
    md.append(report.markdown_table(["proxy", "size", "clients", "tunnels/s", "proxy CPU %", "proxy µs", "origin µs", "client µs", "sum µs", "response ms"], tab, "llrrrrrrrr"))

    # weft's counters.
    md += ["", "## weft's counters (last round)", ""]
    seen, crow = set(), []
    for r in reversed(rows):
        w = r.get("weft")
        key = (r["proxy"], r["size_bytes"], r["clients"])
        if not w or key in seen:
            continue
        seen.add(key)
        n = r["requests"] or 1
        crow.append([r["proxy"], r["size"], r["clients"], f"{w.get('tunnels', 0) / n:.2f}", pl.body_paths(w),
                     f"{(w.get('tunnel_bytes_spliced', 0) + w.get('tunnel_bytes_copied', 0)) / n:,.0f}", pl.calls_per_request(w, 0.05)])  # fmt: skip
    crow.reverse()
    md.append(report.markdown_table(["config", "size", "clients", "tunnels/req", "tunnel bytes by path", "tunnel bytes/req", "system calls per tunnel"], crow, "llrrlrl"))

    # Plots: Figure 12 (CPU per tunnel vs size, per client count), 15 (utilisation vs clients), 14 (latency vs clients).
    styles = {WS: {"color": "tab:blue"}, WC: {"color": "tab:orange"}, SF: {"color": "tab:gray"}, HS: {"color": "tab:green"}, HC: {"color": "tab:red"}}
    for s in sizes:
        series = OrderedDict((p, [100 * med[(p, s, c)]["proxy_util"] if (p, s, c) in med and med[(p, s, c)]["proxy_util"] is not None else None for c in clients]) for p in PROXIES)
        report.plot_series(os.path.join(d, f"util_{pl.size_name(s)}.png"), clients, series, xlabel="clients", ylabel="proxy CPU (% of one core)",
                          title=f"{NAME}: proxy CPU, SSL tunnels, {pl.size_label(s)} objects (001 Fig. 15)", styles=styles)  # fmt: skip
        series = OrderedDict((p, [med.get((p, s, c), {}).get("proxy_us") for c in clients]) for p in PROXIES)
        report.plot_series(os.path.join(d, f"cpu_per_tunnel_{pl.size_name(s)}.png"), clients, series, xlabel="clients", ylabel="proxy CPU µs per tunnel",
                          title=f"{NAME}: proxy CPU per tunnel, {pl.size_label(s)} objects (001 Fig. 12)", styles=styles)  # fmt: skip
        series = OrderedDict((p, [med.get((p, s, c), {}).get("latency_ms_mean") for c in clients]) for p in PROXIES)
        report.plot_series(os.path.join(d, f"latency_{pl.size_name(s)}.png"), clients, series, xlabel="clients", ylabel="mean response time (ms)",
                          title=f"{NAME}: response time, {pl.size_label(s)} objects (001 Fig. 14)", styles=styles)  # fmt: skip

    md += ["", "## Checks", ""]
    if problems or short:
        for r, p in problems:
            md.append(f"- round {r['round']} {r['proxy']} {r['size']} {r['clients']} clients: {', '.join(p)}")
        for r in short:
            md.append(f"- round {r['round']} {r['proxy']} {r['size']} {r['clients']} clients: {r['handshakes']} handshakes for {r['requests']} replies")
    else:
        md.append("- every reply 2xx with the whole object, no errors, one emulated handshake per reply")
    pl.write_summary(d, md, commands, [load_shown], "Load (HAProxy: the same without --proxy, its address as the URL):", lab.versions,
                     ["util_SIZE.png", "cpu_per_tunnel_SIZE.png", "latency_SIZE.png"])  # fmt: skip
    return {"problems": len(problems) + len(short), "weft_problems": pl.weft_rows(problems) + pl.weft_rows([(r, []) for r in short])}
