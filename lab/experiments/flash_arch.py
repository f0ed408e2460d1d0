"""flash-arch: Flash's architectures in weft serve (thesis 004, Figures 4.6-4.10, 4.12; issue 24).

Part `single`: one file requested over and over (Figures 4.6-4.7), file sizes
1 KiB .. 1 MiB, for `weft serve --arch amped|sped|mt|mp` (and amped with the
object cache) and the anchors nginx, nginx with `aio threads`, h2o and
lighttpd; wrk -c50 keep-alive, throughput and server CPU per request.

Part `cpu` (the issue's CPU target): the object cache on, 8 KiB and 100 KiB,
against the best of nginx (± `aio threads`), h2o and lighttpd, all running
side by side and loaded in turn for 2 s slices, twelve rounds with the
order rotated (`core.interleaved_slices`); the summary gives each ratio of
medians and the same ratio round by round (median, interquartile range).

Part `inmem` (the issue's in-memory target, amped within 5 % of sped): one
file over four sizes, amped and sped running side by side and loaded in
turn (wrk -c50) for 2 s slices, 20 pairs per size with the order swapped
every pair (ABBA: single 5 s runs of one server spread by ±20 % on this
shared host, and slices this short and interleaved put that drift on both
alike); then the SPECweb99 set at half the cgroup's memory, six paired
repetitions. The summary pairs the two by repetition and gives the median
and interquartile range of the ratios of req/s and of CPU per request.
--quick: two sizes, two pairs of 1 s slices, no trace.

Part `trace` (Figure 4.8's data-set sizes): the SPECweb99 file set (`weft load
gen specweb99`) replayed by `weft load --workload specweb99 --clients 64`,
with the server (its whole process tree) in a cgroup-v1 memory cgroup of
MEMORY bytes, over data sets from in-memory (half of it) to twice or four
times it. The data set's pages are dropped from the page cache
(posix_fadvise DONTNEED) before each run, so every run starts cold.

Part `disk` (the disk-bound point): a data set of 4x the cgroup's memory
(2x in --quick) whose reads really go to a disk with a seek time:
`lab/slowdisk.py`, a FUSE pass-through where every read that misses the
page cache waits 5 ms, at most 4 at a time (this machine's virtual disk is
cached by the host and answers in microseconds; a blkio throttle, the
fallback without FUSE, only caps a rate that a server reading one range at
a time reaches too). Each run starts cold, warms up for half its length,
then records the bytes the disk served, the cgroup's page cache, RSS and
major faults (memory.stat) and the bytes served to clients, so that
"disk-bound" is shown, not assumed; the byte hit ratio seen from outside is
1 - bytes read / bytes served, for weft and nginx alike. amped, sped, nginx, nginx `aio
threads`, amped with `--send sendfile` (helpers loading without reading, or
reading; and with `--page-cache-admit reuse`, one-timers' pages dropped after
their response), and amped with the object cache under GDS (cost 1, packets)
and LRU (object and byte hit ratios from weft's counters too).

The thesis's settings scaled (docs/serve.md): MT 64 threads, MP 32
processes; in the `trace` and `disk` parts, whose cgroup of M bytes plays
the thesis's 128 MB machine, AMPED, SPED and MT `--file-cache M` with 6,000
entries (MT's split over its threads), MP `--file-cache M/32` and 200
entries per process. --quick: 2 sizes, 3 servers on one in-memory data set
and the disk point at 2x memory, 2 s / 6 s / 2 + 4 s runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from contextlib import ExitStack, contextmanager
from statistics import median

from .. import core, env, proc, report, servers
from ..slowdisk import SlowDisk
from .lard_cluster import BLKIO_ROOT, DISK_IOPS, BlkioCgroup, device_of, read_bytes

NAME = "flash-arch"
DESCRIPTION = "Flash's AMPED/SPED/MT/MP in weft serve vs nginx (± aio threads), h2o and lighttpd: single file over sizes, the CPU target, SPECweb99 over data-set sizes in a memory cgroup, a disk-bound point on a throttled disk"
PARTS = ("single", "cpu", "inmem", "trace", "disk")

CGROUP_ROOT = "/sys/fs/cgroup/memory"
SPECWEB_DIR_BYTES = 5_119_484


def weft(label: str, *extra: str) -> servers.ServerSpec:
    return servers.ServerSpec(label, "weft", {"extra": list(extra)})


ARCHS = [weft("amped", "--arch", "amped"), weft("sped", "--arch", "sped"), weft("mt", "--arch", "mt"), weft("mp", "--arch", "mp")]
# The CPU target: the object cache on, 8 KiB and 100 KiB.
OBJECTS = weft("amped+objects", "--arch", "amped", "--object-cache", "64MiB")
# The same with the snapshot rule's check before the head made by change
# notices instead of an fstat per response (`--snapshot-check notify`).
OBJECTS_NOTIFY = weft("amped+objects notify", "--arch", "amped", "--object-cache", "64MiB", "--snapshot-check", "notify")
NGINX = servers.ServerSpec("nginx", "nginx")
# What a user would pick to keep nginx's loop off the disk: a thread pool for
# file reads (nginx-light is built --with-threads).
NGINX_AIO = servers.ServerSpec("nginx aio", "nginx", {"edits": [("sendfile on;", "sendfile on;\n    aio threads;")]})
H2O = servers.ServerSpec("h2o", "h2o")
LIGHTTPD = servers.ServerSpec("lighttpd", "lighttpd")
ANCHORS = [NGINX, NGINX_AIO, H2O, LIGHTTPD]
# The in-memory part: ABBA pairs of slices per size, and paired
# repetitions of the trace.
INMEM_PAIRS = 20
INMEM_TRACE_REPS = 6
# Rounds of the cpu part's interleaved slices.
CPU_ROUNDS = 12
# The thesis's pathname-cache entries (§4.5).
THESIS_ENTRIES = 6000
# The disk part's disk: reads from the data set's device throttled to
# DISK_IOPS (lard-cluster's, WEFT_LAB_DISK_IOPS) and DISK_BPS bytes per
# second (WEFT_LAB_DISK_BPS; 0: no byte limit), and the data set DISK_FACTOR
# times the cgroup's memory (WEFT_LAB_DISK_FACTOR; --quick: 2).
DISK_BPS = int(os.environ.get("WEFT_LAB_DISK_BPS", str(20 << 20)))
DISK_FACTOR = float(os.environ.get("WEFT_LAB_DISK_FACTOR", "4"))
# The default disk of the disk part is `lab.slowdisk`: every read that misses
# the page cache waits DISK_LATENCY_MS (a seek), at most DISK_SPINDLES at a
# time. WEFT_LAB_DISK_LATENCY_MS=0 uses the blkio throttle above instead
# (a rate cap, which a server reading one range at a time also reaches).
DISK_LATENCY_MS = float(os.environ.get("WEFT_LAB_DISK_LATENCY_MS", "5"))
DISK_SPINDLES = int(os.environ.get("WEFT_LAB_DISK_SPINDLES", "4"))


def thesis_archs(memory: int, archs=("amped", "sped", "mt", "mp")) -> list[servers.ServerSpec]:
    """The architectures with the thesis's cache settings scaled to a
    machine of `memory` bytes (docs/serve.md): 128 MB / 6,000 entries for
    AMPED, SPED and MT (MT's split over its threads), 4 MB / 200 entries
    per MP process (32 x M/32 = M)."""
    out = []
    for a in archs:
        if a == "mp":
            extra = ["--file-cache", str(memory // 32), "--path-cache", "200"]
        else:
            extra = ["--file-cache", str(memory), "--path-cache", str(THESIS_ENTRIES), "--file-cache-entries", str(THESIS_ENTRIES)]
        out.append(weft(a, "--arch", a, *extra))
    return out


def object_cache_specs(memory: int) -> list[servers.ServerSpec]:
    """amped with the object cache (three quarters of the cgroup: the rest
    is the process and the kernel's own share) under GDS and LRU."""
    budget = str(memory * 3 // 4)
    base = ["--arch", "amped", "--path-cache", str(THESIS_ENTRIES), "--file-cache-entries", str(THESIS_ENTRIES), "--object-cache", budget]
    return [weft("amped gds 1", *base, "--cache-policy", "gds", "--gds-cost", "1"),
            weft("amped gds packets", *base, "--cache-policy", "gds", "--gds-cost", "packets"),
            weft("amped lru", *base, "--cache-policy", "lru")]  # fmt: skip


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
    md += report.versions_section(lab.versions)
    report.write_summary(lab.results_dir, md)
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


def run_single(lab: core.Lab, part: str, specs, sizes, reps: int, duration: float) -> list[dict]:
    www = os.path.join(lab.scratch, part)
    os.makedirs(www)
    for _, size in sizes:
        core.make_file(os.path.join(www, f"file-{size}.bin"), size)
    rows = []
    with lab.pool(www) as pool:
        runs = core.ServerRounds(lab, f"{NAME} {part}", pool, specs, reps, len(sizes), "sizes", duration)
        for rep, spec, rs, base in runs:
            for label, size in sizes:
                core.fetch(base + f"file-{size}.bin")
                m = core.measure(lab, rs, base + f"file-{size}.bin", connections=50, duration_s=duration)
                rows.append({"part": part, "rep": rep + 1, "server": spec.label, "size": label, "rps": m.load.rps,
                             "cpu_us_per_req": m.cpu_us_per_request, "errors": m.load.non_2xx + m.load.error_total})  # fmt: skip
                lab.log(f"  {runs.tick()} {spec.label:<13} {label:>8}: {m.load.rps:>9,.0f} req/s {report.fmt_num(m.cpu_us_per_request):>7} µs/req")
    return rows


def cgroup_stat(path: str) -> dict:
    """A v1 memory cgroup's memory.stat as numbers."""
    out = {}
    with open(os.path.join(path, "memory.stat")) as f:
        for line in f:
            k, _, v = line.partition(" ")
            out[k] = int(v)
    return out


def blkio_read_bytes(path: str, device: str) -> int:
    """Bytes a v1 blkio cgroup read from `device` (blkio.throttle.io_service_bytes)."""
    with open(os.path.join(path, "blkio.throttle.io_service_bytes")) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[0] == device and parts[1] == "Read":
                return int(parts[2])
    return 0


def trace_row(lab, spec, doc, ticks, ds_label, dataset_bytes, memory, duration, part) -> dict:
    replies = doc.get("requests", 0)
    rps = doc["reply_rate"]["overall"] if isinstance(doc.get("reply_rate"), dict) else 0.0
    received = doc.get("bytes", {}).get("received", 0)
    return {"part": part, "server": spec.label, "dataset": ds_label, "dataset_bytes": dataset_bytes, "memory": memory,
            "rps": rps, "mbit_s": received * 8 / 1e6 / max(doc.get("duration_s", duration), 1e-9),
            "bytes_served": received, "replies": replies,
            "cpu_us_per_req": ticks * 1e6 / os.sysconf("SC_CLK_TCK") / replies if replies else None,
            "errors": sum(doc.get("errors", {}).values())}  # fmt: skip


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
                row = trace_row(lab, spec, doc, ticks, ds_label, dirs * SPECWEB_DIR_BYTES, memory, duration, "trace")
                row["rep"] = rep + 1
                rows.append(row)
                lab.log(f"  {runs.tick()} {spec.label:<9} {ds_label:>10}: {row['rps']:>8,.0f} req/s {row['mbit_s']:>8,.0f} Mbit/s, {row['errors']} errors")
                lab.load_command = doc["command"]
    return rows


@contextmanager
def disk_cgroups(memory: int, iops: int, device: str, tag: str):
    """A v1 memory cgroup of `memory` bytes and a v1 blkio cgroup whose
    reads from `device` are throttled to `iops`/s (None without the blkio
    controller); yields (adopt(pid), memory cgroup path, blkio cgroup or None)."""
    blk = None
    if iops and os.path.exists(os.path.join(BLKIO_ROOT, "blkio.throttle.read_iops_device")):
        blk = BlkioCgroup(BLKIO_ROOT, f"weft-lab-{tag}-disk-{os.getpid()}", device, iops)
        if DISK_BPS:
            with open(os.path.join(blk.path, "blkio.throttle.read_bps_device"), "w") as f:
                f.write(f"{device} {DISK_BPS}")
    try:
        with memory_cgroup(memory, tag) as adopt_mem:
            path = os.path.join(CGROUP_ROOT, f"weft-lab-{tag}-{os.getpid()}")

            def adopt(pid: int) -> None:
                adopt_mem(pid)
                if blk is not None:
                    blk.add_tree(pid)

            yield adopt, path, blk
    finally:
        if blk is not None:
            blk.remove()


def run_disk(lab: core.Lab, specs, memory: int, factor: float, reps: int, duration: float, slow: bool = True) -> list[dict]:
    """The disk-bound point: a data set of `factor` x memory, the server in
    a memory cgroup, the set on a slow disk (`lab.slowdisk`, or a blkio
    throttle); the evidence that it is disk-bound (bytes read from the disk,
    the cgroup's page cache, major faults) with every row."""
    dirs = max(1, round(factor * memory / SPECWEB_DIR_BYTES))
    backing = os.path.join(lab.scratch, f"disk-{dirs}")
    gen_specweb(lab, backing, dirs)
    os.chmod(backing, 0o755)
    os.sync()  # dirty pages cannot be dropped
    ds_label = f"{factor:g}x mem"
    with ExitStack() as stack:
        disk = None
        if slow:
            try:
                disk = stack.enter_context(SlowDisk(backing, os.path.join(lab.scratch, "slowdisk"), DISK_LATENCY_MS, DISK_SPINDLES, log=lab.log))
            except (RuntimeError, OSError) as e:
                lab.log(f"  no slow disk here ({e}): the blkio throttle instead")
        if disk is not None:
            www, device, iops, what = disk.mount, None, 0, f"{DISK_LATENCY_MS:g} ms per read, {DISK_SPINDLES} at a time"
        else:
            disk, www, device, iops = None, backing, device_of(backing), DISK_IOPS
            what = f"{DISK_IOPS} reads/s, {DISK_BPS >> 20} MiB/s"
        return disk_runs(lab, specs, memory, (www, dirs, ds_label, what), (disk, device, iops), reps, duration)


def disk_runs(lab, specs, memory, dataset, disk_, reps, duration) -> list[dict]:
    """Each server: its cgroups, the page cache dropped, a warm-up of half
    the run, then the measured run."""
    (www, dirs, ds_label, what), (disk, device, iops) = dataset, disk_
    rows = []
    with lab.pool(www) as pool:
        runs = core.ServerRounds(lab, f"{NAME} disk {ds_label}, {what}", pool, specs, reps, 1, "data set", duration)
        for rep, spec, rs, base in runs:
            with disk_cgroups(memory, iops, device, lab.name) as (adopt, mem_path, blk):
                adopt(rs.pid)
                drop_cached(www)

                def disk_bytes() -> int:
                    if disk is not None:
                        return disk.served()[1]
                    return blkio_read_bytes(blk.path, device) if blk else read_bytes(rs.pid)

                # Steady state, as the thesis measured: the cache fills from
                # a cold start before the measured run.
                weft_load(lab, base, ["--workload", "specweb99", "--param", f"dirs={dirs}", "--clients", "64", "--timeout", "10s"], duration / 2)
                time.sleep(0.2 if disk is not None else 0)  # the slow disk's counters are 0.1 s old
                before = rs.admin_stats()
                rb0 = disk_bytes()
                t0 = rs.cpu_ticks()
                doc = weft_load(lab, base, ["--workload", "specweb99", "--param", f"dirs={dirs}", "--clients", "64", "--timeout", "10s"], duration)
                ticks = rs.cpu_ticks() - t0
                time.sleep(0.2 if disk is not None else 0)
                disk_read = disk_bytes() - rb0
                after = rs.admin_stats()
                mstat = cgroup_stat(mem_path)
                pool.stop(rs)
            row = trace_row(lab, spec, doc, ticks, ds_label, dirs * SPECWEB_DIR_BYTES, memory, duration, "disk")
            row.update({"rep": rep + 1, "disk": what, "disk_read_bytes": disk_read,
                        "disk_read_per_req": disk_read / row["replies"] if row["replies"] else None,
                        "byte_hit_ratio_outside": 1 - disk_read / row["bytes_served"] if row["bytes_served"] else None,
                        "cgroup_cache": mstat.get("cache"), "cgroup_rss": mstat.get("rss"),
                        "cgroup_mapped_file": mstat.get("mapped_file"), "cgroup_pgmajfault": mstat.get("pgmajfault"),
                        "cgroup_active_file": mstat.get("active_file"), "cgroup_inactive_file": mstat.get("inactive_file")})  # fmt: skip
            if before and after:
                d = servers.stats_delta(before["total"], after["total"])
                if d.get("object_lookups"):
                    row["object_hit_ratio"] = d.get("object_hits", 0) / d["object_lookups"]
                    row["object_byte_hit_ratio"] = d.get("object_bytes_hit", 0) / max(d.get("object_bytes_looked_up", 0), 1)
                row["helper_jobs"] = d.get("helper_jobs")
                row["residency_misses"] = d.get("residency_misses")
            rows.append(row)
            lab.log(f"  {runs.tick()} {spec.label:<17}: {row['rps']:>7,.0f} req/s, read {disk_read / 2**20:,.0f} MiB from disk"
                    f" ({report.fmt_num(row['disk_read_per_req'])} B/req), byte hits {report.fmt_num(row['byte_hit_ratio_outside'], 3)},"
                    f" page cache {mstat.get('cache', 0) / 2**20:.0f} MiB, {row['errors']} errors")  # fmt: skip
            lab.load_command = doc["command"]
    return rows


def run_cpu(lab: core.Lab) -> list[dict]:
    """Part `cpu`: weft's default path, the object cache (with an fstat per
    response, and with change notices) and the anchors side by side, 8 KiB
    and 100 KiB, in interleaved 2 s slices (`core.interleaved_slices`)."""
    sizes = [("8 KiB", 8 << 10), ("100 KiB", 100 << 10)]
    www = os.path.join(lab.scratch, "cpu")
    os.makedirs(www)
    for _, size in sizes:
        core.make_file(os.path.join(www, f"file-{size}.bin"), size)
    specs = [ARCHS[0], OBJECTS, OBJECTS_NOTIFY] + ANCHORS
    items = [(label, f"file-{size}.bin") for label, size in sizes]
    with lab.pool(www) as pool:
        return [dict(r, part="cpu") for r in core.interleaved_slices(lab, f"{NAME} cpu", pool, specs, items, CPU_ROUNDS, 2.0)]


def cpu_target(rows: list[dict], servers_=(OBJECTS.label, OBJECTS_NOTIFY.label)) -> list[list[str]]:
    """The CPU target per size: weft's CPU per request (median) against the
    best anchor's (the lowest median) in the same runs; met when the ratio
    is <= 0.85. Also the median and interquartile range of the same ratio
    taken round by round (rows of the same `rep`), which interleaved runs
    make comparable."""
    med = report.group_medians(rows, ["server", "size"], ["cpu_us_per_req"])
    by = {(r["size"], r["rep"], r["server"]): r["cpu_us_per_req"] for r in rows if r.get("cpu_us_per_req")}
    out = []
    for size in dict.fromkeys(r["size"] for r in med):
        at = {r["server"]: r["cpu_us_per_req"] for r in med if r["size"] == size and r["cpu_us_per_req"]}
        anchors = {a.label: at[a.label] for a in ANCHORS if a.label in at}
        for server in servers_:
            if server not in at or not anchors:
                continue
            best = min(anchors, key=anchors.get)
            ratio = at[server] / anchors[best]
            rounds = sorted(by[k] / by[(size, k[1], best)] for k in by if k[0] == size and k[2] == server and (size, k[1], best) in by)
            per_round = report.median_iqr(rounds)
            out.append([size, server, report.fmt_num(at[server]), best, report.fmt_num(anchors[best]), f"{ratio:.2f}", per_round,
                        "yes" if ratio <= 0.85 else "no"])  # fmt: skip
    return out


def run_inmem(lab: core.Lab, memory: int, parts) -> list[dict]:
    """Part `inmem`: amped and sped both running, loaded in turn for short
    slices, the order swapped every pair (ABBA), so that the host's drift
    (single 5 s runs of one server here spread by ±20 %) falls on both
    alike; then the SPECweb99 set at half the cgroup's memory in paired
    repetitions. The trace's rows are relabelled as this part's, with the
    data set in `size`."""
    if lab.quick:
        sizes, pairs, slice_s = [("8 KiB", 8 << 10), ("100 KiB", 100 << 10)], 2, 1.0
    else:
        sizes, pairs, slice_s = [("1 KiB", 1 << 10), ("8 KiB", 8 << 10), ("100 KiB", 100 << 10), ("1 MiB", 1 << 20)], INMEM_PAIRS, 2.0
    www = os.path.join(lab.scratch, "inmem")
    os.makedirs(www)
    for _, size in sizes:
        core.make_file(os.path.join(www, f"file-{size}.bin"), size)
    with lab.pool(www) as pool:
        items = [(label, f"file-{size}.bin") for label, size in sizes]
        rows = [dict(r, part="inmem") for r in core.interleaved_slices(lab, f"{NAME} inmem", pool, ARCHS[:2], items, pairs, slice_s)]
    if not lab.quick and cgroup_available():
        dataset = [("0.5x mem", max(1, round(0.5 * memory / SPECWEB_DIR_BYTES)))]
        for r in run_trace(lab, thesis_archs(memory, ("amped", "sped")), memory, dataset, INMEM_TRACE_REPS, 10.0):
            rows.append(dict(r, part="inmem", size=f"SPECweb99 {r['dataset']}"))
    return rows


def inmem_target(rows: list[dict], a: str = "amped", b: str = "sped") -> list[list[str]]:
    """`a` against `b` per size: the per-repetition ratios of req/s and CPU
    per request (pairs of rows with the same size and repetition), their
    median and interquartile range; met when the median req/s ratio is at
    least 0.95."""
    by = {(r["size"], r["rep"], r["server"]): r for r in rows}
    out = []
    for size in dict.fromkeys(r["size"] for r in rows):
        reps = [rep for (sz, rep, server) in by if sz == size and server == a and (size, rep, b) in by]
        pairs = [(by[(size, rep, a)], by[(size, rep, b)]) for rep in reps]
        rps = sorted(x["rps"] / y["rps"] for x, y in pairs if x["rps"] and y["rps"])
        cpu = sorted(x["cpu_us_per_req"] / y["cpu_us_per_req"] for x, y in pairs if x["cpu_us_per_req"] and y["cpu_us_per_req"])
        if rps:
            out.append([size, str(len(rps)), report.median_iqr(rps), report.median_iqr(cpu), "yes" if median(rps) >= 0.95 else "no"])
    return out


def disk_targets(rows: list[dict]) -> list[list[str]]:
    """amped >= 1.5x sped and >= nginx (each nginx); GDS >= LRU; GDS's byte
    hit ratio above nginx's (both seen from outside)."""
    med = {r["server"]: r for r in report.group_medians(rows, ["server"], ["rps", "byte_hit_ratio_outside"])}
    out = []

    def cmp(what, a, b, field, want):
        if a in med and b in med and med[b][field]:
            v = med[a][field] / med[b][field] if field == "rps" else med[a][field] - med[b][field]
            out.append([what, f"{v:.2f}" + ("x" if field == "rps" else ""), "yes" if v >= want else "no"])

    cmp("amped / sped req/s (>= 1.5x)", "amped", "sped", "rps", 1.5)
    for n in (NGINX.label, NGINX_AIO.label):
        cmp(f"amped / {n} req/s (>= 1x)", "amped", n, "rps", 1.0)
    for g in ("amped gds 1", "amped gds packets"):
        cmp(f"{g} / amped lru req/s (>= 1x)", g, "amped lru", "rps", 1.0)
    for g in ("amped gds 1", "amped gds packets", "amped sendfile", "amped sendfile reuse"):
        for n in (NGINX.label, NGINX_AIO.label):
            cmp(f"{g} byte hit ratio - {n}'s (> 0)", g, n, "byte_hit_ratio_outside", 1e-9)
    # Not a target: what loading without reading gives (--helper-load).
    cmp("amped sendfile byte hit ratio - helpers reading (> 0)", "amped sendfile", "amped sendfile read", "byte_hit_ratio_outside", 1e-9)
    # Not a target: what admission by reuse distance gives (--page-cache-admit).
    cmp("amped sendfile reuse byte hit ratio - all admitted (> 0)", "amped sendfile reuse", "amped sendfile", "byte_hit_ratio_outside", 1e-9)
    return out


def run(lab: core.Lab) -> dict:
    parts = lab.parts(PARTS)
    lab.prepare(commands=["nginx", "lighttpd"] if lab.quick else ["nginx", "lighttpd", "h2o"])
    rows: list[dict] = []
    if "single" in parts:
        if lab.quick:
            sizes = [("8 KiB", 8 << 10), ("100 KiB", 100 << 10)]
            rows += run_single(lab, "single", ARCHS + [OBJECTS, NGINX, LIGHTTPD], sizes, 1, 1.0)
        else:
            sizes = [("1 KiB", 1 << 10), ("8 KiB", 8 << 10), ("100 KiB", 100 << 10), ("1 MiB", 1 << 20)]
            rows += run_single(lab, "single", ARCHS + [OBJECTS] + ANCHORS, sizes, 3, 5.0)
    if "cpu" in parts and not lab.quick:
        rows += run_cpu(lab)
    memory = (48 if lab.quick else 96) << 20
    if "inmem" in parts:
        rows += run_inmem(lab, memory, parts)
    if ("trace" in parts or "disk" in parts) and not cgroup_available():
        lab.log("no writable cgroup-v1 memory controller: the trace and disk parts are skipped")
        parts = [p for p in parts if p not in ("trace", "disk")]
    if "trace" in parts:
        # Data sets of 0.5x the cgroup's memory (and 1x, 2x, 4x in the full run).
        fracs = [0.5] if lab.quick else [0.5, 1.0, 2.0, 4.0]
        datasets = [(f"{f:g}x mem", max(1, round(f * memory / SPECWEB_DIR_BYTES))) for f in fracs]
        specs = thesis_archs(memory, ("amped", "sped")) + [NGINX] if lab.quick else thesis_archs(memory) + [NGINX, LIGHTTPD]
        rows += run_trace(lab, specs, memory, datasets, 1 if lab.quick else 2, 6.0 if lab.quick else 10.0)
    if "disk" in parts:
        slow = DISK_LATENCY_MS > 0
        if slow:
            try:
                env.ensure_python_requirements(lab.log, modules=("matplotlib", "fuse"))  # fusepy
                env.ensure_commands(["fusermount"], lab.log)
            except env.EnvError as e:
                lab.log(f"  no slow disk ({e}): the blkio throttle instead")
                slow = False
        if lab.quick:
            specs = thesis_archs(memory, ("amped", "sped")) + [NGINX]
            rows += run_disk(lab, specs, memory, min(DISK_FACTOR, 2.0), 1, 4.0, slow)
        else:
            # amped sendfile: no mapped chunks (the probe of docs/results.md:
            # mapped pages crowd out the small files' page cache).
            base = ["--arch", "amped", "--send", "sendfile", "--file-cache", str(memory), "--path-cache", str(THESIS_ENTRIES),
                    "--file-cache-entries", str(THESIS_ENTRIES)]  # fmt: skip
            # helpers read: each page used twice (helper, send) before
            # --helper-load readahead (the default) loaded without reading.
            # reuse: a one-timer's pages dropped after its response (--page-cache-admit).
            sendfile = [weft("amped sendfile", *base), weft("amped sendfile read", *base, "--helper-load", "read"),
                        weft("amped sendfile reuse", *base, "--page-cache-admit", "reuse")]  # fmt: skip
            specs = thesis_archs(memory, ("amped", "sped")) + sendfile + [NGINX, NGINX_AIO] + object_cache_specs(memory)
            rows += run_disk(lab, specs, memory, DISK_FACTOR, 2, 20.0, slow)
    rows = core.merge_parts(lab.previous_runs(), parts, rows, lambda r: r.get("part"))
    report.write_json(os.path.join(lab.results_dir, "runs.json"), {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "load_command": lab.load_command, "runs": rows})
    report.write_csv(os.path.join(lab.results_dir, "runs.csv"), rows)
    return summarize(lab, rows, memory)


def summarize(lab: core.Lab, rows: list[dict], memory: int) -> dict:
    md = [f"# {NAME}", "", f"{'Quick' if lab.quick else 'Full'} run (medians); parts: {', '.join(dict.fromkeys(r['part'] for r in rows))}.", ""]
    for part, title in (("single", "Single file"), ("cpu", "The CPU target: object cache on, best anchor in the same runs")):
        single = [r for r in rows if r.get("part") == part]
        if not single:
            continue
        med = report.group_medians(single, ["server", "size"], ["rps", "cpu_us_per_req"])
        cols, t = report.pivot(med, "server", "size", "rps")
        md += [f"## {title}: requests/s (wrk -c50)", "", report.markdown_table(["server"] + cols, t), ""]
        cols, t = report.pivot(med, "server", "size", "cpu_us_per_req")
        md += [f"## {title}: server CPU µs per request", "", report.markdown_table(["server"] + cols, t), ""]
        tgt = cpu_target(single)
        if tgt:
            md += [f"## {title}: the object cache's CPU per request against the best anchor (target <= 0.85)", "",
                   report.markdown_table(["size", "weft", "weft µs/req", "best anchor", "its µs/req", "ratio", "by round (IQR)", "met"], tgt), ""]  # fmt: skip
    inmem = [r for r in rows if r.get("part") == "inmem"]
    if inmem:
        med = report.group_medians(inmem, ["server", "size"], ["rps", "cpu_us_per_req"])
        cols, t = report.pivot(med, "server", "size", "rps")
        md += ["## In memory, amped and sped paired: requests/s (medians)", "", report.markdown_table(["server"] + cols, t), ""]
        cols, t = report.pivot(med, "server", "size", "cpu_us_per_req")
        md += ["## ... server CPU µs per request", "", report.markdown_table(["server"] + cols, t), ""]
        head = ["size", "pairs", "req/s amped / sped (IQR)", "CPU/req amped / sped (IQR)", "met (>= 0.95)"]
        md += ["## The in-memory target: amped within 5 % of sped", "", report.markdown_table(head, inmem_target(inmem)), ""]
    trace = [r for r in rows if r.get("part") == "trace"]
    if trace:
        med = report.group_medians(trace, ["server", "dataset"], ["rps", "mbit_s"])
        cols, t = report.pivot(med, "server", "dataset", "rps")
        md += [f"## SPECweb99 in a {memory >> 20} MiB memory cgroup: requests/s", "", report.markdown_table(["server"] + cols, t), ""]
        cols, t = report.pivot(med, "server", "dataset", "mbit_s")
        md += ["## ... Mbit/s", "", report.markdown_table(["server"] + cols, t), ""]
    disk = [r for r in rows if r.get("part") == "disk"]
    if disk:
        fields = ["rps", "cpu_us_per_req", "disk_read_per_req", "byte_hit_ratio_outside", "object_hit_ratio", "object_byte_hit_ratio",
                  "cgroup_cache", "cgroup_rss", "cgroup_pgmajfault"]  # fmt: skip
        med = report.group_medians(disk, ["server"], fields)
        head = ["server", "req/s", "CPU µs/req", "disk bytes read / req", "byte hit ratio (outside)", "object hit ratio (weft)",
                "byte hit ratio (weft)", "page cache MiB", "RSS MiB", "major faults"]  # fmt: skip
        mib = lambda v: report.fmt_num(v / 2**20 if v is not None else None)  # noqa: E731
        table = [[r["server"], report.fmt_num(r["rps"]), report.fmt_num(r["cpu_us_per_req"]), report.fmt_num(r["disk_read_per_req"]),
                  report.fmt_num(r["byte_hit_ratio_outside"], 3), report.fmt_num(r["object_hit_ratio"], 3),
                  report.fmt_num(r["object_byte_hit_ratio"], 3), mib(r["cgroup_cache"]), mib(r["cgroup_rss"]),
                  report.fmt_num(r["cgroup_pgmajfault"])] for r in med]  # fmt: skip
        d0 = disk[0]
        md += [f"## Disk-bound: SPECweb99 {d0['dataset']} ({d0['dataset_bytes'] / 2**20:.0f} MiB) in a {memory >> 20} MiB memory cgroup,"
               f", disk: {d0.get('disk')}", "", report.markdown_table(head, table), "",
               "Byte hit ratio (outside) = 1 - bytes read from the disk / bytes served (heads included).", ""]  # fmt: skip
        tg = disk_targets(disk)
        if tg:
            md += ["## Disk-bound targets", "", report.markdown_table(["target", "value", "met"], tg), ""]
    problems = finish(lab, md, rows)
    return {"runs": len(rows), "problems": problems}
