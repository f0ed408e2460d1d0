#!/usr/bin/env python3
"""Calibrate `weft load` against wrk and httperf on nginx serving a 1-byte file.

Same run, same machine, one nginx worker (the anchor config
/work/shared/anchors/conf/nginx_static_w1.conf, on a free port):

1. equal load, unsaturated: 50 keep-alive connections, each waiting a fixed
   think time between a reply and its next request — wrk with a Lua delay(),
   httperf --wsess, weft load --think. The three must report the same reply
   rate; client CPU per reply compares the tools at equal load.
2. keep-alive, 50 connections, back-to-back requests (server-bound):
   wrk -t1 -c50, weft load --clients 50, httperf with 50 connections of
   back-to-back calls. Reply rate, client CPU per reply, nginx CPU per reply.
3. one request per connection, 50 closed-loop clients: wrk with
   `Connection: close`, weft load --close.
4. open-loop sweep (httperf style, a new connection per request): weft load
   --rate R and httperf --rate R, achieved rate vs target, nginx CPU share.

Each measurement is repeated (--reps, default 3, tools interleaved) and the
median is reported; the machine is shared, so ratios within a repetition
matter more than absolute rates. Prints a Markdown report on stdout.

Usage: scripts/load_calibration.py [--reps 3] [--secs 10] [--quick]
"""

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WEFT = os.path.join(ROOT, "target", "release", "weft")
ANCHOR = "/work/shared/anchors/conf/nginx_static_w1.conf"
TCK = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def proc_cpu(pids):
    """utime + stime of processes, seconds."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TCK
        except OSError:
            pass
    return total


def children(pid):
    out = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


class Nginx:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="weft-calib-")
        self.www = os.path.join(self.dir, "www")
        self.run = os.path.join(self.dir, "run")
        os.makedirs(self.www)
        os.makedirs(self.run)
        # nginx workers run as nobody: the root must be readable by them.
        for d in (self.dir, self.www):
            os.chmod(d, 0o755)
        with open(os.path.join(self.www, "one.bin"), "wb") as f:
            f.write(b"x")
        os.chmod(os.path.join(self.www, "one.bin"), 0o644)
        self.port = free_port()
        with open(ANCHOR) as f:
            conf = f.read()
        conf = conf.replace("@RUN@", self.run).replace("@WWW@", self.www)
        conf = conf.replace("127.0.0.1:18080", f"127.0.0.1:{self.port}")
        self.conf = os.path.join(self.dir, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(conf)
        self.proc = subprocess.Popen(
            ["nginx", "-c", self.conf, "-p", self.run],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise SystemExit("nginx did not start")
        self.pids = [self.proc.pid] + children(self.proc.pid)
        self.url = f"http://127.0.0.1:{self.port}/one.bin"

    def cpu(self):
        return proc_cpu(self.pids)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class Hung(Exception):
    pass


class WeftOrigin:
    """`weft origin` on a free port, with the same interface as Nginx."""

    def __init__(self):
        self.proc = subprocess.Popen([WEFT, "origin", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        addr = line.strip().removeprefix("listening on ")
        self.port = int(addr.rsplit(":", 1)[1])
        self.url = f"http://{addr}/size/1/x"
        self.pids = [self.proc.pid]

    def cpu(self):
        return proc_cpu(self.pids)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


def origin_vs_nginx(a):
    """Server CPU per reply: weft origin vs nginx, both driven by weft load."""
    rows = {("nginx", False): [], ("origin", False): [], ("nginx", True): [], ("origin", True): []}
    nginx, origin = Nginx(), WeftOrigin()
    try:
        for rep in range(a.reps):
            print(f"# origin vs nginx, repetition {rep + 1}", file=sys.stderr)
            for close in (False, True):
                extra = ["--close"] if close else []
                for name, srv in (("nginx", nginx), ("origin", origin)):
                    rows[(name, close)].append(run_weft(srv, ["--clients", "50", "--duration", f"{a.secs}s"] + extra))
    finally:
        nginx.stop()
        origin.stop()
    print(f"### weft origin vs nginx as the server (1 worker each, 1-byte body, weft load --clients 50, {a.secs} s)\n")
    print("| server | connections | replies/s | server CPU µs/reply | errors |")
    print("| --- | --- | ---: | ---: | ---: |")
    for (name, close), r in rows.items():
        print(f"| {name} | {'one per request (--close)' if close else 'keep-alive'} | {med(r, 'rate'):.0f} | "
              f"{us_per(r, 'ncpu'):.2f} | {med(r, 'errors'):.0f} |")


def timed(cmd, nginx, limit):
    """Run cmd; return (stdout, client cpu seconds, nginx cpu seconds, wall).
    A tool that runs past `limit` seconds is killed (raises Hung)."""
    n0 = nginx.cpu()
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    killer = threading.Timer(limit, p.kill)
    killer.start()
    # Outputs are small: read to EOF, then reap with wait4 for the rusage.
    out = p.stdout.read()
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    killer.cancel()
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    if wall >= limit:
        print(f"# {cmd[0]} hung ({' '.join(cmd[1:])}); killed after {limit} s", file=sys.stderr)
        raise Hung(cmd[0])
    if p.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({p.returncode}): {err.decode()[-500:]}")
    return out.decode(), ru.ru_utime + ru.ru_stime, nginx.cpu() - n0, wall


def run_wrk(nginx, secs, close=False, script=None):
    cmd = ["wrk", "-t1", "-c50", f"-d{secs}s", nginx.url]
    if close:
        cmd[1:1] = ["-H", "Connection: close"]
    if script:
        cmd[1:1] = ["-s", script]
    out, cpu, ncpu, _ = timed(cmd, nginx, secs * 3 + 30)
    total = int(re.search(r"(\d+) requests in", out).group(1))
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    errs = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock = re.search(r"Socket errors: (.*)", out)
    return dict(rate=rate, replies=total, cpu=cpu, ncpu=ncpu,
                errors=(int(errs.group(1)) if errs else 0), note=(sock.group(1) if sock else ""))


def run_weft(nginx, args):
    with tempfile.NamedTemporaryFile(suffix=".json") as j:
        out, cpu, ncpu, _ = timed([WEFT, "load", nginx.url, "--quiet", "--json", j.name] + args, nginx, 120)
        with open(j.name) as f:
            d = json.load(f)
    replies = d["replies"]["total"]
    return dict(
        rate=d["reply_rate"]["overall"],
        req_rate=d["requests"] / d["duration_s"],
        replies=replies,
        cpu=cpu,
        ncpu=ncpu,
        errors=d["errors"]["total"],
        samples=d["reply_rate"]["samples"],
        json_cpu=d["cpu"]["user_s"] + d["cpu"]["sys_s"],
    )


def run_httperf(nginx, args):
    # No --hog: with it httperf binds ports itself, and with TIME_WAIT sockets
    # left by earlier runs it was seen spinning forever looking for one.
    cmd = ["httperf", "--server", "127.0.0.1", "--port", str(nginx.port), "--uri", "/one.bin"] + args
    try:
        out, cpu, ncpu, _ = timed(cmd, nginx, 120)
    except Hung:
        return None
    m = re.search(r"Total: connections (\d+) requests (\d+) replies (\d+) test-duration ([\d.]+) s", out)
    conns, reqs, replies, dur = int(m.group(1)), int(m.group(2)), int(m.group(3)), float(m.group(4))
    errs = int(re.search(r"Errors: total (\d+)", out).group(1))
    avg = re.search(r"Reply rate \[replies/s\]: min [\d.]+ avg ([\d.]+)", out)
    return dict(rate=replies / dur, req_rate=reqs / dur, replies=replies, cpu=cpu, ncpu=ncpu,
                errors=errs, httperf_avg=float(avg.group(1)) if avg else None)


def ok(rows):
    return [r for r in rows if r is not None] or [dict(rate=float("nan"), req_rate=float("nan"), replies=1,
                                                        cpu=float("nan"), ncpu=float("nan"), errors=float("nan"),
                                                        samples=[])]


def med(rows, key):
    return statistics.median(r[key] for r in ok(rows))


def us_per(rows, key):
    return statistics.median(r[key] * 1e6 / max(r["replies"], 1) for r in ok(rows))


def version(cmd):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        return (p.stdout + p.stderr).strip().splitlines()[0]
    except Exception as e:  # noqa: BLE001
        return f"unknown ({e})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--secs", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="1 repetition of 3 s, a short sweep")
    ap.add_argument("--rates", default="1000,2000,5000,10000,15000,20000")
    ap.add_argument("--rates10", default="15000,20000,25000",
                    help="rates also swept over HTTP/1.0, where the server closes first")
    ap.add_argument("--rates-local", default="15000,20000",
                    help="rates swept with weft load --local-addrs 127.0.0.2-127.0.0.17 (httperf as usual)")
    ap.add_argument("--only", choices=["all", "origin", "sweep"], default="all",
                    help="origin: only compare weft origin's CPU per reply with nginx's; sweep: only the sweep")
    a = ap.parse_args()
    if a.quick:
        a.reps, a.secs, a.rates, a.rates10, a.rates_local = 1, 3, "1000,5000", "10000", "10000"
    if not os.path.exists(WEFT):
        subprocess.run(["cargo", "build", "--release"], cwd=ROOT, check=True)
    for tool in ("nginx", "wrk", "httperf"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is not installed (apt-get install {tool})")
    if a.only == "origin":
        origin_vs_nginx(a)
        return
    nginx = Nginx()
    thinks = [10, 2]
    lua = {}
    for t in thinks:
        lua[t] = os.path.join(nginx.dir, f"delay{t}.lua")
        with open(lua[t], "w") as f:
            f.write(f"function delay()\n  return {t}\nend\n")
    try:
        eq = {t: {"wrk": [], "weft": [], "httperf": []} for t in thinks}
        ka = {"wrk": [], "weft": [], "httperf": []}
        cl = {"wrk": [], "weft": []}
        for rep in range(a.reps if a.only == "all" else 0):
            print(f"# repetition {rep + 1}/{a.reps}", file=sys.stderr)
            for t in thinks:
                calls = int(a.secs * 1000 / t)
                eq[t]["wrk"].append(run_wrk(nginx, a.secs, script=lua[t]))
                eq[t]["weft"].append(run_weft(nginx, ["--clients", "50", "--think", f"{t}ms",
                                                      "--duration", f"{a.secs}s"]))
                eq[t]["httperf"].append(run_httperf(nginx, [f"--wsess=50,{calls},{t / 1000}", "--rate", "1000",
                                                            "--timeout", "10"]))
            ka["wrk"].append(run_wrk(nginx, a.secs))
            ka["weft"].append(run_weft(nginx, ["--clients", "50", "--duration", f"{a.secs}s"]))
            # 50 connections of back-to-back calls, sized to last about as long.
            calls = max(100, int(ka["wrk"][-1]["rate"] * a.secs / 50))
            ka["httperf"].append(run_httperf(nginx, ["--num-conns", "50", "--rate", "1000",
                                                     "--num-calls", str(calls), "--timeout", "10"]))
            cl["wrk"].append(run_wrk(nginx, a.secs, close=True))
            cl["weft"].append(run_weft(nginx, ["--clients", "50", "--close", "--duration", f"{a.secs}s"]))
        sweep = []
        for r in [int(x) for x in a.rates.split(",") if x]:
            secs = max(3, a.secs // 2)
            rows_w, rows_h = [], []
            for rep in range(a.reps):
                print(f"# sweep {r}/s repetition {rep + 1}", file=sys.stderr)
                rows_w.append(run_weft(nginx, ["--rate", str(r), "--duration", f"{secs}s", "--timeout", "5s"]))
                rows_h.append(run_httperf(nginx, ["--rate", str(r), "--num-conns", str(r * secs), "--timeout", "5"]))
            sweep.append((r, secs, rows_w, rows_h, ""))
        for r in [int(x) for x in a.rates10.split(",") if x]:
            secs = max(3, a.secs // 2)
            rows_w, rows_h = [], []
            for rep in range(a.reps):
                print(f"# sweep {r}/s HTTP/1.0 repetition {rep + 1}", file=sys.stderr)
                rows_w.append(run_weft(nginx, ["--rate", str(r), "--duration", f"{secs}s", "--timeout", "5s",
                                               "--http10"]))
                rows_h.append(run_httperf(nginx, ["--rate", str(r), "--num-conns", str(r * secs), "--timeout", "5",
                                                  "--http-version=1.0"]))
            sweep.append((r, secs, rows_w, rows_h, " (HTTP/1.0)"))
        for r in [int(x) for x in a.rates_local.split(",") if x]:
            secs = max(3, a.secs // 2)
            rows_w, rows_h = [], []
            for rep in range(a.reps):
                print(f"# sweep {r}/s --local-addrs repetition {rep + 1}", file=sys.stderr)
                rows_w.append(run_weft(nginx, ["--rate", str(r), "--duration", f"{secs}s", "--timeout", "5s",
                                               "--local-addrs", "127.0.0.2-127.0.0.17"]))
                rows_h.append(run_httperf(nginx, ["--rate", str(r), "--num-conns", str(r * secs), "--timeout", "5"]))
            sweep.append((r, secs, rows_w, rows_h, " (weft --local-addrs)"))
    finally:
        nginx.stop()

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    print(f"Machine: {os.cpu_count()} CPUs, {os.uname().release}; shared with other work, "
          f"median of {a.reps} repetition(s), tools interleaved within each.")
    print(f"Versions: {version(['nginx', '-v'])}; {version(['wrk', '-v'])}; "
          f"httperf {version(['httperf', '--version'])}; weft {commit}.")
    print(f"Server: nginx anchor `nginx_static_w1.conf` (1 worker) serving a 1-byte file on 127.0.0.1.\n")
    if a.only == "sweep":
        print_sweep(sweep)
        return
    print(f"### Equal load: 50 keep-alive connections with a think time, {a.secs} s\n")
    print("| think | client | command | replies/s | vs wrk | client CPU µs/reply | weft / wrk CPU | errors |")
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for t in thinks:
        cmds = {
            "wrk": f"wrk -t1 -c50 -d{a.secs}s -s delay.lua URL  (delay() returns {t})",
            "weft": f"weft load URL --clients 50 --think {t}ms --duration {a.secs}s",
            "httperf": f"httperf --wsess=50,{int(a.secs * 1000 / t)},{t / 1000} --rate 1000",
        }
        base = med(eq[t]["wrk"], "rate")
        for k in ("wrk", "weft", "httperf"):
            rows = eq[t][k]
            ratio = ""
            if k == "weft":
                ratio = "{:.3f}".format(statistics.median(
                    w["cpu"] / w["replies"] / (x["cpu"] / x["replies"]) for w, x in zip(rows, eq[t]["wrk"])))
            print(f"| {t} ms | {k} | `{cmds[k]}` | {med(rows, 'rate'):.0f} | {med(rows, 'rate') / base:.3f} | "
                  f"{us_per(rows, 'cpu'):.2f} | {ratio} | {med(rows, 'errors'):.0f} |")
    print()
    print(f"### Keep-alive, 50 connections, {a.secs} s (server-bound)\n")
    print("| client | command | replies/s | vs wrk | client CPU µs/reply | nginx CPU µs/reply | errors |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    base = med(ka["wrk"], "rate")
    cmds = {
        "wrk": f"wrk -t1 -c50 -d{a.secs}s URL",
        "weft": f"weft load URL --clients 50 --duration {a.secs}s",
        "httperf": "httperf --num-conns 50 --rate 1000 --num-calls N (N = wrk rate × secs / 50)",
    }
    for k in ("wrk", "weft", "httperf"):
        rows = ka[k]
        print(f"| {k} | `{cmds[k]}` | {med(rows, 'rate'):.0f} | {med(rows, 'rate') / base:.3f} | "
              f"{us_per(rows, 'cpu'):.2f} | {us_per(rows, 'ncpu'):.2f} | {med(rows, 'errors'):.0f} |")
    ratio = statistics.median(w["cpu"] / w["replies"] / (k["cpu"] / k["replies"])
                              for w, k in zip(ka["weft"], ka["wrk"]))
    print(f"\nweft load CPU per reply / wrk's, median of per-repetition ratios: **{ratio:.3f}**\n")
    print(f"### One request per connection, 50 closed-loop clients, {a.secs} s\n")
    print("| client | command | replies/s | vs wrk | client CPU µs/reply | nginx CPU µs/reply | errors |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    base = med(cl["wrk"], "rate")
    cmds = {
        "wrk": f"wrk -t1 -c50 -d{a.secs}s -H 'Connection: close' URL",
        "weft": f"weft load URL --clients 50 --close --duration {a.secs}s",
    }
    for k in ("wrk", "weft"):
        rows = cl[k]
        print(f"| {k} | `{cmds[k]}` | {med(rows, 'rate'):.0f} | {med(rows, 'rate') / base:.3f} | "
              f"{us_per(rows, 'cpu'):.2f} | {us_per(rows, 'ncpu'):.2f} | {med(rows, 'errors'):.0f} |")
    ratio = statistics.median(w["cpu"] / w["replies"] / (k["cpu"] / k["replies"])
                              for w, k in zip(cl["weft"], cl["wrk"]))
    print(f"\nweft load CPU per reply / wrk's: **{ratio:.3f}**\n")
    print_sweep(sweep)


def print_sweep(sweep):
    print("### Open-loop sweep: a new connection per request (httperf style)\n")
    print("`weft load URL --rate R --duration Ds --timeout 5s` and "
          "`httperf --rate R --num-conns R·D --timeout 5`, same run; HTTP/1.1, the client closes each "
          "connection after its reply (httperf's way). Rows marked HTTP/1.0 add `--http10` / "
          "`--http-version=1.0`: the server closes first, so the client keeps no TIME_WAIT ports. Rows "weft "
          "--local-addrs" spread weft's connections over 16 source addresses (httperf unchanged).\n")
    print("| target req/s | weft achieved | weft / target | weft per-second min–max | weft errors | "
          "httperf achieved | httperf / target | httperf errors | nginx CPU (share of a core) |")
    print("| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for r, secs, rw, rh, label in sweep:
        wr = med(rw, "req_rate")
        hr = med(rh, "req_rate")
        mins = statistics.median(min(x["samples"]) if x["samples"] else 0 for x in ok(rw))
        maxs = statistics.median(max(x["samples"]) if x["samples"] else 0 for x in ok(rw))
        share = statistics.median(x["ncpu"] / secs for x in ok(rw))
        hung = sum(1 for x in rh if x is None)
        print(f"| {r}{label} | {wr:.1f} | {wr / r:.4f} | {mins:.0f}–{maxs:.0f} | {med(rw, 'errors'):.0f} | "
              f"{hr:.1f} | {hr / r:.4f} | {med(rh, 'errors'):.0f}{f' ({hung} hung)' if hung else ''} | {share:.2f} |")


if __name__ == "__main__":
    main()
