#!/usr/bin/env python3
"""The disk store's costs (`weft proxy --cache-dir`), quick and reproducible.

1. Hits: the same URL set (N objects of SIZE) requested in turn by
   `weft load --clients 10` through one proxy worker, against `weft origin`:
   once with a memory cache that holds them all, once with a memory cache
   far too small and `--cache-dir`, so that every request puts its object
   back into memory from its file (the page cache's copy: this measures the
   proxy's work, not the disk). Proxy CPU µs per request (the scheduler's
   runtime of every thread, as the lab reads it), median
   of the rounds; every body is verified.
2. Restart: how long a proxy takes to listen, and to index a directory of
   SCAN objects (4 KiB each) in the background, with a cold and a warm page
   cache.

Usage: scripts/cache_dir_bench.py [--objects 200] [--size 65536] [--rounds 3]
       [--duration 4] [--scan 20000]. Needs root for the cold-cache restart
(drop_caches); without it that line is skipped. Everything runs on
loopback and stops by itself.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from lab import proc  # noqa: E402  (the lab's ns CPU clock: every thread's schedstat)


class Bench:
    def __init__(self, weft, scratch):
        self.weft = weft
        self.scratch = scratch

    def start(self, args):
        p = subprocess.Popen([self.weft, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        if not line.startswith("listening on "):
            p.kill()
            sys.exit(f"{args[0]} did not start: {p.stderr.read()}")
        return p, line.split()[-1]

    def stop(self, p):
        p.send_signal(2)
        _, err = p.communicate(timeout=60)
        return err

    def load(self, addr, urls, *args):
        out = os.path.join(self.scratch, "load.json")
        cmd = [self.weft, "load", f"http://{addr}", "--urls", urls, "--json", out, *args]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            sys.exit(f"weft load failed: {r.stderr}")
        return json.load(open(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", type=int, default=200)
    ap.add_argument("--size", type=int, default=65536)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=4.0)
    ap.add_argument("--scan", type=int, default=20000, help="objects in the restart test (0: skip)")
    ap.add_argument("--weft", default=os.path.join(ROOT, "target", "release", "weft"))
    a = ap.parse_args()
    if not os.path.exists(a.weft):
        subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
    scratch = tempfile.mkdtemp(prefix="weft-cache-dir-bench-")
    b = Bench(a.weft, scratch)
    origin, oaddr = b.start(["origin", "--listen", "127.0.0.1:0"])
    try:
        urls = os.path.join(scratch, "urls.txt")
        with open(urls, "w") as f:
            f.writelines(f"/size/{a.size}/c/obj{i}\n" for i in range(a.objects))
        total = a.objects * a.size
        configs = [
            ("memory", ["--cache-size", str(2 * total + (16 << 20))]),
            ("disk", ["--cache-size", str(max(total // 12, 1 << 20)), "--cache-dir", os.path.join(scratch, "dir")]),
        ]
        for name, extra in configs:
            p, paddr = b.start(
                ["proxy", "--listen", "127.0.0.1:0", "--upstream", oaddr, "--workers", "1", "--stats-on-exit", *extra]
            )
            b.load(paddr, urls, "--clients", "1", "--num-conns", "1", "--calls", str(a.objects))  # fill
            per_req, rates = [], []
            for r in range(a.rounds):
                print(f"  {name}: round {r + 1}/{a.rounds}", file=sys.stderr, flush=True)
                c0 = proc.tree_cpu_sample(p.pid)
                j = b.load(paddr, urls, "--clients", "10", "--duration", f"{a.duration}s", "--verify")
                cpu = proc.cpu_seconds_between(c0, proc.tree_cpu_sample(p.pid))
                if j["verified"] != j["requests"] or j["replies"]["2xx"] != j["requests"]:
                    sys.exit(f"{name}: bad replies: {j['replies']}, verified {j['verified']} of {j['requests']}")
                per_req.append(cpu / j["requests"] * 1e6)
                rates.append(j["requests"] / j["duration_s"])
            err = b.stop(p)
            total_line = next(l for l in err.splitlines() if l.startswith('{"total"'))
            loads = re.search(r'"disk_loads":(\d+)', total_line).group(1)
            per_req.sort()
            rates.sort()
            print(
                f"{name:7} {a.objects} x {a.size} B: proxy {per_req[len(per_req) // 2]:.1f} µs/request "
                f"(rounds {', '.join(f'{x:.1f}' for x in per_req)}), {rates[len(rates) // 2]:.0f} requests/s, "
                f"disk loads {loads}",
                flush=True,
            )
        if a.scan:
            scan_dir = os.path.join(scratch, "scan")
            with open(urls, "w") as f:
                f.writelines(f"/size/4096/c/scan{i}\n" for i in range(a.scan))
            p, paddr = b.start(["proxy", "--listen", "127.0.0.1:0", "--upstream", oaddr, "--workers", "1",
                                "--cache-dir", scan_dir])  # fmt: skip
            print(f"  restart: filling {a.scan} objects", file=sys.stderr, flush=True)
            b.load(paddr, urls, "--clients", "1", "--num-conns", "1", "--calls", str(a.scan))
            b.stop(p)
            caches = ["warm"]
            if os.geteuid() == 0:
                caches.insert(0, "cold")
            for cache in caches:
                if cache == "cold":
                    subprocess.run("sync; echo 3 > /proc/sys/vm/drop_caches", shell=True, check=True)
                t0 = time.monotonic()
                p, _ = b.start(["proxy", "--listen", "127.0.0.1:0", "--upstream", oaddr, "--workers", "1",
                                "--cache-dir", scan_dir])  # fmt: skip
                t1 = time.monotonic()
                # The index is built in the background; its log line says when.
                found = ""
                for line in p.stderr:
                    if "indexed in" in line:
                        found = line.strip()
                        break
                b.stop(p)
                print(f"restart, {cache} page cache: listening after {(t1 - t0) * 1000:.0f} ms; {found}")
    finally:
        b.stop(origin)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
