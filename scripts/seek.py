#!/usr/bin/env python3
"""Seeks into large files through the caching reverse proxy, as a video
player makes them: each session asks for a 256 KiB chunk at a random offset
of one of a few large files, then the chunks that follow. Sessions start at
a fixed interval (viewers arriving), each on its own connection. The origin
(here, in this process) answers ranges and sends each connection at a paced
rate, as a distant origin would. Two passes with the same seeks: cold (the
cache fills while viewers arrive), then again.

Prints, for each proxy and pass: the time to the first chunk of a session
(what a viewer waits after a seek: median, 90th percentile, worst, and how
many waited over 100 ms), and the origin's requests and megabytes.

- weft (default): a Range miss is forwarded with its Range, and one
  background GET fills the cache with the whole file (`--range-fill`).
- weft `--range-fill false`: Range misses are only forwarded.
- nginx `proxy_cache` (anchor, when installed): a miss fetches the whole
  file without the Range and the client's range is cut from it as it
  arrives; `proxy_cache_lock` makes concurrent misses wait for that fill.
- nginx `proxy_cache` with `slice 1m` (anchor): nginx's module for this
  case, caching 1 MiB slices, each fetched with a Range.

    python3 scripts/seek.py [--weft BIN] [--files 4] [--size 16MiB] [--rate 32MB/s] [--sessions 48] [--interval-ms 25]

Loopback only; every run is bounded (a fixed list of requests, each with a
timeout).
"""

import argparse
import http.server
import os
import random
import re
import shutil
import socket
import socketserver
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from herd import nginx_proxy_cache, start, start_nginx  # noqa: E402
from lab.wire import read_response  # noqa: E402

CHUNK = 256 * 1024

# nginx's anchors: the whole file on a miss, or 1 MiB slices fetched with Range.
LOCK = ["proxy_cache_lock on;", "proxy_cache_lock_timeout 30s;"]
NGINX_WHOLE = nginx_proxy_cache("2g", LOCK)
NGINX_SLICE = nginx_proxy_cache("2g", LOCK + [
    "slice 1m;",
    "proxy_cache_key $uri$slice_range;",
    "proxy_set_header Range $slice_range;",
    "proxy_cache_valid 200 206 1h;",
])


def size_arg(s):
    m = re.fullmatch(r"(\d+)(KiB|MiB|GiB)?", s)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {s}")
    return int(m.group(1)) << {None: 0, "KiB": 10, "MiB": 20, "GiB": 30}[m.group(2)]


def rate_arg(s):
    m = re.fullmatch(r"(\d+)MB/s", s)
    if not m:
        raise argparse.ArgumentTypeError(f"not a rate (e.g. 32MB/s): {s}")
    return int(m.group(1)) * 1_000_000


def content(offset, length):
    """The files' bytes: position modulo 251, the same in every file."""
    start = offset % 251
    period = bytes(range(251))
    reps = (start + length) // 251 + 1
    return (period * reps)[start:start + length]


class Origin:
    """A threaded HTTP/1.1 origin of `files` files of `size` bytes that
    answers single ranges and paces each connection to `rate` bytes/s.
    `chunked`: it sends every file whole and chunked (a 64 KiB chunk per
    write), ignoring Range, as a generated response would come."""

    def __init__(self, files, size, rate, chunked=False):
        self.requests = 0
        self.bytes = 0
        self.lock = threading.Lock()
        origin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                m = re.fullmatch(r"/f(\d+)\.bin", self.path)
                if not m or int(m.group(1)) >= files:
                    self.send_error(404)
                    return
                first, last = 0, size - 1
                status = 200
                rng = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
                if rng and int(rng.group(1)) < size and not chunked:
                    first = int(rng.group(1))
                    last = min(int(rng.group(2)) if rng.group(2) else size - 1, size - 1)
                    status = 206
                self.send_response(status)
                self.send_header("Content-Type", "video/mp4")
                self.send_header("Cache-Control", "max-age=3600")
                self.send_header("ETag", f'"f{m.group(1)}"')
                self.send_header("Accept-Ranges", "bytes")
                if status == 206:
                    self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_header("Content-Length", str(last - first + 1))
                self.end_headers()
                with origin.lock:
                    origin.requests += 1
                t0 = time.monotonic()
                sent, pos = 0, first
                while pos <= last:
                    n = min(65536, last + 1 - pos)
                    piece = content(pos, n)
                    if chunked:
                        piece = b"%x\r\n%s\r\n" % (n, piece) + (b"0\r\n\r\n" if pos + n > last else b"")
                    try:
                        self.wfile.write(piece)
                    except OSError:
                        break
                    pos += n
                    sent += n
                    with origin.lock:
                        origin.bytes += n
                    ahead = t0 + sent / rate - time.monotonic()
                    if ahead > 0:
                        time.sleep(ahead)

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def session(port, path, offset, chunks, size):
    """One viewer: a seek to `offset` and the chunks after it on one
    connection. The time to the first chunk, or an error string."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        buf, first = b"", None
        t = time.monotonic()
        for k in range(chunks):
            a = offset + k * CHUNK
            if a >= size:
                break
            b = min(a + CHUNK, size) - 1
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: h\r\nRange: bytes={a}-{b}\r\n\r\n".encode())
            status, body, buf = read_response(s, buf)
            if status != 206 or body != content(a, b - a + 1):
                return f"{path} bytes={a}-{b}: status {status}, {len(body)} bytes"
            if first is None:
                first = time.monotonic() - t
        return first


def run(name, proxy, args, seeks):
    """`proxy`: weft proxy's extra flags, or an nginx configuration."""
    origin = Origin(args.files, args.size, args.rate)
    tmp = tempfile.mkdtemp(prefix="seek-")
    if isinstance(proxy, str):
        p, port = start_nginx(origin.port, tmp, proxy)
    else:
        argv = [args.weft, "proxy", "--listen", "127.0.0.1:0", "--upstream", f"127.0.0.1:{origin.port}",
                "--workers", "2", "--cache-size", "2GiB", "--max-object-size", "1GiB"]
        p, port = start(argv + proxy)
    results = []
    try:
        for label in ("cold", "again"):
            req0, bytes0 = origin.requests, origin.bytes
            waits, failed = [], []
            lock = threading.Lock()

            def viewer(path, offset):
                try:
                    r = session(port, path, offset, args.chunks, args.size)
                except OSError as e:
                    r = str(e)
                with lock:
                    (waits if isinstance(r, float) else failed).append(r)

            threads = []
            for path, offset in seeks:
                t = threading.Thread(target=viewer, args=(path, offset))
                t.start()
                threads.append(t)
                time.sleep(args.interval_ms / 1000)
            for t in threads:
                t.join()
            # A background fill may still be reading: the next pass starts
            # once the origin is quiet.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                seen = origin.bytes
                time.sleep(0.5)
                if origin.bytes == seen:
                    break
            waits.sort()
            pct = lambda q: waits[min(len(waits) - 1, int(q * len(waits)))] * 1000 if waits else float("nan")
            slow = sum(1 for w in waits if w > 0.1)
            results.append((label, (pct(0.5), pct(0.9), pct(1.0), slow), origin.requests - req0,
                            (origin.bytes - bytes0) / 1e6, failed))
    finally:
        p.terminate()
        p.wait()
        origin.close()
        shutil.rmtree(tmp, ignore_errors=True)
    for label, (med, p90, worst, slow), reqs, mb, failed in results:
        print(f"  {name:30s} {label:5s}  first chunk median {med:6.1f} p90 {p90:6.1f} max {worst:6.1f} ms, "
              f">100 ms {slow:3d}   origin {reqs:4d} requests {mb:6.1f} MB   failed {len(failed)}", flush=True)
        for f in failed[:3]:
            print(f"      {f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weft", default="target/release/weft")
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--size", type=size_arg, default=16 << 20, help="each file's size (16MiB)")
    ap.add_argument("--rate", type=rate_arg, default=32_000_000, help="origin's rate per connection (32MB/s)")
    ap.add_argument("--sessions", type=int, default=48, help="seeks per pass")
    ap.add_argument("--chunks", type=int, default=3, help="256 KiB chunks per session")
    ap.add_argument("--interval-ms", type=float, default=25, help="between session starts")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-nginx", action="store_true", help="leave the nginx anchors out")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    seeks = [(f"/f{rng.randrange(args.files)}.bin", rng.randrange(args.size // CHUNK) * CHUNK)
             for _ in range(args.sessions)]
    print(f"{args.sessions} seeks x {args.chunks} chunks of 256 KiB into {args.files} files of "
          f"{args.size >> 20} MiB, one every {args.interval_ms:g} ms; origin {args.rate / 1e6:.0f} MB/s "
          "per connection")
    runs = [("weft (default: --range-fill)", []), ("weft --collapse", ["--collapse"]),
            ("weft --range-fill false", ["--range-fill", "false"])]
    if not args.no_nginx and shutil.which("nginx"):
        runs.append(("nginx proxy_cache (anchor)", NGINX_WHOLE))
        runs.append(("nginx proxy_cache + slice 1m", NGINX_SLICE))
    for name, proxy in runs:
        run(name, proxy, args, seeks)


if __name__ == "__main__":
    main()
