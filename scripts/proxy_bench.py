#!/usr/bin/env python3
"""Reverse-proxy miss cost: weft proxy (splice / copy) against HAProxy (splice / copy).

Starts an nginx origin (the anchor `nginx_origin.conf`: `/nc/NAME` answers
with `Cache-Control: no-store`, so every request is a miss), HAProxy with and
without splicing (the anchor configs) and `weft proxy` with `--splice on` and
`--splice off`, each with one worker, on free loopback ports. For each object
size and each proxy it runs `wrk -t1 -c50` through the proxy and samples the
CPU time (utime + stime from /proc) of the proxy's process tree, of the origin's
process tree, and of wrk itself, and divides by completed requests.

Rounds are interleaved (every proxy once per size per round) so that drift in
the machine's load hits all of them alike; the table shows the median of the
rounds. Cost moved from the proxy to the origin or the client is not a saving:
all three columns are printed.

    scripts/proxy_bench.py                       # 64 KiB, 100 KiB, 1 MiB; 3 rounds of 10 s
    scripts/proxy_bench.py --sizes 1MiB --rounds 5 --duration 5
    scripts/proxy_bench.py --only weft-splice,haproxy-splice --json out.json
    scripts/proxy_bench.py --baseline /path/to/old/weft  # also base-splice, base-copy
    sudo scripts/proxy_bench.py --netns --congestion reno  # own loopback, no pacing

With `--netns` (root) everything runs in a new network namespace: its own
loopback, so other traffic on the machine neither collides on ports nor shows in
the namespace's counters, and `--congestion` can change the namespace's default
TCP congestion control. The congestion control matters: with BBR (the default
on weft's machines) most of the CPU of a 1 MiB transfer goes to pacing timers,
charged to whichever process paces — see docs/proxy.md, "Where a transfer
waits".

Needs nginx, haproxy and wrk (apt-get install nginx-light haproxy wrk) and a
release build of weft (`cargo build --release`, or `--weft PATH`).
"""

import argparse
import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

TICK = os.sysconf("SC_CLK_TCK")

NGINX_ORIGIN = """
worker_processes 1;
daemon off;
pid @RUN@/nginx_origin.pid;
error_log @RUN@/nginx_origin.err warn;
worker_rlimit_nofile 30000;
events { worker_connections 20000; use epoll; }
http {
    access_log off;
    default_type application/octet-stream;
    sendfile on; tcp_nopush on; tcp_nodelay on;
    keepalive_timeout 300s;
    keepalive_requests 10000000;
    open_file_cache max=1000 inactive=60s;
    client_body_temp_path @RUN@/ngo_body;
    proxy_temp_path @RUN@/ngo_proxy;
    fastcgi_temp_path @RUN@/ngo_fcgi;
    uwsgi_temp_path @RUN@/ngo_uwsgi;
    scgi_temp_path @RUN@/ngo_scgi;
    server {
        listen 127.0.0.1:@ORIGIN_PORT@ backlog=4096;
        root @WWW@;
        location /c/  { alias @WWW@/; expires 1h; }
        location /nc/ { alias @WWW@/; add_header Cache-Control "no-store"; }
    }
}
"""

HAPROXY = """
global
    nbthread 1
    maxconn 4000
    pidfile @RUN@/haproxy-@NAME@.pid
defaults
    mode http
    timeout connect 5s
    timeout client 300s
    timeout server 300s
    option http-keep-alive
    http-reuse always
    no log
@SPLICE@
frontend fe
    bind 127.0.0.1:@PORT@
    default_backend be
backend be
    server origin 127.0.0.1:@ORIGIN_PORT@ maxconn 1000
"""

SIZES = {"KiB": 1024, "MiB": 1024 * 1024, "B": 1}


def parse_size(s):
    m = re.fullmatch(r"(\d+)\s*(B|KiB|MiB)?", s.strip())
    if not m:
        raise SystemExit(f"proxy_bench: bad size `{s}` (e.g. 64KiB, 1MiB)")
    return int(m.group(1)) * SIZES[m.group(2) or "B"]


def size_name(n):
    if n % (1024 * 1024) == 0:
        return f"{n // (1024 * 1024)}MiB"
    if n % 1024 == 0:
        return f"{n // 1024}KiB"
    return f"{n}B"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise SystemExit(f"proxy_bench: {what} exited with status {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"proxy_bench: {what} did not listen on port {port}")


def tree(pid):
    """pid and all its descendants (from /proc)."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        ppid = int(st[st.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_seconds(pid):
    """utime + stime of a process tree, in seconds."""
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                st = f.read()
        except OSError:
            continue
        fields = st[st.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / TICK


class Server:
    def __init__(self, name, argv, port, env=None, stderr=None):
        self.name, self.port = name, port
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=stderr or subprocess.DEVNULL, env=env, start_new_session=True
        )
        wait_port(port, self.proc, name)

    def cpu(self):
        return cpu_seconds(self.proc.pid)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run_wrk(url, duration, conns):
    """Run wrk; returns (requests, wrk cpu seconds, stdout)."""
    argv = ["wrk", "-t1", f"-c{conns}", f"-d{duration}s", url]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"proxy_bench: wrk failed ({p.returncode}):\n{out}")
    m = re.search(r"(\d+) requests in", out)
    if not m:
        raise SystemExit(f"proxy_bench: cannot read wrk's output:\n{out}")
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errs = re.search(r"Socket errors: (.*)", out)
    if bad:
        raise SystemExit(f"proxy_bench: {url}: {bad.group(0)}")
    if errs:
        print(f"  warning: {url}: {errs.group(0)}", file=sys.stderr)
    return int(m.group(1)), ru.ru_utime + ru.ru_stime, out


def enter_netns(a):
    """Re-run this script in a new network namespace with its loopback up."""
    if os.geteuid() != 0:
        raise SystemExit("proxy_bench: --netns needs root (unshare -n)")
    for tool in ("unshare", "ip"):
        if not shutil.which(tool):
            raise SystemExit(f"proxy_bench: --netns needs `{tool}`")
    env = dict(os.environ, PROXY_BENCH_IN_NETNS="1")
    argv = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:]
    script = 'ip link set lo up && exec "$@"'
    os.execvpe("unshare", ["unshare", "-n", "--", "sh", "-c", script, "sh"] + argv, env)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="64KiB,100KiB,1MiB", help="object sizes (comma-separated)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is reported")
    ap.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    ap.add_argument("--warmup", type=int, default=1, help="seconds of unmeasured wrk before each run")
    ap.add_argument("--conns", type=int, default=50, help="wrk connections")
    ap.add_argument("--weft", default=None, help="weft binary (default: target/release/weft)")
    ap.add_argument("--baseline", default=None, help="another weft binary, run as base-splice and base-copy")
    ap.add_argument(
        "--only",
        default=None,
        help="proxies to run (comma-separated; default haproxy-splice,haproxy-copy,weft-splice,weft-copy"
        " and base-splice,base-copy with --baseline)",
    )
    ap.add_argument("--netns", action="store_true", help="run in a new network namespace (root)")
    ap.add_argument("--congestion", default=None, help="with --netns: the namespace's TCP congestion control")
    ap.add_argument("--weft-arg", action="append", default=[], help="extra argument for weft proxy (repeatable)")
    ap.add_argument("--json", default=None, help="write every sample and the medians to this file")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    a = ap.parse_args()

    if a.congestion and not a.netns:
        raise SystemExit("proxy_bench: --congestion needs --netns (it changes the namespace's default)")
    if a.netns and os.environ.get("PROXY_BENCH_IN_NETNS") != "1":
        enter_netns(a)
    if a.congestion:
        try:
            with open("/proc/sys/net/ipv4/tcp_congestion_control", "w") as f:
                f.write(a.congestion)
        except OSError as e:
            raise SystemExit(f"proxy_bench: --congestion {a.congestion}: {e}")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    weft = a.weft or os.path.join(root, "target", "release", "weft")
    known = ["haproxy-splice", "haproxy-copy", "weft-splice", "weft-copy"]
    if a.baseline:
        known += ["base-splice", "base-copy"]
    names = [n.strip() for n in (a.only or ",".join(known)).split(",") if n.strip()]
    for n in names:
        if n not in known:
            raise SystemExit(f"proxy_bench: --only: unknown proxy `{n}` (known: {', '.join(known)})")
    if a.baseline and not os.access(a.baseline, os.X_OK):
        raise SystemExit(f"proxy_bench: --baseline {a.baseline}: not an executable")
    needs = ["nginx", "wrk"] + (["haproxy"] if any(n.startswith("haproxy") for n in names) else [])
    for tool in needs:
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            raise SystemExit(f"proxy_bench: `{tool}` not found (apt-get install nginx-light haproxy wrk)")
    if any(n.startswith(("weft", "base")) for n in names) and not os.access(weft, os.X_OK):
        raise SystemExit(f"proxy_bench: {weft} missing: run `cargo build --release` or pass --weft")
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    if a.rounds < 1 or a.duration < 1:
        raise SystemExit("proxy_bench: --rounds and --duration must be at least 1")

    scratch = tempfile.mkdtemp(prefix="proxy_bench.")
    os.chmod(scratch, 0o755)  # nginx's worker runs as nobody
    www, run = os.path.join(scratch, "www"), os.path.join(scratch, "run")
    os.makedirs(www)
    os.makedirs(run)
    for n in sizes:
        with open(os.path.join(www, size_name(n)), "wb") as f:
            f.write(os.urandom(n))

    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    servers = {}
    weft_stats = {}
    try:
        oport = free_port()
        conf = os.path.join(run, "nginx_origin.conf")
        with open(conf, "w") as f:
            f.write(
                NGINX_ORIGIN.replace("@RUN@", run).replace("@WWW@", www).replace("@ORIGIN_PORT@", str(oport))
            )
        origin = Server("nginx origin", [nginx, "-c", conf, "-p", run], oport)
        for name in names:
            port = free_port()
            if name.startswith("haproxy"):
                splice = "    option splice-response\n    option splice-auto" if name.endswith("splice") else ""
                cfg = os.path.join(run, f"{name}.cfg")
                with open(cfg, "w") as f:
                    f.write(
                        HAPROXY.replace("@RUN@", run)
                        .replace("@NAME@", name)
                        .replace("@SPLICE@", splice)
                        .replace("@PORT@", str(port))
                        .replace("@ORIGIN_PORT@", str(oport))
                    )
                servers[name] = Server(name, [haproxy, "-f", cfg, "-db"], port)
            else:
                mode = "on" if name.endswith("splice") else "off"
                err = open(os.path.join(run, f"{name}.stderr"), "w")
                binary = a.baseline if name.startswith("base") else weft
                argv = [binary, "proxy", "--listen", f"127.0.0.1:{port}", "--upstream", f"127.0.0.1:{oport}"]
                argv += ["--workers", "1", "--splice", mode, "--stats-on-exit"] + a.weft_arg
                servers[name] = Server(name, argv, port, stderr=err)

        cc = open("/proc/sys/net/ipv4/tcp_congestion_control").read().strip()
        print(
            f"congestion control {cc}; load average at start {open('/proc/loadavg').read().split()[:3]}",
            file=sys.stderr,
        )
        samples = []
        for r in range(a.rounds):
            for n in sizes:
                for name in names:
                    s = servers[name]
                    url = f"http://127.0.0.1:{s.port}/nc/{size_name(n)}"
                    if a.warmup:
                        run_wrk(url, a.warmup, a.conns)
                    p0, o0 = s.cpu(), origin.cpu()
                    reqs, client, _ = run_wrk(url, a.duration, a.conns)
                    p1, o1 = s.cpu(), origin.cpu()
                    row = {
                        "round": r + 1,
                        "size": n,
                        "proxy": name,
                        "requests": reqs,
                        "proxy_us": (p1 - p0) / reqs * 1e6,
                        "origin_us": (o1 - o0) / reqs * 1e6,
                        "client_us": client / reqs * 1e6,
                        "rps": reqs / a.duration,
                    }
                    samples.append(row)
                    print(
                        f"round {r + 1} {size_name(n):>7} {name:<15} {reqs:>8} req  proxy {row['proxy_us']:8.1f}"
                        f"  origin {row['origin_us']:8.1f}  client {row['client_us']:8.1f} µs/req",
                        file=sys.stderr,
                    )
    finally:
        for name, s in servers.items():
            s.stop()
            if name.startswith(("weft", "base")):
                try:
                    txt = open(os.path.join(run, f"{name}.stderr")).read()
                    start = txt.find('{"total"')
                    if start >= 0:
                        weft_stats[name] = json.JSONDecoder().raw_decode(txt[start:])[0]
                except (OSError, ValueError):
                    pass
        if "origin" in locals():
            origin.stop()
        if a.keep:
            print(f"scratch kept in {scratch}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)

    med = {}
    for n in sizes:
        for name in names:
            rows = [x for x in samples if x["size"] == n and x["proxy"] == name]
            med[(n, name)] = {k: statistics.median(x[k] for x in rows) for k in ("proxy_us", "origin_us", "client_us", "rps")}

    cc = open("/proc/sys/net/ipv4/tcp_congestion_control").read().strip()
    print(
        f"\nmedian of {a.rounds} x wrk -t1 -c{a.conns} -d{a.duration}s, /nc/ (no-store) misses, one worker each,"
        f" congestion control {cc}{' (own netns)' if a.netns else ''}; CPU µs per request"
    )
    print(f"{'size':>7} {'proxy':<15} {'proxy µs/req':>12} {'origin':>8} {'client':>8} {'sum':>8} {'req/s':>8}")
    for n in sizes:
        for name in names:
            m = med[(n, name)]
            tot = m["proxy_us"] + m["origin_us"] + m["client_us"]
            print(
                f"{size_name(n):>7} {name:<15} {m['proxy_us']:12.1f} {m['origin_us']:8.1f} {m['client_us']:8.1f}"
                f" {tot:8.1f} {m['rps']:8.0f}"
            )
    print("\nratios of medians (proxy CPU per request)")
    for n in sizes:
        parts = []
        if (n, "weft-splice") in med and (n, "haproxy-splice") in med:
            parts.append(
                f"weft-splice / haproxy-splice {med[(n, 'weft-splice')]['proxy_us'] / med[(n, 'haproxy-splice')]['proxy_us']:.2f}"
            )
        if (n, "weft-copy") in med and (n, "haproxy-copy") in med:
            parts.append(
                f"weft-copy / haproxy-copy {med[(n, 'weft-copy')]['proxy_us'] / med[(n, 'haproxy-copy')]['proxy_us']:.2f}"
            )
        if (n, "weft-splice") in med and (n, "weft-copy") in med:
            saving = 1 - med[(n, "weft-splice")]["proxy_us"] / med[(n, "weft-copy")]["proxy_us"]
            parts.append(f"weft splice saves {saving * 100:.0f} % vs copy")
        if (n, "haproxy-splice") in med and (n, "haproxy-copy") in med:
            saving = 1 - med[(n, "haproxy-splice")]["proxy_us"] / med[(n, "haproxy-copy")]["proxy_us"]
            parts.append(f"haproxy splice saves {saving * 100:.0f} %")
        if (n, "base-splice") in med and (n, "haproxy-splice") in med:
            parts.append(
                f"base-splice / haproxy-splice {med[(n, 'base-splice')]['proxy_us'] / med[(n, 'haproxy-splice')]['proxy_us']:.2f}"
            )
        if (n, "base-splice") in med and (n, "base-copy") in med:
            saving = 1 - med[(n, "base-splice")]["proxy_us"] / med[(n, "base-copy")]["proxy_us"]
            parts.append(f"base splice saves {saving * 100:.0f} %")
        print(f"{size_name(n):>7}: " + "; ".join(parts))
    if weft_stats:
        print("\nweft system calls per request (whole run, from --stats-on-exit)")
        for name, st in weft_stats.items():
            tot = st.get("total", {})
            reqs = max(tot.get("requests", 0), 1)
            calls = tot.get("syscalls", {})
            line = ", ".join(f"{k} {v / reqs:.2f}" for k, v in sorted(calls.items(), key=lambda kv: -kv[1]) if v)
            print(f"  {name}: {line}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(
                {
                    "config": vars(a),
                    "samples": samples,
                    "medians": [{"size": n, "proxy": name, **m} for (n, name), m in med.items()],
                    "weft_stats": weft_stats,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(20000, hard), hard))
    main()
