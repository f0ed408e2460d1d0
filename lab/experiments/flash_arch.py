"""flash-arch: Flash's architectures in weft serve (thesis 004, Figures 4.6-4.10, 4.12; issue 24).

Part `single`: one file requested over and over (Figures 4.6-4.7), file sizes
1 KiB .. 1 MiB, for `weft serve --arch amped|sped|mt|mp` (and amped with the
object cache) and the anchors nginx and lighttpd; wrk -c50 keep-alive, throughput and server CPU per request.

Part `trace` (Figure 4.8's data-set sizes): the SPECweb99 file set (`weft load
gen specweb99`) replayed by `weft load --workload specweb99 --clients 64`,
with the server (its whole process tree) in a cgroup-v1 memory cgroup of
MEMORY bytes, over data sets from in-memory (half of it) to disk-bound (twice
it). The data set's pages are dropped from the page cache
(posix_fadvise DONTNEED) before each run, so every run starts cold.

The thesis's settings scaled (docs/serve.md): MT 64 threads, MP 32 processes
with 200-entry / 4 MB private caches, AMPED and SPED one process.
--quick: 2 sizes, 3 servers on 2 data-set sizes, 2 s / 6 s runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from contextlib import contextmanager

from .. import core, env, proc, report, servers

NAME = "flash-arch"
DESCRIPTION = "Flash's AMPED/SPED/MT/MP in weft serve vs nginx and lighttpd: single file over sizes, SPECweb99 over data-set sizes in a memory cgroup"

CGROUP_ROOT = "/sys/fs/cgroup/memory"
SPECWEB_DIR_BYTES = 5_119_484


def weft(label: str, *extra: str) -> servers.ServerSpec:
    return servers.ServerSpec(label, "weft", {"extra": list(extra)})


ARCHS = [weft("amped", "--arch", "amped"), weft("sped", "--arch", "sped"), weft("mt", "--arch", "mt"), weft("mp", "--arch", "mp")]
# The CPU target: the object cache on, 8 KiB and 100 KiB.
OBJECTS = weft("amped+objects", "--arch", "amped", "--object-cache", "64MiB")
ANCHORS = [servers.ServerSpec("nginx", "nginx"), servers.ServerSpec("lighttpd", "lighttpd")]


@contextmanager
def memory_cgroup(limit: int, tag: str):
    """A v1 memory cgroup of `limit` bytes; yields a function that moves a
    process tree into it. Removed afterwards (its processes must be gone)."""
    path = os.path.join(CGROUP_ROOT, f"weft-lab-{tag}-{os.getpid()}")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "memory.limit_in_bytes"), "w") as f:
        f.write(str(limit))

    def adopt(root_pid: int) -> None:
        stats = proc._read_all_stats()
        for pid in sorted(proc.descendants(root_pid, {p: s.ppid for p, s in stats.items()})):
            try:
                with open(os.path.join(path, "cgroup.procs"), "w") as f:
                    f.write(str(pid))
            except OSError:
                pass

    try:
        yield adopt
    finally:
        for _ in range(50):
            try:
                os.rmdir(path)
                break
            except OSError:
                time.sleep(0.1)


def cgroup_available() -> bool:
    return os.path.isdir(CGROUP_ROOT) and os.access(CGROUP_ROOT, os.W_OK)


def drop_cached(www: str) -> None:
    """Drop the data set's pages from the page cache (every run starts cold)."""
    for d, _, files in os.walk(www):
        for name in files:
            with open(os.path.join(d, name), "rb") as f:
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def finish(lab: core.Lab, md: list[str], rows: list[dict]) -> int:
    """Close a summary (checks, versions), write it; the number of runs with errors."""
    problems = [r for r in rows if r["errors"]]
    md += ["## Checks", "", f"- {len(problems)} run(s) with errors" if problems else "- no errors", ""]
    md += ["## Versions", ""] + [f"- {k}: {v}" for k, v in lab.versions.items()] + [""]
    with open(os.path.join(lab.results_dir, "summary.md"), "w") as f:
        f.write("\n".join(md))
    return len(problems)


def gen_specweb(lab: core.Lab, www: str, dirs: int) -> None:
    p = subprocess.run([lab.weft, "load", "gen", "specweb99", "--out", www, "--param", f"dirs={dirs}"], capture_output=True, text=True)
    if p.returncode != 0:
        raise env.EnvError(f"weft load gen specweb99 failed: {p.stderr.strip()[-500:]}")


def weft_load(lab: core.Lab, base: str, args: list[str], duration_s: float) -> dict:
    """Run `weft load` and return its JSON report."""
    out = os.path.join(lab.scratch, "load.json")
    cmd = [lab.weft, "load", base, *args, "--duration", f"{duration_s:g}s", "--json", out]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=duration_s + 60)
    if p.returncode not in (0, 1):
        raise env.EnvError(f"weft load failed: {p.stderr.strip()[-500:]}")
    with open(out) as f:
        doc = json.load(f)
    doc["command"] = cmd
    return doc


def run_single(lab: core.Lab, specs, sizes, reps: int, duration: float) -> list[dict]:
    www = os.path.join(lab.scratch, "single")
    os.makedirs(www)
    for _, size in sizes:
        core.make_file(os.path.join(www, f"file-{size}.bin"), size)
    rows = []
    with lab.pool(www) as pool:
        runs = core.ServerRounds(lab, NAME + " single", pool, specs, reps, len(sizes), "sizes", duration)
        for rep, spec, rs, base in runs:
            for label, size in sizes:
                core.fetch(base + f"file-{size}.bin")
                m = core.measure(lab, rs, base + f"file-{size}.bin", connections=50, duration_s=duration)
                rows.append({"part": "single", "rep": rep + 1, "server": spec.label, "size": label, "rps": m.load.rps,
                             "cpu_us_per_req": m.cpu_us_per_request, "errors": m.load.non_2xx + m.load.error_total})  # fmt: skip
                lab.log(f"  {runs.tick()} {spec.label:<9} {label:>8}: {m.load.rps:>9,.0f} req/s {report.fmt_num(m.cpu_us_per_request):>7} µs/req")
    return rows


def run_trace(lab: core.Lab, specs, memory: int, datasets, reps: int, duration: float) -> list[dict]:
    rows = []
    for ds_label, dirs in datasets:
        www = os.path.join(lab.scratch, f"specweb-{dirs}")
        gen_specweb(lab, www, dirs)
        os.chmod(www, 0o755)
        with lab.pool(www) as pool:
            runs = core.ServerRounds(lab, f"{NAME} trace {ds_label}", pool, specs, reps, 1, "data set", duration)
            for rep, spec, rs, base in runs:
                with memory_cgroup(memory, lab.name) as adopt:
                    adopt(rs.pid)
                    drop_cached(www)
                    t0 = rs.cpu_ticks()
                    doc = weft_load(lab, base, ["--workload", "specweb99", "--param", f"dirs={dirs}", "--clients", "64", "--timeout", "5s"], duration)
                    ticks = rs.cpu_ticks() - t0
                    pool.stop(rs)
                replies = doc.get("requests", 0)
                rps = doc["reply_rate"]["overall"] if isinstance(doc.get("reply_rate"), dict) else 0.0
                cpu_us = ticks * 1e6 / os.sysconf("SC_CLK_TCK") / replies if replies else None
                errors = sum(doc.get("errors", {}).values())
                mbps = doc.get("bytes", {}).get("received", 0) * 8 / 1e6 / max(doc.get("duration_s", duration), 1e-9)
                rows.append({"part": "trace", "rep": rep + 1, "server": spec.label, "dataset": ds_label, "dataset_bytes": dirs * SPECWEB_DIR_BYTES,
                             "memory": memory, "rps": rps, "mbit_s": mbps, "cpu_us_per_req": cpu_us, "errors": errors})  # fmt: skip
                lab.log(f"  {runs.tick()} {spec.label:<9} {ds_label:>10}: {rps:>8,.0f} req/s {mbps:>8,.0f} Mbit/s, {errors} errors")
                lab.load_command = doc["command"]
    return rows


def run(lab: core.Lab) -> dict:
    reps = 1 if lab.quick else 3
    lab.prepare(commands=["nginx", "lighttpd"])
    if lab.quick:
        sizes = [("8 KiB", 8 << 10), ("100 KiB", 100 << 10)]
        single = run_single(lab, ARCHS + [OBJECTS] + ANCHORS, sizes, 1, 2.0)
    else:
        sizes = [("1 KiB", 1 << 10), ("8 KiB", 8 << 10), ("32 KiB", 32 << 10), ("100 KiB", 100 << 10), ("1 MiB", 1 << 20)]
        single = run_single(lab, ARCHS + [OBJECTS] + ANCHORS, sizes, reps, 5.0)
    trace: list[dict] = []
    memory = (48 if lab.quick else 96) << 20
    # Data sets of 0.5x and 2x the cgroup's memory (and 1x, 4x in the full run).
    fracs = [0.5, 2.0] if lab.quick else [0.5, 1.0, 2.0, 4.0]
    datasets = [(f"{f:g}x mem", max(1, round(f * memory / SPECWEB_DIR_BYTES))) for f in fracs]
    if cgroup_available():
        specs = [ARCHS[0], ARCHS[1], ANCHORS[0]] if lab.quick else ARCHS + ANCHORS
        trace = run_trace(lab, specs, memory, datasets, 1 if lab.quick else 2, 6.0 if lab.quick else 20.0)
    else:
        lab.log("no writable cgroup-v1 memory controller: the trace part is skipped")
    rows = single + trace
    report.write_json(os.path.join(lab.results_dir, "runs.json"), {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "load_command": lab.load_command, "runs": rows})
    report.write_csv(os.path.join(lab.results_dir, "runs.csv"), rows)
    md = [f"# {NAME}", "", f"{'Quick' if lab.quick else 'Full'} run, median of {reps}.", ""]
    med = report.group_medians([r for r in single], ["server", "size"], ["rps", "cpu_us_per_req"])
    cols, t = report.pivot(med, "server", "size", "rps")
    md += ["## Single file: requests/s (wrk -c50)", "", report.markdown_table(["server"] + cols, t), ""]
    cols, t = report.pivot(med, "server", "size", "cpu_us_per_req")
    md += ["## Single file: server CPU µs per request", "", report.markdown_table(["server"] + cols, t), ""]
    if trace:
        med = report.group_medians(trace, ["server", "dataset"], ["rps", "mbit_s"])
        cols, t = report.pivot(med, "server", "dataset", "rps")
        md += [f"## SPECweb99 in a {memory >> 20} MiB memory cgroup: requests/s", "", report.markdown_table(["server"] + cols, t), ""]
        cols, t = report.pivot(med, "server", "dataset", "mbit_s")
        md += ["## ... Mbit/s", "", report.markdown_table(["server"] + cols, t), ""]
    problems = finish(lab, md, rows)
    return {"runs": len(rows), "problems": problems}
