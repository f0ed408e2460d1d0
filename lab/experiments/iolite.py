"""iolite: the IO-Lite object cache in weft serve (thesis 004, Figures 2.3-2.6, 2.8, 2.10; issue 24).

The SPECweb99 file set (`weft load gen specweb99`) replayed by `weft load
--workload specweb99 --clients 64` against `weft serve --arch amped` with the
object cache off and on (budget a quarter of the data set, so replacement
decides), under Greedy-Dual-Size with cost 1, packets and bytes, LRU and
LRU-500K; nginx beside them. Requests/s, server CPU µs per request, object
and byte hit ratios and heap + page-cache bytes per cached byte (from the
admin counters). Figure 2.13 (grep, wc, cat, gcc over IO-Lite) is out of
scope in user space; the CGI rows belong to the `cgi` experiment; the WAN
form (Figure 2.12: object cache on and off and nginx across network delays,
on `weft wan`'s lab network) is `wan-server`'s "weft object cache" rows
beside its sendfile, copy and nginx rows. --quick: 4 dirs, 4 s runs.
"""

from __future__ import annotations

import os

from .. import core, report, servers
from .flash_arch import SPECWEB_DIR_BYTES, finish, gen_specweb, weft_load

NAME = "iolite"
DESCRIPTION = "IO-Lite object cache in weft serve: off/on, GDS (1, packets, bytes) vs LRU vs LRU-500K, hit ratios, CPU per request"


def specs(budget: int) -> list[servers.ServerSpec]:
    def w(label, *extra):
        return servers.ServerSpec(label, "weft", {"extra": ["--arch", "amped", *extra]})

    b = str(budget)
    return [
        w("object cache off"),
        w("gds cost 1", "--object-cache", b, "--cache-policy", "gds", "--gds-cost", "1"),
        w("gds packets", "--object-cache", b, "--cache-policy", "gds", "--gds-cost", "packets"),
        w("gds bytes", "--object-cache", b, "--cache-policy", "gds", "--gds-cost", "bytes"),
        w("lru", "--object-cache", b, "--cache-policy", "lru"),
        w("lru-500k", "--object-cache", b, "--cache-policy", "lru-500k"),
        servers.ServerSpec("nginx", "nginx"),
    ]


def ratio(a, b):
    return a / b if b else None


def run(lab: core.Lab) -> dict:
    reps = 1 if lab.quick else 3
    duration = 4.0 if lab.quick else 20.0
    dirs = 4 if lab.quick else 20
    lab.prepare(commands=["nginx"])
    www = os.path.join(lab.scratch, "specweb")
    gen_specweb(lab, www, dirs)
    os.chmod(www, 0o755)
    budget = dirs * SPECWEB_DIR_BYTES // 4
    rows = []
    with lab.pool(www) as pool:
        runs = core.ServerRounds(lab, NAME, pool, specs(budget), reps, 1, "run", duration)
        for rep, spec, rs, base in runs:
            before = rs.admin_stats()
            t0 = rs.cpu_ticks()
            doc = weft_load(lab, base, ["--workload", "specweb99", "--param", f"dirs={dirs}", "--clients", "64"], duration)
            ticks = rs.cpu_ticks() - t0
            after = rs.admin_stats()
            replies = doc.get("requests", 0)
            rps = doc["reply_rate"]["overall"]
            row = {"rep": rep + 1, "config": spec.label, "rps": rps, "cpu_us_per_req": ticks * 1e6 / os.sysconf("SC_CLK_TCK") / replies if replies else None,
                   "errors": sum(doc.get("errors", {}).values())}  # fmt: skip
            if before and after:
                d = servers.stats_delta(before["total"], after["total"])
                t = after["total"]
                row["hit_ratio"] = ratio(d.get("object_hits", 0), d.get("object_lookups", 0))
                row["byte_hit_ratio"] = ratio(d.get("object_bytes_hit", 0), d.get("object_bytes_looked_up", 0))
                body = t.get("object_mapped_bytes", 0)
                row["bytes_per_cached_byte"] = ratio(t.get("object_heap_bytes", 0) + body, body)
                row["heap_bytes"] = t.get("object_heap_bytes")
                row["mapped_bytes"] = body
            rows.append(row)
            lab.log(f"  {runs.tick()} {spec.label:<17}: {rps:>8,.0f} req/s, hits {report.fmt_num(row.get('hit_ratio'))} bytes {report.fmt_num(row.get('byte_hit_ratio'))}")
            lab.load_command = doc["command"]
    med = report.group_medians(rows, ["config"], ["rps", "cpu_us_per_req", "hit_ratio", "byte_hit_ratio", "bytes_per_cached_byte"])
    report.write_json(os.path.join(lab.results_dir, "runs.json"), {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "commands": runs.commands, "load_command": lab.load_command, "runs": rows})
    report.write_csv(os.path.join(lab.results_dir, "runs.csv"), rows)
    report.write_csv(os.path.join(lab.results_dir, "medians.csv"), med)
    head = ["config", "req/s", "CPU µs/req", "object hit ratio", "byte hit ratio", "heap + page cache per cached byte"]
    table = [[r["config"], report.fmt_num(r.get("rps")), report.fmt_num(r.get("cpu_us_per_req")), report.fmt_num(r.get("hit_ratio"), 3),
              report.fmt_num(r.get("byte_hit_ratio"), 3), report.fmt_num(r.get("bytes_per_cached_byte"), 3)] for r in med]  # fmt: skip
    md = [f"# {NAME}", "", f"{'Quick' if lab.quick else 'Full'} run, median of {reps}; SPECweb99 {dirs} dirs ({dirs * SPECWEB_DIR_BYTES / 2**20:.0f} MiB), object cache {budget / 2**20:.0f} MiB per worker; `{' '.join(lab.load_command)}`.", ""]
    md += [report.markdown_table(head, table), ""]
    problems = finish(lab, md, rows)
    return {"medians": med, "problems": problems}
