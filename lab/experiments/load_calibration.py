"""load-calibration: `weft load` against wrk and httperf on nginx (issue 3).

nginx (the anchor, one worker) serves a 1-byte file; in the same run:

1. equal load, unsaturated: 50 keep-alive connections, each waiting a think
   time between a reply and its next request — wrk with a Lua delay(),
   httperf --wsess, weft load --think. Reply rates side by side, and client
   CPU per reply at (nearly) equal load;
2. keep-alive saturation: wrk -t1 -c50, weft load --clients 50, httperf with
   50 connections of back-to-back calls; reply rate, client and nginx CPU per
   reply;
3. one request per connection, 50 closed-loop clients (Connection: close);
4. an open-loop sweep, httperf style (a new connection per request): weft load
   --rate R and httperf --rate R; achieved rate against the target. Also over
   HTTP/1.0 (the server closes first) and with weft load --local-addrs.

Client CPU is the tool's rusage (wait4); nginx CPU the process tree's
utime+stime from /proc. Median of 3 repetitions, tools interleaved within
each (1 repetition of 3 s and a short sweep with --quick).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import tempfile
import threading
import time

from .. import core, proc, report, servers

NAME = "load-calibration"
DESCRIPTION = "weft load vs wrk and httperf on nginx (1 B): equal load, saturation, close, open-loop sweep"

CONNECTIONS = 50
THINKS_MS = [10, 2]
LOCAL_ADDRS = "127.0.0.2-127.0.0.17"


class Hung(Exception):
    pass


class Origin:
    """`weft origin` on a free port (prints its address), stopped on exit."""

    def __init__(self, weft: str):
        self.popen = subprocess.Popen([weft, "origin", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        line = self.popen.stdout.readline().strip()
        if not line.startswith("listening on "):
            self.stop()
            raise RuntimeError(f"weft origin did not start: {line!r}")
        self.addr = line.removeprefix("listening on ")

    def cpu_ticks(self) -> int:
        return proc.tree_cpu_ticks(self.popen.pid)

    def stop(self) -> None:
        self.popen.terminate()
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


def timed(cmd: list[str], server, limit: float):
    """Run cmd; (stdout, client CPU s, server CPU s, wall s). Killed past `limit` (Hung)."""
    t0_ticks = server.cpu_ticks()
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    killer = threading.Timer(limit, p.kill)
    killer.start()
    out = p.stdout.read()  # outputs are small: read to EOF, then reap with wait4
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    killer.cancel()
    wall = time.monotonic() - t0
    if wall >= limit:
        raise Hung(" ".join(cmd))
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"{cmd[0]} exited {code}: {err.decode()[-500:]}")
    return out.decode(), ru.ru_utime + ru.ru_stime, proc.ticks_to_seconds(server.cpu_ticks() - t0_ticks), wall


def parse_wrk(out: str) -> dict:
    total = int(re.search(r"(\d+) requests in", out).group(1))
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    errors = (int(non2xx.group(1)) if non2xx else 0) + (sum(map(int, sock.groups())) if sock else 0)
    return dict(rate=rate, replies=total, errors=errors)


def parse_httperf(out: str) -> dict:
    m = re.search(r"Total: connections (\d+) requests (\d+) replies (\d+) test-duration ([\d.]+) s", out)
    if not m:
        raise RuntimeError(f"cannot parse httperf output:\n{out[-1500:]}")
    _, reqs, replies, dur = int(m.group(1)), int(m.group(2)), int(m.group(3)), float(m.group(4))
    errs = int(re.search(r"Errors: total (\d+)", out).group(1))
    return dict(rate=replies / dur, req_rate=reqs / dur, replies=replies, errors=errs)


def parse_weft(doc: dict) -> dict:
    return dict(
        rate=doc["reply_rate"]["overall"],
        req_rate=doc["requests"] / doc["duration_s"],
        replies=doc["replies"]["total"],
        errors=sum(doc["errors"].values()) + doc["replies"]["total"] - doc["replies"]["2xx"],
        samples=doc["reply_rate"]["samples"],
    )


class Tools:
    def __init__(self, lab: core.Lab, server, url: str, port: int):
        self.lab, self.server, self.url, self.port = lab, server, url, port
        self.commands: dict[str, str] = {}

    def wrk(self, secs: float, *extra: str) -> dict | None:
        cmd = ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{secs:g}s", *extra, self.url]
        out, cpu, scpu, _ = timed(cmd, self.server, secs * 3 + 30)
        return dict(parse_wrk(out), cpu=cpu, scpu=scpu)

    def weft(self, *args: str) -> dict | None:
        with tempfile.NamedTemporaryFile(suffix=".json") as j:
            cmd = [self.lab.weft, "load", self.url, "--quiet", "--json", j.name, *args]
            _, cpu, scpu, _ = timed(cmd, self.server, 180)
            with open(j.name) as f:
                doc = json.load(f)
        return dict(parse_weft(doc), cpu=cpu, scpu=scpu)

    def httperf(self, *args: str) -> dict | None:
        # No --hog: with it httperf binds ports itself, and with TIME_WAIT
        # sockets left by earlier runs it was seen spinning forever.
        cmd = ["httperf", "--server", "127.0.0.1", "--port", str(self.port), "--uri", "/one.bin", *args]
        try:
            out, cpu, scpu, _ = timed(cmd, self.server, 180)
        except Hung:
            self.lab.log(f"  httperf hung, killed: {' '.join(args)}")
            return None
        return dict(parse_httperf(out), cpu=cpu, scpu=scpu)


def ok(rows):
    return [r for r in rows if r is not None]


def med(rows, key):
    vals = [r[key] for r in ok(rows)]
    return statistics.median(vals) if vals else float("nan")


def us_per(rows, key):
    vals = [r[key] * 1e6 / max(r["replies"], 1) for r in ok(rows)]
    return statistics.median(vals) if vals else float("nan")


def cpu_ratio(a_rows, b_rows):
    vals = [a["cpu"] / a["replies"] / (b["cpu"] / b["replies"]) for a, b in zip(a_rows, b_rows) if a and b]
    return statistics.median(vals) if vals else float("nan")


def run(lab: core.Lab) -> dict:
    reps = 1 if lab.quick else 3
    secs = 3 if lab.quick else 10
    sweep_secs = 3 if lab.quick else 5
    rates = [1000, 5000] if lab.quick else [1000, 2000, 5000, 10000, 15000, 20000]
    rates10 = [10000] if lab.quick else [15000, 20000, 25000]
    rates_local = [10000] if lab.quick else [15000, 20000]
    lab.prepare(commands=["nginx", "httperf"])
    hv = subprocess.run(["httperf", "--version"], capture_output=True, text=True, timeout=30)
    lab.versions["httperf"] = ((hv.stdout + hv.stderr).strip().splitlines() or ["unknown"])[0]
    www = os.path.join(lab.scratch, "www")
    os.makedirs(www)
    core.make_file(os.path.join(www, "one.bin"), 1)
    scripts = {}
    for t in THINKS_MS:
        scripts[t] = os.path.join(lab.scratch, f"delay{t}.lua")
        with open(scripts[t], "w") as f:
            f.write(f"function delay()\n  return {t}\nend\n")
    eq = {t: {"wrk": [], "weft": [], "httperf": []} for t in THINKS_MS}
    sat = {"wrk": [], "weft": [], "httperf": []}
    close = {"wrk": [], "weft": []}
    sweep = []
    servers_rows: dict = {}
    rows: list[dict] = []

    def keep(section, tool, rep, r, **extra):
        if r is not None:
            rows.append({"section": section, "tool": tool, "rep": rep, **extra,
                         **{k: v for k, v in r.items() if k != "samples"}})  # fmt: skip
        return r

    with lab.pool(www) as pool:
        rs = pool.start(servers.ServerSpec("nginx", "nginx"))
        url = f"http://127.0.0.1:{rs.port}/one.bin"
        core.fetch(url)
        tools = Tools(lab, rs, url, rs.port)
        for rep in range(1, reps + 1):
            lab.log(f"repetition {rep}/{reps}: equal load, saturation, one request per connection")
            for t in THINKS_MS:
                calls = int(secs * 1000 / t)
                e = eq[t]
                e["wrk"].append(keep("equal", "wrk", rep, tools.wrk(secs, "-s", scripts[t]), think_ms=t))
                e["weft"].append(keep("equal", "weft", rep, tools.weft("--clients", str(CONNECTIONS), "--think", f"{t}ms", "--duration", f"{secs}s"), think_ms=t))
                e["httperf"].append(keep("equal", "httperf", rep, tools.httperf(f"--wsess={CONNECTIONS},{calls},{t / 1000}", "--rate", "1000", "--timeout", "10"), think_ms=t))
            sat["wrk"].append(keep("saturation", "wrk", rep, tools.wrk(secs)))
            sat["weft"].append(keep("saturation", "weft", rep, tools.weft("--clients", str(CONNECTIONS), "--duration", f"{secs}s")))
            calls = max(100, int(sat["wrk"][-1]["rate"] * secs / CONNECTIONS))
            sat["httperf"].append(keep("saturation", "httperf", rep, tools.httperf("--num-conns", str(CONNECTIONS), "--rate", "1000", "--num-calls", str(calls), "--timeout", "10")))
            close["wrk"].append(keep("close", "wrk", rep, tools.wrk(secs, "-H", "Connection: close")))
            close["weft"].append(keep("close", "weft", rep, tools.weft("--clients", str(CONNECTIONS), "--close", "--duration", f"{secs}s")))
        variants = [(r, "", [], []) for r in rates]
        variants += [(r, " (HTTP/1.0)", ["--http10"], ["--http-version=1.0"]) for r in rates10]
        variants += [(r, " (weft --local-addrs)", ["--local-addrs", LOCAL_ADDRS], []) for r in rates_local]
        for r, label, wargs, hargs in variants:
            lab.log(f"sweep {r}/s{label}")
            rw, rh = [], []
            for rep in range(1, reps + 1):
                rw.append(keep("sweep", "weft", rep, tools.weft("--rate", str(r), "--duration", f"{sweep_secs}s", "--timeout", "5s", *wargs), target=r, variant=label.strip()))
                rh.append(keep("sweep", "httperf", rep, tools.httperf("--rate", str(r), "--num-conns", str(r * sweep_secs), "--timeout", "5", *hargs), target=r, variant=label.strip()))
            sweep.append((r, label, rw, rh))
        lab.log("weft origin vs nginx as the server")
        origin = Origin(lab.weft)
        try:
            otools = Tools(lab, origin, f"http://{origin.addr}/size/1/x", 0)
            for rep in range(1, reps + 1):
                for extra in ([], ["--close"]):
                    for name, t in (("nginx", tools), ("weft origin", otools)):
                        r = t.weft("--clients", str(CONNECTIONS), "--duration", f"{secs}s", *extra)
                        servers_rows.setdefault((name, bool(extra)), []).append(keep("origin", name, rep, r, close=bool(extra)))
        finally:
            origin.stop()
        pool.stop(rs)

    md = [f"# {NAME}", "", f"{'Quick' if lab.quick else 'Full'} run: median of {reps} repetition(s), tools interleaved within each; "
          f"nginx anchor (1 worker) serving a 1-byte file on 127.0.0.1. Client CPU: the tool's rusage; nginx CPU: its process tree.", ""]  # fmt: skip
    md += ["## Versions", ""] + [f"- {k}: {v}" for k, v in lab.versions.items()] + [""]
    md += [f"## Equal load: {CONNECTIONS} keep-alive connections with a think time, {secs} s", ""]
    table = []
    for t in THINKS_MS:
        cmds = {
            "wrk": f"wrk -t1 -c{CONNECTIONS} -d{secs}s -s delay.lua URL (delay() returns {t})",
            "weft": f"weft load URL --clients {CONNECTIONS} --think {t}ms --duration {secs}s",
            "httperf": f"httperf --wsess={CONNECTIONS},{int(secs * 1000 / t)},{t / 1000} --rate 1000",
        }
        base = med(eq[t]["wrk"], "rate")
        for k in ("wrk", "weft", "httperf"):
            table.append([f"{t} ms", k, f"`{cmds[k]}`", f"{med(eq[t][k], 'rate'):.0f}", f"{med(eq[t][k], 'rate') / base:.3f}",
                          f"{us_per(eq[t][k], 'cpu'):.2f}", f"{cpu_ratio(eq[t]['weft'], eq[t]['wrk']):.3f}" if k == "weft" else "",
                          f"{med(eq[t][k], 'errors'):.0f}"])  # fmt: skip
    md += [report.markdown_table(["think", "client", "command", "replies/s", "vs wrk", "client CPU µs/reply", "weft / wrk CPU", "errors"], table, "rllrrrrr"), ""]
    md += [f"## Keep-alive saturation, {CONNECTIONS} connections, {secs} s", ""]
    cmds = {
        "wrk": f"wrk -t1 -c{CONNECTIONS} -d{secs}s URL",
        "weft": f"weft load URL --clients {CONNECTIONS} --duration {secs}s",
        "httperf": f"httperf --num-conns {CONNECTIONS} --rate 1000 --num-calls N (N = wrk's rate × {secs} s / {CONNECTIONS})",
    }
    base = med(sat["wrk"], "rate")
    table = [[k, f"`{cmds[k]}`", f"{med(sat[k], 'rate'):.0f}", f"{med(sat[k], 'rate') / base:.3f}", f"{us_per(sat[k], 'cpu'):.2f}",
              f"{us_per(sat[k], 'scpu'):.2f}", f"{med(sat[k], 'errors'):.0f}"] for k in ("wrk", "weft", "httperf")]  # fmt: skip
    md += [report.markdown_table(["client", "command", "replies/s", "vs wrk", "client CPU µs/reply", "nginx CPU µs/reply", "errors"], table, "llrrrrr"), ""]
    md += [f"weft load CPU per reply / wrk's (median of per-repetition ratios): **{cpu_ratio(sat['weft'], sat['wrk']):.3f}**", ""]
    md += [f"## One request per connection, {CONNECTIONS} closed-loop clients, {secs} s", ""]
    cmds = {"wrk": f"wrk -t1 -c{CONNECTIONS} -d{secs}s -H 'Connection: close' URL", "weft": f"weft load URL --clients {CONNECTIONS} --close --duration {secs}s"}
    base = med(close["wrk"], "rate")
    table = [[k, f"`{cmds[k]}`", f"{med(close[k], 'rate'):.0f}", f"{med(close[k], 'rate') / base:.3f}", f"{us_per(close[k], 'cpu'):.2f}",
              f"{us_per(close[k], 'scpu'):.2f}", f"{med(close[k], 'errors'):.0f}"] for k in ("wrk", "weft")]  # fmt: skip
    md += [report.markdown_table(["client", "command", "replies/s", "vs wrk", "client CPU µs/reply", "nginx CPU µs/reply", "errors"], table, "llrrrrr"), ""]
    md += [f"weft load CPU per reply / wrk's: **{cpu_ratio(close['weft'], close['wrk']):.3f}**", ""]
    md += ["## Open-loop sweep: a new connection per request (httperf style)", "",
           f"`weft load URL --rate R --duration {sweep_secs}s --timeout 5s` and `httperf --rate R --num-conns R·{sweep_secs} --timeout 5`; "
           "HTTP/1.1 and the client closes each connection after its reply, as httperf does. HTTP/1.0 rows: `--http10` / "
           "`--http-version=1.0`, the server closes first. `--local-addrs` rows: weft load spreads its connections over "
           f"{LOCAL_ADDRS} (httperf unchanged).", ""]  # fmt: skip
    table = []
    for r, label, rw, rh in sweep:
        wr, hr = med(rw, "req_rate"), med(rh, "req_rate")
        samples = [x["samples"] for x in ok(rw) if x.get("samples")]
        lo = statistics.median(min(s) for s in samples) if samples else 0
        hi = statistics.median(max(s) for s in samples) if samples else 0
        share = statistics.median(x["scpu"] / sweep_secs for x in ok(rw)) if ok(rw) else float("nan")
        hung = sum(1 for x in rh if x is None)
        table.append([f"{r}{label}", f"{wr:.1f}", f"{wr / r:.4f}", f"{lo:.0f}–{hi:.0f}", f"{med(rw, 'errors'):.0f}", f"{hr:.1f}", f"{hr / r:.4f}",
                      f"{med(rh, 'errors'):.0f}" + (f" ({hung} hung)" if hung else ""), f"{share:.2f}"])  # fmt: skip
    md += [report.markdown_table(["target req/s", "weft achieved", "weft / target", "weft per-second min–max", "weft errors",
                                  "httperf achieved", "httperf / target", "httperf errors", "nginx CPU (cores)"], table, "rrrlrrrrr"), ""]  # fmt: skip
    md += [f"## weft origin vs nginx as the server (1 worker each, 1-byte body, `weft load --clients {CONNECTIONS}`, {secs} s)", ""]
    table = [[name, "one per request (`--close`)" if close else "keep-alive", f"{med(r, 'rate'):.0f}", f"{us_per(r, 'scpu'):.2f}",
              f"{med(r, 'errors'):.0f}"] for (name, close), r in servers_rows.items()]  # fmt: skip
    md += [report.markdown_table(["server", "connections", "replies/s", "server CPU µs/reply", "errors"], table, "llrrr"), ""]
    report.write_json(os.path.join(lab.results_dir, "runs.json"), {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "runs": rows})
    report.write_csv(os.path.join(lab.results_dir, "runs.csv"), rows)
    with open(os.path.join(lab.results_dir, "summary.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    return {"problems": 0}
