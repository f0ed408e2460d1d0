"""iolite: the IO-Lite object cache in weft serve (thesis 004, Figures 2.3-2.6, 2.8, 2.10; issue 24).

The SPECweb99 file set (`weft load gen specweb99`) replayed by `weft load
--workload specweb99 --clients 64` against `weft serve --arch amped` with the
object cache off and on (budget a quarter of the data set, so replacement
decides), under Greedy-Dual-Size with cost 1, packets and bytes, LRU and
LRU-500K; nginx beside them. Requests/s, server CPU µs per request, object
and byte hit ratios and heap + page-cache bytes per cached byte, twice: from
weft's own counters, and from outside, where no counter of weft's can err:
/proc/PID/smaps (the resident bytes of the data set's files mapped by the
server, and the growth of its anonymous memory over the run: (mapped +
anonymous growth) / mapped), and the server's cgroup-v1 memory cgroup
(limit far above the set, so nothing is evicted; the set's pages dropped
before each run so they are charged to it): (page cache + RSS growth) / page
cache. A server that keeps heap copies of file pages shows about 2 there; one
copy shows about 1. Figure 2.13 (grep, wc, cat, gcc over IO-Lite) is out of
scope in user space (docs/serve.md says why); the CGI rows belong to the
`cgi` experiment; the WAN form (Figure 2.12) is the `wan-server`
experiment's object-cache rows (weft serve with and without the object
cache behind the WAN emulator). --quick: 4 dirs, 4 s runs.
"""

from __future__ import annotations

import os
from contextlib import nullcontext

from .. import core, report, servers
from .flash_arch import SPECWEB_DIR_BYTES, cgroup_available, cgroup_stat, drop_cached, finish, gen_specweb, memory_cgroup, weft_load

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


def smaps(pid: int, prefix: str) -> tuple[int, int]:
    """(resident bytes of the mappings of files under `prefix`, anonymous
    bytes) of process `pid`, from /proc/PID/smaps."""
    mapped = anon = 0
    current = ""
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split()
                if not head:
                    continue
                if not head[0].endswith(":"):  # a mapping's first line: range perms offset dev inode [path]
                    current = head[5] if len(head) > 5 else ""
                elif head[0] == "Rss:" and current.startswith(prefix):
                    mapped += int(head[1]) << 10
                elif head[0] == "Anonymous:":
                    anon += int(head[1]) << 10
    except OSError:
        pass
    return mapped, anon


# The memory cgroup of the outside measure: far above the data set, so
# nothing is evicted and its page cache is every page the server read.
CGROUP_LIMIT = 2 << 30


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
    cgroup = cgroup_available()
    cgroup_path = os.path.join("/sys/fs/cgroup/memory", f"weft-lab-{lab.name}-{os.getpid()}")
    with lab.pool(www) as pool:
        runs = core.ServerRounds(lab, NAME, pool, specs(budget), reps, 1, "run", duration)
        for rep, spec, rs, base in runs:
            with memory_cgroup(CGROUP_LIMIT, lab.name) if cgroup else nullcontext() as adopt:
                if adopt:
                    adopt(rs.pid)
                drop_cached(www)
                cg0 = cgroup_stat(cgroup_path) if adopt else {}
                _, anon0 = smaps(rs.pid, www + "/")
                before = rs.admin_stats()
                t0 = rs.cpu_ticks()
                doc = weft_load(lab, base, ["--workload", "specweb99", "--param", f"dirs={dirs}", "--clients", "64"], duration)
                ticks = rs.cpu_ticks() - t0
                after = rs.admin_stats()
                mapped, anon1 = smaps(rs.pid, www + "/")
                cg1 = cgroup_stat(cgroup_path) if adopt else {}
                pool.stop(rs)
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
            # From outside (weft only: the anchors map nothing).
            if before:
                row["smaps_mapped"], row["smaps_anon_growth"] = mapped, anon1 - anon0
                row["outside_smaps"] = ratio(mapped + max(anon1 - anon0, 0), mapped)
            if cg1:
                growth = max(cg1.get("rss", 0) - cg0.get("rss", 0), 0)
                row["cgroup_cache"], row["cgroup_rss_growth"] = cg1.get("cache"), growth
                row["outside_cgroup"] = ratio(cg1.get("cache", 0) + growth, cg1.get("cache", 0))
            rows.append(row)
            lab.log(f"  {runs.tick()} {spec.label:<17}: {rps:>8,.0f} req/s, hits {report.fmt_num(row.get('hit_ratio'))} bytes {report.fmt_num(row.get('byte_hit_ratio'))}")
            lab.load_command = doc["command"]
    med = report.group_medians(rows, ["config"], ["rps", "cpu_us_per_req", "hit_ratio", "byte_hit_ratio", "bytes_per_cached_byte",
                                                  "smaps_mapped", "smaps_anon_growth", "outside_smaps", "cgroup_cache", "cgroup_rss_growth", "outside_cgroup"])  # fmt: skip
    core.write_runs(lab, NAME, rows, runs.commands, med)
    head = ["config", "req/s", "CPU µs/req", "object hit ratio", "byte hit ratio", "heap + page cache per cached byte (weft's counters)"]
    table = [[r["config"], report.fmt_num(r.get("rps")), report.fmt_num(r.get("cpu_us_per_req")), report.fmt_num(r.get("hit_ratio"), 3),
              report.fmt_num(r.get("byte_hit_ratio"), 3), report.fmt_num(r.get("bytes_per_cached_byte"), 3)] for r in med]  # fmt: skip
    mib = lambda v: report.fmt_num(v / 2**20 if v is not None else None)  # noqa: E731
    outside = [[r["config"], mib(r.get("smaps_mapped")), mib(r.get("smaps_anon_growth")), report.fmt_num(r.get("outside_smaps"), 3),
                mib(r.get("cgroup_cache")), mib(r.get("cgroup_rss_growth")), report.fmt_num(r.get("outside_cgroup"), 3)]
               for r in med if r.get("smaps_mapped") is not None or r.get("cgroup_cache") is not None]  # fmt: skip
    md = [f"# {NAME}", "", f"{'Quick' if lab.quick else 'Full'} run, median of {reps}; SPECweb99 {dirs} dirs ({dirs * SPECWEB_DIR_BYTES / 2**20:.0f} MiB), object cache {budget / 2**20:.0f} MiB per worker; `{' '.join(lab.load_command)}`.", ""]
    md += [report.markdown_table(head, table), ""]
    if outside:
        md += ["## One copy, measured from outside", "",
               "smaps: resident bytes of the set's files mapped by weft, and its anonymous memory's growth over the run; "
               "cgroup: the server's memory cgroup (page cache charged to it, RSS growth).", "",
               report.markdown_table(["config", "mapped MiB (smaps)", "anon growth MiB", "(mapped + anon) / mapped",
                                      "page cache MiB (cgroup)", "RSS growth MiB", "(cache + RSS growth) / cache"], outside), ""]  # fmt: skip
    problems = finish(lab, md, rows)
    return {"medians": med, "problems": problems}
