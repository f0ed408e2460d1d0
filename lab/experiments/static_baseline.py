"""static-baseline: weft serve against nginx, h2o and lighttpd on static files.

Issue 2's "Measure": `wrk -t1 -c50 -d10s` keep-alive against each server with
one worker, same files, same run: 1 B, 8 KiB, 100 KiB and 1 MiB. For each,
requests/s and server CPU µs per request (utime+stime of the server's process
tree from /proc before and after). weft runs with `--send auto`, `sendfile`
and `copy`, nginx with and without sendfile. Median of 3 repetitions (1 with
--quick, 1 s runs: the smoke form CI runs, where only errors fail). The
servers' order rotates between repetitions so no one server always runs first
or last.
"""

from __future__ import annotations

import os
from collections import OrderedDict

from .. import core, report, servers

NAME = "static-baseline"
DESCRIPTION = "wrk -t1 -c50 keep-alive: weft (auto/sendfile/copy) vs nginx (±sendfile), h2o, lighttpd; 1 B..1 MiB"

SIZES = [("1 B", 1), ("8 KiB", 8 * 1024), ("100 KiB", 100 * 1024), ("1 MiB", 1024 * 1024)]

SERVERS = [
    servers.ServerSpec("weft auto", "weft", {"event": "epoll", "send": "auto"}),
    servers.ServerSpec("weft sendfile", "weft", {"event": "epoll", "send": "sendfile"}),
    servers.ServerSpec("weft copy", "weft", {"event": "epoll", "send": "copy"}),
    servers.ServerSpec("nginx", "nginx"),
    servers.ServerSpec("nginx no-sendfile", "nginx-nosendfile"),
    servers.ServerSpec("h2o", "h2o"),
    servers.ServerSpec("lighttpd", "lighttpd"),
]

CONNECTIONS = 50
THREADS = 1


def run(lab: core.Lab) -> dict:
    reps = 1 if lab.quick else 3
    # Quick is CI's smoke run (28 runs, failed only by errors): 1 s of wrk
    # exercises every path, and CI's 40-minute budget needs the seconds.
    duration = 1.0 if lab.quick else 10.0
    lab.prepare(commands=["nginx", "h2o", "lighttpd"])
    rows: list[dict] = []
    with core.size_site_rounds(lab, NAME, [size for _, size in SIZES], SERVERS, reps, len(SIZES), "sizes", duration) as runs:
        for rep, spec, rs, base in runs:
            for _, size in SIZES:  # warm caches; check the bytes
                status, n = core.fetch(base + core.file_name(size))
                if status != 200 or n != size:
                    raise servers.ServerError(f"{spec.label}: GET {core.file_name(size)} gave {status}, {n} bytes")
            for label, size in SIZES:
                m = core.measure(lab, rs, base + core.file_name(size), connections=CONNECTIONS, duration_s=duration, threads=THREADS)
                row = {
                    "rep": rep + 1,
                    "server": spec.label,
                    "kind": spec.kind,
                    "size": label,
                    "size_bytes": size,
                    "requests": m.load.requests,
                    "duration_s": m.load.duration_s,
                    "rps": m.load.rps,
                    "cpu_ticks": m.cpu_ticks,
                    "cpu_us_per_req": m.cpu_us_per_request,
                    "non_2xx": m.load.non_2xx,
                    "socket_errors": m.load.error_total,
                    "bytes_per_response": m.load.bytes_received / m.load.requests if m.load.requests else None,
                    "latency_ms": m.load.latency_ms,
                }
                if m.weft:
                    row["weft"] = {
                        "syscalls_per_req": m.syscalls_per_request(),
                        "event_syscalls_per_req": m.event_syscalls_per_request(),
                        "bytes_sendfile": m.weft.get("bytes_sendfile", 0),
                        "bytes_copy": m.weft.get("bytes_copy", 0),
                        "bytes_memory": m.weft.get("bytes_memory", 0),
                    }
                rows.append(row)
                cpu = report.fmt_num(m.cpu_us_per_request)
                lab.log(f"  {runs.tick()} rep {rep + 1} {spec.label:<18} {label:>7}: {m.load.rps:>10,.0f} req/s  {cpu:>7} µs/req")
    lab.load_command = lab.driver.command("http://127.0.0.1:PORT/file-SIZE.bin", connections=CONNECTIONS, duration_s=duration, threads=THREADS)
    return summarize(lab, rows, runs.commands, reps, duration)


def body_path(row: dict) -> str:
    """Which path carried weft's bodies in a run, from the byte counters."""
    w = row.get("weft") or {}
    paths = [(w.get("bytes_memory", 0), "memory"), (w.get("bytes_copy", 0), "copy"), (w.get("bytes_sendfile", 0), "sendfile")]
    total = sum(b for b, _ in paths)
    if not total:
        return "–"
    return " + ".join(f"{name} {100 * b / total:.0f}%" for b, name in paths if b)


def summarize(lab: core.Lab, rows: list[dict], commands: dict, reps: int, duration: float) -> dict:
    med = report.group_medians(rows, ["server", "size"], ["rps", "cpu_us_per_req"])
    sizes = [s for s, _ in SIZES]
    core.write_runs(lab, NAME, rows, commands, med)

    cols, cpu_table = report.pivot(med, "server", "size", "cpu_us_per_req")
    _, rps_table = report.pivot(med, "server", "size", "rps")
    by = {(r["server"], r["size"]): r for r in med}

    # Ratios against nginx (default config) and against the best anchor.
    anchors = [s.label for s in SERVERS if s.kind != "weft"]
    ratio_rows = []
    for s in sizes:
        ng = by.get(("nginx", s), {}).get("cpu_us_per_req")
        best_anchor = min(((by[(a, s)]["cpu_us_per_req"], a) for a in anchors if by.get((a, s), {}).get("cpu_us_per_req")), default=(None, "–"))
        weft = {w.label: by.get((w.label, s), {}).get("cpu_us_per_req") for w in SERVERS if w.kind == "weft"}
        best_weft = min(((v, k) for k, v in weft.items() if v), default=(None, "–"))
        auto = weft.get("weft auto")
        ratio_rows.append([
            s,
            report.fmt_num(auto),
            report.fmt_num(ng),
            f"{auto / ng:.2f}" if auto and ng else "–",
            f"{best_weft[1]} {report.fmt_num(best_weft[0])}",
            f"{best_anchor[1]} {report.fmt_num(best_anchor[0])}",
            f"{best_weft[0] / best_anchor[0]:.2f}" if best_weft[0] and best_anchor[0] else "–",
        ])  # fmt: skip

    # Which path weft's auto mode took, and its system calls per request.
    path_rows = []
    sys_rows = []
    kinds = ["read", "write", "writev", "sendfile", "pread", "epoll_wait", "epoll_ctl"]
    for w in (x for x in SERVERS if x.kind == "weft"):
        for s in sizes:
            runs = [r for r in rows if r["server"] == w.label and r["size"] == s and r.get("weft")]
            if not runs:
                continue
            last = runs[-1]
            path_rows.append([w.label, s, body_path(last)])
            spr = last["weft"]["syscalls_per_req"]
            sys_rows.append([w.label, s] + [f"{spr.get(k, 0):.2f}" for k in kinds])

    problems = [r for r in rows if r["non_2xx"] or r["socket_errors"] or (r["bytes_per_response"] or 0) < r["size_bytes"]]

    series = OrderedDict((s.label, [by.get((s.label, z), {}).get("cpu_us_per_req") for z in sizes]) for s in SERVERS)
    report.plot_grouped_bars(os.path.join(lab.results_dir, "cpu_per_request.png"), sizes, series, ylabel="server CPU µs per request (log)", title=f"{NAME}: server CPU per request (median of {reps})", log=True)
    series = OrderedDict((s.label, [by.get((s.label, z), {}).get("rps") for z in sizes]) for s in SERVERS)
    report.plot_grouped_bars(os.path.join(lab.results_dir, "requests_per_second.png"), sizes, series, ylabel="requests/s (log)", title=f"{NAME}: requests/s (median of {reps})", log=True)

    md = [f"# {NAME}", ""]
    md.append(f"{'Quick' if lab.quick else 'Full'} run: {reps} repetition(s), median shown; each run `{' '.join(lab.load_command)}` "
              f"(duration {duration:g}s), one server at a time, one worker each, keep-alive, same files. "
              f"CPU = utime+stime of the server's process tree from /proc/PID/stat before and after the run, per completed request.")  # fmt: skip
    md += ["", "## Server CPU µs per request", "", report.markdown_table(["server"] + cols, cpu_table)]
    md += ["", "## Requests/s", "", report.markdown_table(["server"] + cols, rps_table)]
    md += ["", "## weft against the anchors (CPU µs per request)", ""]
    md.append(report.markdown_table(["size", "weft auto", "nginx", "weft auto / nginx", "best weft", "best anchor", "best weft / best anchor"], ratio_rows, "lrrrlll"))
    md += ["", "## weft's body path (share of body bytes, last repetition)", "", report.markdown_table(["config", "size", "path"], path_rows, "lll")]
    md += ["", "## weft's system calls per request (last repetition)", "", report.markdown_table(["config", "size"] + kinds, sys_rows, "ll" + "r" * len(kinds))]
    md += ["", "## Checks", ""]
    if problems:
        for r in problems:
            md.append(f"- rep {r['rep']} {r['server']} {r['size']}: non-2xx {r['non_2xx']}, socket errors {r['socket_errors']}, bytes/response {r['bytes_per_response']}")
    else:
        md.append("- every response was 2xx, no socket errors, every response carried at least the file's bytes")
    md += report.summary_end(commands, lab.versions, plots=["cpu_per_request.png", "requests_per_second.png"],
                             raw=["runs.json", "runs.csv", "medians.csv"])  # fmt: skip
    report.write_summary(lab.results_dir, md)
    return {"medians": med, "problems": len(problems)}
