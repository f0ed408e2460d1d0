#!/usr/bin/env python3
"""CPU per MiB of CONNECT tunnels, 1 MiB transfers: `weft proxy --splice on`
(splice(2) per chunk) against `--splice sockmap` (BPF sk_skb redirect), issue 27.

Each tunnel carries 1 MiB client -> echo upstream -> client (2 MiB through
the proxy), TUNNELS tunnels CONC at a time; the two modes alternate for
ROUNDS rounds and the medians are reported.

How kernel time is counted. This kernel samples CPU time at the tick
without IRQ time accounting, so softirq work is charged to whichever task
it interrupts (and to /proc/stat's softirq column). The two modes put the
same kernel work in different tasks: with splice, weft's own system calls
send, and the loopback receive softirq runs in its context; with sockmap,
the verdict program runs in the softirq of the *sender's* receive (the load
generator's or the upstream's context) and the psock worker sends from a
kworker. So the script reports, per MiB moved:

  weft      the proxy process (all threads; /proc/PID/task/*/schedstat, ns);
  involved  weft + this script's process (the load generator and the echo
            upstream, threads included; os.times) + every kworker and
            ksoftirqd thread (schedstat): all the CPU the tunnels cost,
            wherever the kernel ran it;
  machine   /proc/stat busy time of the whole machine (noisy when others
            run: reference only).

A third mode, `direct`, runs the same tunnels straight to the upstream (no
proxy): its `involved` is what the load generator, the upstream and
loopback TCP cost anyway. The forwarding cost of a mode is its `involved`
minus direct's; the target (issue 27) is sockmap's <= 0.5x splice's. The
last line gives sockmap's forwarding cost less weft's own: what it would
cost if weft's process cost nothing.

  python3 scripts/sockmap_bench.py [--quick] [--weft target/release/weft]
                                   [--baseline /tmp/weft-old] [--size MIB]

--size N makes each tunnel carry N MiB each way (default 1; the tunnel
count shrinks so a round moves about as much): past 2 MiB a direction meets
the middle of its redirect budget and weft raises it, past 4 MiB a
destination slower than its source is taken over (docs/proxy.md, "Bounding
what a tunnel pins"), so a long --size measures what the bound costs.

--baseline (as in proxy_bench.py and serve_bench.py; also spelled
--weft-before) adds a fourth mode, `sockmap` with another build (a copy kept
from before a change), alternating with the others in the same run, so a
change's before and after are measured against the same anchors.
"""
import argparse, os, socket, statistics, subprocess, sys, threading, time

TICK = os.sysconf("SC_CLK_TCK")
MIB = 1 << 20


def task_ns(pid):
    """Run time of every live thread of `pid`, in seconds."""
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(open(f"/proc/{pid}/task/{t}/schedstat").read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9


def kernel_threads():
    """Run time of every kworker and ksoftirqd thread, in seconds."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            comm = open(f"/proc/{pid}/comm").read()
            if comm.startswith(("kworker", "ksoftirqd")):
                total += int(open(f"/proc/{pid}/schedstat").read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9


def self_cpu():
    t = os.times()
    return t.user + t.system


def machine_busy():
    v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    idle = v[3] + v[4]
    return (sum(v[:8]) - idle) / TICK


def echo_server():
    l = socket.socket()
    l.bind(("127.0.0.1", 0))
    l.listen(512)

    def serve(s):
        while True:
            d = s.recv(262144)
            if not d:
                break
            s.sendall(d)
        s.shutdown(socket.SHUT_WR)
        s.close()

    def accept():
        while True:
            s, _ = l.accept()
            threading.Thread(target=serve, args=(s,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return l.getsockname()[1]


def tunnel(proxy, port, data):
    """One round trip of `data` through the proxy (proxy None: straight to the
    upstream, the baseline)."""
    c = socket.create_connection(("127.0.0.1", proxy or port))
    if proxy:
        c.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += c.recv(1)
        assert head.startswith(b"HTTP/1.1 200"), head

    def w():
        c.sendall(data)
        c.shutdown(socket.SHUT_WR)

    t = threading.Thread(target=w)
    t.start()
    got = 0
    c.settimeout(30)
    while True:
        d = c.recv(262144)
        if not d:
            break
        got += len(d)
    t.join()
    c.close()
    assert got == len(data), (got, len(data))


def run(weft, mode, tunnels, conc, port, size):
    if mode == "direct":
        return measure(None, None, mode, tunnels, conc, port, size)
    weft, mode = (weft[1], "sockmap") if mode == "sockmap-before" else (weft[0], mode)
    p = subprocess.Popen([weft, "proxy", "--listen", "127.0.0.1:0", "--workers", "1", "--splice", mode,
                          "--connect-ports", str(port), "--stats-on-exit"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    proxy = int(line.rsplit(":", 1)[1])
    return measure(p, proxy, mode, tunnels, conc, port, size)


def measure(p, proxy, mode, tunnels, conc, port, size):
    """Run the tunnels (`size` MiB each way) through `proxy` (process `p`),
    or straight to the upstream when both are None; CPU per MiB moved."""
    data = os.urandom(size * MIB)
    tunnel(proxy, port, data)  # warm-up (loads the BPF program in sockmap mode)
    wcpu = (lambda: task_ns(p.pid)) if p else (lambda: 0.0)
    w0, s0, k0, m0, t0 = wcpu(), self_cpu(), kernel_threads(), machine_busy(), time.time()
    left = [tunnels]
    lock = threading.Lock()
    failed = []

    def worker():
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            try:
                tunnel(proxy, port, data)
            except (OSError, AssertionError) as e:
                failed.append(repr(e))

    ts = [threading.Thread(target=worker) for _ in range(conc)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    w1, s1, k1, m1, t1 = wcpu(), self_cpu(), kernel_threads(), machine_busy(), time.time()
    err = ""
    if p:
        p.terminate()
        _, err = p.communicate(timeout=20)
    stats = next((l for l in err.splitlines() if l.startswith('{"total"')), "")
    mib = 2 * (tunnels - len(failed)) * size  # each tunnel moves `size` MiB each way
    weft = w1 - w0
    return {"mode": mode, "mib": mib, "secs": t1 - t0,
            "weft": 1000 * weft / mib,
            "involved": 1000 * (weft + (s1 - s0) + (k1 - k0)) / mib,
            "machine": 1000 * (m1 - m0) / mib,
            "sockmap_used": '"sockmap_sessions":0,' not in stats and '"sockmap_sessions"' in stats,
            "takeovers": int(stats.split('"sockmap_takeovers":', 1)[1].split(",", 1)[0]) if '"sockmap_takeovers":' in stats else 0,
            "unavailable": next((l for l in err.splitlines() if "sockmap unavailable" in l), ""),
            # A mismatch (docs/proxy.md: the kernel forwarded a byte twice)
            # resets that tunnel and turns sockmap off for the process.
            "warnings": [l for l in err.splitlines() if "--splice sockmap:" in l]
                        + ([f"{len(failed)} tunnel(s) failed, first: {failed[0]}"] if failed else [])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--weft", default="target/release/weft")
    ap.add_argument("--baseline", "--weft-before", dest="baseline",
                    help="another weft binary, run in sockmap mode as a fourth mode (sockmap-before)")
    ap.add_argument("--size", type=int, default=1, help="MiB each tunnel carries each way (1 to 256)")
    a = ap.parse_args()
    if not 1 <= a.size <= 256:
        sys.exit("sockmap_bench.py: --size must be 1 to 256 (MiB)")
    tunnels, conc, rounds = (100, 4, 3) if a.quick else (400, 8, 5)
    tunnels = max(conc, tunnels // a.size)
    port = echo_server()
    runs = {"direct": [], "on": [], "sockmap": []}
    if a.baseline:
        runs["sockmap-before"] = []
    for _ in range(rounds):
        for m in runs:
            runs[m].append(run((a.weft, a.baseline), m, tunnels, conc, port, a.size))
    med = {}
    for m, rs in runs.items():
        med[m] = {k: statistics.median(r[k] for r in rs) for k in ("weft", "involved", "machine", "secs")}
        used = all(r["sockmap_used"] for r in rs) if m.startswith("sockmap") else None
        print(f"{m:14} {rs[0]['mib']:5d} MiB x {rounds}  median ms/MiB: weft {med[m]['weft']:.3f}  "
              f"involved {med[m]['involved']:.3f}  machine {med[m]['machine']:.3f}  "
              f"({med[m]['secs']:.2f} s/round)" + ("" if used is None else f"  sockmap used: {used}")
              + (f"  takeovers {sum(r['takeovers'] for r in rs)}" if m.startswith("sockmap") else ""))
        for r in rs:
            if r["unavailable"]:
                print("  " + r["unavailable"])
                break
        for line in {w for r in rs for w in r["warnings"]}:
            print("  " + line)
    on, sm, base = med["on"], med["sockmap"], med["direct"]["involved"]
    fon, fsm = on["involved"] - base, sm["involved"] - base
    print(f"forwarding cost (involved - direct) ms/MiB: splice {fon:.3f}  sockmap {fsm:.3f}")
    if fon > 0:
        print(f"sockmap/splice forwarding cost: {fsm / fon:.2f}x  (target <= 0.5x)")
    if on["weft"] > 0:
        print(f"sockmap/splice weft alone: {sm['weft'] / on['weft']:.2f}x")
    if fon > 0:
        # What sockmap would cost with weft's own process at zero: the
        # kernel's forwarding (the verdict in the senders' softirq, the psock
        # worker's sends), which no change in weft can take away.
        print(f"sockmap's forwarding outside weft: {fsm - sm['weft']:.3f} ms/MiB = {(fsm - sm['weft']) / fon:.2f}x splice's forwarding cost")
    if "sockmap-before" in med and fon > 0 and on["weft"] > 0:
        bf = med["sockmap-before"]
        print(f"sockmap-before/splice forwarding cost: {(bf['involved'] - base) / fon:.2f}x  "
              f"weft alone: {bf['weft'] / on['weft']:.2f}x  ({a.baseline})")


if __name__ == "__main__":
    sys.exit(main())
