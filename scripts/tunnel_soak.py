#!/usr/bin/env python3
"""Soak CONNECT tunnels through `weft proxy`, every byte checked (issue 27).

Runs ROUNDS rounds of TUNNELS tunnels (CONC at a time) through one
`weft proxy --splice MODE` (default sockmap), each 1 MiB each way through an
echo upstream, with scripts/tunnel_soak.c (built here with cc) as client
and upstream: a native load, fast enough to meet races the Python benches
do not. Every tunnel's bytes are its own and are compared at both ends.

What it tells: tunnels that came back exact, ended with a reset (weft found
a fault and did not pass the stream off as good), or ended cleanly with
other bytes (corrupt: a fault weft missed); and the proxy's
`sockmap_mismatches` and what it said. Exit 1 on a corrupt tunnel.

  python3 scripts/tunnel_soak.py [--weft target/release/weft] [--rounds 50]
        [--tunnels 400] [--conc 8] [--splice sockmap] [-- extra proxy flags]

This found a Linux 6.18 fault in `--splice sockmap` (the verdict handed the
start of an skb twice, about once in 20,000-40,000 tunnels): see
docs/proxy.md, "A kernel that forwards a byte twice". 50 rounds take about
a minute.
"""
import argparse, json, os, socket, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from lab import proc  # noqa: E402


def build(out_dir):
    src = os.path.join(HERE, "tunnel_soak.c")
    exe = os.path.join(out_dir, "tunnel_soak")
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        os.makedirs(out_dir, exist_ok=True)
        subprocess.run(["cc", "-O2", "-pthread", "-Wall", "-o", exe, src], check=True)
    return exe


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weft", default=os.path.join(HERE, "..", "target", "release", "weft"))
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--tunnels", type=int, default=400)
    ap.add_argument("--conc", type=int, default=8)
    ap.add_argument("--splice", default="sockmap")
    ap.add_argument("extra", nargs="*", help="more flags for weft proxy (after --)")
    a = ap.parse_args()
    exe = build(os.path.join(HERE, "..", "target", "soak"))
    upstream = free_port()
    proxy = subprocess.Popen(
        [a.weft, "proxy", "--listen", "127.0.0.1:0", "--workers", "1", "--splice", a.splice,
         "--connect-ports", str(upstream), "--stats-on-exit", *a.extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    port = int(proxy.stdout.readline().rsplit(":", 1)[1])
    before = proc.tree_cpu_sample(proxy.pid)
    totals = {"tunnels": 0, "exact": 0, "reset": 0, "corrupt": 0}
    faults = []
    t0 = time.time()
    try:
        for r in range(a.rounds):
            p = subprocess.run([exe, str(port), str(upstream), str(a.tunnels), str(a.conc), str(1 + r * a.tunnels)],
                               capture_output=True, text=True, timeout=300)
            words = p.stdout.split()
            for k, v in zip(words[::2], words[1::2]):
                totals[k] += int(v)
            faults += [l for l in p.stderr.splitlines() if l]
            print(f"\rround {r + 1}/{a.rounds}: {totals['tunnels']} tunnels, {totals['reset']} reset, "
                  f"{totals['corrupt']} corrupt ({time.time() - t0:.0f} s)", end="", file=sys.stderr, flush=True)
            if p.returncode not in (0, 2):
                sys.exit(f"\ntunnel_soak failed (exit {p.returncode}): {p.stderr[-500:]}")
        after = proc.tree_cpu_sample(proxy.pid)
        cpu, switches = proc.cpu_seconds_between(before, after), proc.switches_between(before, after)
    finally:
        proxy.terminate()
        _, err = proxy.communicate(timeout=30)
    print(file=sys.stderr)
    for line in faults[:20]:
        print("  " + line)
    said = [l for l in err.splitlines() if l.startswith("weft proxy:")]
    for line in said:
        print("  " + line)
    stats = next((json.loads(l) for l in err.splitlines() if l.startswith('{"total"')), {}).get("total", {})
    print(f"tunnels {totals['tunnels']}: exact {totals['exact']}, reset {totals['reset']}, corrupt {totals['corrupt']}; "
          f"proxy: sockmap_sessions {stats.get('sockmap_sessions')}, sockmap_mismatches {stats.get('sockmap_mismatches')}, "
          f"sockmap_declined {stats.get('sockmap_declined')}")
    n = max(totals["tunnels"], 1)
    calls = stats.get("syscalls", {})
    waits = sum(calls.get(k, 0) for k in ("epoll_wait", "io_uring_enter", "poll", "select"))
    print(f"proxy cost per tunnel: {cpu * 1e6 / n:.0f} µs CPU, {switches / n:.1f} times on a CPU, "
          f"{waits / n:.1f} event waits, {sum(calls.values()) / n:.1f} system calls")
    return 1 if totals["corrupt"] else 0


if __name__ == "__main__":
    sys.exit(main())
