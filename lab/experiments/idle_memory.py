"""idle-memory: what an idle keep-alive connection costs each server (issue 21).

For each server, in the same run: start it (one worker), warm it up (a few
requests), read the resident set of its process tree (VmRSS of the root and
every descendant, /proc), then open connections that each send one `GET`
for an 8 KiB answer, read it whole, and stay open and idle. At each
connection count (1,000, 10,000 and 19,000; `--quick`: 1,000 and 5,000) the
server's RSS is read again after a settling pause, and the cost per idle
connection is (RSS now − RSS before) / connections. Kernel socket buffers
are not in RSS: this is what the server's own user memory grows by.

Servers: weft serve, weft proxy (reverse, the 8 KiB answer a cache hit from
its memory store), weft front in relay and booster mode (one back-end: the
origin), nginx, h2o, lighttpd (static files), HAProxy (reverse,
no cache: every request forwarded) and Varnish (reverse, a cache hit), the
proxies in front of `weft origin`. An anchor that is not installed (and
cannot be with apt-get) is skipped and named in the summary.

The client is this process: plain blocking sockets, one connection at a
time (connect, send, read the whole answer), so no server ever sees a burst
and its buffer pools stay small; each connection is closed with a reset at
the end (SO_LINGER 0), so 19,000 client ports are not left in TIME_WAIT for
the next server. 19,000 connections stay under this machine's 20,000
descriptors per process on both sides.
"""

from __future__ import annotations

import os
import resource
import socket
import struct
import time
from collections import OrderedDict

from .. import core, env, proc, report, servers
from ..wire import read_response

NAME = "idle-memory"
DESCRIPTION = "issue 21: RSS per idle keep-alive connection (one 8 KiB GET each) at 1k/10k/19k connections: weft serve, proxy, front vs nginx, h2o, lighttpd, HAProxy, Varnish"

COUNTS = [1000, 10000, 19000]
QUICK_COUNTS = [1000, 5000]
SIZE = 8192
SETTLE_S = 3.0  # after the last connection: weft's pools shrink once a second
ORIGIN_PATH = f"/size/{SIZE}/c3600/idle.bin"

# Anchors whose stock settings would close idle connections or refuse
# 19,000 of them: raised for this experiment (and named in the summary).
EDITS = {
    "h2o": [("max-connections: 15000", "max-connections: 25000")],
    # lighttpd holds at most half its descriptors as connections: 10,000
    # under the 20,000 limit (it stops there; the table says so).
    "lighttpd": [("server.max-fds = 19000", "server.max-fds = 20000"),
                 ("server.max-connections = 15000", "server.max-connections = 19500")],
    # HAProxy reserves two descriptors per connection (client and server)
    # and refuses to start when 2 × maxconn passes the hard limit (20,000
    # here): it holds at most ~9,950 clients (the table says where it stops).
    "haproxy-copy": [("maxconn 4000", "maxconn 9950")],
}
# Varnish closes idle client connections after 5 s (timeout_idle).
servers.ANCHORS.setdefault("varnish-hit-idle", dict(servers.ANCHORS["varnish-hit"], cmd=[
    *servers.ANCHORS["varnish-hit"]["cmd"], "-p", "timeout_idle=600"]))


def plan(quick: bool) -> list[tuple[str, str, dict, str]]:
    """(label, kind, options, path) of every server, in table order."""
    weft_idle = ["--idle-timeout", "600s"]
    rows = [
        ("weft serve", "weft", {"extra": weft_idle}, "/8k.bin"),
        ("weft proxy (hit)", "weft-proxy", {"extra": weft_idle}, ORIGIN_PATH),
        # The cluster front-end's two terminating modes, one back-end (the
        # origin): every request forwarded (relay) or multiplexed over
        # pooled back-end connections and cached (booster, a hit).
        ("weft front (relay)", "weft-front", {"extra": [*weft_idle, "--mode", "relay"]}, ORIGIN_PATH),
        ("weft front (booster)", "weft-front", {"extra": [*weft_idle, "--mode", "booster"]}, ORIGIN_PATH),
        ("nginx", "nginx", {}, "/8k.bin"),
    ]
    if not quick:
        rows += [
            ("h2o", "h2o", {"edits": EDITS["h2o"]}, "/8k.bin"),
            ("lighttpd", "lighttpd", {"edits": EDITS["lighttpd"]}, "/8k.bin"),
            ("HAProxy (no cache)", "haproxy-copy", {"edits": EDITS["haproxy-copy"]}, ORIGIN_PATH),
            ("Varnish (hit)", "varnish-hit-idle", {}, ORIGIN_PATH),
        ]
    return rows


def tree_rss_kib(root: int, proc_dir: str = "/proc") -> int:
    """VmRSS (KiB) of `root` and its live descendants."""
    stats = proc._read_all_stats(proc_dir)
    tree = proc.descendants(root, {pid: s.ppid for pid, s in stats.items()})
    total = 0
    for pid in tree:
        try:
            with open(f"{proc_dir}/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            continue
    return total


def per_connection_kib(before_kib: int, after_kib: int, conns: int) -> float:
    """The growth of the resident set per connection, KiB."""
    return (after_kib - before_kib) / conns


class Holder:
    """Idle keep-alive connections to one server, each after one GET."""

    def __init__(self, port: int, path: str, host: str = "127.0.0.1"):
        self.addr = (host, port)
        self.request = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
        self.socks: list[socket.socket] = []

    def grow_to(self, n: int) -> None:
        while len(self.socks) < n:
            s = socket.create_connection(self.addr, timeout=10)
            # A reset at close: no TIME_WAIT left on 19,000 client ports.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            try:
                s.sendall(self.request)
                status, _, _ = read_response(s)
                if status != 200:
                    raise ConnectionError(f"status {status}")
            except OSError:
                s.close()
                raise
            self.socks.append(s)

    def close(self) -> None:
        for s in self.socks:
            try:
                s.close()
            except OSError:
                pass
        self.socks = []


def raise_nofile(want: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))


def available(kind: str, log) -> bool:
    a = servers.ANCHORS.get(kind)
    if a is None:
        return True
    try:
        env.ensure_commands([a["binary"]], log)
        return True
    except env.EnvError as e:
        log(f"skipping {kind}: {e}")
        return False


def measure_server(lab: core.Lab, pool: servers.ServerPool, spec: servers.ServerSpec, path: str,
                   counts: list[int]) -> tuple[list[dict], list[str]]:
    """The rows of one server at every connection count, and its command."""
    rs = pool.start(spec)
    holder = Holder(rs.port, path)
    rows = []
    try:
        # Warm up: the answer cached (proxies), files opened, first buffers made.
        warm = Holder(rs.port, path)
        warm.grow_to(5)
        warm.close()
        time.sleep(SETTLE_S)
        base = tree_rss_kib(rs.pid)
        for n in counts:
            t0 = time.monotonic()
            stopped = None
            try:
                holder.grow_to(n)
            except OSError as e:
                # A server that cannot hold this many (lighttpd, HAProxy:
                # half their descriptors): measured at what it held, in
                # this column, and the summary says so.
                stopped = f"held {len(holder.socks):,} of {n:,}: {e}"
                lab.log(f"  {spec.label}: {stopped}")
            opened_s = time.monotonic() - t0
            time.sleep(SETTLE_S)
            if not rs.alive():
                raise servers.ServerError(f"{spec.label} exited")
            rss = tree_rss_kib(rs.pid)
            stats = rs.admin_stats() if spec.kind.startswith("weft") else None
            held = len(holder.socks)
            row = {"server": spec.label, "connections": n, "held": held, "rss_base_kib": base, "rss_kib": rss,
                   "kib_per_conn": per_connection_kib(base, rss, held), "open_s": round(opened_s, 2)}  # fmt: skip
            if stopped:
                row["failed"] = stopped
            # weft front's /stats has no per-worker totals (its document
            # is the front-end's and the back-ends'): no pool gauges there.
            if stats and "total" in stats:
                t = stats["total"]
                # The pool gauges are nested under "pools" (the same group in every role).
                t = {**t, **t.get("pools", {})}
                # idle_connections: the connections asleep (a record in the
                # slot, the rest of their state in the pool: serve's
                # conn_records_pooled, the proxy's request_state_pooled).
                for k in ("open_connections", "idle_connections", "input_bufs_lent", "input_bytes_pooled",
                          "output_bufs_lent", "output_bytes_pooled", "request_state_pooled",
                          "conn_records_pooled"):  # fmt: skip
                    if k in t:
                        row[f"weft_{k}"] = t[k]
            lab.log(f"  {spec.label:<20} {held:>6} conns: RSS {base:>7} → {rss:>7} KiB, {row['kib_per_conn']:.2f} KiB/conn")
            rows.append(row)
            if stopped:
                break
    finally:
        holder.close()
        pool.stop(rs)
    return rows, rs.command


def run(lab: core.Lab) -> dict:
    counts = QUICK_COUNTS if lab.quick else COUNTS
    lab.prepare(commands=["nginx"])
    raise_nofile(max(*counts, BUDGET_CONNS) + 1000)
    www = os.path.join(lab.scratch, "www")
    os.makedirs(www, exist_ok=True)
    os.chmod(www, 0o755)
    core.make_file(os.path.join(www, "8k.bin"), SIZE)
    rows: list[dict] = []
    skipped: list[str] = []
    commands: dict[str, list[str]] = {}
    with lab.pool(www) as pool:
        origin = pool.start(servers.ServerSpec("weft origin", "weft-origin", {"extra": ["--idle-timeout", "600s"]}))
        commands["weft origin"] = origin.command
        for label, kind, opts, path in plan(lab.quick):
            if not available(kind, lab.log):
                skipped.append(label)
                continue
            o = dict(opts)
            if kind == "weft-proxy":
                o["extra"] = ["--upstream", f"127.0.0.1:{origin.port}", *o.get("extra", [])]
            elif kind == "weft-front":
                o["extra"] = ["--backend", f"127.0.0.1:{origin.port}", *o.get("extra", [])]
            elif kind in ("haproxy-copy", "varnish-hit-idle"):
                o["origin"] = ("127.0.0.1", origin.port)
            spec = servers.ServerSpec(label, kind, o)
            try:
                got, cmd = measure_server(lab, pool, spec, path, counts)
                rows += got
                commands[label] = cmd
            except (servers.ServerError, OSError) as e:
                lab.log(f"  {label}: failed: {e}")
                skipped.append(f"{label} (failed: {e})")
    versions = dict(lab.versions)
    for kind in ("h2o", "lighttpd", "haproxy", "varnish"):
        versions.setdefault(kind, env.package_version(kind))
    doc = {"experiment": NAME, "quick": lab.quick, "versions": versions, "commands": commands, "runs": rows,
           "skipped": skipped, "counts": counts}  # fmt: skip
    with lab.pool(www) as pool:
        doc["budget"] = budget_part(lab, pool, www)
    report.write_json(os.path.join(lab.results_dir, "runs.json"), doc)
    report.write_csv(os.path.join(lab.results_dir, "runs.csv"), rows)
    write_summary(lab, doc)
    return doc


# The budget part (issue 24): weft serve's RSS at 10,000 connections against
# its configured cache budget plus a fixed overhead, nginx in the same run.
BUDGET_CONNS = 10000
BUDGET_FILES = 48  # 1 MiB files fetched once each: 48 MiB through a 16 MiB budget
FILE_CACHE = 16 << 20
# The documented fixed overhead: the process right after start (binary,
# threads, first buffers: `rss_start_kib`) plus this much per connection
# (its Conn, slab slot, readiness entry; docs/serve.md "Memory").
PER_CONN_ALLOW = 1024


def budget_part(lab: core.Lab, pool: servers.ServerPool, www: str) -> list[dict]:
    for i in range(BUDGET_FILES):
        path = os.path.join(www, f"m{i}.bin")
        if not os.path.exists(path):
            core.make_file(path, 1 << 20)
    extra = ["--idle-timeout", "600s", "--file-cache", str(FILE_CACHE)]
    rows = []
    for label, kind, opts in [("weft serve (budgets)", "weft", {"extra": extra}), ("nginx", "nginx", {})]:
        rs = pool.start(servers.ServerSpec(label, kind, opts))
        holder = Holder(rs.port, "/8k.bin")
        try:
            time.sleep(1.0)
            start = tree_rss_kib(rs.pid)
            for i in range(BUDGET_FILES):
                h = Holder(rs.port, f"/m{i}.bin")
                h.grow_to(1)
                h.close()
            t0 = time.monotonic()
            holder.grow_to(BUDGET_CONNS)
            open_s = time.monotonic() - t0
            time.sleep(SETTLE_S)
            rss = tree_rss_kib(rs.pid)
            row = {"server": label, "connections": len(holder.socks), "rss_start_kib": start, "rss_kib": rss,
                   "open_s": round(open_s, 2), "command": rs.command}  # fmt: skip
            st = rs.admin_stats() if kind == "weft" else None
            if st:
                t = {**st["total"], **st["total"].get("pools", {})}
                for k in ("file_cache_bytes", "file_mapped_bytes", "file_cache_evictions", "helper_bytes",
                          "socket_send_bytes", "socket_recv_bytes", "input_bytes_pooled", "output_bytes_pooled",
                          "open_connections"):  # fmt: skip
                    row[k] = t.get(k)
                row["budget_bytes"] = FILE_CACHE
                bound = start * 1024 + FILE_CACHE + PER_CONN_ALLOW * row["connections"]
                row["bound_kib"] = bound // 1024
                row["within"] = rss * 1024 <= bound
            lab.log(f"  budget: {label:<22} {row['connections']} conns: RSS {start} → {rss} KiB"
                    + (f" (bound {row['bound_kib']} KiB)" if "bound_kib" in row else ""))  # fmt: skip
            rows.append(row)
        finally:
            holder.close()
            pool.stop(rs)
    return rows


def budget_table(rows: list[dict]) -> list[str]:
    header = ["server", "connections", "RSS at start KiB", "RSS KiB", "bound KiB", "within",
              "file cache KiB", "mapped KiB", "socket send KiB"]  # fmt: skip
    kib = lambda v: "–" if v is None else str(int(v) // 1024)  # noqa: E731
    body = [[r["server"], f"{r['connections']:,}", str(r["rss_start_kib"]), str(r["rss_kib"]),
             str(r.get("bound_kib", "–")), {True: "yes", False: "**no**"}.get(r.get("within"), "–"),
             kib(r.get("file_cache_bytes")), kib(r.get("file_mapped_bytes")), kib(r.get("socket_send_bytes"))]
            for r in rows]  # fmt: skip
    return ["## Budgets at 10,000 connections (issue 24)", "",
            f"weft serve with `--file-cache {FILE_CACHE >> 20}MiB` after {BUDGET_FILES} 1 MiB files went through it, "
            f"then {BUDGET_CONNS:,} idle connections (one 8 KiB GET each); bound = RSS at start + the budget + "
            f"{PER_CONN_ALLOW} B per connection. Socket bytes are /stats' once-a-second SIOCOUTQ sample.", "",
            report.markdown_table(header, body), ""]  # fmt: skip


def table(rows: list[dict], counts: list[int]) -> tuple[list[str], list[list[str]]]:
    by: "OrderedDict[str, dict[int, float]]" = OrderedDict()
    short = {(r["server"], r["connections"]) for r in rows if "failed" in r}
    for r in rows:
        by.setdefault(r["server"], {})[r["connections"]] = r.get("kib_per_conn")
    header = ["server"] + [f"{n:,} conns" for n in counts]
    body = [[s] + [report.fmt_num(v.get(n), 2) + ("*" if (s, n) in short else "") for n in counts]
            for s, v in by.items()]  # fmt: skip
    return header, body


def write_summary(lab: core.Lab, doc: dict) -> None:
    rows, counts = doc["runs"], doc["counts"]
    header, body = table(rows, counts)
    md = [f"# {NAME}{' (quick)' if lab.quick else ''}", "",
          "KiB of resident memory (the server's process tree) per idle keep-alive connection, after one GET of an "
          "8 KiB answer on each; one worker per server; same run.", "",
          report.markdown_table(header, body), ""]  # fmt: skip
    failed = [f"{r['server']} at {r['connections']:,} ({r['failed']})" for r in rows if "failed" in r]
    if failed:
        md += ["\\* could not hold that many (the figure is at what it held): " + "; ".join(failed) + ".", ""]
    if doc["skipped"]:
        md += ["Skipped: " + ", ".join(doc["skipped"]) + ".", ""]
    md += ["Anchor settings raised for 19,000 idle connections: h2o `max-connections`, lighttpd `max-fds` and "
           "`max-connections`, HAProxy `maxconn`, Varnish `timeout_idle`; weft `--idle-timeout 600s`.", ""]  # fmt: skip
    series: "OrderedDict[str, list[float | None]]" = OrderedDict()
    for r in body:
        series[r[0]] = [next((x.get("kib_per_conn") for x in rows if x["server"] == r[0] and x["connections"] == n), None)
                        for n in counts]  # fmt: skip
    try:
        report.plot_grouped_bars(os.path.join(lab.results_dir, "kib_per_connection.png"), [f"{n:,}" for n in counts],
                                 series, ylabel="KiB RSS per idle connection", title=f"{NAME}: idle keep-alive connections")  # fmt: skip
        md += ["Plot: `kib_per_connection.png`.", ""]
    except Exception as e:  # matplotlib missing: the table is the result
        md += [f"(no plot: {e})", ""]
    md += budget_table(doc.get("budget", []))
    md += report.versions_section(doc["versions"])
    report.write_summary(lab.results_dir, md)
