"""cgi: dynamic content through weft's FastCGI and CGI support (issue 24,
thesis 004 §2.2.6: Flash-Lite's persistent CGI with its zero-copy path).

64 KiB responses, `wrk -t1 -c50` keep-alive, one serve worker:

- weft static: the same size from a file (sendfile), the reference;
- weft fastcgi splice / copy: `--fastcgi /app=127.0.0.1:PORT` to
  `weft-fcgi-app` (the workspace's FastCGI responder), record payloads
  spliced to the socket, or read and written (`--cgi-send copy`);
- weft fastcgi unix: the same application on a Unix socket (spliced too:
  since Linux 6.5 the application's sendfile attaches pages to the Unix
  socket and weft's splice moves them);
- weft cgi pool: `--cgi /app=weft-fcgi-app`, weft starts and supervises the
  processes (persistent CGI);
- weft cgi1 fork: `--cgi-mode cgi1`, a shell script per request (CGI/1.1);
- nginx static and nginx fastcgi (`fastcgi_pass` to the same application
  with upstream keepalive and `fastcgi_keep_conn on`): the anchors.

The application (`weft-fcgi-app`) answers from a prepared record stream
with one sendfile per request, as a tuned FastCGI application serving a
document would (the thesis's CGI program also returned a document).

Reported: requests/s, server CPU µs per request (the server's process tree:
for `weft cgi pool` and `cgi1` that includes the programs), application CPU
µs per request for the external application, the times per request the
server's and the application's threads were put on a CPU (schedstat: each
a wake-up or a preemption, the price of an exchange between processes), and
CGI throughput as a share of static (target: FastCGI via splice ≥ 80 % of static; the thesis reports
87 % for Flash-Lite and about 50 % for copying servers). All servers run side
by side and are loaded in turn for 2 s slices, ten rounds with the order
rotated (`core.interleaved`: single runs spread by ±20 % on this shared
host, and a share of static taken within one round cancels that drift);
medians, and each share also round by round (median, interquartile range).
--quick: one round.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections import OrderedDict

from .. import core, env, proc, report, servers

NAME = "cgi"
DESCRIPTION = "FastCGI via splice vs copy vs static at 64 KiB, persistent vs fork-per-request, nginx fastcgi_pass anchor"

SIZE = 64 << 10
CONNECTIONS = 50
ROUNDS = 10
# (server, the static reference its share is taken of).
SHARES = [("weft fastcgi splice", "weft static"), ("weft fastcgi copy", "weft static"), ("weft fastcgi unix", "weft static"),
          ("weft cgi pool", "weft static"), ("weft cgi1 fork", "weft static"), ("nginx fastcgi", "nginx static")]  # fmt: skip

servers.ANCHORS.setdefault("nginx-fastcgi", {
    "template": "nginx_fastcgi.conf",
    "cmd": ["nginx", "-c", "{conf}", "-p", "{run}"],
    "package": "nginx-light",
    "binary": "nginx",
})  # fmt: skip


def build_app(log) -> str:
    """The FastCGI test application, built beside weft (release)."""
    binary = os.path.join(env.REPO_DIR, "target", "release", "weft-fcgi-app")
    p = subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "weft-fcgi-app"], cwd=env.REPO_DIR, capture_output=True, text=True)
    if p.returncode != 0 and not os.access(binary, os.X_OK):
        raise env.EnvError(f"cargo build --bin weft-fcgi-app failed:\n{p.stderr[-2000:]}")
    log(f"FastCGI application: {binary}")
    return binary


def _wait_path(path: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return True
        time.sleep(0.02)
    return False


def configs(app: str, tcp: str, sock: str, script: str) -> list[tuple[servers.ServerSpec, str, bool]]:
    """(server, URL path, uses the external application)."""
    fcgi = ["--fastcgi", f"/app={tcp}"]
    page = f"app/x?size={SIZE}"
    return [
        (servers.ServerSpec("weft static", "weft"), f"file-{SIZE}.bin", False),
        (servers.ServerSpec("weft fastcgi splice", "weft", {"extra": fcgi}), page, True),
        (servers.ServerSpec("weft fastcgi copy", "weft", {"extra": fcgi + ["--cgi-send", "copy"]}), page, True),
        (servers.ServerSpec("weft fastcgi unix", "weft", {"extra": ["--fastcgi", f"/app=unix:{sock}"]}), page, True),
        (servers.ServerSpec("weft cgi pool", "weft", {"extra": ["--cgi", f"/app={app}", "--cgi-workers", "4"]}), page, False),
        (servers.ServerSpec("weft cgi1 fork", "weft", {"extra": ["--cgi-mode", "cgi1", "--cgi", f"/app={script}"]}), page, False),
        (servers.ServerSpec("nginx static", "nginx"), f"file-{SIZE}.bin", False),
        (servers.ServerSpec("nginx fastcgi", "nginx-fastcgi", {"origin": tuple(tcp.split(":"))}), page, True),
    ]  # fmt: skip


def round_shares(rows: list[dict], server: str, ref: str) -> list[float]:
    """`server`'s requests/s as a share of `ref`'s, round by round (rows of
    the same `rep`), sorted."""
    rps = {(r["rep"], r["server"]): r["rps"] for r in rows if r.get("rps")}
    return sorted(rps[(rep, server)] / rps[(rep, ref)] for rep, s in rps if s == server and (rep, ref) in rps)


def run(lab: core.Lab) -> dict:
    reps = 1 if lab.quick else ROUNDS
    duration = 2.0
    lab.prepare(commands=["nginx"])
    app = build_app(lab.log)
    www = os.path.join(lab.scratch, "www")
    os.makedirs(www)
    core.make_file(os.path.join(www, f"file-{SIZE}.bin"), SIZE)
    sockdir = os.path.join(lab.scratch, "fcgi")
    os.makedirs(sockdir)
    os.chmod(sockdir, 0o777)
    os.chmod(lab.scratch, 0o755)
    sock = os.path.join(sockdir, "app.sock")
    script = os.path.join(lab.scratch, "cgi1.sh")
    with open(script, "w") as f:
        f.write(f"#!/bin/sh\nprintf 'Content-Type: application/octet-stream\\r\\nContent-Length: {SIZE}\\r\\n\\r\\n'\nexec head -c {SIZE} /dev/zero\n")
    os.chmod(script, 0o755)
    tcp = f"127.0.0.1:{servers.free_port()}"
    cfgs = configs(app, tcp, sock, script)
    paths = {spec.label: (path, ext) for spec, path, ext in cfgs}
    rows: list[dict] = []
    with lab.pool(www) as pool:
        ext_app = pool.start_process("weft-fcgi-app", [app, "--listen", tcp])
        ext_unix = pool.start_process("weft-fcgi-app unix", [app, "--listen", f"unix:{sock}"])
        host, port = tcp.split(":")
        if not _wait_path(sock, 10.0) or not servers.wait_for_port(host, int(port), 10.0, ext_app.popen):
            raise servers.ServerError("weft-fcgi-app did not start")
        items = [("64 KiB", {label: path for label, (path, _) in paths.items()})]
        commands = {}
        for rep, spec, rs, _, url in core.interleaved(lab, NAME, pool, [c[0] for c in cfgs], items, reps, duration):
            commands[spec.label] = rs.command
            path, ext = paths[spec.label]
            if rep == 1:
                status, got = core.fetch(url)
                if status != 200 or got != SIZE:
                    raise servers.ServerError(f"{spec.label}: GET /{path} gave {status} with {got} bytes")
            # The application's threads come and go with connections: its
            # CPU is read in ticks (utime + stime, exited threads included).
            app_pid = ext_unix.pid if spec.label == "weft fastcgi unix" else ext_app.pid
            app_before, srv_before = proc.tree_cpu_sample(app_pid), proc.tree_cpu_sample(rs.pid)
            m = core.measure(lab, rs, url, connections=CONNECTIONS, duration_s=duration)
            app_after, srv_after = proc.tree_cpu_sample(app_pid), proc.tree_cpu_sample(rs.pid)
            n = max(m.load.requests, 1)
            app_us = (app_after.ticks - app_before.ticks) * 1e6 / os.sysconf("SC_CLK_TCK") / n if ext else 0.0
            # Times the server's and the application's threads were put on a
            # CPU, per request: each is a wake-up or a preemption, the price
            # of an exchange between processes (docs/results.md, "A FastCGI
            # application that waits in poll"). The pool's processes are in
            # the server's tree.
            srv_sw, app_sw = proc.switches_between(srv_before, srv_after), proc.switches_between(app_before, app_after)
            w = m.weft or {}
            c = w.get("cgi") or {}
            rows.append({
                "rep": rep, "server": spec.label, "requests": m.load.requests, "rps": m.load.rps,
                "cpu_us_per_req": m.cpu_us_per_request, "app_cpu_us_per_req": app_us,
                "total_cpu_us_per_req": (m.cpu_us_per_request or 0) + app_us,
                "syscalls_per_req": sum(m.syscalls_per_request().values()) if m.weft else None,
                "server_switches_per_req": srv_sw / n,
                "app_switches_per_req": app_sw / n if ext else None,
                "non_2xx": m.load.non_2xx, "socket_errors": m.load.error_total,
                "bytes_spliced": c.get("bytes_spliced"), "bytes_copied": c.get("bytes_copied"),
                "restarts": c.get("restarts"), "status_502": c.get("status_502"), "status_504": c.get("status_504"),
            })  # fmt: skip
            if lab.quick:
                lab.log(f"  {spec.label:<20}: {m.load.rps:>9,.0f} req/s {report.fmt_num(m.cpu_us_per_request):>7} µs/req (+{app_us:.1f} app)")
    lab.load_command = lab.driver.command("http://127.0.0.1:PORT/PATH", connections=CONNECTIONS, duration_s=duration)
    med = report.group_medians(rows, ["server"], ["rps", "cpu_us_per_req", "app_cpu_us_per_req", "total_cpu_us_per_req", "syscalls_per_req", "server_switches_per_req", "app_switches_per_req"])
    by = {r["server"]: r for r in med}
    share = OrderedDict()
    for lbl, ref in SHARES:
        if by.get(lbl) and by.get(ref) and by[ref]["rps"]:
            share[lbl] = by[lbl]["rps"] / by[ref]["rps"]
    rounds = OrderedDict()
    for lbl, ref in SHARES:
        rounds[lbl] = round_shares(rows, lbl, ref)
    core.write_runs(lab, NAME, rows, commands, med, share_of_static=share, share_by_round={k: v for k, v in rounds.items() if v})
    def switches(v) -> str:
        return f"{v:.2f}" if v is not None else "–"

    table = [[r["server"], f"{r['rps']:,.0f}", report.fmt_num(r["cpu_us_per_req"]), f"{r['app_cpu_us_per_req']:.1f}", report.fmt_num(r["total_cpu_us_per_req"]), report.fmt_num(r.get("syscalls_per_req")), switches(r.get("server_switches_per_req")), switches(r.get("app_switches_per_req")), f"{share[r['server']]:.0%}" if r["server"] in share else "–", report.median_iqr(rounds.get(r["server"], []), ".0%")] for r in med]
    series = OrderedDict((r["server"], [r["rps"]]) for r in med)
    report.plot_grouped_bars(os.path.join(lab.results_dir, "rps.png"), ["64 KiB"], series, ylabel="requests/s", title=f"{NAME}: median of {reps} rounds")
    problems = [r for r in rows if r["non_2xx"] or r["socket_errors"]]
    md = [f"# {NAME}", "", f"{'Quick' if lab.quick else 'Full'} run, {reps} interleaved round(s) of {duration:g} s slices, median; `{' '.join(lab.load_command)}`, 64 KiB responses, one worker.", ""]
    md += ["## Throughput and CPU", "", report.markdown_table(["server", "req/s", "server µs/req", "app µs/req", "total µs/req", "weft syscalls/req", "server switches/req", "app switches/req", "of static", "by round (IQR)"], table), ""]
    md += ["`of static`: requests/s as a share of the same server's static file at the same size (target for weft fastcgi splice: ≥ 80 %).", ""]
    md += ["`switches/req`: times the threads were put on a CPU (schedstat), per request: wake-ups and preemptions; the `--cgi` pool's and nginx's worker processes count as the server's.", ""]
    md += ["## Checks", "", f"- {len(problems)} run(s) with errors" if problems else "- every response was 2xx, no socket errors", ""]
    md += report.versions_section(lab.versions)
    report.write_summary(lab.results_dir, md)
    return {"medians": med, "share_of_static": share, "problems": len(problems)}
