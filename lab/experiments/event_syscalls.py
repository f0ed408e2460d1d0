"""event-syscalls: event-related system calls per request, by backend.

Issue 4's target "uring and tracked make at most half the event-related
system calls per request (epoll_wait/epoll_ctl/poll/select/io_uring_enter) of
level-triggered epoll at the same load", measured closed-loop with wrk
keep-alive against `weft serve --workers 1 --event B --send copy`, read from
weft's admin counters before and after each run. Three workloads:

- `1 B, wrk -t1 -c50`: the µserver study's one-byte workload; one wrk thread
  is slower than weft, so the server waits for the client between batches;
- `1 B, wrk -t2 -c100`: wrk on both cores, so the server is saturated (always
  has work when it comes back to the event loop) — the regime where the
  event mechanism's cost shows;
- `1 MiB, wrk -t1 -c50`: writes block, so level-triggered epoll changes
  interest twice per blocked write.

`uring` and `tracked` also run with `--wake-interval 200us` (io_uring
wake-up batching). nginx, h2o and lighttpd run in the same repetitions as the
CPU anchors (issue 4's CPU target compares weft's best backend with the best
of them on the one-byte keep-alive workload). Median of 3,
5 s runs (1 repetition of 2 s runs with --quick).

This is a closed-loop stand-in for the open-loop `epoll-study` (which needs
`weft load --rate`): at saturation every backend runs at its own rate, so the
ratios are per request, with the reply rate beside them.
"""

from __future__ import annotations

import os
from collections import OrderedDict

from .. import core, report, servers

NAME = "event-syscalls"
DESCRIPTION = "event syscalls and CPU per request for each weft backend (wrk -c50, 1 B and 1 MiB), nginx/h2o/lighttpd beside"

BACKENDS = ["epoll", "epoll-et", "epoll-once", "epoll-batched", "uring", "tracked", "tracked:epoll-et", "poll", "select"]
QUICK_BACKENDS = ["epoll", "uring", "tracked", "tracked:epoll-et"]
# io_uring wake-up batching (`--wake-interval`, docs/events.md), beside the plain forms.
WAKE_INTERVAL = "200us"
WAKE_BACKENDS = ["uring", "tracked"]
FILES = [("1 B", 1), ("1 MiB", 1024 * 1024)]
# (label, file size, wrk threads, connections)
WORKLOADS = [("1 B, wrk -t1 -c50", 1, 1, 50), ("1 B, wrk -t2 -c100", 1, 2, 100), ("1 MiB, wrk -t1 -c50", 1024 * 1024, 1, 50)]


def specs(quick: bool) -> list[servers.ServerSpec]:
    out = [servers.ServerSpec(f"weft {b}", "weft", {"event": b, "send": "copy"}) for b in (QUICK_BACKENDS if quick else BACKENDS)]
    out += [servers.ServerSpec(f"weft {b} wake {WAKE_INTERVAL}", "weft", {"event": b, "send": "copy", "extra": ["--wake-interval", WAKE_INTERVAL]}) for b in WAKE_BACKENDS]
    out += [servers.ServerSpec("nginx", "nginx"), servers.ServerSpec("h2o", "h2o"), servers.ServerSpec("lighttpd", "lighttpd")]
    return out


def run(lab: core.Lab) -> dict:
    reps = 1 if lab.quick else 3
    duration = 2.0 if lab.quick else 5.0
    lab.prepare(commands=["nginx", "h2o", "lighttpd"])
    all_specs = specs(lab.quick)
    rows: list[dict] = []
    with core.size_site_rounds(lab, NAME, [size for _, size in FILES], all_specs, reps, len(WORKLOADS), "workloads", duration) as runs:
        for rep, spec, rs, base in runs:
            for _, size in FILES:
                core.fetch(base + core.file_name(size))
            for label, size, threads, conns in WORKLOADS:
                m = core.measure(lab, rs, base + core.file_name(size), connections=conns, duration_s=duration, threads=threads)
                spr = m.syscalls_per_request()
                row = {
                    "rep": rep + 1,
                    "server": spec.label,
                    "workload": label,
                    "requests": m.load.requests,
                    "rps": m.load.rps,
                    "cpu_us_per_req": m.cpu_us_per_request,
                    "event_syscalls_per_req": m.event_syscalls_per_request(),
                    "non_2xx": m.load.non_2xx,
                    "socket_errors": m.load.error_total,
                }
                for k in core.EVENT_SYSCALLS:
                    row[k] = spr.get(k) if m.weft else None
                if m.weft and m.weft.get("tracker"):
                    t = m.weft["tracker"]
                    row["tracker_user_passes"] = t.get("user_passes", 0)
                    row["tracker_kernel_polls"] = t.get("kernel_polls", 0)
                rows.append(row)
                ev = m.event_syscalls_per_request()
                ev_s = f"{ev:.3f} event syscalls/req" if ev is not None else ""
                lab.log(f"  {runs.tick()} rep {rep + 1} {spec.label:<22} {label:>19}: {m.load.rps:>10,.0f} req/s {report.fmt_num(m.cpu_us_per_request):>7} µs/req  {ev_s}")
    lab.load_command = lab.driver.command("http://127.0.0.1:PORT/file-SIZE.bin", connections=50, duration_s=duration)
    return summarize(lab, rows, runs.commands, reps, duration, all_specs)


def summarize(lab, rows, commands, reps, duration, all_specs) -> dict:
    fields = ["rps", "cpu_us_per_req", "event_syscalls_per_req", *core.EVENT_SYSCALLS]
    med = report.group_medians(rows, ["server", "workload"], fields)
    core.write_runs(lab, NAME, rows, commands, med)
    md = [f"# {NAME}", ""]
    md.append(f"{'Quick' if lab.quick else 'Full'} run: {reps} repetition(s), median shown; each run `{' '.join(lab.load_command)}` "
              f"(or -t2 -c100, see each table; {duration:g}s) against one server with one worker; weft with `--send copy`. Event system calls = "
              f"{', '.join(core.EVENT_SYSCALLS)}, from weft's /stats before and after each run.")  # fmt: skip
    for f, _, _, _ in WORKLOADS:
        ms = [r for r in med if r["workload"] == f]
        epoll = next((r for r in ms if r["server"] == "weft epoll"), None)
        base = epoll["event_syscalls_per_req"] if epoll else None
        table = []
        for r in ms:
            ev = r["event_syscalls_per_req"]
            table.append([
                r["server"],
                report.fmt_num(r["rps"]),
                report.fmt_num(r["cpu_us_per_req"], 2),
                f"{ev:.3f}" if ev is not None else "–",
                f"{ev / base:.2f}" if ev is not None and base else "–",
            ] + [f"{r[k]:.3f}" if r[k] is not None else "–" for k in core.EVENT_SYSCALLS])  # fmt: skip
        md += ["", f"## {f}", ""]
        md.append(report.markdown_table(["server", "req/s", "CPU µs/req", "event syscalls/req", "vs epoll", *core.EVENT_SYSCALLS], table))
        weft_rows = [r for r in ms if r["server"].startswith("weft")]
        series = OrderedDict([("event syscalls / request", [r["event_syscalls_per_req"] for r in weft_rows])])
        slug = "".join(ch if ch.isalnum() else "_" for ch in f).strip("_")
        report.plot_grouped_bars(os.path.join(lab.results_dir, f"event_syscalls_{slug}.png"), [r["server"].removeprefix("weft ") for r in weft_rows], series, ylabel="event syscalls per request", title=f"{NAME}: {f}")
    problems = [r for r in rows if r["non_2xx"] or r["socket_errors"]]
    md += ["", "## Checks", ""]
    md.append(f"- {len(problems)} run(s) with non-2xx responses or socket errors" if problems else "- every response was 2xx, no socket errors")
    md += report.summary_end(commands, lab.versions)
    report.write_summary(lab.results_dir, md)
    return {"medians": med, "problems": len(problems)}
