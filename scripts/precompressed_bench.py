#!/usr/bin/env python3
"""Precompressed sidecars, weft against nginx's gzip_static: server CPU per
request for a script file whose `.gz` sidecar exists, asked for by a client
that accepts gzip.

Three servers on one worker each, the same directory: `weft serve
--precompressed gzip`, `weft serve` (sends the file itself), and nginx with
`gzip_static on`. `wrk -t1 -c50` keep-alive with `Accept-Encoding: gzip,
deflate, br`, 1 s of warm-up, then a measured run; rounds interleaved in
rotated order; the server's CPU (utime + stime of all its threads, from
/proc) per request; medians.

    python3 scripts/precompressed_bench.py [--weft BIN] [--size 100KiB] [--rounds 3] [--duration 5]

Needs wrk, nginx and gzip. Loopback only; every run is bounded by its
duration.
"""

import argparse
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from herd import free_port  # noqa: E402
from seek import size_arg  # noqa: E402

NGINX_CONF = """worker_processes 1;
daemon off;
master_process off;
pid {run}/nginx.pid;
error_log {run}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    types {{ text/javascript js; }}
    server {{
        listen 127.0.0.1:{port};
        root {run}/www;
        gzip_static on;
        gzip_vary on;
    }}
}}
"""

WORDS = ["function", "return", "const", "let", "if", "else", "for", "while", "this", "document", "window",
         "value", "length", "push", "map", "filter", "reduce", "console", "log", "null", "undefined"]


def script_text(size, seed=1):
    """`size` bytes of script-like text (compresses about as real code does)."""
    rng = random.Random(seed)
    out, n = [], 0
    while n < size:
        line = "  " + " ".join(rng.choice(WORDS) for _ in range(8)) + f"({rng.randint(0, 9999)});\n"
        out.append(line)
        n += len(line)
    return "".join(out)[:size]


def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def wait_listening(port, proc):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server on port {port} exited ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on port {port}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--weft", default="target/release/weft")
    ap.add_argument("--size", type=size_arg, default=100 << 10, help="the script file's size (100KiB)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5, help="seconds per measured wrk run")
    a = ap.parse_args()
    for tool in ("wrk", "nginx", "gzip"):
        if not shutil.which(tool):
            raise SystemExit(f"precompressed_bench: needs {tool}")
    run = tempfile.mkdtemp(prefix="precompressed-")
    www = os.path.join(run, "www")
    os.makedirs(www)
    with open(os.path.join(www, "app.js"), "w") as f:
        f.write(script_text(a.size))
    subprocess.run(["gzip", "-k", "-9", os.path.join(www, "app.js")], check=True)
    gz_size = os.path.getsize(os.path.join(www, "app.js.gz"))
    procs = {}
    try:
        for name in ("weft --precompressed", "weft (the file)", "nginx gzip_static"):
            port = free_port()
            if name.startswith("nginx"):
                conf = os.path.join(run, "nginx.conf")
                with open(conf, "w") as f:
                    f.write(NGINX_CONF.format(run=run, port=port))
                argv = ["nginx", "-c", conf, "-p", run]
            else:
                extra = ["--precompressed", "gzip"] if "precompressed" in name else []
                argv = [a.weft, "serve", www, "--listen", f"127.0.0.1:{port}", "--workers", "1", *extra]
            p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs[name] = (p, port)
            wait_listening(port, p)
        print(f"app.js {a.size} bytes, app.js.gz {gz_size} bytes; wrk -t1 -c50 -d{a.duration:g}s, "
              f"Accept-Encoding: gzip, deflate, br")
        names = list(procs)
        tick = os.sysconf("SC_CLK_TCK")
        results = {n: [] for n in names}
        header = ["-H", "Accept-Encoding: gzip, deflate, br"]
        for r in range(a.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                p, port = procs[name]
                url = f"http://127.0.0.1:{port}/app.js"
                subprocess.run(["wrk", "-t1", "-c50", "-d1s", *header, url], capture_output=True)
                c0 = cpu_ticks(p.pid)
                out = subprocess.run(["wrk", "-t1", "-c50", f"-d{a.duration:g}s", *header, url],
                                     capture_output=True, text=True).stdout
                c1 = cpu_ticks(p.pid)
                reqs = int(re.search(r"(\d+) requests in", out).group(1))
                us = (c1 - c0) / tick / max(reqs, 1) * 1e6
                results[name].append((us, reqs / a.duration))
                print(f"  round {r + 1} {name:22s} {us:7.2f} µs/req {reqs / a.duration:9.0f} req/s", flush=True)
        print("medians:")
        for name in names:
            us = sorted(x[0] for x in results[name])[len(results[name]) // 2]
            rps = sorted(x[1] for x in results[name])[len(results[name]) // 2]
            print(f"  {name:22s} {us:7.2f} µs/req {rps:9.0f} req/s")
    finally:
        for p, _ in procs.values():
            p.terminate()
            p.wait()
        shutil.rmtree(run, ignore_errors=True)


if __name__ == "__main__":
    main()
