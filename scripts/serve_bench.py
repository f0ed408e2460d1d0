#!/usr/bin/env python3
"""Static-serving cost, quick A/B: weft serve (this build, variants of it,
and optionally an older build given with --baseline) against nginx,
lighttpd and h2o, same files, same run.

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
    scripts/serve_bench.py --sizes 8KiB,100KiB --variant 'objects=--object-cache 64MiB' \
        --only weft,objects,lighttpd,h2o --perf                # and where each server's CPU goes

`--variant NAME=ARGS` adds `weft serve` with these extra arguments
(`{fcgi_app}` in them stands for the workspace's FastCGI application,
`weft-fcgi-app`, beside the weft binary). `--path NAME=PATH` has that
server asked for PATH instead of a file named by the size; `{bytes}` in
PATH is the size in bytes. So a FastCGI application's responses are
measured beside the static files of the same size:

    scripts/serve_bench.py --sizes 64KiB --only weft,pool,nginx --perf \
        --variant 'pool=--cgi /app={fcgi_app} --cgi-workers 4' --path 'pool=app/x?size={bytes}'

(the pool's processes are in weft's process tree: its CPU and its profile
count them). With
`--perf` (perf; root for the anchors' processes) each server serves one more
run per size after the rounds, not counted in the medians, with a `perf
record -g` of its process tree over the middle of the run; the table that
follows gives the shares of its samples in user space, in copies, under
each kind of system call and in the loopback receive work done for the
client inside its sends, and its kernel time: its median less its time in
user space (`lab/proxylab.py`'s `kernel_times`), what it would cost if its
own code cost nothing. Then, for each variant given a `--path`, against
plain `weft`'s static file: the requests/s it could reach at most with its
own code free and both CPUs busy, the CPUs divided by the client's CPU plus
its kernel time per request.

Needs nginx and wrk (the lab installs them with apt-get; lighttpd and h2o
when named) and a release build of weft (built by the lab when cargo is
there, or --weft).
"""

import argparse
import json
import os
import resource
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lab import perfshares, proxylab as pl, servers  # noqa: E402

ANCHORS = ("nginx", "lighttpd", "h2o")

# The groups `--perf` reports, as shares of a server's samples.
PERF_PATHS = [perfshares.COPY, perfshares.SEND, perfshares.SENDFILE, perfshares.RECV, perfshares.EPOLL, perfshares.TCP_RCV,
              perfshares.SWITCH]


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
    ap.add_argument("--only", default=None, help="servers to run (comma-separated; default weft, nginx, the variants, and base with --baseline; "
                                            "also known: lighttpd, h2o)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                    help="another weft serve with these extra arguments (repeatable)")
    ap.add_argument("--path", action="append", default=[], metavar="NAME=PATH",
                    help="ask server NAME for PATH (`{bytes}`: the size in bytes) instead of the file named by the size")
    ap.add_argument("--json", default=None, help="write every sample and the medians to this file")
    ap.add_argument("--perf", action="store_true", help="one more run per server and size, profiled: where its CPU goes")
    a = ap.parse_args()

    sizes = pl.bench_sizes("serve_bench", a)
    if a.perf and not shutil.which("perf"):
        raise SystemExit("serve_bench: --perf needs perf (Debian: apt-get install linux-perf)")
    variants, paths = parse_servers(a.variant, a.path)
    known = ["weft", "nginx"] + (["base"] if a.baseline else []) + list(variants)
    names = [n.strip() for n in (a.only or ",".join(known)).split(",") if n.strip()]
    allowed = set(known) | set(ANCHORS)
    for n in names:
        if n not in allowed:
            raise SystemExit(f"serve_bench: --only: unknown server `{n}` (known: {', '.join(sorted(allowed))})")
    commands = ["wrk"] + [n for n in ANCHORS if n in names or n == "nginx"]
    result = pl.run_bench("serve_bench", commands, a, lambda lab, weft: bench(lab, a, weft, names, sizes, variants, paths))
    report(a, names, sizes, result, paths)


def parse_servers(variant_args, path_args):
    """`--variant NAME=ARGS` and `--path NAME=PATH`: the variants' extra
    arguments by name, and every server's path ("" for the file named by the
    size). A bad one ends the script with a line naming it."""
    variants = {}
    for v in variant_args:
        name, sep, args = v.partition("=")
        if not sep or not name or name in ("weft", "base", *ANCHORS, *variants):
            raise SystemExit(f"serve_bench: --variant {v!r}: expected NAME=ARGS with a NAME of its own")
        variants[name] = args.split()
    paths = dict.fromkeys(["weft", "base", *ANCHORS, *variants], "")
    for v in path_args:
        name, sep, path = v.partition("=")
        if not sep or name not in paths or not path.strip("/"):
            raise SystemExit(f"serve_bench: --path {v!r}: expected NAME=PATH with NAME one of {', '.join(paths)}")
        paths[name] = path.lstrip("/")
    return variants, paths


def bench(lab, a, weft, names, sizes, variants, paths):
    app = os.path.join(os.path.dirname(os.path.abspath(weft)), "weft-fcgi-app")
    if any("{fcgi_app}" in x for name in names for x in variants.get(name, [])) and not os.access(app, os.X_OK):
        raise SystemExit(f"serve_bench: {{fcgi_app}}: no {app} beside the weft binary (cargo build --release builds it)")
    www = pl.size_files(lab.scratch, sizes)
    with lab.pool(www) as pool:
        running = {}
        for name in names:
            if name in ANCHORS:
                spec = servers.ServerSpec(name, name)
            else:
                spec = servers.ServerSpec(name, "weft", {"event": a.event, "send": "auto", "extra": [x.replace("{fcgi_app}", app) for x in variants.get(name, [])]})
            pool.weft_binary = a.baseline if name == "base" else weft
            running[name] = pool.start(spec)
        print(f"load average at start {open('/proc/loadavg').read().split()[:3]}", file=sys.stderr)
        samples = pl.bench_rounds(a, running, names, sizes, scratch=os.path.join(lab.scratch, "client"), path=paths,
                                  origin=None, role="server", line=progress_line)
        profiles = pl.profile_runs(a, lab.scratch, running, names, sizes, paths, None, "server", PERF_PATHS) if a.perf else []
        return samples, profiles


def progress_line(r, n, name, row):
    return (f"round {r + 1} {pl.size_name(n):>7} {name:<10} {row['requests']:>8} req  server {row['proxy_us']:7.2f}"
            f" µs/req  client {row['client_us']:7.2f} µs/req")  # fmt: skip


def report(a, names, sizes, result, paths):
    samples, profiles = result
    med = pl.median_rows(samples, ["size", "server"], ["proxy_us", "client_us", "rps"])
    print(f"\nmedian of {a.rounds} x wrk -t1 -c{a.conns} -d{a.duration:g}s keep-alive, one worker each,"
          f" weft --event {a.event} --send auto; server CPU µs per request")  # fmt: skip
    pl.print_median_table(med, sizes, names, f"{'size':>7} {'server':<10} {'µs/req':>8} {'client':>8} {'req/s':>8}",
                          lambda name, m: f"{name:<10} {m['proxy_us']:8.2f} {m['client_us']:8.2f} {m['rps']:8.0f}")  # fmt: skip
    print("\nratios of medians (server CPU per request)")
    weftish = [n for n in names if n not in ANCHORS]
    anchors = [n for n in names if n in ANCHORS]
    for n in sizes:
        pairs = [("weft", "base")] + [(w, x) for w in weftish for x in anchors]
        parts = pl.median_ratios(med, n, pairs, digits=3)
        print(f"{pl.size_name(n):>7}: " + "; ".join(parts))
    if profiles:
        floor = pl.print_profiles(profiles, med, "server", PERF_PATHS)
        for n in sizes:
            at = {x: med[(n, x)]["proxy_us"] for x in anchors if med.get((n, x), {}).get("proxy_us")}
            if not at:
                continue
            best = min(at, key=at.get)
            parts = [f"{w} {floor[(n, w)]:.1f} µs = {floor[(n, w)] / at[best]:.2f}×" for w in weftish if (n, w) in floor]
            if parts:
                print(f"{pl.size_name(n):>7}: kernel time alone against the best anchor ({best}, {at[best]:.1f} µs): " + ", ".join(parts))
        # Against the static file: the variants asked for something else (--path).
        print_ceilings(med, sizes, [w for w in weftish if paths.get(w)], floor)
    if a.json:
        with open(a.json, "w") as f:
            medians = [{"size": n, "server": name, **m} for (n, name), m in med.items()]
            json.dump({"config": vars(a), "samples": samples, "medians": medians, "profiles": profiles}, f, indent=1)


def rate_ceiling(cpus: int, client_us: float, kernel_us: float) -> float:
    """Requests/s a server could reach with its own code free and the
    machine's `cpus` all busy with the client and the server's kernel work:
    the client's CPU per request plus the server's kernel time per request,
    shared by every CPU. The client (wrk) is not ours to change, and on a
    machine the client shares it is the bound of a CPU-bound run."""
    return cpus * 1e6 / (client_us + kernel_us)


def print_ceilings(med, sizes, weftish, floor):
    """The rate ceiling (`rate_ceiling`) of each profiled variant of
    `weftish` as a share of plain `weft`'s measured requests/s of the same
    size: how near a variant (a FastCGI application, say) could at best come
    to the static file, with this machine's CPUs shared by client and
    server."""
    cpus = os.cpu_count() or 1
    for n in sizes:
        ref = med.get((n, "weft"), {}).get("rps")
        parts = []
        for w in weftish:
            m = med.get((n, w), {})
            if w != "weft" and ref and (n, w) in floor and m.get("client_us"):
                top = rate_ceiling(cpus, m["client_us"], floor[(n, w)])
                parts.append(f"{w} {top:,.0f} req/s = {top / ref:.2f}× weft's {ref:,.0f}")
        if parts:
            print(f"{pl.size_name(n):>7}: rate with its own code free, {cpus} CPUs busy with client and kernel: " + ", ".join(parts))


if __name__ == "__main__":
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(20000, hard), hard))
    main()
