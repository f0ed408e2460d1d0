"""wan-events: event mechanisms under WAN conditions (paper 002 §6, its
proposed future work): the epoll-study comparison with delay and loss in
place of idle connections.

002 made select and poll pay by holding thousands of idle connections open
beside the active ones. On a WAN nobody has to: every connection waits
round trips for its SYN, request, response and FIN, so at a given request
rate the server holds rate x (a few RTTs) connections open, nearly all idle
at any moment. Two namespaces joined by `weft wan` (lab/netlab.py): the
clients' and the server's, 100 ms RTT (50 ms each way) and 0.05 % loss each
way (PolyMix-4's loss); the "no WAN" condition is the same path without
delay or loss. `weft serve --event B --workers 1 --stats-on-exit` serves a
one-byte file; `weft load --rate R` opens a connection per request (002's
httperf workload). Backends: select, poll, epoll, tracked, uring.

Reported per backend: replies/s, the server's CPU µs per reply (/proc),
event system calls per reply (weft's own counters: select, poll,
epoll_wait, epoll_ctl, io_uring_enter), the mean and p99 response time and
the connections the WAN keeps open (rate x mean response time, Little's law).

A run is a problem (`--strict`) when under 95 % of its requests got a 2xx,
except for what select is built to refuse: a connection whose descriptor
is at or above FD_SETSIZE (1,024) is closed at accept (weft's
`refused_fd_limit`), which is 002's point about select, not a fault. Such
refusals are reported beside the run; every other missing reply (the
load's timeouts, resets, refusals by kind) counts.

Full form: both conditions, 2,000 and 5,000 requests/s, 15 s per backend.
`--quick`: WAN only, 2,000 requests/s, 6 s per backend (about 40 s).
"""

from __future__ import annotations

import json
import os

from .. import core, netlab, report

NAME = "wan-events"
DESCRIPTION = "002 §6: select, poll, epoll, tracked, uring on weft serve with WAN delay and loss in place of idle connections"

BACKENDS = ["select", "poll", "epoll", "tracked", "uring"]
CONDITIONS = {"WAN 100 ms, 0.05 %": {"delay": "50ms", "loss": "0.05%"}, "no WAN": {}}
EVENT_CALLS = ("select", "poll", "epoll_wait", "epoll_ctl", "io_uring_enter")


def event_calls(stats: dict) -> int:
    """Event system calls in weft's exit counters (pure)."""
    sc = stats.get("syscalls", {})
    return sum(sc.get(k, 0) for k in EVENT_CALLS)


def shortfall(row: dict) -> int:
    """Requests below the 95 % 2xx bar that the server's refusals at its
    backend's descriptor limit do not explain (pure)."""
    missing = row["requests"] - row["replies_2xx"] - row.get("refused_fd_limit", 0)
    return max(0, missing - int(0.05 * row["requests"]))


def error_kinds(doc: dict) -> dict:
    """The load's non-zero error counts by kind (pure)."""
    return {k: v for k, v in doc.get("errors", {}).items() if v}


def exit_stats(path: str) -> dict:
    """The JSON line `--stats-on-exit` printed on stderr (pure but for the read)."""
    try:
        with open(path) as f:
            lines = [line for line in f if line.startswith("{")]
        return json.loads(lines[-1]) if lines else {}
    except (OSError, ValueError):
        return {}


def one_run(lab, net, www: str, backend: str, rate: int, secs: float) -> dict:
    err = os.path.join(lab.scratch, f"serve-{backend}.err")
    argv = [lab.weft, "serve", www, "--listen", "0.0.0.0:8080", "--workers", "1", "--event", backend, "--stats-on-exit", "--idle-timeout", "120s"]
    p = net.popen("server", argv, stdout=open(os.devnull, "w"), stderr=open(err, "w"))
    try:
        net.wait_port("server", 8080, p)
        out = os.path.join(lab.scratch, "load.json")
        load = [lab.weft, "load", f"http://{net.addr('server')}:8080/1b", "--rate", str(rate), "--duration", f"{secs:g}s", "--timeout", "10s", "--quiet", "--json", out]
        doc, cpu, _, tcp = net.measured_load("server", p.pid, load, out, secs + 120, f"against {backend}")
    finally:
        netlab.stop(p, timeout=5)
    st = exit_stats(err)
    n = doc["replies"].get("2xx", 0)
    rt = doc.get("response_time_ms", {})
    return {
        "requests": doc.get("requests", 0), "replies_2xx": n, "rps": n / secs, "server_us": cpu * 1e6 / n if n else None,
        "event_calls": event_calls(st) / n if n and st else None, "rt_mean_ms": rt.get("mean"), "rt_p99_ms": rt.get("p99"),
        "open_conns": rate * rt["mean"] / 1e3 if rt.get("mean") is not None else None,
        "server_retrans": tcp["TcpRetransSegs"], "server_rtos": tcp["TcpExtTCPTimeouts"],
        "refused_fd_limit": st.get("refused_fd_limit", 0) if st else 0, "errors": error_kinds(doc),
    }  # fmt: skip


def run(lab: core.Lab) -> dict:
    lab.prepare()
    www = os.path.join(lab.scratch, "www")
    os.makedirs(www)
    core.make_file(os.path.join(www, "1b"), 1)
    if lab.quick:
        conds, rates, secs = ["WAN 100 ms, 0.05 %"], [2000], 6.0
    else:
        conds, rates, secs = list(CONDITIONS), [2000, 5000], 15.0
    rows = []
    for cond in conds:
        link = {"a": "client", "b": "server", **CONDITIONS[cond]}
        with netlab.WanNet(lab.weft, [{"name": "client"}, {"name": "server"}], [link], log=lab.log) as net:
            for rate in rates:
                for b in BACKENDS:
                    m = one_run(lab, net, www, b, rate, secs)
                    rows.append({"condition": cond, "rate": rate, "backend": b, **m})
                    lab.log(f"  {cond:<18} {rate:>5}/s {b:<8}: {m['rps']:>7.0f} replies/s  {report.fmt_num(m['server_us'])} µs/reply  "
                            f"{report.fmt_num(m['event_calls'], 2)} event calls/reply  open {report.fmt_num(m['open_conns'])}  "
                            f"mean {report.fmt_num(m['rt_mean_ms'])} ms  retrans {m['server_retrans']}{missing_note(m)}")  # fmt: skip
    return summarize(lab, rows, secs)


def missing_note(row: dict) -> str:
    """What the log line adds when replies were missing: the load's errors
    by kind and the server's refusals at its descriptor limit (pure)."""
    missing = row["requests"] - row["replies_2xx"]
    if missing <= 0:
        return ""
    kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(row["errors"].items())) or "no load errors"
    refused = f"; server refused {row['refused_fd_limit']:,} at its descriptor limit" if row.get("refused_fd_limit") else ""
    return f"  [{missing:,} without a 2xx: {kinds}{refused}]"


def summarize(lab, rows: list[dict], secs: float) -> dict:
    d = lab.results_dir
    report.write_json(os.path.join(d, "runs.json"), {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "runs": rows})
    report.write_csv(os.path.join(d, "runs.csv"), rows)
    problems = [r for r in rows if shortfall(r) > 0]
    at_limit = [r for r in rows if r.get("refused_fd_limit")]
    f = report.fmt_num
    epoll = {(r["condition"], r["rate"]): r for r in rows if r["backend"] == "epoll"}
    table = []
    for r in rows:
        e = epoll.get((r["condition"], r["rate"]))
        vs = f(r["server_us"] / e["server_us"], 2) if e and e["server_us"] and r["server_us"] else "–"
        table.append([r["condition"], r["rate"], r["backend"], f(r["rps"]), f(r["server_us"]), vs, f(r["event_calls"], 2), f(r["open_conns"]),
                      f(r["rt_mean_ms"]), f(r["rt_p99_ms"]), r["server_retrans"]])  # fmt: skip
    md = [f"# {NAME}", "", f"{'Quick' if lab.quick else 'Full'} run, {secs:g} s per backend, one run each, a connection per request for a one-byte file. "
          "Anchor: weft's epoll backend in the same run (002's baseline).", ""]  # fmt: skip
    md += [report.markdown_table(["condition", "req/s", "backend", "replies/s", "server µs/reply", "vs epoll", "event calls/reply", "open conns", "mean ms", "p99 ms", "retrans"], table), ""]
    md += ["## Checks", ""]
    if problems:
        md += [f"- {len(problems)} run(s) with under 95 % 2xx beyond refusals at the descriptor limit:"]
        md += [f"  - {r['condition']} {r['rate']}/s {r['backend']}:{missing_note(r)}" for r in problems]
    else:
        md += ["- every run had at least 95 % 2xx replies, not counting refusals at the descriptor limit"]
    md += [f"- {r['condition']} {r['rate']}/s {r['backend']}: the WAN held more connections than the backend can watch; "
           f"{r['refused_fd_limit']:,} refused at accept (select's FD_SETSIZE, 002's point)" for r in at_limit]
    md += [""]
    md += report.versions_section(lab.versions)
    report.write_summary(d, md)
    return {"runs": rows, "problems": len(problems)}
