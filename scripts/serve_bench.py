#!/usr/bin/env python3
"""Static-serving cost, quick A/B: weft serve (this build, and optionally an
older build given with --baseline) against nginx, same files, same run.

A developer's tool on top of the lab (`python3 -m lab run static-baseline` is
the full experiment with h2o and lighttpd). For each size and server it runs
`wrk -t1 -c50` keep-alive and reads the CPU time of the server's process tree
(/proc, ns) per completed request. Rounds are interleaved, and the order of
the servers rotates between rounds, so drift in the machine's load hits every
server alike; the table shows the median. It is the before/after check of a
change to the serving path: run it with the previous commit's binary as
--baseline and compare the `weft` and `base` rows of the same run.

    scripts/serve_bench.py                                   # 1 B and 100 KiB; 3 rounds of 5 s
    scripts/serve_bench.py --baseline /tmp/weft-old --rounds 5
    scripts/serve_bench.py --sizes 1B,8KiB,1MiB --only weft,nginx --json out.json

Needs nginx and wrk (the lab installs them with apt-get) and a release build
of weft (built by the lab when cargo is there, or --weft).
"""

import argparse
import json
import os
import resource
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lab import proxylab as pl, servers  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1B,100KiB", help="file sizes (comma-separated)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is reported")
    ap.add_argument("--duration", type=float, default=5, help="seconds per wrk run")
    ap.add_argument("--warmup", type=float, default=1, help="seconds of unmeasured wrk before each run")
    ap.add_argument("--conns", type=int, default=50, help="wrk connections")
    ap.add_argument("--event", default="epoll", help="weft's event backend (both builds)")
    ap.add_argument("--weft", default=None, help="weft binary (default: target/release/weft, built when cargo is there)")
    ap.add_argument("--baseline", default=None, help="another weft binary, run as `base`")
    ap.add_argument("--only", default=None, help="servers to run (comma-separated; default weft,nginx and base with --baseline)")
    ap.add_argument("--json", default=None, help="write every sample and the medians to this file")
    a = ap.parse_args()

    sizes = pl.bench_sizes("serve_bench", a)
    known = ["weft", "nginx"] + (["base"] if a.baseline else [])
    names = [n.strip() for n in (a.only or ",".join(known)).split(",") if n.strip()]
    for n in names:
        if n not in known:
            raise SystemExit(f"serve_bench: --only: unknown server `{n}` (known: {', '.join(known)})")
    samples = pl.run_bench("serve_bench", ["nginx", "wrk"], a, lambda lab, weft: bench(lab, a, weft, names, sizes))
    report(a, names, sizes, samples)


def bench(lab, a, weft, names, sizes):
    www = pl.size_files(lab.scratch, sizes)
    with lab.pool(www) as pool:
        running = {}
        for name in names:
            if name == "nginx":
                spec = servers.ServerSpec("nginx", "nginx")
            else:
                spec = servers.ServerSpec(name, "weft", {"event": a.event, "send": "auto"})
            pool.weft_binary = a.baseline if name == "base" else weft
            running[name] = pool.start(spec)
        print(f"load average at start {open('/proc/loadavg').read().split()[:3]}", file=sys.stderr)
        return pl.bench_rounds(a, running, names, sizes, scratch=os.path.join(lab.scratch, "client"), path="",
                               origin=None, role="server", line=progress_line)


def progress_line(r, n, name, row):
    return (f"round {r + 1} {pl.size_name(n):>7} {name:<6} {row['requests']:>8} req  server {row['proxy_us']:7.2f}"
            f" µs/req  client {row['client_us']:7.2f} µs/req")  # fmt: skip


def report(a, names, sizes, samples):
    med = pl.median_rows(samples, ["size", "server"], ["proxy_us", "client_us", "rps"])
    print(f"\nmedian of {a.rounds} x wrk -t1 -c{a.conns} -d{a.duration:g}s keep-alive, one worker each,"
          f" weft --event {a.event} --send auto; server CPU µs per request")  # fmt: skip
    pl.print_median_table(med, sizes, names, f"{'size':>7} {'server':<6} {'µs/req':>8} {'client':>8} {'req/s':>8}",
                          lambda name, m: f"{name:<6} {m['proxy_us']:8.2f} {m['client_us']:8.2f} {m['rps']:8.0f}")  # fmt: skip
    print("\nratios of medians (server CPU per request)")
    for n in sizes:
        parts = pl.median_ratios(med, n, (("weft", "base"), ("weft", "nginx"), ("base", "nginx")), digits=3)
        print(f"{pl.size_name(n):>7}: " + "; ".join(parts))
    if a.json:
        with open(a.json, "w") as f:
            medians = [{"size": n, "server": name, **m} for (n, name), m in med.items()]
            json.dump({"config": vars(a), "samples": samples, "medians": medians}, f, indent=1)


if __name__ == "__main__":
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(20000, hard), hard))
    main()
