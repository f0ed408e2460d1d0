#!/usr/bin/env python3
"""A request repeated right after its response ended must be a hit, on any
worker: counts how often the origin is asked twice for one cacheable path.

Each sequence starts `weft proxy --workers N` (without `--collapse`) in front
of an origin in this process (2-byte bodies, `max-age=3600`), fetches a few
paths on new connections, then each path once more, and counts the origin's
requests per path: more than one is a repeat that missed (before
2026-12-04 a worker stored an object only after its client had the last
byte, so another worker could miss in between; docs/results.md). Several
copies at once, beside CPU hogs, make the window show:

    for i in 1 2 3 4 5 6; do python3 scripts/repeat_hit.py --runs 500 & done; wait

Bounded: `--runs` sequences of ten requests, each proxy stopped after its
sequence, every socket with a timeout; progress every 100 sequences.
"""

import argparse
import collections
import os
import re
import socket
import subprocess
import sys
import threading

PATHS = ["/fresh/1", "/fresh/2", "/fresh/x/3", "/fresh-kept", "/other/4"]
BODY = b"v1"


class Origin:
    """Answers every GET with a 2-byte body, cacheable for an hour, and
    counts requests per path."""

    def __init__(self):
        self.counts = collections.Counter()
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            c, _ = self.sock.accept()
            c.settimeout(10)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    d = c.recv(4096)
                    if not d:
                        return
                    buf += d
                head, buf = buf.split(b"\r\n\r\n", 1)
                path = head.split(b" ")[1].decode()
                with self.lock:
                    self.counts[path] += 1
                c.sendall(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=3600\r\nETag: \"v1\"\r\n"
                          b"Content-Length: 2\r\n\r\n" + BODY)
        except OSError:
            return
        finally:
            c.close()


def fetch(port, path):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: h\r\n\r\n".encode())
        got = b""
        while not got.endswith(BODY):
            d = s.recv(4096)
            if not d:
                raise OSError(f"{path}: connection closed after {got!r}")
            got += d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--weft", default="target/release/weft", help="weft binary")
    ap.add_argument("--workers", type=int, default=2, help="proxy workers (two or more to see the race)")
    ap.add_argument("--runs", type=int, default=200, help="sequences (each a new proxy)")
    a = ap.parse_args()
    if not os.access(a.weft, os.X_OK):
        sys.exit(f"repeat_hit: no weft binary at {a.weft} (cargo build --release)")
    origin = Origin()
    missed = 0
    for run in range(a.runs):
        with origin.lock:
            origin.counts.clear()
        p = subprocess.Popen([a.weft, "proxy", "--listen", "127.0.0.1:0", "--upstream", origin.addr,
                              "--workers", str(a.workers)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            line = p.stdout.readline()
            m = re.search(r"listening on \S+:(\d+)", line)
            if not m:
                sys.exit(f"repeat_hit: weft proxy did not start: {line!r}")
            port = int(m.group(1))
            for path in PATHS + PATHS:
                fetch(port, path)
        finally:
            p.terminate()
            p.wait(timeout=10)
        with origin.lock:
            twice = {k: v for k, v in origin.counts.items() if v != 1}
        if twice:
            missed += 1
            print(f"sequence {run}: origin asked {twice}", flush=True)
        if (run + 1) % 100 == 0:
            print(f"[{run + 1}/{a.runs}] {missed} with a repeat that missed", file=sys.stderr, flush=True)
    print(f"{missed} of {a.runs} sequences had a repeat that missed")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
