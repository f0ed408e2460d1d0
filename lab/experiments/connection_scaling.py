"""connection-scaling: the uselect paper's microbenchmarks (paper 000, §5.1,
Figures 4 and 5) on weft.

Server CPU utilization at a fixed request rate (100 % hits) as the number of
concurrent connections grows (Figure 4: 250 to 10,000 connections, 8 KiB
files) and as the file size grows (Figure 5: 4 to 128 KiB, 5,000
connections), for every weft backend and the anchors (nginx `use
epoll|poll|select`, h2o, lighttpd, one worker each); plus mean response time.

Many slow clients, each at a low request rate: `weft load` open-loop
sessions, like Polygraph's robots (a robot keeps a connection for several
requests at its own pace): sessions arrive at rate X/k, each is one
connection carrying k requests with an exponential think time T between
them, so the request rate is X and, by Little's law, the number of open
connections is C = (X/k)·(k−1)·T. For each C, T = C·k / (X·(k−1)).

Each point: start the load, wait until the connections have ramped up (one
session lifetime, k·C/X seconds), then measure for a window: server CPU
(utime+stime of its process tree, /proc), weft's counters (/stats), the
established connections (server side, /proc/net/tcp, sampled), and the reply
rate in the window from the load's per-second samples (the offered rate must
be achieved). Then SIGTERM the load, which finishes what is in flight and
writes its JSON (mean response time over the whole run, ramp included).

select (weft's and nginx's) cannot hold more than 1,024 descriptors: it runs
only at the connection counts it can hold.
"""

from __future__ import annotations

import json
import os
import time
from collections import OrderedDict

from .. import core, env, loadgen, proc, report, servers
from .epoll_study import BACKENDS, Runner, anchors, weft

NAME = "connection-scaling"
DESCRIPTION = "uselect microbenchmarks (000 Figs 4-5): server CPU at a fixed rate vs connections (250-10k) and file size (4-128 KiB)"

# Parts (`--only`): one figure each, ~10 minutes each in the full form; their
# rows merge into the same runs.json and summary.
PARTS = ["connections", "size"]
RATE = 10000  # requests/s offered
CALLS = 5  # requests per connection (session)
CONNS = [250, 1000, 2500, 5000, 10000]
SIZES_KIB = [4, 8, 25, 64, 128]
FIG4_SIZE_KIB = 8
FIG5_CONNS = 5000
SELECT_MAX = 1000  # select servers run only up to here (FD_SETSIZE 1024 less the listener and the rest)
CLIENT_PROCESSES = 2


def think_s(conns: int, rate: float, calls: int) -> float:
    """Mean think time between the requests of a session so that `conns`
    connections are open at `rate` requests/s with `calls` per connection."""
    return conns * calls / (rate * (calls - 1))


def ramp_s(conns: int, rate: float, calls: int) -> float:
    """Mean session lifetime: the time until the connection count is steady."""
    return conns * calls / rate


def load_args(conns: int, rate: float, calls: int, size_kib: int, run_s: float) -> list[str]:
    t = think_s(conns, rate, calls)
    return ["--rate", f"{rate / calls:g}", "--calls", str(calls), "--think", f"exp({t * 1000:.0f}ms)", "--dist", "exp",
            "--duration", f"{run_s:.0f}s", "--timeout", "5s"]  # fmt: skip


def window_rate(samples: list[float], start_s: float, window_s: float) -> float | None:
    """Mean of the per-second samples wholly inside [start, start + window)."""
    a = int(start_s) + 1
    b = int(start_s + window_s)
    inside = samples[a:b]
    return sum(inside) / len(inside) if inside else None


class Plan:
    def __init__(self, quick: bool):
        self.quick = quick
        self.rate = RATE
        self.conns = [250, 2000] if quick else CONNS
        self.sizes = [4, 64] if quick else SIZES_KIB
        self.fig5_conns = 250 if quick else FIG5_CONNS
        self.window_s = 2.0 if quick else 5.0
        self.backends = ["epoll", "poll", "tracked"] if quick else BACKENDS
        self.anchor_labels = ["nginx"] if quick else None


def measure_point(lab, runner: Runner, rs: servers.RunningServer, *, conns: int, size_kib: int, plan: Plan) -> dict:
    ramp = ramp_s(conns, plan.rate, CALLS) + 1.0
    run_s = ramp + plan.window_s + 30  # bound: stopped with SIGTERM long before
    args = load_args(conns, plan.rate, CALLS, size_kib, run_s)
    url = f"http://127.0.0.1:{rs.port}/file-{size_kib}k.bin"
    bgs = []
    docs = []
    try:
        for i in range(CLIENT_PROCESSES):
            runner.n += 1
            bgs.append(loadgen.Background.start(lab.weft, url, loadgen.split_args(args, CLIENT_PROCESSES, i),
                                                os.path.join(runner.tmp, f"{runner.n}.json")))  # fmt: skip
        t0 = time.monotonic()
        time.sleep(ramp)
        s0 = rs.admin_stats()
        c0 = rs.cpu_ticks()
        w0 = time.monotonic()
        est = [loadgen.established(rs.port)]
        while time.monotonic() - w0 < plan.window_s:
            time.sleep(min(1.0, max(0.0, plan.window_s - (time.monotonic() - w0))))
            est.append(loadgen.established(rs.port))
        c1 = rs.cpu_ticks()
        s1 = rs.admin_stats()
        w1 = time.monotonic()
        start_in_run = w0 - t0
        for b in bgs:
            docs.append(b.finish(timeout_s=30))
    finally:
        for b in bgs:
            b.kill()
    doc = loadgen.merge(docs)
    runner.load_commands.setdefault("load", loadgen.shown(docs[0]["_command"]) + [f"(x{CLIENT_PROCESSES} processes)"])
    window = w1 - w0
    replies_window = window_rate(doc["reply_rate"]["samples"], start_in_run, plan.window_s)
    errors = doc.get("errors", {})
    row = {
        "server": rs.spec.label,
        "conns": conns,
        "size_kib": size_kib,
        "offered": plan.rate,
        "reply_rate": replies_window,
        "established_mean": sum(est) / len(est),
        "cpu_util": proc.ticks_to_seconds(c1 - c0) / window,
        "rt_mean_ms": doc.get("response_time_ms", {}).get("mean"),
        "rt_p99_ms": doc.get("response_time_ms", {}).get("p99"),
        "replies": doc["replies"].get("total", 0),
        "replies_2xx": doc["replies"].get("2xx", 0),
        "errors": sum(errors.values()),
        "client_errors": sum(errors.get(k, 0) for k in loadgen.CLIENT_ERRORS),
        "client_cpu_util": (doc["cpu"]["user_s"] + doc["cpu"]["sys_s"]) / max(doc.get("duration_s", 1), 1e-9),
        "loadavg_1m": os.getloadavg()[0],  # the machine is shared: how busy it was
    }
    if row["cpu_util"] < 0:  # a process of the server died (nginx respawning a crashed worker): CPU unknown
        row["cpu_util"] = None
        row["server_restarted"] = True
    row["cpu_us_per_reply"] = row["cpu_util"] * 1e6 / replies_window if replies_window and row["cpu_util"] is not None else None
    if s0 and s1:
        d = servers.stats_delta(s0["total"], s1["total"])
        n = d.get("requests", 0)
        calls = d.get("syscalls", {})
        row["weft_requests"] = n
        row["event_syscalls_per_reply"] = sum(calls.get(k, 0) for k in core.EVENT_SYSCALLS) / n if n else None
        row["syscalls_per_reply"] = {k: v / n for k, v in calls.items() if v} if n else {}
        row["refused_fd_limit"] = d.get("refused_fd_limit", 0)
    ok = replies_window is not None and replies_window >= 0.95 * plan.rate
    row["rate_achieved"] = ok
    lab.log(f"  {rs.spec.label:<22} {conns:>6} conns {size_kib:>4} KiB: {report.fmt_num(replies_window)} replies/s "
            f"(offered {plan.rate:,}), {100 * row['cpu_util']:.1f} % CPU, {row['established_mean']:.0f} established, "
            f"rt {report.fmt_num(row['rt_mean_ms'], 2)} ms, errors {row['errors']}"
            + (f", ev/reply {row['event_syscalls_per_reply']:.3f}" if row.get("event_syscalls_per_reply") is not None else ""))  # fmt: skip
    return row


def run(lab: core.Lab) -> dict:
    plan = Plan(lab.quick)
    parts = lab.parts(PARTS)
    prev = lab.previous_runs()
    lab.prepare(commands=["nginx", "h2o", "lighttpd"])
    nginx_built = None
    if plan.anchor_labels is None or any("select" in a or "poll" in a for a in plan.anchor_labels):
        nginx_built = env.ensure_nginx_select_poll(lab.log)
        lab.versions["nginx (built with select+poll)"] = env._first_line([nginx_built, "-v"]) + f" ({nginx_built})"
    www = os.path.join(lab.scratch, "www")
    os.makedirs(www)
    for kib in sorted(set(plan.sizes) | {FIG4_SIZE_KIB}):
        core.make_file(os.path.join(www, f"file-{kib}k.bin"), kib * 1024)
    core.make_file(os.path.join(www, "one.bin"), 1)
    os.makedirs(os.path.join(www, "dir00000"))
    core.make_file(os.path.join(www, "dir00000", "class1_4"), 5 * 1024)
    specs = [weft(b) for b in plan.backends]
    all_anchors = anchors(nginx_built)
    specs += all_anchors if plan.anchor_labels is None else [s for s in all_anchors if s.label in plan.anchor_labels]
    rows: list[dict] = []
    parts_info: dict = dict((prev or {}).get("parts", {}))
    t_start = time.monotonic()
    with lab.pool(www) as pool:
        runner = Runner(lab, pool, keep_logs=prev is not None)
        for part in parts:
            t0 = time.monotonic()
            lab.log(f"part {part} ...")
            for spec in specs:
                is_select = "select" in spec.label
                if part == "connections":
                    points = [c for c in plan.conns if not (is_select and c > SELECT_MAX)]
                else:
                    points = [] if is_select and plan.fig5_conns > SELECT_MAX else plan.sizes
                if not points:
                    continue
                rs = runner.start(spec)
                for x in points:
                    if part == "connections":
                        row = measure_point(lab, runner, rs, conns=x, size_kib=FIG4_SIZE_KIB, plan=plan)
                    else:
                        row = measure_point(lab, runner, rs, conns=plan.fig5_conns, size_kib=x, plan=plan)
                    row["figure"] = part
                    rows.append(row)
                runner.stop(rs)
            took = time.monotonic() - t0
            parts_info[part] = {"at": core.utc_now(), "duration_s": round(took), "weft": lab.versions.get("weft")}
            lab.log(f"part {part} took {took:.0f}s")
    lab.log(f"measurements took {time.monotonic() - t_start:.0f}s")
    rows = core.merge_parts(prev, parts, rows, lambda r: r["figure"])
    commands = {**(prev or {}).get("commands", {}), **runner.commands}
    load_commands = {**(prev or {}).get("load_commands", {}), **runner.load_commands}
    return summarize(lab, plan, rows, commands, load_commands, parts_info)


def resummarize(lab: core.Lab) -> dict:
    """Summary, tables and plots again from runs.json (no measurement)."""
    with open(os.path.join(lab.results_dir, "runs.json")) as f:
        doc = json.load(f)
    lab.versions = doc["versions"]
    lab.quick = doc["quick"]
    return summarize(lab, Plan(doc["quick"]), doc["runs"], doc["commands"], doc["load_commands"], doc.get("parts", {}))


def summarize(lab, plan: Plan, rows: list[dict], commands: dict, load_commands: dict, parts_info: dict) -> dict:
    d = lab.results_dir
    for r in rows:  # runs.json of before the parts: the figure was "size" or "connections" already
        r.setdefault("figure", "connections")
    report.write_json(os.path.join(d, "runs.json"), {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "rate": plan.rate,
                                                     "calls": CALLS, "parts": parts_info, "commands": commands,
                                                     "load_commands": load_commands, "runs": rows})  # fmt: skip
    report.write_csv(os.path.join(d, "runs.csv"), rows)
    names = list(dict.fromkeys(r["server"] for r in rows))

    def series(fig, x, y):
        return OrderedDict((s, [(r[x], r[y] * (100 if y == "cpu_util" else 1) if r[y] is not None else None)
                                for r in rows if r["server"] == s and r["figure"] == fig]) for s in names)  # fmt: skip

    pngs = []

    def cpu_and_time(fig: str, x: str, png: str, cpu_title: str, xlabel: str) -> None:
        # One figure: server CPU and mean response time against `x`, both log scales.
        if any(r["figure"] == fig for r in rows):
            pngs.append(png)
            report.plot_lines(os.path.join(d, png), [(cpu_title, series(fig, x, "cpu_util")), ("mean response time", series(fig, x, "rt_mean_ms"))],
                              xlabel=xlabel, ylabel="", logx=True, logy=True, sharey=False,
                              ylabels=["server CPU, % of one core", "mean response time, ms"])  # fmt: skip

    cpu_and_time("connections", "conns", "cpu_vs_connections.png", f"CPU, {plan.rate:,} req/s of {FIG4_SIZE_KIB} KiB", "concurrent connections")
    cpu_and_time("size", "size_kib", "cpu_vs_size.png", f"CPU, {plan.fig5_conns:,} connections, {plan.rate:,} req/s", "file size (KiB)")
    md = [f"# {NAME}", ""]
    md.append(f"{'Quick' if lab.quick else 'Full'} run, one pass. Offered {plan.rate:,} requests/s as open-loop sessions of {CALLS} requests "
              f"(exponential arrivals and think times; T = C·k/(X·(k−1))), {CLIENT_PROCESSES} `weft load` processes; each point measured "
              f"over a {plan.window_s:g} s window after the connections ramped up. CPU = server process tree utime+stime in the window / "
              f"window (100 % = one core). Response time: mean over the whole run.")  # fmt: skip
    md += ["", report.parts_table(parts_info, NAME, lab.quick)]
    for fig, x, title in (("connections", "conns", f"Server CPU vs concurrent connections ({FIG4_SIZE_KIB} KiB)"),
                          ("size", "size_kib", f"Server CPU vs file size ({plan.fig5_conns:,} connections)")):  # fmt: skip
        xs = sorted({r[x] for r in rows if r["figure"] == fig})
        if not xs:
            continue
        by = {(r["server"], r[x]): r for r in rows if r["figure"] == fig}
        md += ["", f"## {title}", "", "CPU % of one core (mean response time ms; event calls per reply for weft; `!` = offered rate not achieved):", ""]
        tab = []
        for s in names:
            cells = [s]
            for v in xs:
                r = by.get((s, v))
                if not r:
                    cells.append("–")
                    continue
                ev = r.get("event_syscalls_per_reply")
                cpu = f"{100 * r['cpu_util']:.1f}" if r["cpu_util"] is not None else "– (restarted)"
                cells.append(f"{cpu} ({report.fmt_num(r['rt_mean_ms'], 2)} ms"
                             + (f"; {ev:.2f}" if ev is not None else "") + ")" + ("" if r["rate_achieved"] else " !"))  # fmt: skip
            tab.append(cells)
        md.append(report.markdown_table(["server"] + [f"{v:,}" + (" KiB" if x == "size_kib" else "") for v in xs], tab))
    md += ["", "## Checks", ""]
    miss = [r for r in rows if not r["rate_achieved"]]
    md.append(f"- points where the window's reply rate was under 95 % of the offered rate: {len(miss)}"
              + "".join(f"\n  - {r['server']} {r['conns']} conns {r['size_kib']} KiB: {report.fmt_num(r['reply_rate'])}/s, {r['errors']} errors" for r in miss))  # fmt: skip
    est = [(r["server"], r["conns"], r["established_mean"]) for r in rows if r["figure"] == "connections"]
    if est:
        worst = max(est, key=lambda e: abs(e[2] - e[1]) / e[1])
        md.append(f"- established connections vs intended: worst {worst[0]} at {worst[1]:,}: {worst[2]:,.0f}")
    cl = [r["client_cpu_util"] for r in rows]
    md.append(f"- load processes' CPU (both together): median {100 * report.median(cl):.0f} %, max {100 * max(cl):.0f} % of one core")
    non2xx = [r for r in rows if r["replies"] != r["replies_2xx"]]
    md.append(f"- runs with non-2xx replies: {len(non2xx)}")
    loads = [f"weft load: {' '.join(v)}" for v in load_commands.values()]
    md += report.summary_end(commands, lab.versions, more_commands=loads, plots=pngs)
    report.write_summary(d, md)
    print("\n".join(md))
    return {"problems": len(non2xx)}
