#!/usr/bin/env python3
"""Reverse-proxy cost, quick A/B: weft proxy (splice / copy / variants) against
HAProxy, nginx, Varnish and Squid, for misses or hits of a few sizes.

A developer's tool on top of the lab (lab/proxylab.py holds the shared parts;
`python3 -m lab run proxy-splice` is the full experiment). It starts an nginx
origin (the anchor `nginx_origin.conf`: `/nc/NAME` answers `no-store`, so every
request is a miss; `/c/NAME` is cacheable) and the chosen proxies, one worker
each, on free loopback ports; for each size and proxy it runs `wrk -t1 -c50`
through the proxy and reads the CPU time of the proxy's and the origin's
process trees (/proc, ns) and of wrk (rusage), per completed request. Rounds
are interleaved so drift in the machine's load hits every proxy alike; the
table shows the median. Cost moved from the proxy to the origin or the client
is not a saving: all three columns are printed. So is the CPU of every
kworker and ksoftirqd thread of the machine (`kthr`): work the kernel does
for nobody's account, such as a sockmap psock's sends (`--splice sockmap`);
it is machine-wide, so it also counts whatever else runs meanwhile.

    scripts/proxy_bench.py                       # misses: 64 KiB, 100 KiB, 1 MiB; 3 rounds of 10 s
    scripts/proxy_bench.py --sizes 1MiB --rounds 5 --duration 5
    scripts/proxy_bench.py --mode hit --sizes 100KiB,1MiB --only weft-splice,varnish
    scripts/proxy_bench.py --only weft-splice,haproxy-splice --json out.json
    scripts/proxy_bench.py --variant 'lowat0=--notsent-lowat 0' --only weft-splice,lowat0
    scripts/proxy_bench.py --sizes 1MiB --variant 'sockmap=--splice sockmap' --only weft-splice,sockmap,haproxy-splice
    scripts/proxy_bench.py --baseline /path/to/old/weft  # also base-splice, base-copy
    scripts/proxy_bench.py --netns --congestion reno     # own loopback, no pacing (root)
    scripts/proxy_bench.py --netns --tcp-rmem '4096 131072 262144'  # receive windows of a network path
    scripts/proxy_bench.py --sizes 64KiB,100KiB --perf  # and where each proxy's CPU goes

With `--perf` (perf, root for the anchors' processes) each proxy serves one
more run per size after the rounds, not counted in the medians, with a
`perf record -g` of its process tree over the middle of the run. The table
that follows gives the shares of its samples in user space, in the kernel's
copies of body bytes (`copy`), and under each kind of system call, with
`tcp-rcv` the loopback receive work the kernel does for a peer inside the
proxy's sends; and each proxy's kernel time: its median less its time in
user space (its share of the samples, times the profiled run's µs where that
run cost more), what it would cost if its own code cost nothing and its
system calls stayed as they are. The profiled runs are slower (perf runs
too): compare their shares, not their µs, with the medians.

With `--netns` (root) everything runs in a new network namespace: its own
loopback, so other traffic on the machine neither collides on ports nor shows
in the namespace's counters, and `--congestion` can change the namespace's
default TCP congestion control. The congestion control matters: with BBR (the
default on weft's machines) much of a 1 MiB transfer's CPU goes to pacing
timers, charged to whichever process paces — see docs/proxy.md, "Where a
transfer waits".

Needs nginx, wrk and the anchors chosen (the lab installs them with apt-get)
and a release build of weft (built by the lab when cargo is there, or --weft).
"""

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lab import perfshares, proxylab as pl, servers  # noqa: E402

ANCHOR_KINDS = {
    "haproxy-splice": ("haproxy-splice", "haproxy"),
    "haproxy-copy": ("haproxy-copy", "haproxy"),
    "nginx-proxy": ("nginx-proxy", "nginx"),
    "varnish": (None, "varnishd"),  # varnish-hit or varnish-pass by --mode
    "squid": ("squid-reverse", "squid"),
}


# The groups `--perf` reports, as shares of a proxy's samples (a share
# counts the callees: `copy` and `tcp-rcv` run inside the system calls).
PERF_PATHS = [perfshares.COPY, perfshares.SEND, perfshares.SPLICE, perfshares.RECV, perfshares.EPOLL, perfshares.TCP_RCV]


def enter_netns():
    """Re-run this script in a new network namespace with its loopback up."""
    if os.geteuid() != 0:
        raise SystemExit("proxy_bench: --netns needs root (unshare -n)")
    for tool in ("unshare", "ip"):
        if not shutil.which(tool):
            raise SystemExit(f"proxy_bench: --netns needs `{tool}`")
    environ = dict(os.environ, PROXY_BENCH_IN_NETNS="1")
    argv = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:]
    os.execvpe("unshare", ["unshare", "-n", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"] + argv, environ)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="64KiB,100KiB,1MiB", help="object sizes (comma-separated)")
    ap.add_argument("--mode", default="miss", choices=["miss", "hit"], help="no-store misses (/nc/) or cache hits (/c/)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is reported")
    ap.add_argument("--duration", type=float, default=10, help="seconds per wrk run")
    ap.add_argument("--warmup", type=float, default=1, help="seconds of unmeasured wrk before each run")
    ap.add_argument("--conns", type=int, default=50, help="wrk connections")
    ap.add_argument("--weft", default=None, help="weft binary (default: target/release/weft, built when cargo is there)")
    ap.add_argument("--baseline", default=None, help="another weft binary, run as base-splice and base-copy")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                    help="another weft proxy (splice on) with these extra arguments (repeatable)")
    ap.add_argument("--only", default=None,
                    help="proxies to run (comma-separated; default haproxy-splice,haproxy-copy,weft-splice,weft-copy, the variants, "
                         "and base-splice,base-copy with --baseline; also known: nginx-proxy, varnish, squid)")
    ap.add_argument("--netns", action="store_true", help="run in a new network namespace (root)")
    ap.add_argument("--congestion", default=None, help="with --netns: the namespace's TCP congestion control")
    ap.add_argument("--tcp-rmem", default=None, metavar="'MIN DEFAULT MAX'",
                    help="with --netns: the namespace's net.ipv4.tcp_rmem; a small MAX bounds how much of a body the "
                         "origin can send ahead of the proxy's reads, as a window-limited network path does")
    ap.add_argument("--weft-arg", action="append", default=[], help="extra argument for every weft proxy (repeatable)")
    ap.add_argument("--json", default=None, help="write every sample and the medians to this file")
    ap.add_argument("--perf", action="store_true", help="one more run per proxy and size, profiled: where its CPU goes")
    a = ap.parse_args()

    if (a.congestion or a.tcp_rmem) and not a.netns:
        raise SystemExit("proxy_bench: --congestion and --tcp-rmem need --netns (they change the namespace's defaults)")
    if a.perf and not shutil.which("perf"):
        raise SystemExit("proxy_bench: --perf needs perf (Debian: apt-get install linux-perf)")
    if a.netns and os.environ.get("PROXY_BENCH_IN_NETNS") != "1":
        enter_netns()
    for value, name, key in ((a.congestion, "--congestion", "tcp_congestion_control"), (a.tcp_rmem, "--tcp-rmem", "tcp_rmem")):
        if value:
            try:
                with open(f"/proc/sys/net/ipv4/{key}", "w") as f:
                    f.write(value)
            except OSError as e:
                raise SystemExit(f"proxy_bench: {name} {value}: {e}")
    sizes = pl.bench_sizes("proxy_bench", a)
    variants = {}
    for v in a.variant:
        name, sep, args = v.partition("=")
        if not sep or not name:
            raise SystemExit(f"proxy_bench: --variant {v!r}: expected NAME=ARGS")
        variants[name] = args.split()
    known = ["haproxy-splice", "haproxy-copy", "weft-splice", "weft-copy"] + list(variants)
    if a.baseline:
        known += ["base-splice", "base-copy"]
    names = [n.strip() for n in (a.only or ",".join(known)).split(",") if n.strip()]
    allowed = set(known) | set(ANCHOR_KINDS)
    for n in names:
        if n not in allowed:
            raise SystemExit(f"proxy_bench: --only: unknown proxy `{n}` (known: {', '.join(sorted(allowed))})")
    commands = ["nginx", "wrk"] + sorted({ANCHOR_KINDS[n][1] for n in names if n in ANCHOR_KINDS})
    samples = pl.run_bench("proxy_bench", commands, a, lambda lab, weft: bench(lab, a, weft, names, variants, sizes))
    report(a, names, sizes, samples)


def bench(lab, a, weft, names, variants, sizes):
    www = pl.size_files(lab.scratch, sizes)
    weft_stats = {}
    path = "nc" if a.mode == "miss" else "c"
    with lab.pool(www) as pool:
        origin = pool.start(servers.ServerSpec("nginx origin", "nginx-origin"))
        o = f"127.0.0.1:{origin.port}"
        running = {}
        for name in names:
            if name in ANCHOR_KINDS:
                kind = ANCHOR_KINDS[name][0] or ("varnish-pass" if a.mode == "miss" else "varnish-hit")
                spec = pl.anchor(name, kind, origin.port)
            else:
                mode = "off" if name.endswith("-copy") else "on"
                spec = pl.weft_reverse(name, o, mode, *variants.get(name, []), *a.weft_arg)
            pool.weft_binary = a.baseline if name.startswith("base-") else weft
            running[name] = pool.start(spec)
        cc = open("/proc/sys/net/ipv4/tcp_congestion_control").read().strip()
        print(f"congestion control {cc}; load average at start {open('/proc/loadavg').read().split()[:3]}", file=sys.stderr)
        samples = pl.bench_rounds(a, running, names, sizes, scratch=os.path.join(lab.scratch, "client"), path=f"{path}/",
                                  origin=origin, role="proxy", line=progress_line)
        profiles = pl.profile_runs(a, lab.scratch, running, names, sizes, f"{path}/", origin, "proxy", PERF_PATHS) if a.perf else []
        for name, rs in running.items():
            st = servers.weft_exit_stats(pool.stop(rs)) if rs.spec.kind == "weft-proxy" else None
            if st:
                weft_stats[name] = st
    return samples, weft_stats, profiles


def report_profiles(rows, med):
    """The shares of each profiled run, and the kernel time of weft's
    spliced miss against the lines of issue 27's targets."""
    floor = pl.print_profiles(rows, med, "proxy", PERF_PATHS)
    for n in sorted({r["size"] for r in rows}):
        f = floor.get((n, "weft-splice"))
        if f is None:
            continue
        parts = []
        for other, word in (("haproxy-splice", "HAProxy splice"), ("weft-copy", "weft copy")):
            m = med.get((n, other), {}).get("proxy_us")
            if m:
                parts.append(f"{f / m:.2f}× {word}")
        if parts:
            print(f"{pl.size_name(n):>7}: weft-splice's kernel time alone is {f:.1f} µs = " + ", ".join(parts))


def progress_line(r, n, name, row):
    return (f"round {r + 1} {pl.size_name(n):>7} {name:<15} {row['requests']:>8} req  proxy {row['proxy_us']:8.1f}"
            f"  origin {row['origin_us']:8.1f}  client {row['client_us']:8.1f}  kthr {row['kthreads_us']:6.1f} µs/req")  # fmt: skip


def variants_of(names):
    """The weft configurations other than the standard ones (the --variant names)."""
    standard = ("weft-splice", "weft-copy", "base-splice", "base-copy")
    return [x for x in names if x not in standard and x not in ANCHOR_KINDS]


def report(a, names, sizes, result):
    samples, weft_stats, profiles = result
    med = pl.median_rows(samples, ["size", "proxy"], ["proxy_us", "origin_us", "client_us", "kthreads_us", "rps", "proxy_ms_per_mib"])
    cc = open("/proc/sys/net/ipv4/tcp_congestion_control").read().strip()
    what = "/nc/ (no-store) misses" if a.mode == "miss" else "/c/ cache hits"
    rmem = f", tcp_rmem {a.tcp_rmem}" if a.tcp_rmem else ""
    print(f"\nmedian of {a.rounds} x wrk -t1 -c{a.conns} -d{a.duration:g}s, {what}, one worker each,"
          f" congestion control {cc}{rmem}{' (own netns)' if a.netns else ''}; CPU µs per request")  # fmt: skip
    pl.print_median_table(med, sizes, names,
                          f"{'size':>7} {'proxy':<15} {'proxy µs/req':>12} {'ms/MiB':>7} {'origin':>8} {'client':>8} {'kthr':>7} {'sum':>8} {'req/s':>8}",
                          lambda name, m: f"{name:<15} {m['proxy_us']:12.1f} {m['proxy_ms_per_mib']:7.3f} {m['origin_us']:8.1f}"
                                          f" {m['client_us']:8.1f} {m['kthreads_us']:7.1f}"
                                          f" {m['proxy_us'] + m['origin_us'] + m['client_us'] + m['kthreads_us']:8.1f} {m['rps']:8.0f}")  # fmt: skip
    print("\nratios of medians (proxy CPU per request)")
    for n in sizes:
        p = lambda name: med.get((n, name), {}).get("proxy_us")  # noqa: E731
        pairs = (("weft-splice", "base-splice"), ("weft-copy", "base-copy"),  # this build against --baseline
                 ("weft-splice", "haproxy-splice"), ("weft-copy", "haproxy-copy"), ("base-splice", "haproxy-splice"))
        parts = pl.median_ratios(med, n, pairs)
        for x, y in (("weft-splice", "weft-copy"), ("haproxy-splice", "haproxy-copy"), ("base-splice", "base-copy")):
            if p(x) and p(y):
                parts.append(f"{x.split('-')[0]} splice saves {100 * pl.saving(p(x), p(y)):.0f} %")
        others = [x for x in names if x not in ("weft-splice", "weft-copy", "haproxy-splice", "haproxy-copy", "base-splice", "base-copy")]
        for x in others:
            if p(x) and p("weft-splice"):
                parts.append(f"weft-splice / {x} {p('weft-splice') / p(x):.2f}")
        # With the kernel's own threads counted (sockmap moves work there).
        pk = lambda name: p(name) + med[(n, name)]["kthreads_us"] if p(name) and med[(n, name)].get("kthreads_us") is not None else None  # noqa: E731
        for x in variants_of(names):
            if pk(x) and pk("weft-splice"):
                parts.append(f"{x} / weft-splice {p(x) / p('weft-splice'):.2f} ({pk(x) / pk('weft-splice'):.2f} with kthr)")
        print(f"{pl.size_name(n):>7}: " + "; ".join(parts))
    if weft_stats:
        print("\nweft system calls per request (whole run, from --stats-on-exit)")
        for name, st in weft_stats.items():
            tot = st.get("total", {})
            reqs = max(tot.get("requests", 0), 1)
            calls = tot.get("syscalls", {})
            line = ", ".join(f"{k} {v / reqs:.2f}" for k, v in sorted(calls.items(), key=lambda kv: -kv[1]) if v)
            print(f"  {name}: {line}; body bytes {pl.body_paths(tot)}")
    if profiles:
        report_profiles(profiles, med)
    if a.json:
        with open(a.json, "w") as f:
            medians = [{"size": n, "proxy": name, **m} for (n, name), m in med.items()]
            json.dump({"config": vars(a), "samples": samples, "medians": medians, "weft_stats": weft_stats, "profiles": profiles}, f, indent=1)


if __name__ == "__main__":
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(20000, hard), hard))
    main()
