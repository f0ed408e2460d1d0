"""wan-server: server throughput vs network delay and vs number of clients
(thesis 004, Figs. 2.12 and 4.12), weft serve (sendfile, copy, the IO-Lite
object cache) and nginx.

Two namespaces joined by `weft wan` (lab/netlab.py): the server's and the
clients'. `weft load --clients N` (closed loop, keep-alive) requests the
files of a data set in turn. As in the thesis:

- Fig. 2.12: a 120 MB data set, round-trip delay 0–150 ms with the clients
  scaled linearly with it, from 64 (no delay) to 900 (150 ms);
- Fig. 4.12: a 90 MB data set, 64 to 900 clients (here at 100 ms RTT);
- the server runs in a v1 memory cgroup whose limit (64 MiB) is below the
  data set: its page cache, heap and socket buffers compete, and with many
  slow clients the bytes parked in socket buffers are what makes double
  buffering visible. Each server starts with the data set evicted from the
  page cache (posix_fadvise DONTNEED on its files only), so what it reads
  is charged to its cgroup;
- the socket send buffer is a setting: `weft serve --send-buffer 64KiB`
  and nginx `listen ... sndbuf=64k` (the thesis's 64 KB);
- Fig. 2.12 is IO-Lite's WAN figure: "weft object cache" is `weft serve
  --object-cache` (a budget of half the memory limit: the page cache is
  the only copy of a cached file, sent with writev from its mappings)
  beside sendfile and copy with the object cache off. This is where the
  `iolite` experiment's WAN form lives.

Reported: replies/s and Mbit/s per server, the cgroup's peak memory and
page-cache bytes; nginx is the anchor of the same run.

Full form: 4 servers x 9 points x 3 runs x 30 s: about an hour.
`--quick`: a 40 MB data set under a 24 MiB limit, (0 ms, 64 clients) and
(100 ms, 400 clients), 3.5 s each, one run (about 75 s).
"""

from __future__ import annotations

import json
import os
import subprocess

from .. import core, netlab, report, servers

NAME = "wan-server"
DESCRIPTION = "004 Figs. 2.12/4.12: throughput vs delay and vs clients, weft serve sendfile/copy/object cache and nginx, on a weft wan network"

SERVERS = ["weft sendfile", "weft copy", "weft object cache", "nginx"]


SEND_BUFFER = 64 << 10
MEMORY_LIMIT = 64 << 20
SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10]  # mean 85 KiB


def data_set(www: str, total_mb: int, tag: str) -> list[tuple[str, int]]:
    """Files of SIZES in turn until about `total_mb` MB."""
    files, total, i = [], 0, 0
    while total < total_mb * 1_000_000:
        size = SIZES[i % len(SIZES)]
        name = f"{tag}/f{i}.bin"
        core.make_file(os.path.join(www, name), size)
        files.append((name, size))
        total += size
        i += 1
    return files


def evict(www: str, files: list[tuple[str, int]]) -> None:
    """Drop the data set's pages from the page cache (only these files)."""
    for name, _ in files:
        fd = os.open(os.path.join(www, name), os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


class MemCgroup:
    """A v1 memory cgroup with a limit (None where v1 memory is not mounted)."""

    ROOT = "/sys/fs/cgroup/memory"

    def __init__(self, limit: int):
        self.path = None
        if os.path.isdir(self.ROOT) and os.access(self.ROOT, os.W_OK):
            self.path = os.path.join(self.ROOT, f"weft-lab-{os.getpid()}")
            os.makedirs(self.path, exist_ok=True)
            with open(os.path.join(self.path, "memory.limit_in_bytes"), "w") as f:
                f.write(str(limit))

    def wrap(self, argv: list[str]) -> list[str]:
        """argv started inside the cgroup."""
        if not self.path:
            return argv
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', os.path.join(self.path, "cgroup.procs"), *argv]

    def reset_peak(self) -> None:
        if self.path:
            with open(os.path.join(self.path, "memory.max_usage_in_bytes"), "w") as f:
                f.write("0")

    def figures(self) -> dict:
        if not self.path:
            return {"mem_peak_mb": None, "page_cache_mb": None}
        with open(os.path.join(self.path, "memory.max_usage_in_bytes")) as f:
            peak = int(f.read())
        stat = {}
        with open(os.path.join(self.path, "memory.stat")) as f:
            for line in f:
                k, v = line.split()
                stat[k] = int(v)
        return {"mem_peak_mb": peak / 2**20, "page_cache_mb": stat.get("cache", 0) / 2**20}

    def remove(self) -> None:
        if self.path:
            try:
                os.rmdir(self.path)
            except OSError:
                pass


def weft_args(kind: str, limit: int) -> list[str]:
    """weft serve's flags for a weft row of SERVERS under a memory limit (pure)."""
    if kind == "weft object cache":
        return ["--object-cache", str(limit // 2)]
    return ["--send", kind.split()[1]]


def start_server(lab, net, kind: str, www: str, cg: MemCgroup | None = None, limit: int = MEMORY_LIMIT):
    """Start `kind` (a weft row of SERVERS, or nginx) in the server
    namespace, inside the memory cgroup `cg` when given (the booster and
    zerocopy experiments share this helper without a memory limit)."""
    devnull = open(os.devnull, "w")
    wrap = cg.wrap if cg is not None else (lambda argv: argv)
    if kind.startswith("weft"):
        argv = [lab.weft, "serve", www, "--listen", "0.0.0.0:8080", *weft_args(kind, limit), "--workers", "1", "--send-buffer", str(SEND_BUFFER)]
        return subprocess.Popen(wrap(net.argv("server", argv)), stdout=devnull, stderr=devnull, start_new_session=True)
    run = os.path.join(lab.scratch, "nginx")
    os.makedirs(run, exist_ok=True)
    with open(os.path.join(servers.ANCHOR_DIR, "nginx_static_w1.conf")) as f:
        text = servers.render_template(f.read(), {"WWW": www, "RUN": run, "CONF": run, "PORT": "8080"})
    conf = os.path.join(run, "nginx.conf")
    with open(conf, "w") as f:
        f.write(servers.edit_config(text, [("listen 127.0.0.1:8080 backlog=4096;", f"listen 0.0.0.0:8080 backlog=4096 sndbuf={SEND_BUFFER // 1024}k;")]))
    argv = net.argv("server", ["nginx", "-c", conf, "-p", run])
    return subprocess.Popen(wrap(argv), stdout=devnull, stderr=devnull, start_new_session=True)


def measure(lab, net, urls: str, clients: int, seconds: float, mean_size: float) -> dict:
    out = os.path.join(lab.scratch, "load.json")
    argv = [lab.weft, "load", f"http://{net.addr('server')}:8080/", "--urls", urls, "--clients", str(clients), "--duration", f"{seconds}s", "--quiet", "--json", out]
    p = net.run("client", argv, timeout=seconds + 120)
    if p.returncode != 0:
        raise RuntimeError(f"weft load failed: {p.stderr.strip()[-300:]}")
    with open(out) as f:
        j = json.load(f)
    rps = j["replies"]["2xx"] / seconds
    return {"rps": rps, "mbit_s": rps * mean_size * 8 / 1e6, "replies_2xx": j["replies"]["2xx"], "requests": j["requests"], "rt_mean_ms": j["response_time_ms"]["mean"], "rt_cv": j["response_time_ms"].get("cv")}


def plan(quick: bool) -> list[tuple[int, int, int, float]]:
    """(data set MB, RTT ms, clients, seconds) points (pure)."""
    if quick:
        return [(40, 0, 64, 3.5), (40, 100, 400, 3.5)]
    fig212 = [(120, d, round(64 + (900 - 64) * d / 150), 30.0) for d in (0, 20, 50, 100, 150)]
    fig412 = [(90, 100, c, 30.0) for c in (64, 256, 512, 900)]
    return fig212 + fig412


def run(lab: core.Lab) -> dict:
    lab.prepare(commands=["nginx"])
    www = os.path.join(lab.scratch, "www")
    os.makedirs(www)
    points = plan(lab.quick)
    reps = 1 if lab.quick else 3
    limit = (24 << 20) if lab.quick else MEMORY_LIMIT
    sets = {}
    for mb in sorted({p[0] for p in points}):
        os.makedirs(os.path.join(www, f"d{mb}"))
        files = data_set(www, mb, f"d{mb}")
        urls = os.path.join(lab.scratch, f"urls{mb}.txt")
        with open(urls, "w") as f:
            f.write("".join(f"/{n}\n" for n, _ in files))
        sets[mb] = (files, urls, sum(s for _, s in files) / len(files))
    cg = MemCgroup(limit)
    if not cg.path:
        lab.log("  no writable v1 memory cgroup: servers run without the memory limit")
    rows = []
    try:
        for mb, rtt, clients, secs in points:
            files, urls, mean_size = sets[mb]
            link = {"a": "client", "b": "server", "delay": f"{rtt / 2:g}ms"}
            with netlab.WanNet(lab.weft, [{"name": "client"}, {"name": "server"}], [link], log=lab.log) as net:
                for kind in SERVERS:
                    evict(www, files)
                    p = start_server(lab, net, kind, www, cg, limit)
                    try:
                        net.wait_port("server", 8080, p)
                        for rep in range(reps):
                            cg.reset_peak()
                            m = measure(lab, net, urls, clients, secs, mean_size)
                            m.update(cg.figures())
                            rows.append({"server": kind, "data_mb": mb, "rtt_ms": rtt, "clients": clients, "rep": rep + 1, **m})
                            lab.log(f"  {mb} MB rtt {rtt:>3} ms {clients:>4} clients {kind:<14} rep {rep + 1}: {m['rps']:>8.0f} req/s {m['mbit_s']:>7.1f} Mbit/s"
                                    f"  peak {report.fmt_num(m['mem_peak_mb'])} MiB, cache {report.fmt_num(m['page_cache_mb'])} MiB")  # fmt: skip
                    finally:
                        netlab.stop(p, timeout=5)
    finally:
        cg.remove()
    return summarize(lab, rows, points, reps, limit if cg.path else None)


def summarize(lab, rows: list[dict], points, reps: int, limit: int | None) -> dict:
    med = report.group_medians(rows, ["server", "data_mb", "rtt_ms", "clients"], ["rps", "mbit_s", "rt_mean_ms", "mem_peak_mb", "page_cache_mb"])
    report.write_json(os.path.join(lab.results_dir, "runs.json"), {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "runs": rows})
    report.write_csv(os.path.join(lab.results_dir, "runs.csv"), rows)
    report.write_csv(os.path.join(lab.results_dir, "medians.csv"), med)
    by = {(m["server"], m["data_mb"], m["rtt_ms"], m["clients"]): m for m in med}
    table = []
    for mb, rtt, clients, _ in points:
        row = [f"{mb} MB", f"{rtt} ms", str(clients)]
        for s in SERVERS:
            m = by.get((s, mb, rtt, clients))
            row.append("–" if m is None else f"{m['rps']:.0f} ({m['mbit_s']:.0f} Mbit/s, peak {report.fmt_num(m['mem_peak_mb'])} MiB)")
        table.append(row)
    problems = [r for r in rows if r["replies_2xx"] < r["requests"] * 0.99]
    mem = f"memory cgroup limit {limit >> 20} MiB" if limit else "no memory limit (no writable v1 memory cgroup)"
    md = [f"# {NAME}", "", f"{'Quick' if lab.quick else 'Full'} run, {reps} run(s) per point, median; files of 4–256 KiB (mean 85 KiB); {mem}; "
          f"send buffer {SEND_BUFFER >> 10} KiB; weft object cache: `--object-cache` of half the limit. Anchor: nginx, same network and run.", ""]  # fmt: skip
    md += [report.markdown_table(["data set", "RTT", "clients"] + SERVERS, table), ""]
    md += ["## Checks", "", f"- {len(problems)} run(s) with under 99 % 2xx" if problems else "- every run had at least 99 % 2xx replies", ""]
    md += report.versions_section(lab.versions)
    report.write_summary(lab.results_dir, md)
    return {"medians": med, "problems": len(problems)}
