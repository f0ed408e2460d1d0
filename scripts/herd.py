#!/usr/bin/env python3
"""Thundering herd through the caching reverse proxy: N clients at once ask
for one object the cache lacks, from an origin that thinks before each
answer (`weft origin --think`), for a few cold objects in turn. Prints how
many requests reached the origin and the clients' latencies, for weft (and
a baseline build, and the default without `--collapse`, to compare).

    python3 scripts/herd.py [--weft BIN] [--baseline BIN] [--clients 50] [--objects 5]

Loopback only; every run is bounded (one request per client per object).
"""

import argparse
import re
import socket
import subprocess
import threading
import time


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


def herd(weft, extra, clients, objects, think):
    o, op = start([weft, "origin", "--listen", "127.0.0.1:0", "--think", think, "--stats-on-exit"])
    p, pp = start([weft, "proxy", "--listen", "127.0.0.1:0", "--upstream", f"127.0.0.1:{op}", "--workers", "2", *extra])
    latencies, failed = [], []
    try:
        for k in range(objects):
            path = f"/size/20000/herd{k}"

            def client():
                t = time.monotonic()
                try:
                    with socket.create_connection(("127.0.0.1", pp), timeout=20) as s:
                        s.sendall(f"GET {path} HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n".encode())
                        got = b""
                        while chunk := s.recv(65536):
                            got += chunk
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
        o.terminate()
        _, err = o.communicate()
    m = re.search(r'"requests":(\d+)', err.decode())
    latencies.sort()
    median = latencies[len(latencies) // 2] if latencies else float("nan")
    return (int(m.group(1)) if m else -1), median, (latencies[-1] if latencies else float("nan")), failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weft", default="target/release/weft")
    ap.add_argument("--baseline", help="another weft binary to run the same way")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--objects", type=int, default=5)
    ap.add_argument("--think", default="200ms", help="the origin's think time per answer")
    args = ap.parse_args()
    runs = [("weft --collapse", args.weft, ["--collapse"]), ("weft (default)", args.weft, [])]
    if args.baseline:
        runs.append(("baseline", args.baseline, []))
    print(f"{args.objects} cold objects x {args.clients} concurrent clients, origin think time {args.think}")
    for name, binary, extra in runs:
        reqs, median, worst, failed = herd(binary, extra, args.clients, args.objects, args.think)
        print(f"  {name:24s} origin requests {reqs:5d}   client latency median {median * 1000:6.0f} ms, "
              f"max {worst * 1000:6.0f} ms   failed {len(failed)}", flush=True)


if __name__ == "__main__":
    main()
