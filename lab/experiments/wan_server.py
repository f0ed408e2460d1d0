"""wan-server: server throughput vs network delay and vs number of clients
(thesis 004, Figs. 2.12 and 4.12), weft serve (sendfile, copy) and nginx.

Two namespaces joined by `weft wan` (lab/netlab.py): the server's and the
clients'. `weft load --clients N` (closed loop, keep-alive) requests the
files of a data set in turn. Points: round-trip delay 0–150 ms at 64 clients
(Fig. 2.12), and 64–900 clients at 100 ms (Fig. 4.12). Reported: replies/s
and Mbit/s per server; nginx is the anchor of the same run.

Full form: 3 servers x 10 points x 3 runs x 30 s, data set of 1,000 files
(about 90 MB, sizes 4 KiB–1 MiB): about 50 minutes. `--quick`: 200 files of
16 KiB, delays 0 and 100 ms at 64 clients, 5 s each, one run (about 60 s).
Not done yet: the thesis's memory limit (cgroup v1) and the socket send
buffer as a setting (`weft serve` has no `--send-buffer` flag yet).
"""

from __future__ import annotations

import json
import os
import time

from .. import core, netlab, report, servers

NAME = "wan-server"
DESCRIPTION = "004 Figs. 2.12/4.12: throughput vs delay and vs clients, weft serve sendfile/copy and nginx, on a weft wan network"

SERVERS = ["weft sendfile", "weft copy", "nginx"]


def data_set(www: str, quick: bool) -> list[tuple[str, int]]:
    files = []
    n = 200 if quick else 1000
    for i in range(n):
        size = 16 << 10 if quick else [4 << 10, 16 << 10, 64 << 10, 256 << 10][i % 4]
        name = f"f{i}.bin"
        core.make_file(os.path.join(www, name), size)
        files.append((name, size))
    return files


def start_server(lab, net, kind: str, www: str):
    devnull = open(os.devnull, "w")
    if kind.startswith("weft"):
        send = kind.split()[1]
        return net.popen("server", [lab.weft, "serve", www, "--listen", "0.0.0.0:8080", "--send", send, "--workers", "1"], stdout=devnull, stderr=devnull)
    run = os.path.join(lab.scratch, "nginx")
    os.makedirs(run, exist_ok=True)
    with open(os.path.join(servers.ANCHOR_DIR, "nginx_static_w1.conf")) as f:
        text = servers.render_template(f.read(), {"WWW": www, "RUN": run, "CONF": run, "PORT": "8080"})
    conf = os.path.join(run, "nginx.conf")
    with open(conf, "w") as f:
        f.write(text.replace("listen 127.0.0.1:8080", "listen 0.0.0.0:8080"))
    return net.popen("server", ["nginx", "-c", conf, "-p", run], stdout=devnull, stderr=devnull)


def measure(lab, net, urls: str, clients: int, seconds: float, mean_size: float) -> dict:
    out = os.path.join(lab.scratch, "load.json")
    argv = [lab.weft, "load", f"http://{net.addr('server')}:8080/", "--urls", urls, "--clients", str(clients), "--duration", f"{seconds}s", "--quiet", "--json", out]
    p = net.run("client", argv, timeout=seconds + 120)
    if p.returncode != 0:
        raise RuntimeError(f"weft load failed: {p.stderr.strip()[-300:]}")
    with open(out) as f:
        j = json.load(f)
    rps = j["replies"]["2xx"] / seconds
    return {"rps": rps, "mbit_s": rps * mean_size * 8 / 1e6, "replies_2xx": j["replies"]["2xx"], "requests": j["requests"], "rt_mean_ms": j["response_time_ms"]["mean"], "rt_cv": j["response_time_ms"].get("cv")}


def run(lab: core.Lab) -> dict:
    lab.prepare(commands=["nginx"])
    www = os.path.join(lab.scratch, "www")
    os.makedirs(www)
    files = data_set(www, lab.quick)
    urls = os.path.join(lab.scratch, "urls.txt")
    with open(urls, "w") as f:
        f.write("".join(f"/{n}\n" for n, _ in files))
    mean_size = sum(s for _, s in files) / len(files)
    if lab.quick:
        points, reps, secs = [(0, 64), (100, 64)], 1, 5.0
    else:
        points = [(d, 64) for d in (0, 20, 50, 100, 150)] + [(100, c) for c in (128, 256, 512, 900)]
        reps, secs = 3, 30.0
    rows = []
    for rtt, clients in points:
        link = {"a": "client", "b": "server", "delay": f"{rtt / 2:g}ms"}
        with netlab.WanNet(lab.weft, [{"name": "client"}, {"name": "server"}], [link], log=lab.log) as net:
            for kind in SERVERS:
                p = start_server(lab, net, kind, www)
                time.sleep(0.5)
                try:
                    for rep in range(reps):
                        m = measure(lab, net, urls, clients, secs, mean_size)
                        rows.append({"server": kind, "rtt_ms": rtt, "clients": clients, "rep": rep + 1, **m})
                        lab.log(f"  rtt {rtt:>3} ms {clients:>4} clients {kind:<14} rep {rep + 1}: {m['rps']:>8.0f} req/s {m['mbit_s']:>7.1f} Mbit/s")
                finally:
                    netlab.stop(p)
    med = report.group_medians(rows, ["server", "rtt_ms", "clients"], ["rps", "mbit_s", "rt_mean_ms"])
    report.write_json(os.path.join(lab.results_dir, "runs.json"), {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "runs": rows})
    report.write_csv(os.path.join(lab.results_dir, "runs.csv"), rows)
    report.write_csv(os.path.join(lab.results_dir, "medians.csv"), med)
    by = {(m["server"], m["rtt_ms"], m["clients"]): m for m in med}
    table = []
    for rtt, clients in points:
        row = [f"{rtt} ms", str(clients)]
        for s in SERVERS:
            m = by.get((s, rtt, clients))
            row.append("–" if m is None else f"{m['rps']:.0f} ({m['mbit_s']:.0f} Mbit/s)")
        table.append(row)
    problems = [r for r in rows if r["replies_2xx"] < r["requests"] * 0.99]
    md = [f"# {NAME}", "", f"{'Quick' if lab.quick else 'Full'} run, {reps} run(s) per point, median; {len(files)} files, mean {mean_size / 1024:.0f} KiB. Anchor: nginx, same network and run.", ""]
    md += [report.markdown_table(["RTT", "clients"] + SERVERS, table), ""]
    md += ["## Checks", "", f"- {len(problems)} run(s) with under 99 % 2xx" if problems else "- every run had at least 99 % 2xx replies", ""]
    md += ["## Versions", ""] + [f"- {k}: {v}" for k, v in lab.versions.items()] + [""]
    with open(os.path.join(lab.results_dir, "summary.md"), "w") as f:
        f.write("\n".join(md))
    return {"medians": med, "problems": len(problems)}
