"""zerocopy: `weft serve --zero-copy-send` on a veth pair with offloads off (issue 24).

Loopback copies every zero-copy send anyway (the receiver is local), so this
runs on `netlab`'s plain veth pair (`mode = "veth"`: MTU 1500, offloads off;
still one host: a receiver in the other namespace is local to the kernel too,
and the completions say whether it copied). One worker serves a 1 MiB file
(sent as mapped chunks) to `weft load --clients 4` in the client namespace;
for each setting the server's CPU per request (utime + stime from /proc) and
its `bytes_zerocopy` / `zerocopy_copied` counters; nginx (sendfile) in the
same run. Quick: 4 s per point, one round; full: 15 s, three rounds.

The full form also measures IO-Lite's checksum-cache stand-in (issue 24):
the object cache's ready-to-send responses (head and body kept per content
generation, `--object-cache`) on and off, for the 1 MiB file and for an
8 KiB one (`--clients 16`), where per-response work matters most; the
kernel computes checksums here (offloads off), so what the cache saves is
weft's own per-response work, not checksums.
"""

from __future__ import annotations

import os
import re
import subprocess
import time

from .. import core, netlab, report
from . import wan_server

NAME = "zerocopy"
DESCRIPTION = "issue 24: --zero-copy-send vs plain writev (mapped chunks) vs nginx sendfile, 1 MiB on a veth pair with offloads off"

# (label, weft flags or None for nginx, file, clients)
SETTINGS = [("weft writev", [], "1m.bin", 4), ("weft zero-copy", ["--zero-copy-send"], "1m.bin", 4), ("nginx sendfile", None, "1m.bin", 4)]
# Full form only: the object cache (ready-to-send responses) on and off.
OBJECT_SETTINGS = [
    ("weft object cache on", ["--object-cache", "64MiB"], "1m.bin", 4),
    ("weft object cache off", [], "8k.bin", 16),
    ("weft object cache on", ["--object-cache", "64MiB"], "8k.bin", 16),
    ("nginx sendfile", None, "8k.bin", 16),
]
SIZE = 1 << 20


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def start(lab, net, label: str, extra, www: str):
    if extra is not None:
        argv = [lab.weft, "serve", www, "--listen", "0.0.0.0:8080", "--workers", "1", "--stats-on-exit", *extra]
        return net.popen("server", argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True), None
    # The same nginx set-up as wan-server's, on the same kind of network.
    return wan_server.start_server(lab, net, "nginx", www), "nginx"


def worker_pid(p, pidfile) -> int:
    if pidfile is None:
        return p.pid  # `ip netns exec` execs weft: same pid
    for _ in range(50):
        # `daemon off`: the process started is the master; its child serves.
        kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
        if kids:
            return int(kids[0])
        time.sleep(0.1)
    raise RuntimeError("nginx worker not found")


def run(lab: core.Lab) -> dict:
    lab.prepare(commands=["nginx"])
    www = os.path.join(lab.scratch, "www")
    os.makedirs(www, exist_ok=True)
    core.make_file(os.path.join(www, "1m.bin"), SIZE)
    core.make_file(os.path.join(www, "8k.bin"), 8 << 10)
    secs, rounds = (4.0, 1) if lab.quick else (15.0, 3)
    settings = SETTINGS if lab.quick else SETTINGS + OBJECT_SETTINGS
    rows = []
    with netlab.WanNet(lab.weft, [{"name": "client"}, {"name": "server"}], [{"a": "client", "b": "server"}],
                       mode="veth", log=lab.log) as net:  # fmt: skip
        for rnd in range(rounds):
            for label, extra, name, clients in settings:
                url = f"http://{net.addr('server')}:8080/{name}"
                p, pidfile = start(lab, net, label, extra, www)
                time.sleep(0.7)
                try:
                    pid = worker_pid(p, pidfile)
                    t0 = cpu_ticks(pid)
                    out = net.run("client", [lab.weft, "load", url, "--clients", str(clients), "--duration", f"{secs:g}s"],
                                  timeout=secs + 60)  # fmt: skip
                    ticks = cpu_ticks(pid) - t0
                finally:
                    netlab.stop(p)
                err = p.stderr.read() if p.stderr else ""
                m = re.search(r"requests (\d+) replies (\d+)", out.stdout)
                replies = int(m.group(2)) if m else 0
                num = lambda k: int(x.group(1)) if (x := re.search(rf'"{k}":(\d+)', err)) else None  # noqa: E731
                row = {"setting": label, "file": name, "clients": clients, "round": rnd + 1, "replies": replies, "rps": replies / secs,
                       "us_per_req": ticks * 1e6 / os.sysconf("SC_CLK_TCK") / max(replies, 1),
                       "bytes_zerocopy": num("bytes_zerocopy"), "zerocopy_copied": num("zerocopy_copied")}  # fmt: skip
                lab.log(f"  {label:<21} {name:<6} round {rnd + 1}: {row['rps']:.0f} req/s, {row['us_per_req']:.0f} µs CPU/req,"
                        f" zero-copy bytes {row['bytes_zerocopy']}, copied completions {row['zerocopy_copied']}")  # fmt: skip
                rows.append(row)
    report.write_json(os.path.join(lab.results_dir, "runs.json"), {"experiment": NAME, "quick": lab.quick,
                      "versions": lab.versions, "runs": rows})  # fmt: skip
    table = [[r["setting"], r["file"], str(r["round"]), f"{r['rps']:.0f}", f"{r['us_per_req']:.1f}",
              str(r["bytes_zerocopy"] if r["bytes_zerocopy"] is not None else "–"),
              str(r["zerocopy_copied"] if r["zerocopy_copied"] is not None else "–")] for r in rows]  # fmt: skip
    md = [f"# {NAME}{' (quick)' if lab.quick else ''}", "",
          "One server worker, `weft load` (--clients 4 for the 1 MiB file, 16 for the 8 KiB one) across a veth pair (offloads off); same run.", "",
          report.markdown_table(["setting", "file", "round", "req/s", "µs server CPU/req", "zero-copy bytes",
                                 "copied completions"], table), ""] + report.versions_section(lab.versions)  # fmt: skip
    report.write_summary(lab.results_dir, md)
    return {"runs": rows}
