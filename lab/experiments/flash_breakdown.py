"""flash-breakdown: what each of Flash's caches buys (thesis 004, Figure 4.11; issue 24).

`weft serve --arch amped` with every combination of its three caches on and
off: pathname translation (`--path-cache 0|1000`), ready-to-send header
fields (`--head-cache on|off`), file contents (`--file-cache 0|64MiB`). One
file requested over and over with wrk -c50 keep-alive; requests/s and server
CPU µs per request per combination, beside nginx (its anchor configuration,
lab/anchors/nginx_static_w1.conf: sendfile and `open_file_cache max=1000`
on, so nginx too keeps descriptors and their metadata). --quick: one size,
2 s runs.
"""

from __future__ import annotations

import itertools

from .. import core, report, servers
from .flash_arch import finish

NAME = "flash-breakdown"
DESCRIPTION = "Flash's three caches (path, head, file) in all 8 combinations, weft serve --arch amped, single file"


def combos() -> list[servers.ServerSpec]:
    specs = []
    for path, head, data in itertools.product([True, False], repeat=3):
        label = "+".join(n for n, on in (("path", path), ("head", head), ("file", data)) if on) or "none"
        extra = ["--arch", "amped", "--path-cache", "1000" if path else "0", "--head-cache", "on" if head else "off",
                 "--file-cache", "64MiB" if data else "0"]  # fmt: skip
        specs.append(servers.ServerSpec(label, "weft", {"extra": extra}))
    return specs


def run(lab: core.Lab) -> dict:
    reps = 1 if lab.quick else 3
    duration = 2.0 if lab.quick else 5.0
    sizes = [("1 KiB", 1 << 10)] if lab.quick else [("1 KiB", 1 << 10), ("8 KiB", 8 << 10), ("100 KiB", 100 << 10)]
    lab.prepare(commands=["nginx"])
    specs = combos() + [servers.ServerSpec("nginx", "nginx")]
    rows = []
    with core.size_site_rounds(lab, NAME, [size for _, size in sizes], specs, reps, len(sizes), "sizes", duration) as runs:
        for rep, spec, rs, base in runs:
            for label, size in sizes:
                url = base + core.file_name(size)
                core.fetch(url)
                m = core.measure(lab, rs, url, connections=50, duration_s=duration)
                rows.append({"rep": rep + 1, "caches": spec.label, "size": label, "rps": m.load.rps, "cpu_us_per_req": m.cpu_us_per_request,
                             "opens": (m.weft.get("syscalls") or {}).get("open") if m.weft else None,
                             "errors": m.load.non_2xx + m.load.error_total})  # fmt: skip
                lab.log(f"  {runs.tick()} {spec.label:<15} {label:>8}: {m.load.rps:>9,.0f} req/s {report.fmt_num(m.cpu_us_per_request):>7} µs/req")
    lab.load_command = lab.driver.command("http://127.0.0.1:PORT/file-SIZE.bin", connections=50, duration_s=duration)
    med = report.group_medians(rows, ["caches", "size"], ["rps", "cpu_us_per_req"])
    core.write_runs(lab, NAME, rows, runs.commands, med)
    md = [f"# {NAME}", "", f"{'Quick' if lab.quick else 'Full'} run, median of {reps}; `{' '.join(lab.load_command)}`.", ""]
    cols, t = report.pivot(med, "caches", "size", "rps")
    md += ["## Requests/s", "", report.markdown_table(["caches on"] + cols, t), ""]
    cols, t = report.pivot(med, "caches", "size", "cpu_us_per_req")
    md += ["## Server CPU µs per request", "", report.markdown_table(["caches on"] + cols, t), ""]
    problems = finish(lab, md, rows)
    return {"medians": med, "problems": problems}
