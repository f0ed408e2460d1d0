"""wan-proxy: splice vs copy through `weft proxy` under WAN conditions
(paper 001, Figs. 6–10 and 18–20), with the no-proxy baseline.

Three namespaces joined by `weft wan` (lab/netlab.py), as 001's Figure 3:
client — proxy — server, plus a direct client — server link for the
baseline. Table II, as the paper gives it (delay / (first loss, loss after
a loss)):

| row | client–proxy | proxy–server |
| --- | --- | --- |
| corporate | 10 ms / (0.1 %, 40 %) | 90 ms / (1 %, 40 %) |
| modem, loss 1 % | 50 ms / (0.1 %, 40 %) | 90 ms / (1 %, 40 %) |
| modem, loss 2 % | 50 ms / (0.1 %, 40 %) | 90 ms / (2 %, 40 %) |

Modem connections are limited each to 56 kbit/s down and 28 kbit/s up (a
rate per flow on the client's links). The no-proxy link sums the two
links' delays and first-loss rates (1.1 % or 2.1 %) with the same loss
after a loss (40 %) and the same per-connection rates (001 §IV-E). SACK is
always off on the clients and off or on on the server and proxy together
(001 §IV-E's two sets); NewReno everywhere.

NewReno on Linux: `congestion = "reno"` on every host. Linux has no
separate NewReno switch: with SACK off its recovery is NewReno's
(partial ACKs retransmit the next hole, RFC 6582), and Limited Transmit
(RFC 3042) is always on, so 001's "NewReno and Limited Transmit on" holds.
What Linux cannot turn off, and 2003's AIX did not have: Proportional
Rate Reduction in recovery and an initial window of 10 segments (per route
only, `initcwnd`). Left at Linux's defaults (they could be turned off with
sysctls, but are today's TCP): RACK-TLP loss detection (`tcp_recovery`,
`tcp_early_retrans`) and F-RTO (`tcp_frto`); TLP in particular turns some
tail losses that were RTOs in 2003 into probes.

`weft origin` serves uncacheable bodies (every request is a miss, the
path splicing changes); `weft load --clients 20 --calls 1 --http10` is the
paper's 20 clients, each with one outstanding request on a connection of
its own. The proxies keep no idle upstream connections (`--pool-size 0`):
as 001's splicing proxy, each request opens its own connection to the
server (with a pool, the proxy path would skip the proxy–server handshake
the paper's paid). Response time is weft load's, from the request written
to the reply complete, the client's connect left out: as 001's (its no-proxy
minimum was ≈200 ms below the proxy's, the proxy's handshake with the
server). Each namespace's TCP metrics cache is flushed before each run.

Reported per point (medians over runs): response time mean, p99, standard
deviation and coefficient of variation; the server's data packets sent
per ACK received (Fig. 6: TCPOrigDataSent + RetransSegs over TCPPureAcks +
TCPHPAcks, nstat in the server's namespace) and its retransmission
timeouts per 1,000 data packets (Fig. 7); then the figures' comparisons:
no proxy less proxy (Figs. 18–20: latency difference, relative decrease,
CV improvement) and splice against copy (Figs. 9–10), as the paper's
(v_app − v_socket) · 100 / v_app.

The paper's protocol (6 runs per point, 20 s warm-up, windows of 120 s
corporate or 20·size/1024 s modem, over 13 object sizes) would take about
300 hours here. The full form keeps the grid (Table II's three rows x SACK
off/on x the 13 sizes x 3 paths, 20 clients) and scales the protocol: 3
runs, 5 s warm-up, windows of 30 s (corporate) or size/1024 s (modem, at
least 10 s: still 100+ replies per point); about 10 hours, in six parts
(`--only`, one Table II row and SACK setting each, 1–2.5 h).
`--quick`: corporate and modem at 1 %, SACK off, one size each (16 KiB,
4 KiB), one run, 2 s + 4 s per path (about 60 s).
Each size's rows are written to runs.json when measured; `--resume`
continues a stopped part from the sizes it lacks.
"""

from __future__ import annotations

import json
import os
import time

from .. import core, netlab, report
from .. import proxylab as pl

NAME = "wan-proxy"
DESCRIPTION = "001 Figs. 6-10, 18-20: splice vs copy through weft proxy under Table II's corporate and modem WAN settings, no-proxy baseline, size sweep"

SETTINGS = {
    # name: (client-proxy delay ms, down rate, up rate: per connection)
    "corporate": (10, None, None),
    "modem": (50, "56kbit", "28kbit"),
}
# Table II's rows: (setting, proxy-server first-loss rate).
TABLE_II = (("corporate", 0.01), ("modem", 0.01), ("modem", 0.02))
CLIENT_PROXY_LOSS = 0.001
PROXY_SERVER_MS = 90
AFTER_LOSS = 0.40
SIZES_KIB = (1, 5, 10, 15, 20, 33, 45, 64, 71, 90, 100, 110, 128)
CLIENTS = 20
PATHS = ["no proxy", "proxy splice", "proxy copy"]
FULL_RUNS, FULL_WARM_S = 3, 5.0


def pct(p: float) -> str:
    return f"{round(p * 100, 6):g}%"


def two_state(first: float) -> dict:
    return {"loss": pct(first), "loss_after_loss": pct(AFTER_LOSS)}


def links(setting: str, ps_loss: float) -> list[dict]:
    """client-proxy, proxy-server and the no-proxy client-server link of a
    Table II row (pure)."""
    cp_ms, down, up = SETTINGS[setting]
    cp = {"a": "client", "b": "proxy", "delay": f"{cp_ms}ms", **two_state(CLIENT_PROXY_LOSS)}
    ps = {"a": "proxy", "b": "server", "delay": f"{PROXY_SERVER_MS}ms", **two_state(ps_loss)}
    cs = {"a": "client", "b": "server", "delay": f"{cp_ms + PROXY_SERVER_MS}ms", **two_state(CLIENT_PROXY_LOSS + ps_loss)}
    if down:
        # A modem each: the client's own connections, whichever way they go.
        for link in (cp, cs):
            link.update({"rate_per": "flow", "up": {"rate": up}, "down": {"rate": down}})
    return [cp, ps, cs]


def hosts(sack: bool) -> list[dict]:
    """SACK off on the client always, `sack` on the proxy and server; Reno
    (NewReno recovery) everywhere (pure)."""
    return [{"name": "client", "sack": False, "congestion": "reno"}] + [{"name": h, "sack": sack, "congestion": "reno"} for h in ("proxy", "server")]


def part_name(setting: str, ps_loss: float, sack: bool) -> str:
    return f"{setting}-{ps_loss * 100:g}-sack-{'on' if sack else 'off'}"


PARTS = tuple(part_name(s, loss, sack) for s, loss in TABLE_II for sack in (False, True))
# Each size's rows are in runs.json as soon as they are measured; `--resume`
# measures only what is missing (a part takes up to 2.5 hours).
RESUMABLE = True


def window_s(setting: str, size_kib: int, quick: bool) -> float:
    """Sampling window of one run (the paper: 120 s, or 20·size/1024 s)."""
    if quick:
        return 4.0
    return 30.0 if setting == "corporate" else max(10.0, float(size_kib))


def plan(quick: bool, parts: list[str] | None = None) -> list[tuple[str, float, bool, tuple[int, ...]]]:
    """(setting, proxy-server loss, SACK on server and proxy, sizes in KiB) per network (pure)."""
    if quick:
        return [("corporate", 0.01, False, (16,)), ("modem", 0.01, False, (4,))]
    nets = [(s, loss, sack, SIZES_KIB) for s, loss in TABLE_II for sack in (False, True)]
    return [n for n in nets if parts is None or part_name(*n[:3]) in parts]


def estimate_s(quick: bool, parts: list[str] | None = None, nets=None) -> float:
    """Load time of a plan (`nets`, or the parts' whole plan), drains left out (pure)."""
    runs, warm = (1, 2.0) if quick else (FULL_RUNS, FULL_WARM_S)
    nets = plan(quick, parts) if nets is None else nets
    return sum(runs * len(PATHS) * (warm + window_s(s, k, quick)) for s, _, _, sizes in nets for k in sizes)


def server_figures(srv: dict) -> dict:
    """Fig. 6's data packets per ACK and Fig. 7's timeouts per 1,000 data
    packets from the server namespace's counter deltas (pure)."""
    data, acks = srv["data_segs_out"], srv["acks_in"]
    return {
        "server_data_segs": data, "server_acks_in": acks, "server_data_per_ack": data / acks if acks else None,
        "server_rtos": srv["TcpExtTCPTimeouts"], "server_rtos_per_1000": 1000 * srv["TcpExtTCPTimeouts"] / data if data else None,
        "server_retrans": srv["TcpRetransSegs"],
    }  # fmt: skip


def improvement(app: float | None, socket: float | None) -> float | None:
    """001's relative improvement, (v_app − v_socket) · 100 / v_app (pure)."""
    if app is None or socket is None or not app:
        return None
    return (app - socket) * 100 / app


def load(lab, net, path: str, url: str, proxy: str | None, seconds: float, out: str):
    argv = [lab.weft, "load", url, "--clients", str(CLIENTS), "--calls", "1", "--http10", "--duration", f"{seconds}s", "--timeout", "60s", "--quiet", "--json", out]
    if proxy:
        argv += ["--proxy", proxy]
    p = net.run("client", argv, timeout=seconds + 180)
    if p.returncode != 0 or not os.path.exists(out):
        raise RuntimeError(f"weft load ({path}) failed: {p.stderr.strip()[-300:]}")
    with open(out) as f:
        return json.load(f)


def one_network(lab, setting: str, ps_loss: float, sack: bool, sizes, runs: int, warm: float, on_size) -> None:
    """Measure `sizes` on one Table II network; `on_size(rows)` gets each
    size's rows as soon as they are measured."""
    part = part_name(setting, ps_loss, sack)
    with netlab.WanNet(lab.weft, hosts(sack), links(setting, ps_loss), log=lab.log) as net:
        devnull = open(os.devnull, "w")
        procs = [net.popen("server", [lab.weft, "origin", "--listen", "0.0.0.0:8080", "--cache-control", "no-store"], stdout=devnull, stderr=devnull)]
        for port, splice in ((3128, "on"), (3129, "off")):
            argv = [lab.weft, "proxy", "--listen", f"0.0.0.0:{port}", "--splice", splice, "--cache-size", "0", "--pool-size", "0", "--allow", "0.0.0.0/0", "--log-level", "error"]
            procs.append(net.popen("proxy", argv, stdout=devnull, stderr=devnull))
        try:
            net.wait_port("server", 8080, procs[0])
            for port, p in ((3128, procs[1]), (3129, procs[2])):
                net.wait_port("proxy", port, p)
            proxies = {"no proxy": None, "proxy splice": f"{net.addr('proxy')}:3128", "proxy copy": f"{net.addr('proxy')}:3129"}
            tmp = os.path.join(lab.scratch, "load.json")
            for size in sizes:
                rows = []
                url = f"http://{net.addr('server')}:8080/size/{size << 10}/nc/obj"
                window = window_s(setting, size, lab.quick)
                for rep in range(runs):
                    for path in pl.rotate(PATHS, rep):
                        for h in ("client", "proxy", "server"):
                            net.run(h, ["ip", "tcp_metrics", "flush", "all"], timeout=10)
                        load(lab, net, path, url, proxies[path], warm, tmp)
                        before = {h: net.nstat(h) for h in ("server", "client")}
                        t0 = time.monotonic()
                        j = load(lab, net, path, url, proxies[path], window, tmp)
                        el = time.monotonic() - t0
                        srv = netlab.delta(net.nstat("server"), before["server"])
                        cli = netlab.delta(net.nstat("client"), before["client"])
                        rt = j["response_time_ms"]
                        row = {
                            "part": part, "setting": setting, "ps_loss_pct": ps_loss * 100, "sack": sack, "size_kib": size, "path": path, "rep": rep + 1,
                            "replies_2xx": j["replies"]["2xx"], "requests": j["requests"], "rt_mean_ms": rt["mean"], "rt_p50_ms": rt["p50"],
                            "rt_p99_ms": rt["p99"], "rt_max_ms": rt["max"], "rt_stdev_ms": rt.get("stdev"), "rt_cv": rt.get("cv"),
                            **server_figures(srv), "client_retrans": cli["TcpRetransSegs"], "client_rtos": cli["TcpExtTCPTimeouts"], "window_s": window, "wall_s": el,
                        }  # fmt: skip
                        rows.append(row)
                        lab.log(f"  {part} {size:>3} KiB {path:<13} run {rep + 1}: mean {rt['mean']:.0f} ms cv {report.fmt_num(row['rt_cv'], 2)} "
                                f"data/ACK {report.fmt_num(row['server_data_per_ack'], 2)} RTOs/1000 {report.fmt_num(row['server_rtos_per_1000'], 2)} ({j['replies']['2xx']} replies)")  # fmt: skip
                on_size(rows)
        finally:
            for p in procs:
                netlab.stop(p)


def complete_points(rows: list[dict], runs: int) -> set[tuple[str, int]]:
    """(part, size) points whose rows cover every path and run (pure)."""
    seen: dict[tuple[str, int], set] = {}
    for r in rows:
        seen.setdefault((r["part"], r["size_kib"]), set()).add((r["path"], r["rep"]))
    want = {(p, rep) for p in PATHS for rep in range(1, runs + 1)}
    return {k for k, v in seen.items() if want <= v}


def checkpoint(lab, parts: list[str], rows: list[dict]) -> list[dict]:
    """Put this run's rows so far into runs.json and return everything it
    then holds. Parts run side by side (`--only`, one process each) write the
    same file: under a lock, the other parts' rows are taken from the file as
    it is now, and this run's parts' rows are replaced."""
    import fcntl

    path = os.path.join(lab.results_dir, "runs.json")
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        prev = pl.read_runs(lab.results_dir)
        same_form = prev is not None and bool(prev.get("quick")) == lab.quick and lab.only is not None
        kept = [r for r in prev.get("runs", []) if r.get("part") not in parts] if same_form else []
        doc = {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "runs": kept + rows}
        report.write_json(path, doc)
    return doc["runs"]


def run(lab: core.Lab) -> dict:
    lab.prepare()
    runs, warm = (1, 2.0) if lab.quick else (FULL_RUNS, FULL_WARM_S)
    nets = plan(lab.quick, lab.only)
    parts = [part_name(*n[:3]) for n in nets]
    # --resume: the points runs.json already holds for these parts (each
    # size is written as soon as it is measured) are kept, not measured again.
    rows: list[dict] = []
    if lab.resume:
        prev = pl.read_runs(lab.results_dir)
        if prev is not None and bool(prev.get("quick")) == lab.quick:
            rows = [r for r in prev.get("runs", []) if r.get("part") in parts]
            done = complete_points(rows, runs)
            rows = [r for r in rows if (r["part"], r["size_kib"]) in done]
            nets = [(s, loss, sack, tuple(k for k in sizes if (part_name(s, loss, sack), k) not in done)) for s, loss, sack, sizes in nets]
            lab.log(f"--resume: {len(done)} point(s) already measured are kept")
    lab.log(f"{NAME}: {len(nets)} network(s), {runs} run(s) per point, {CLIENTS} clients, about {estimate_s(lab.quick, lab.only, nets) / 60:.0f} min of load")

    def on_size(new: list[dict]) -> None:
        rows.extend(new)
        checkpoint(lab, parts, rows)

    for setting, ps_loss, sack, sizes in nets:
        if sizes:
            one_network(lab, setting, ps_loss, sack, sizes, runs, warm, on_size)
    return summarize(lab, checkpoint(lab, parts, rows), runs)


def resummarize(lab: core.Lab) -> dict:
    """Summary again from runs.json (`python3 -m lab summarize wan-proxy`)."""
    doc = pl.runs_to_resummarize(lab)
    return summarize(lab, doc["runs"], max((r["rep"] for r in doc["runs"]), default=1))


KEYS = ["setting", "ps_loss_pct", "sack", "size_kib", "path"]
FIELDS = ["rt_mean_ms", "rt_p99_ms", "rt_max_ms", "rt_stdev_ms", "rt_cv", "server_data_per_ack", "server_rtos_per_1000", "server_retrans", "replies_2xx"]


def comparisons(med: list[dict]) -> list[dict]:
    """Per network and size: Figs. 18–20 (no proxy against proxy splice)
    and Figs. 9–10 (splice against copy) from the medians (pure)."""
    by = {tuple(m[k] for k in KEYS): m for m in med}
    out = []
    for key in dict.fromkeys(tuple(m[k] for k in KEYS[:-1]) for m in med):
        none, splice, copy = (by.get((*key, p)) for p in PATHS)
        if splice is None:
            continue
        row = dict(zip(KEYS[:-1], key))
        if none is not None:
            row["noproxy_less_splice_ms"] = none["rt_mean_ms"] - splice["rt_mean_ms"]
            row["latency_decrease_pct"] = improvement(none["rt_mean_ms"], splice["rt_mean_ms"])
            row["cv_improvement_pct"] = improvement(none["rt_cv"], splice["rt_cv"])
        if copy is not None:
            row["splice_vs_copy_latency_pct"] = improvement(copy["rt_mean_ms"], splice["rt_mean_ms"])
            row["splice_vs_copy_cv_pct"] = improvement(copy["rt_cv"], splice["rt_cv"])
        out.append(row)
    return out


def summarize(lab, rows: list[dict], runs: int) -> dict:
    med = report.group_medians(rows, KEYS, FIELDS)
    comp = comparisons(med)
    report.write_csv(os.path.join(lab.results_dir, "runs.csv"), rows)
    report.write_csv(os.path.join(lab.results_dir, "medians.csv"), med)
    report.write_csv(os.path.join(lab.results_dir, "comparisons.csv"), comp)
    f = report.fmt_num
    net = lambda m: f"{m['setting']} {m['ps_loss_pct']:g} %"  # noqa: E731
    sack = lambda m: "on" if m["sack"] else "off"  # noqa: E731
    table = [[net(m), sack(m), m["size_kib"], m["path"], f(m["rt_mean_ms"], 0), f(m["rt_p99_ms"], 0), f(m["rt_stdev_ms"], 0), f(m["rt_cv"], 2),
              f(m["server_data_per_ack"], 2), f(m["server_rtos_per_1000"], 2), f(m["server_retrans"], 0), f(m["replies_2xx"], 0)] for m in med]  # fmt: skip
    ctable = [[net(c), sack(c), c["size_kib"], f(c.get("noproxy_less_splice_ms"), 0), f(c.get("latency_decrease_pct")), f(c.get("cv_improvement_pct")),
               f(c.get("splice_vs_copy_latency_pct")), f(c.get("splice_vs_copy_cv_pct"))] for c in comp]  # fmt: skip
    problems = [r for r in rows if r["replies_2xx"] < r["requests"] * 0.9]
    md = [f"# {NAME}", "", f"{'Quick' if lab.quick else 'Full'} run, {runs} run(s) per point, median; {CLIENTS} clients, a connection per request (HTTP/1.0). "
          "Network: 001's Table II (client–proxy 0.1 % first loss, proxy–server 1 or 2 %, 40 % after a loss; no-proxy link the sums). "
          "SACK off on the clients, on/off on server and proxy; Reno (NewReno recovery) everywhere. Anchor: the no-proxy path of the same network.", ""]  # fmt: skip
    md += [report.markdown_table(["network", "server/proxy SACK", "KiB", "path", "mean ms", "p99 ms", "stdev ms", "CV", "server data/ACK (Fig. 6)",
                                  "server RTOs per 1,000 (Fig. 7)", "server retrans", "2xx"], table), ""]  # fmt: skip
    md += ["## The figures' comparisons", "", "Figs. 18–20: no proxy against proxy splice (difference of means, relative decrease, CV improvement); "
           "Figs. 9–10: splice against copy; improvements as 001's (v_app − v_socket) · 100 / v_app, in %.", ""]  # fmt: skip
    md += [report.markdown_table(["network", "SACK", "KiB", "no proxy − splice ms (Fig. 18)", "latency decrease % (Fig. 19)", "CV improvement % (Fig. 20)",
                                  "splice vs copy latency % (Fig. 9)", "splice vs copy CV % (Fig. 10)"], ctable), ""]  # fmt: skip
    md += ["## Checks", "", f"- {len(problems)} run(s) with fewer than 90 % 2xx replies" if problems else "- every run had at least 90 % 2xx replies", ""]
    md += report.versions_section(lab.versions)
    report.write_summary(lab.results_dir, md)
    return {"medians": med, "comparisons": comp, "problems": len(problems)}
