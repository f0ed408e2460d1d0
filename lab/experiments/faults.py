"""faults: fault injection against weft proxy and weft front (issue 17 §4),
each fault with its expected outcome asserted and counted:

- origin reset mid-body (`weft origin --abort 1`): the client's response is
  cut so it cannot look complete, and nothing is cached;
- origin stall (`X-Weft-Think: 5s` against `--upstream-timeout 1s`): 504
  after the timeout;
- client abort during KeepCopy (`--splice on`): the client reads the head
  and leaves; the object completes in the cache (the next request is a hit);
- disk full in `--cache-dir` (a 1 MiB tmpfs, as root only): answers keep
  coming from memory, the failed writes are counted, no damaged file stays
  (a restart on the directory indexes every file left and removes none);
- descriptor exhaustion (`prlimit --nofile=64`): connections past the
  limit are refused or queued (not all of them answered), the ones open
  keep working, and new ones succeed again once descriptors free up;
- a back-end killed under `weft front` while `weft load` runs: only the
  requests in flight on it fail (at most the client count), the rest
  succeed on the other back-end.

One command (`python3 -m lab run faults`; `--quick` is the same, about a
minute); results in docs/results.md.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time

from .. import core, proxylab as pl, servers

NAME = "faults"
DESCRIPTION = "issue 17: fault injection (origin reset and stall, client abort during KeepCopy, disk full, fd exhaustion, back-end killed under front)"


def request(addr: str, path: str, headers: str = "", read_body: bool = True, timeout: float = 10.0) -> tuple[int, int, int, bool]:
    """GET path over a fresh connection: (status, Content-Length, body bytes
    received, whether the connection ended cleanly after the body)."""
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=timeout)
    try:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: faults\r\n{headers}Connection: close\r\n\r\n".encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                return (0, 0, 0, False)
            buf += chunk
        head, body = buf.split(b"\r\n\r\n", 1)
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v)
        if not read_body:
            return (status, length, len(body), False)
        got, clean = len(body), True
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                clean = False
                break
            if not chunk:
                break
            got += len(chunk)
        return (status, length, got, clean)
    finally:
        s.close()


def counter(rs: servers.RunningServer, key: str) -> int:
    return int((rs.admin_stats() or {}).get("total", {}).get(key, 0))


def origin_reset(pool, out: dict) -> list[str]:
    origin = pool.start(servers.ServerSpec("origin abort", "weft-origin", {"extra": ["--abort", "1"]}))
    rs = pool.start(pl.weft_reverse("proxy", origin.addr, "auto"))
    status, length, got, clean = request(rs.addr, "/size/1000000/c60/reset.bin")
    again = request(rs.addr, "/size/1000000/c60/reset.bin")
    out["origin_reset"] = {"status": status, "length": length, "received": got, "clean_end": clean, "stored": counter(rs, "stored"),
                           "upstream_aborts": counter(rs, "sessions_upstream_abort"), "second_received": again[2]}  # fmt: skip
    pool.stop(rs)
    pool.stop(origin)
    p = []
    if got >= length:
        p.append(f"origin reset: the client's response looked complete ({got} of {length} bytes)")
    if out["origin_reset"]["stored"]:
        p.append("origin reset: a cut response was stored")
    return p


def origin_stall(pool, origin, out: dict) -> list[str]:
    rs = pool.start(pl.weft_reverse("proxy stall", origin.addr, "auto", "--upstream-timeout", "1s"))
    t0 = time.monotonic()
    status, *_ = request(rs.addr, "/size/100/stall.bin", "X-Weft-Think: 5s\r\n")
    took = time.monotonic() - t0
    out["origin_stall"] = {"status": status, "seconds": round(took, 2), "errors_504": counter(rs, "errors_504")}
    pool.stop(rs)
    return [] if status == 504 and 0.8 <= took < 4.5 else [f"origin stall: {status} after {took:.1f}s (want 504 after ~1s)"]


def client_abort(pool, origin, out: dict) -> list[str]:
    rs = pool.start(pl.weft_reverse("proxy keepcopy", origin.addr, "on"))
    path = "/size/800000/c600/abort.bin"
    request(rs.addr, path, read_body=False)  # head, then gone
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and counter(rs, "stored") == 0:
        time.sleep(0.1)
    status, length, got, _ = request(rs.addr, path)
    hits = counter(rs, "hits")
    out["client_abort"] = {"stored": counter(rs, "stored"), "orphan_fills": counter(rs, "sessions_orphan_fill"), "second_status": status,
                           "second_complete": got == length, "hits": hits}  # fmt: skip
    pool.stop(rs)
    ok = out["client_abort"]["stored"] >= 1 and hits >= 1 and got == length
    return [] if ok else [f"client abort during KeepCopy: {out['client_abort']}"]


def disk_full(pool, origin, scratch: str, out: dict) -> list[str]:
    if os.geteuid() != 0 or not shutil.which("mount"):
        out["disk_full"] = {"skipped": "needs root to mount a small tmpfs"}
        return []
    mnt = os.path.join(scratch, "small-disk")
    os.makedirs(mnt, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt], capture_output=True).returncode != 0:
        out["disk_full"] = {"skipped": "mount failed"}
        return []
    try:
        spec = pl.weft_reverse("proxy disk", origin.addr, "auto", "--cache-dir", mnt, "--cache-dir-size", "64MiB")
        rs = pool.start(spec)
        statuses = [request(rs.addr, f"/size/300000/c600/full{i}.bin")[0] for i in range(8)]
        hits = [request(rs.addr, f"/size/300000/c600/full{i}.bin")[0] for i in range(8)]
        doc = rs.admin_stats() or {}
        stats = doc.get("total", {})
        pool.stop(rs)
        # Object files (the directory's `lock` file aside).
        left = sum(len([f for f in fs if f != "lock"]) for _, _, fs in os.walk(mnt))
        # A restart indexes the directory and removes any file that is not
        # whole: none may be found (no partial file was left by the full disk).
        again = pool.start(spec)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "indexed in" not in again.log_text():
            time.sleep(0.1)
        indexed = re.search(r"(\d+) objects .* indexed in .*, (\d+) damaged files removed", pool.stop(again))
        objects, damaged = (int(indexed[1]), int(indexed[2])) if indexed else (None, None)
        out["disk_full"] = {"statuses": sorted(set(statuses + hits)), "memory_hits": stats.get("hits", 0), "store": doc.get("store"),
                            "files_left": left, "indexed_at_restart": objects, "damaged_at_restart": damaged}  # fmt: skip
        p = [] if set(statuses + hits) == {200} and stats.get("hits", 0) >= 8 else [f"disk full: {out['disk_full']}"]
        if damaged != 0 or objects != left:
            p.append(f"disk full: a partial file was left ({damaged} damaged, {objects} indexed of {left} files)")
        return p
    finally:
        subprocess.run(["umount", "-l", mnt], capture_output=True)


def fd_exhaustion(lab: core.Lab, scratch: str, out: dict) -> list[str]:
    www = os.path.join(scratch, "fd-www")
    os.makedirs(www, exist_ok=True)
    with open(os.path.join(www, "a.txt"), "w") as f:
        f.write("a\n")
    p = subprocess.Popen(["prlimit", "--nofile=64", lab.weft, "serve", www, "--listen", "127.0.0.1:0", "--workers", "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        line = p.stdout.readline().decode()
        addr = line.split("listening on ")[1].strip()
        host, port = addr.rsplit(":", 1)
        # The connection that stays: its file is open in the cache before
        # the descriptors run out.
        first = socket.create_connection((host, int(port)), timeout=5)
        first.sendall(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n")
        warm = first.recv(4096).startswith(b"HTTP/1.1 200")
        held = [first]
        for _ in range(120):
            try:
                held.append(socket.create_connection((host, int(port)), timeout=2))
            except OSError:
                break
        crowd = held[1:]
        for s in crowd:
            try:
                s.sendall(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n")
            except OSError:
                pass
        first.sendall(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n")
        existing_ok = first.recv(4096).startswith(b"HTTP/1.1 200")
        # A second for the server to answer what it can; then each new
        # connection was answered, refused (closed or reset), or is still
        # waiting in the backlog.
        time.sleep(1.0)
        answered = refused = 0
        for s in crowd:
            # Non-blocking: a socket with a timeout would wait it out on EAGAIN.
            s.setblocking(False)
            try:
                got = s.recv(16)
            except BlockingIOError:
                continue
            except OSError:
                got = b""
            if got.startswith(b"HTTP/1.1 200"):
                answered += 1
            elif not got:
                refused += 1
        for s in crowd:
            s.close()
        time.sleep(0.5)
        recovered = request(addr, "/a.txt")[0] == 200
        out["fd_exhaustion"] = {"opened": len(held), "warm": warm, "new_answered": answered, "new_refused": refused,
                                "new_queued": len(crowd) - answered - refused, "existing_connection_served": existing_ok,
                                "recovered": recovered}  # fmt: skip
        first.close()
        problems = [] if existing_ok and recovered else [f"descriptor exhaustion: {out['fd_exhaustion']}"]
        if answered >= len(crowd):
            problems.append(f"descriptor exhaustion: the limit did not bite ({answered} of {len(crowd)} new connections answered)")
        return problems
    finally:
        p.kill()
        p.wait()


def backend_killed(lab: core.Lab, pool, scratch: str, out: dict) -> list[str]:
    backs = [pool.start(servers.ServerSpec(f"backend {i}", "weft-origin", {"extra": ["--think", "20ms"]})) for i in range(2)]
    front = pool.start(servers.ServerSpec("front", "weft-front", {"extra": [a for b in backs for a in ("--backend", b.addr)]}))
    clients = 8
    args = ["--clients", str(clients), "--duration", "6s", "--timeout", "10s"]
    import threading

    box: dict = {}
    t = threading.Thread(target=lambda: box.update(run=pl.run_weft_load(lab.weft, f"http://{front.addr}/size/1000/k.bin", args, scratch=scratch, timeout_s=60)))
    t.start()
    time.sleep(2.5)
    backs[0].popen.kill()
    t.join()
    doc = box["run"].doc
    replies = doc.get("replies", {})
    errors = int(doc.get("error_details", {}).get("total", 0)) + replies.get("5xx", 0)
    out["backend_killed"] = {"replies": replies.get("total", 0), "2xx": replies.get("2xx", 0), "failed": errors, "clients": clients}
    pool.stop(front)
    ok = errors <= clients and replies.get("2xx", 0) > 100
    return [] if ok else [f"back-end killed: {errors} failed (at most {clients}, those in flight): {out['backend_killed']}"]


def run(lab: core.Lab) -> dict:
    lab.prepare()
    scratch = os.path.join(lab.scratch, "faults")
    os.makedirs(scratch, exist_ok=True)
    out: dict = {}
    problems: list[str] = []
    with lab.pool(lab.scratch) as pool:
        origin = pool.start(servers.ServerSpec("weft origin", "weft-origin", {}))
        for name, f in (("origin reset mid-body", lambda: origin_reset(pool, out)),
                        ("origin stall", lambda: origin_stall(pool, origin, out)),
                        ("client abort during KeepCopy", lambda: client_abort(pool, origin, out)),
                        ("disk full in --cache-dir", lambda: disk_full(pool, origin, scratch, out)),
                        ("descriptor exhaustion", lambda: fd_exhaustion(lab, scratch, out)),
                        ("back-end killed under weft front", lambda: backend_killed(lab, pool, scratch, out))):  # fmt: skip
            try:
                p = f()
            except Exception as e:  # a fault scenario that breaks is a problem, not a crash of the lab
                p = [f"{name}: {type(e).__name__}: {e}"]
            problems += p
            lab.log(f"  {name}: {'ok' if not p else '; '.join(p)}")
    d = lab.results_dir
    from .. import report

    report.write_json(os.path.join(d, "runs.json"), {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "runs": [out], "problems": problems})
    md = [f"# {NAME}", "", "| fault | outcome |", "| --- | --- |"] + [f"| {k} | `{v}` |" for k, v in out.items()]
    md += ["", "Problems: " + ("none" if not problems else "; ".join(problems))]
    report.write_summary(d, md)
    lab.log(f"{NAME}: {len(out)} faults, {len(problems)} problem(s)")
    return {"problems": len(problems), "weft_problems": len(problems)}
