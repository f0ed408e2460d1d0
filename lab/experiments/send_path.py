"""send-path: where sendfile starts to beat pread + writev on this kernel.

`weft serve --send sendfile` and `--send copy` (and `auto`, to check its
choice), nginx with and without sendfile beside them, on files from 16 KiB to
4 MiB, `wrk -t1 -c50` keep-alive. Server CPU µs per request per size and path;
the crossover is where `auto` should switch for loopback peers. Median of 3
(1 with --quick), 5 s runs (2 s with --quick).
"""

from __future__ import annotations

import os
from collections import OrderedDict

from .. import core, report, servers

NAME = "send-path"
DESCRIPTION = "sendfile vs copy crossover: weft --send sendfile/copy/auto and nginx ±sendfile, 16 KiB..4 MiB"

SIZES = [("16 KiB", 16 << 10), ("64 KiB", 64 << 10), ("128 KiB", 128 << 10), ("256 KiB", 256 << 10), ("512 KiB", 512 << 10), ("1 MiB", 1 << 20), ("4 MiB", 4 << 20)]
SERVERS = [
    servers.ServerSpec("weft sendfile", "weft", {"send": "sendfile"}),
    servers.ServerSpec("weft copy", "weft", {"send": "copy"}),
    servers.ServerSpec("weft auto", "weft", {"send": "auto"}),
    servers.ServerSpec("nginx", "nginx"),
    servers.ServerSpec("nginx no-sendfile", "nginx-nosendfile"),
]
CONNECTIONS = 50


def run(lab: core.Lab) -> dict:
    reps = 1 if lab.quick else 3
    duration = 2.0 if lab.quick else 5.0
    lab.prepare(commands=["nginx"])
    rows: list[dict] = []
    with core.size_site_rounds(lab, NAME, [size for _, size in SIZES], SERVERS, reps, len(SIZES), "sizes", duration) as runs:
        for rep, spec, rs, base in runs:
            for label, size in SIZES:
                core.fetch(base + core.file_name(size))
                m = core.measure(lab, rs, base + core.file_name(size), connections=CONNECTIONS, duration_s=duration)
                rows.append({
                    "rep": rep + 1, "server": spec.label, "size": label, "size_bytes": size,
                    "requests": m.load.requests, "rps": m.load.rps, "cpu_us_per_req": m.cpu_us_per_request,
                    "cpu_ns_per_kib": (m.cpu_us_per_request or 0) * 1000 / (size / 1024),
                    "non_2xx": m.load.non_2xx, "socket_errors": m.load.error_total,
                    "bytes_copy": m.weft.get("bytes_copy") if m.weft else None,
                    "bytes_sendfile": m.weft.get("bytes_sendfile") if m.weft else None,
                })  # fmt: skip
                lab.log(f"  {runs.tick()} rep {rep + 1} {spec.label:<18} {label:>8}: {m.load.rps:>9,.0f} req/s {report.fmt_num(m.cpu_us_per_request):>7} µs/req")
    lab.load_command = lab.driver.command("http://127.0.0.1:PORT/file-SIZE.bin", connections=CONNECTIONS, duration_s=duration)
    med = report.group_medians(rows, ["server", "size"], ["rps", "cpu_us_per_req", "cpu_ns_per_kib"])
    core.write_runs(lab, NAME, rows, runs.commands, med)
    cols, cpu = report.pivot(med, "server", "size", "cpu_us_per_req")
    by = {(r["server"], r["size"]): r["cpu_us_per_req"] for r in med}
    ratio = [["sendfile / copy (weft)"] + [f"{by[('weft sendfile', s)] / by[('weft copy', s)]:.2f}" if by.get(("weft sendfile", s)) and by.get(("weft copy", s)) else "–" for s, _ in SIZES]]
    ratio.append(["sendfile / copy (nginx)"] + [f"{by[('nginx', s)] / by[('nginx no-sendfile', s)]:.2f}" if by.get(("nginx", s)) and by.get(("nginx no-sendfile", s)) else "–" for s, _ in SIZES])
    series = OrderedDict((s.label, [by.get((s.label, z)) for z, _ in SIZES]) for s in SERVERS)
    report.plot_grouped_bars(os.path.join(lab.results_dir, "cpu_per_request.png"), [s for s, _ in SIZES], series, ylabel="server CPU µs per request (log)", title=f"{NAME}: median of {reps}", log=True)
    problems = [r for r in rows if r["non_2xx"] or r["socket_errors"]]
    md = [f"# {NAME}", "", f"{'Quick' if lab.quick else 'Full'} run, {reps} repetition(s), median; `{' '.join(lab.load_command)}`.", ""]
    md += ["## Server CPU µs per request", "", report.markdown_table(["server"] + cols, cpu), ""]
    md += ["## Ratio", "", report.markdown_table([""] + cols, ratio), ""]
    md += ["## Checks", "", f"- {len(problems)} run(s) with errors" if problems else "- every response was 2xx, no socket errors", ""]
    md += report.versions_section(lab.versions)
    report.write_summary(lab.results_dir, md)
    return {"medians": med, "problems": len(problems)}
