#!/usr/bin/env python3
"""Kernel memory a client that stops reading makes `weft proxy` hold (issue 27).

Two probes, each under every `--splice` mode given:

- tunnel: one CONNECT tunnel; the upstream writes as fast as it can (at most
  LIMIT bytes), the client (SO_RCVBUF 64 KiB) reads the 200 and nothing more.
  Prints, each second for SECONDS, what the upstream has written, the change
  in /proc/net/sockstat's TCP `mem` and in MemAvailable.
- bodies: CLIENTS clients each ask `weft origin` for a no-store body of
  BODY bytes and read nothing; after SECONDS, the change in MemAvailable.

Under `--splice on` TCP's buffers hold the sender back; under `sockmap` the
destination's psock queue has no bound (docs/proxy.md, "In-kernel tunnels"),
so a tunnel's upstream writes until LIMIT. MemAvailable is the whole
machine's: run it on a quiet one.

  python3 scripts/slow_reader_memory.py [--weft target/release/weft]
        [--modes sockmap,on] [--probe tunnel,bodies] [--limit 400MiB]
"""
import argparse, os, socket, subprocess, threading, time

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20


def meminfo_available():
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise SystemExit("no MemAvailable in /proc/meminfo")


def tcp_mem():
    for line in open("/proc/net/sockstat"):
        if line.startswith("TCP:"):
            w = line.split()
            return int(w[w.index("mem") + 1]) * 4096
    raise SystemExit("no TCP line in /proc/net/sockstat")


def start(cmd):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    if not line:
        raise SystemExit(f"{cmd[0]} {cmd[1]} did not start: {' '.join(cmd)}")
    return p, int(line.rsplit(":", 1)[1])


def stop(*procs):
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def tunnel(a, mode):
    up = socket.socket()
    up.bind(("127.0.0.1", 0))
    up.listen(1)
    up.settimeout(10)
    uport = up.getsockname()[1]
    written = [0]

    def feed():
        try:
            c, _ = up.accept()
            c.settimeout(a.seconds + 5)
            chunk = b"x" * 65536
            while written[0] < a.limit:
                written[0] += c.send(chunk)
        except OSError:
            pass  # the proxy stopped: the probe is over

    threading.Thread(target=feed, daemon=True).start()
    proxy, port = start([a.weft, "proxy", "--listen", "127.0.0.1:0", "--workers", "1", "--splice", mode,
                         "--connect-ports", str(uport)])
    mem0, tcp0 = meminfo_available(), tcp_mem()
    cl = socket.socket()
    try:
        cl.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        cl.connect(("127.0.0.1", port))
        cl.settimeout(10)
        cl.sendall(f"CONNECT 127.0.0.1:{uport} HTTP/1.1\r\nHost: 127.0.0.1:{uport}\r\n\r\n".encode())
        head = cl.recv(200)
        if not head.startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"tunnel under --splice {mode}: the proxy answered {head[:60]!r}")
        for i in range(a.seconds):
            time.sleep(1)
            print(f"tunnel  --splice {mode:8} t={i + 1}s  upstream wrote {written[0] / MIB:7.1f} MiB  "
                  f"TCP mem {(tcp_mem() - tcp0) / MIB:+7.1f} MiB  MemAvailable {(meminfo_available() - mem0) / MIB:+8.1f} MiB",
                  flush=True)
    finally:
        cl.close()
        stop(proxy)
        up.close()


def bodies(a, mode):
    origin, oport = start([a.weft, "origin", "--listen", "127.0.0.1:0", "--cache-control", "no-store"])
    proxy, port = start([a.weft, "proxy", "--listen", "127.0.0.1:0", "--workers", "1", "--splice", mode,
                         "--upstream", f"127.0.0.1:{oport}"])
    mem0 = meminfo_available()
    clients = []
    try:
        for _ in range(a.clients):
            cl = socket.socket()
            cl.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            cl.connect(("127.0.0.1", port))
            cl.sendall(f"GET /size/{a.body} HTTP/1.1\r\nHost: probe\r\n\r\n".encode())
            clients.append(cl)
        time.sleep(a.seconds)
        print(f"bodies  --splice {mode:8} {a.clients} clients x {a.body / MIB:.1f} MiB, none read: "
              f"MemAvailable {(meminfo_available() - mem0) / MIB:+8.1f} MiB", flush=True)
    finally:
        for cl in clients:
            cl.close()
        stop(proxy, origin)


def size(text):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    try:
        for u, m in units.items():
            if text.endswith(u):
                return int(text[: -len(u)]) * m
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 8000000, 64KiB, 400MiB)") from None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weft", default=os.path.join(HERE, "..", "target", "release", "weft"))
    ap.add_argument("--modes", default="sockmap,on", help="--splice modes, comma-separated")
    ap.add_argument("--probe", default="tunnel,bodies", help="tunnel, bodies or both")
    ap.add_argument("--seconds", type=int, default=4, help="how long each probe waits")
    ap.add_argument("--limit", type=size, default=400 * MIB, help="most bytes the tunnel's upstream writes")
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--body", type=size, default=8_000_000, help="body size (at most 8 MiB goes in the kernel)")
    a = ap.parse_args()
    probes = {"tunnel": tunnel, "bodies": bodies}
    for p in a.probe.split(","):
        if p not in probes:
            ap.error(f"--probe: unknown probe {p!r} (tunnel, bodies)")
    for m in a.modes.split(","):
        if m not in ("sockmap", "on", "off", "auto"):
            ap.error(f"--modes: unknown --splice mode {m!r} (sockmap, on, off, auto)")
    a.weft = os.path.abspath(a.weft)
    if not os.access(a.weft, os.X_OK):
        raise SystemExit(f"{a.weft}: not found; run `cargo build --release` or pass --weft")
    for probe in a.probe.split(","):
        for mode in a.modes.split(","):
            probes[probe](a, mode)
            time.sleep(1)  # let the kernel free the last probe's buffers


if __name__ == "__main__":
    main()
