#!/usr/bin/env python3
"""CPU per MiB of CONNECT tunnels, 1 MiB transfers: `weft proxy --splice on`
(splice(2) per chunk) against `--splice sockmap` (BPF sk_skb redirect), issue 27.

Each tunnel carries 1 MiB client -> echo upstream -> client (2 MiB through
the proxy), TUNNELS tunnels CONC at a time. Reports per mode: the proxy
process's CPU (utime+stime from /proc/PID/stat) per MiB moved, and the
whole machine's busy CPU per MiB (/proc/stat; includes the softirq and
kworker time the sockmap redirect runs in, and the load generator and
upstream, which are the same in both modes).

  python3 scripts/sockmap_bench.py [--quick] [--weft target/release/weft]
"""
import argparse, os, socket, subprocess, sys, threading, time

TICK = os.sysconf("SC_CLK_TCK")
MIB = 1 << 20


def proc_cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


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
    c = socket.create_connection(("127.0.0.1", proxy))
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


def run(weft, mode, tunnels, conc, port):
    p = subprocess.Popen([weft, "proxy", "--listen", "127.0.0.1:0", "--workers", "1", "--splice", mode,
                          "--connect-ports", str(port), "--stats-on-exit"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    proxy = int(line.rsplit(":", 1)[1])
    data = os.urandom(MIB)
    tunnel(proxy, port, data)  # warm-up (loads the BPF program in sockmap mode)
    c0, m0, t0 = proc_cpu(p.pid), machine_busy(), time.time()
    left = [tunnels]
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            tunnel(proxy, port, data)

    ts = [threading.Thread(target=worker) for _ in range(conc)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    c1, m1, t1 = proc_cpu(p.pid), machine_busy(), time.time()
    p.terminate()
    _, err = p.communicate(timeout=20)
    stats = next((l for l in err.splitlines() if l.startswith('{"total"')), "")
    mib = 2 * tunnels  # each tunnel moves 1 MiB each way
    return {"mode": mode, "mib": mib, "secs": t1 - t0, "proxy_ms_per_mib": 1000 * (c1 - c0) / mib,
            "machine_ms_per_mib": 1000 * (m1 - m0) / mib, "sockmap_sessions": stats.count('"sockmap_sessions":0') == 0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--weft", default="target/release/weft")
    a = ap.parse_args()
    tunnels, conc = (40, 4) if a.quick else (400, 8)
    port = echo_server()
    res = [run(a.weft, m, tunnels, conc, port) for m in ("on", "sockmap")]
    for r in res:
        print(f"{r['mode']:8} {r['mib']:5d} MiB in {r['secs']:.2f}s  proxy CPU {r['proxy_ms_per_mib']:.3f} ms/MiB  "
              f"machine CPU {r['machine_ms_per_mib']:.3f} ms/MiB  sockmap used: {r['sockmap_sessions']}")
    on, sm = res
    if on["proxy_ms_per_mib"] > 0:
        print(f"sockmap/splice: proxy CPU {sm['proxy_ms_per_mib'] / on['proxy_ms_per_mib']:.2f}x, "
              f"machine CPU {sm['machine_ms_per_mib'] / on['machine_ms_per_mib']:.2f}x (target <= 0.5x)")


if __name__ == "__main__":
    sys.exit(main())
