#!/usr/bin/env python3
"""Thundering herd through the caching reverse proxy: N clients at once ask
for one object the cache lacks, from an origin that thinks before each
answer (`weft origin --think`), for a few cold objects in turn. Prints how
many requests reached the origin and the clients' latencies, for weft (and
a baseline build, and the default without `--collapse`, to compare).

With `--size` and `--rate`, the objects are large and come from a paced
origin (scripts/seek.py's, in this process): the herd then shows how long
the clients wait for their first byte while the one fill is under way, and
how long for the whole object, with weft's waiters following the fill as it
arrives (read-while-write) and nginx's waiting on its cache lock. With
`--chunked` as well, the origin sends them chunked (no length before the
last byte), as a generated response comes.

With `--stale`, the objects are cached first and have gone stale
(`max-age=1`) when the herd comes: weft with `--stale-while-revalidate`
against the default, which revalidates every request in the foreground.

The anchor (when nginx is installed) is nginx with `proxy_cache`, in the
same run: `proxy_cache_lock on` for the cold herd, `proxy_cache_use_stale
updating` with `proxy_cache_background_update on` for the stale one.

    python3 scripts/herd.py [--weft BIN] [--baseline BIN] [--clients 50] [--objects 5] [--stale] [--no-nginx]
    python3 scripts/herd.py --size 8MiB --rate 16MB/s [--chunked] [--clients 20] [--objects 3]

Loopback only; every run is bounded (one request per client per object).
"""

import argparse
import os
import re
import shutil
import socket
import subprocess
import tempfile
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from lab.wire import dechunk  # noqa: E402

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


def get(port, path, first=None):
    """One request on its own connection: the reply's bytes. `first`: a
    list the time of the first byte (time.monotonic) is appended to."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n".encode())
        parts = []
        while chunk := s.recv(1 << 20):
            if not parts and first is not None:
                first.append(time.monotonic())
            parts.append(chunk)
    return b"".join(parts)


def body_of(reply):
    """The body of a whole reply (`get`'s bytes), de-chunked when it came
    chunked; None when it did not come whole."""
    head, _, body = reply.partition(b"\r\n\r\n")
    if re.search(rb"\r\ntransfer-encoding:\s*chunked", head, re.I):
        try:
            return dechunk(body)
        except ValueError:
            return None
    return body


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


def herd(weft, proxy, clients, objects, think, stale=False, large=None):
    """`proxy`: weft proxy's extra flags, or "nginx" for the anchor.
    `large`: (size, rate, chunked) of a paced origin's objects instead of `weft
    origin`'s 20,000 bytes. The origin's requests, the median and worst
    latencies to the whole reply and to its first byte, the failures."""
    cc = ["--cache-control", "max-age=1"] if stale else []
    if large:
        import seek
        paced = seek.Origin(objects, *large)
        o, op = None, paced.port
        paths = [f"/f{k}.bin" for k in range(objects)]
    else:
        o, op = start([weft, "origin", "--listen", "127.0.0.1:0", "--think", think, "--stats-on-exit", *cc])
        paths = [f"/size/20000/herd{k}" for k in range(objects)]
    run = tempfile.mkdtemp(prefix="herd-")
    if proxy == "nginx":
        p, pp = start_nginx(op, run)
    else:
        argv = [weft, "proxy", "--listen", "127.0.0.1:0", "--upstream", f"127.0.0.1:{op}", "--workers", "2",
                "--cache-size", "1GiB", "--max-object-size", "256MiB"]
        p, pp = start(argv + proxy)
    latencies, firsts, failed = [], [], []
    warm = 0
    try:
        if stale:
            # Cached first, then stale (max-age=1) when the herd comes.
            for path in paths:
                get(pp, path)
            warm = objects
            time.sleep(2.2)
        for path in paths:

            def client():
                t = time.monotonic()
                try:
                    first = []
                    got = get(pp, path, first)
                    whole = not large or body_of(got) == seek.content(0, large[0])
                    if not got.startswith(b"HTTP/1.1 200") or not whole:
                        failed.append(got[:40])
                    latencies.append(time.monotonic() - t)
                    firsts.extend(f - t for f in first)
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
        if o:
            o.terminate()
            _, err = o.communicate()
        else:
            paced.close()
    if o:
        m = re.search(r'"requests":(\d+)', err.decode())
        reqs = int(m.group(1)) - warm if m else -1
    else:
        reqs = paced.requests - warm

    def median_max(xs):
        xs = sorted(xs)
        return (xs[len(xs) // 2], xs[-1]) if xs else (float("nan"), float("nan"))

    return reqs, median_max(latencies), median_max(firsts), failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weft", default="target/release/weft")
    ap.add_argument("--baseline", help="another weft binary to run the same way")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--objects", type=int, default=5)
    ap.add_argument("--think", default="200ms", help="the origin's think time per answer")
    ap.add_argument("--stale", action="store_true", help="herd on cached objects gone stale")
    ap.add_argument("--no-nginx", action="store_true", help="leave the nginx anchor out")
    ap.add_argument("--size", help="large objects of this size from a paced origin (e.g. 8MiB; needs --rate)")
    ap.add_argument("--rate", help="the paced origin's rate per connection (e.g. 16MB/s; needs --size)")
    ap.add_argument("--chunked", action="store_true", help="the paced origin sends its objects chunked (needs --size)")
    args = ap.parse_args()
    large = None
    if args.size or args.rate:
        if not (args.size and args.rate) or args.stale:
            ap.error("--size and --rate go together, without --stale")
        import seek
        large = (seek.size_arg(args.size), seek.rate_arg(args.rate), args.chunked)
    elif args.chunked:
        ap.error("--chunked needs --size and --rate")
    flags = ["--stale-while-revalidate", "30s"] if args.stale else ["--collapse"]
    runs = [(f"weft {' '.join(flags)}", args.weft, flags)]
    if args.baseline:
        # The same flags: what this build changes of them.
        runs.append((f"baseline {' '.join(flags)}", args.baseline, flags))
    runs.append(("weft (default)", args.weft, []))
    if not args.no_nginx and shutil.which("nginx"):
        runs.append(("nginx proxy_cache (anchor)", args.weft, "nginx"))
    kind = "stale" if args.stale else "cold"
    what = f"{args.size}{' chunked' if args.chunked else ''} from an origin at {args.rate}" if large else f"origin think time {args.think}"
    print(f"{args.objects} {kind} objects x {args.clients} concurrent clients, {what}")
    for name, binary, extra in runs:
        reqs, whole, first, failed = herd(binary, extra, args.clients, args.objects, args.think, args.stale, large)
        print(f"  {name:40s} origin requests {reqs:5d}   whole reply median {whole[0] * 1000:6.0f} ms, "
              f"max {whole[1] * 1000:6.0f}; first byte median {first[0] * 1000:6.0f} ms, "
              f"max {first[1] * 1000:6.0f}   failed {len(failed)}", flush=True)


if __name__ == "__main__":
    main()
