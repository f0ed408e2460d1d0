#!/usr/bin/env python3
"""Thundering herd through the caching reverse proxy: N clients at once ask
for one object the cache lacks, from an origin that thinks before each
answer (`weft origin --think`), for a few cold objects in turn. Prints how
many requests reached the origin and the clients' latencies, for weft (and
a baseline build, and the default without `--collapse`, to compare).

With `--stale`, the objects are cached first and have gone stale
(`max-age=1`) when the herd comes: weft with `--stale-while-revalidate`
against the default, which revalidates every request in the foreground.

The anchor (when nginx is installed) is nginx with `proxy_cache`, in the
same run: `proxy_cache_lock on` for the cold herd, `proxy_cache_use_stale
updating` with `proxy_cache_background_update on` for the stale one.

    python3 scripts/herd.py [--weft BIN] [--baseline BIN] [--clients 50] [--objects 5] [--stale] [--no-nginx]

Loopback only; every run is bounded (one request per client per object).
"""

import argparse
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time

_NGINX_PROXY_CACHE = """worker_processes 1;
daemon off;
user root;
pid {run}/nginx.pid;
error_log {run}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {run}/body;
    proxy_temp_path {run}/proxy;
    fastcgi_temp_path {run}/fcgi;
    uwsgi_temp_path {run}/uwsgi;
    scgi_temp_path {run}/scgi;
    proxy_cache_path {run}/cache levels=1:2 keys_zone=c:10m max_size=%MAX_SIZE% use_temp_path=off;
    upstream origin {{ server 127.0.0.1:{origin}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache c;
            %CACHE%
        }}
    }}
}}
"""


def nginx_proxy_cache(max_size, directives):
    """An nginx configuration (with {run}, {origin} and {port} to fill in,
    for `start_nginx`): one worker, `proxy_cache` of `max_size` in front of
    the origin over keep-alive connections, and these location
    `directives` (lines, no braces)."""
    lines = "\n            ".join(directives)
    return _NGINX_PROXY_CACHE.replace("%MAX_SIZE%", max_size).replace("%CACHE%", lines)


NGINX_CONF = nginx_proxy_cache("256m", [
    "proxy_cache_lock on;",
    "proxy_cache_lock_timeout 5s;",
    "proxy_cache_revalidate on;",
    "proxy_cache_use_stale updating;",
    "proxy_cache_background_update on;",
])


def start(argv):
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        line = p.stdout.readline().decode()
        m = re.search(r"listening on [\d.]+:(\d+)", line)
        if m:
            return p, int(m.group(1))
    p.kill()
    raise SystemExit(f"{argv[0]} {argv[1]} never listened")


def get(port, path):
    """One request on its own connection: the reply's bytes."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n".encode())
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    return got


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nginx(origin_port, run, template=NGINX_CONF):
    """nginx with proxy_cache in front of the origin: (process, port).
    `template`: the configuration, with {run}, {origin} and {port}."""
    port = free_port()
    conf = os.path.join(run, "nginx.conf")
    with open(conf, "w") as f:
        f.write(template.format(run=run, origin=origin_port, port=port))
    p = subprocess.Popen(["nginx", "-c", conf, "-p", run], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return p, port
        except OSError:
            time.sleep(0.05)
    p.kill()
    raise SystemExit("nginx never listened")


def herd(weft, proxy, clients, objects, think, stale=False):
    """`proxy`: weft proxy's extra flags, or "nginx" for the anchor."""
    cc = ["--cache-control", "max-age=1"] if stale else []
    o, op = start([weft, "origin", "--listen", "127.0.0.1:0", "--think", think, "--stats-on-exit", *cc])
    run = tempfile.mkdtemp(prefix="herd-")
    if proxy == "nginx":
        p, pp = start_nginx(op, run)
    else:
        argv = [weft, "proxy", "--listen", "127.0.0.1:0", "--upstream", f"127.0.0.1:{op}", "--workers", "2"]
        p, pp = start(argv + proxy)
    latencies, failed = [], []
    warm = 0
    try:
        if stale:
            # Cached first, then stale (max-age=1) when the herd comes.
            for k in range(objects):
                get(pp, f"/size/20000/herd{k}")
            warm = objects
            time.sleep(2.2)
        for k in range(objects):
            path = f"/size/20000/herd{k}"

            def client():
                t = time.monotonic()
                try:
                    got = get(pp, path)
                    if not got.startswith(b"HTTP/1.1 200"):
                        failed.append(got[:40])
                    latencies.append(time.monotonic() - t)
                except OSError as e:
                    failed.append(str(e))

            threads = [threading.Thread(target=client) for _ in range(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        p.terminate()
        p.wait()
        shutil.rmtree(run, ignore_errors=True)
        o.terminate()
        _, err = o.communicate()
    m = re.search(r'"requests":(\d+)', err.decode())
    latencies.sort()
    median = latencies[len(latencies) // 2] if latencies else float("nan")
    return (int(m.group(1)) - warm if m else -1), median, (latencies[-1] if latencies else float("nan")), failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weft", default="target/release/weft")
    ap.add_argument("--baseline", help="another weft binary to run the same way")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--objects", type=int, default=5)
    ap.add_argument("--think", default="200ms", help="the origin's think time per answer")
    ap.add_argument("--stale", action="store_true", help="herd on cached objects gone stale")
    ap.add_argument("--no-nginx", action="store_true", help="leave the nginx anchor out")
    args = ap.parse_args()
    if args.stale:
        runs = [("weft --stale-while-revalidate", args.weft, ["--stale-while-revalidate", "30s"])]
    else:
        runs = [("weft --collapse", args.weft, ["--collapse"])]
    runs.append(("weft (default)", args.weft, []))
    if args.baseline:
        runs.append(("baseline", args.baseline, []))
    if not args.no_nginx and shutil.which("nginx"):
        runs.append(("nginx proxy_cache (anchor)", args.weft, "nginx"))
    kind = "stale" if args.stale else "cold"
    print(f"{args.objects} {kind} objects x {args.clients} concurrent clients, origin think time {args.think}")
    for name, binary, extra in runs:
        reqs, median, worst, failed = herd(binary, extra, args.clients, args.objects, args.think, args.stale)
        print(f"  {name:30s} origin requests {reqs:5d}   client latency median {median * 1000:6.0f} ms, "
              f"max {worst * 1000:6.0f} ms   failed {len(failed)}", flush=True)


if __name__ == "__main__":
    main()
