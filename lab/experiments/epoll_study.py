"""epoll-study: the µserver study (paper 002, Figures 1–7 and Table 1) on weft.

Open loop with `weft load --rate` (httperf semantics: sessions start on a
fixed schedule whatever the server does; a request without progress for
--timeout is a client timeout), reply rate against offered request rate:

- one-byte workload: every request a new connection for a 1-byte file
  (Table 1's profile, where accept and close cost as much as read, says the
  study's clients did that), HTTP/1.0 so the server closes first, spread over
  16 source addresses (docs/load.md: one address cannot open more than
  ~10k connections/s on loopback with the client closing);
- SPECweb99-like: `weft load gen specweb99` file set, `--workload specweb99`
  sessions (30 % one request, 70 % 5–15 keep-alive requests; 7.3 requests per
  session), offered at rate / 7.3 sessions per second;
- each with 10,000 idle connections held by a second `weft load --idle`
  process (a process may hold at most 20,000 descriptors: never the one that
  measures), started after the server and waited for;
- accept-limit 1, 10, inf for weft epoll, epoll-batched and tracked
  (Figure 7), beside nginx with multi_accept off (its default) and on.

weft runs with each backend (`--workers 1`); beside it, in the same run, nginx
(Debian's binary, `use epoll`, the anchor) and nginx `use poll` / `use select`
(the same release built with those modules: Debian's has neither), h2o and
lighttpd, one worker each. The offered rates are fractions of a peak probed at
the start (closed loop against weft epoll), so the curves show the knee on
whatever machine runs them.

The targets of issue 4 are measured in a second phase, repeated (servers
rotated), median reported:
(a) peak reply rate, one-byte, closed loop at saturation, without and with
    10,000 idle connections, same server instance, back to back;
(b) the modern Table 1: system calls per reply by kind (weft's /stats) and
    server CPU per reply at one fixed offered rate below every knee;
(c) one-byte keep-alive (`weft load --clients 50`, like `wrk -c50`): server
    CPU per request, best weft backend against the best of nginx, h2o and
    lighttpd.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections import OrderedDict

from .. import core, env, loadgen, proc, report, servers

NAME = "epoll-study"
DESCRIPTION = "µserver study (002 Figs 1-7, Table 1): open-loop reply rate per backend, 10k idle conns, accept limits, syscalls/reply"

# Parts (`--only`), each short enough for one locked measurement slot; their
# rows merge into the same runs.json and summary.
PARTS = ["sweep-one-byte", "sweep-specweb99", "accept", "table1", "idle-peak"]
WORKLOADS = ["one-byte", "specweb99"]
PART_WORKLOADS = {"sweep-one-byte": ["one-byte"], "sweep-specweb99": ["specweb99"], "accept": ["one-byte"], "table1": ["one-byte"],
                  "idle-peak": []}  # fmt: skip
BACKENDS = ["select", "poll", "epoll", "epoll-et", "epoll-once", "epoll-batched", "uring", "tracked"]
SPECWEB_CALLS = 0.3 * 1 + 0.7 * 10  # mean requests per SPECweb99 session
SPECWEB_DIRS = 10  # 360 files, 51 MB: the whole set stays in memory, as in the study
IDLE = 10000
# Of the probed (closed-loop) peak. Five points: with 13 servers x 2 idle
# settings x 3 s a point, one workload's sweep fits a ~12-minute locked slot.
# The points go where the knees are (0.6-1.25 of weft epoll's peak); a server
# that is off the diagonal already at 0.6 (select and poll with 10,000 idle
# connections) shows that as a flat curve, which is the finding.
FRACTIONS = [0.6, 0.8, 0.95, 1.1, 1.25]
ACCEPT_LIMITS = ["1", "10", "inf"]
ACCEPT_BACKENDS = ["epoll", "epoll-batched", "tracked"]
TABLE1_FRACTION = 0.5  # fixed rate for Table 1, of the probed peak: below every knee
# Load processes per run: each has its own 20,000 descriptors (an overloaded
# server makes connections pile up at the client) and can run on either core.
CLIENT_PROCESSES = 2
SAT_BACKENDS = ["select", "poll", "epoll", "epoll-once", "uring", "tracked"]


def weft(backend: str, accept_limit: str | None = None) -> servers.ServerSpec:
    # Idle connections must not be timed out during a sweep (60 s default).
    extra = ["--idle-timeout", "600s"]
    label = f"weft {backend}"
    if accept_limit:
        extra += ["--accept-limit", accept_limit]
        label += f" accept {accept_limit}"
    return servers.ServerSpec(label, "weft", {"event": backend, "extra": extra})


def nginx_edits(use: str) -> list[tuple[str, str]]:
    """The anchor config with `use USE;`, idle connections kept 600 s, and
    for select no more connections than FD_SETSIZE (nginx refuses to start
    otherwise)."""
    edits = [("use epoll;", f"use {use};"), ("keepalive_timeout 300s;", "keepalive_timeout 300s;\n    client_header_timeout 600s;")]
    if use == "select":
        edits.append(("worker_connections 20000;", "worker_connections 1024;"))
    return edits


LIGHTTPD_EDITS = [("server.max-keep-alive-idle = 300", "server.max-keep-alive-idle = 300\nserver.max-read-idle = 600")]


def anchors(nginx_built: str | None, with_built_epoll: bool = False) -> list[servers.ServerSpec]:
    out = [servers.ServerSpec("nginx", "nginx", {"edits": nginx_edits("epoll")})]
    if nginx_built:
        if with_built_epoll:
            out.append(servers.ServerSpec("nginx epoll (built)", "nginx", {"binary": nginx_built, "edits": nginx_edits("epoll")}))
        out.append(servers.ServerSpec("nginx poll", "nginx", {"binary": nginx_built, "edits": nginx_edits("poll")}))
        out.append(servers.ServerSpec("nginx select", "nginx", {"binary": nginx_built, "edits": nginx_edits("select")}))
    out.append(servers.ServerSpec("h2o", "h2o"))
    out.append(servers.ServerSpec("lighttpd", "lighttpd", {"edits": LIGHTTPD_EDITS}))
    return out


class Plan:
    """What a full or quick run measures."""

    def __init__(self, quick: bool):
        self.quick = quick
        # Quick: a smoke test of every step (CI), not a figure: short points.
        self.point_s = 1.0 if quick else 3.0
        self.idle = 2000 if quick else IDLE
        self.fractions = [0.5, 0.95] if quick else FRACTIONS
        self.workloads = ["one-byte"] if quick else ["one-byte", "specweb99"]
        self.parts = [p for p in PARTS if all(w in self.workloads for w in PART_WORKLOADS[p])]
        self.sweep_backends = ["epoll", "select"] if quick else BACKENDS
        self.sweep_anchor_labels = ["nginx select"] if quick else None  # None: every anchor
        self.accept = [("epoll", "10")] if quick else [(b, a) for b in ACCEPT_BACKENDS for a in ACCEPT_LIMITS]
        self.reps = 1 if quick else 3
        self.target_s = 1.5 if quick else 4.0
        self.target_backends = ["epoll", "uring", "tracked"] if quick else BACKENDS
        self.target_anchor_labels = ["nginx", "h2o"] if quick else None
        self.sat_backends = ["epoll"] if quick else SAT_BACKENDS
        self.sat_anchor_labels = [] if quick else ["nginx", "h2o", "lighttpd"]


def pick(specs, labels):
    return specs if labels is None else [s for s in specs if s.label in labels]


def load_args(workload: str, rate: float, duration_s: float) -> tuple[list[str], float]:
    """weft load flags for one open-loop point, and requests per session."""
    if workload == "one-byte":
        return ["--rate", f"{rate:g}", "--duration", f"{duration_s:g}s", "--timeout", "1s", "--http10",
                "--local-addrs", loadgen.LOCAL_ADDRS], 1.0  # fmt: skip
    sessions = rate / SPECWEB_CALLS
    return ["--rate", f"{sessions:.1f}", "--duration", f"{duration_s:g}s", "--timeout", "2s", "--workload", "specweb99",
            "--param", f"dirs={SPECWEB_DIRS}", "--local-addrs", loadgen.LOCAL_ADDRS], SPECWEB_CALLS  # fmt: skip


def url_for(rs: servers.RunningServer, workload: str) -> str:
    return f"http://127.0.0.1:{rs.port}/" + ("one.bin" if workload == "one-byte" else "")


class Runner:
    def __init__(self, lab: core.Lab, pool: servers.ServerPool, keep_logs: bool = False):
        self.lab = lab
        self.pool = pool
        self.tmp = tempfile.mkdtemp(prefix="load-", dir=lab.scratch)
        self.n = 0
        self.commands: dict[str, list[str]] = {}
        self.load_commands: dict[str, list[str]] = {}
        if not keep_logs:  # a whole run starts afresh; parts added to earlier ones keep their logs
            shutil.rmtree(os.path.join(lab.results_dir, "logs"), ignore_errors=True)

    def json_path(self) -> str:
        self.n += 1
        return os.path.join(self.tmp, f"{self.n}.json")

    def measured(self, rs: servers.RunningServer, url: str, args: list[str], *, target: float, duration_s: float,
                 calls: float, key: str, processes: int = CLIENT_PROCESSES) -> dict:  # fmt: skip
        """One load (`processes` weft load processes sharing it) with the
        server's CPU and counters sampled around it."""
        if not rs.alive():
            raise servers.ServerError(f"{rs.spec.label} is not running")
        s0 = rs.admin_stats()
        c0 = rs.cpu_ticks()
        self.n += 1
        doc = loadgen.run_split(self.lab.weft, url, args, self.tmp, str(self.n), processes, timeout_s=duration_s + 60)
        c1 = rs.cpu_ticks()
        s1 = rs.admin_stats()
        self.load_commands.setdefault(key, loadgen.shown(doc["_command"]))
        row = loadgen.point(doc, target=target, duration_s=duration_s, calls_per_session=calls, processes=processes)
        row["server_cpu_util"] = proc.ticks_to_seconds(c1 - c0) / row["run_s"] if row["run_s"] else None
        row["loadavg_1m"] = os.getloadavg()[0]  # the machine is shared: how busy it was
        row["server_cpu_s"] = proc.ticks_to_seconds(c1 - c0)
        row["server_cpu_us_per_reply"] = row["server_cpu_s"] * 1e6 / row["replies"] if row["replies"] else None
        if s0 and s1:
            d = servers.stats_delta(s0["total"], s1["total"])
            calls_ = d.get("syscalls", {})
            n = row["replies"]
            row["syscalls_per_reply"] = {k: v / n for k, v in calls_.items() if v} if n else {}
            row["event_syscalls_per_reply"] = sum(calls_.get(k, 0) for k in core.EVENT_SYSCALLS) / n if n else None
            row["accepted"] = d.get("accepted", 0)
            row["refused_fd_limit"] = d.get("refused_fd_limit", 0)
            if d.get("tracker"):
                row["tracker"] = d["tracker"]
        return row

    def stop(self, rs: servers.RunningServer) -> None:
        """Stop a server; keep the tail of an anchor's error log in the
        results (nginx's select module aborts past FD_SETSIZE: that is where
        it shows)."""
        self.pool.stop(rs)
        if rs.spec.kind == "weft":
            return
        run = os.path.dirname(rs.log_path)
        logs = os.path.join(self.lab.results_dir, "logs")
        for name in sorted(os.listdir(run)) if os.path.isdir(run) else []:
            if name.endswith((".err", ".log")):
                try:
                    with open(os.path.join(run, name), errors="replace") as f:
                        lines = f.readlines()
                except OSError:
                    continue
                if lines:
                    os.makedirs(logs, exist_ok=True)
                    with open(os.path.join(logs, f"{servers.slug(rs.spec.label)}-{name}"), "a") as f:
                        f.writelines(lines[-300:])

    def start(self, spec: servers.ServerSpec) -> servers.RunningServer:
        rs = self.pool.start(spec)
        self.commands[spec.label] = rs.command
        for path in ("one.bin", "dir00000/class1_4"):
            status, _ = core.fetch(f"http://127.0.0.1:{rs.port}/{path}")
            if status != 200:
                raise servers.ServerError(f"{spec.label}: GET /{path} gave {status}")
        return rs

    def hold_idle(self, rs: servers.RunningServer, n: int, bound_s: float):
        """A separate `weft load --idle N` process (in the pool, so it is always
        stopped); waits until the connections are established."""
        path = self.json_path()
        cmd = [self.lab.weft, "load", f"http://127.0.0.1:{rs.port}/one.bin", "--idle", str(n), "--duration", f"{bound_s:.0f}s",
               "--quiet", "--json", path]  # fmt: skip
        self.load_commands.setdefault("idle", loadgen.shown(cmd))
        base = loadgen.established(rs.port)
        holder = self.pool.start_process(f"idle for {rs.spec.label}", cmd)
        got = loadgen.wait_established(rs.port, base + n, timeout_s=30) - base
        time.sleep(0.5)  # let the server finish accepting the last of them
        if got < n:
            self.lab.log(f"    only {got} of {n} idle connections established to {rs.spec.label} (its limit)")
        return holder, path, got

    def release_idle(self, holder, path: str) -> dict:
        self.pool.stop(holder, timeout_s=15)
        time.sleep(1.0)  # the server sees 10k closes
        try:
            with open(path) as f:
                doc = json.load(f)
            return {"held": doc.get("idle", {}).get("held", 0), "reopened": doc.get("idle", {}).get("reopened", 0),
                    "errors": sum(doc.get("errors", {}).values())}  # fmt: skip
        except (OSError, ValueError):
            return {}


def probe_peak(lab: core.Lab, runner: Runner, rs: servers.RunningServer, workload: str) -> float:
    """Closed-loop saturation against weft epoll: the rate range's anchor."""
    if workload == "one-byte":
        args = ["--clients", "64", "--calls", "1", "--http10", "--local-addrs", loadgen.LOCAL_ADDRS, "--duration", "3s", "--timeout", "2s"]
    else:
        args = ["--clients", "64", "--workload", "specweb99", "--param", f"dirs={SPECWEB_DIRS}", "--local-addrs",
                loadgen.LOCAL_ADDRS, "--duration", "3s", "--timeout", "2s"]  # fmt: skip
    row = runner.measured(rs, url_for(rs, workload), args, target=0, duration_s=3.0, calls=1.0, key=f"probe {workload}")
    peak = row["reply_rate"] or row["replies"] / 3.0
    lab.log(f"  probe {workload}: weft epoll saturates at {peak:,.0f} replies/s (closed loop, 64 clients)")
    return peak


def part_of(row: dict) -> str:
    """The part (`--only`) a row belongs to."""
    phase = row["phase"]
    if phase == "sweep":
        return f"sweep-{row['workload']}"
    return {"accept": "accept", "table1": "table1", "keepalive": "table1", "saturation": "idle-peak"}[phase]


def run(lab: core.Lab) -> dict:
    plan = Plan(lab.quick)
    parts = lab.parts(plan.parts)
    if not parts:
        raise env.EnvError(f"--only {','.join(lab.only or [])}: not part of the {'quick' if lab.quick else 'full'} form (its parts: {', '.join(plan.parts)})")
    prev = lab.previous_runs()
    lab.prepare(commands=["nginx", "h2o", "lighttpd"])
    nginx_built = env.ensure_nginx_select_poll(lab.log)
    lab.versions["nginx (built with select+poll)"] = env._first_line([nginx_built, "-v"]) + f" ({nginx_built})"
    www = os.path.join(lab.scratch, "www")
    os.makedirs(www)
    core.make_file(os.path.join(www, "one.bin"), 1)
    # The SPECweb99 file set (also in quick runs: the servers' warm-up reads it).
    p = subprocess.run([lab.weft, "load", "gen", "specweb99", "--out", www, "--param", f"dirs={SPECWEB_DIRS}"],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    if p.returncode != 0:
        raise env.EnvError(f"weft load gen specweb99 failed: {p.stderr.strip()[-500:]}")
    for root, dirs, files in os.walk(www):  # anchors drop to `nobody`
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    # Rates: fractions of weft epoll's probed peak. Parts run later reuse the
    # peaks stored with the earlier parts, so every curve of a figure has the
    # same offered rates.
    peaks: dict = dict((prev or {}).get("peaks", {}))
    need = {w for part in parts for w in PART_WORKLOADS[part]}
    rows: list[dict] = []
    idle_info: dict = dict((prev or {}).get("idle_holders", {}))
    parts_info: dict = dict((prev or {}).get("parts", {}))
    t_start = time.monotonic()
    with lab.pool(www) as pool:
        runner = Runner(lab, pool, keep_logs=prev is not None)
        missing = [w for w in WORKLOADS if w in need and w not in peaks]
        if missing:
            rs = runner.start(weft("epoll"))
            for w in missing:
                peaks[w] = probe_peak(lab, runner, rs, w)
            runner.stop(rs)
        rates = {w: loadgen.sweep_rates(peaks[w], plan.fractions, step=500 if w == "one-byte" else 100) for w in WORKLOADS if w in peaks}
        t1_rate = float(loadgen.sweep_rates(peaks["one-byte"], [TABLE1_FRACTION])[0]) if "one-byte" in peaks else None
        for part in parts:
            t0 = time.monotonic()
            lab.log(f"part {part} ...")
            if part.startswith("sweep-"):
                w = part.removeprefix("sweep-")
                lab.log(f"  {w}: offered rates {rates[w]} requests/s, {plan.point_s:g}s each")
                run_sweep(lab, plan, runner, nginx_built, w, rates[w], rows, idle_info)
            elif part == "accept":
                run_accept(lab, plan, runner, rates["one-byte"], rows)
            elif part == "table1":
                run_table1(lab, plan, runner, nginx_built, t1_rate, rows)
            elif part == "idle-peak":
                run_idle_peak(lab, plan, runner, nginx_built, rows)
            took = time.monotonic() - t0
            parts_info[part] = {"at": core.utc_now(), "duration_s": round(took), "weft": lab.versions.get("weft")}
            lab.log(f"part {part} took {took:.0f}s")
    lab.log(f"measurements took {time.monotonic() - t_start:.0f}s")
    rows = core.merge_parts(prev, parts, rows, part_of)
    commands = {**(prev or {}).get("commands", {}), **runner.commands}
    load_commands = {**(prev or {}).get("load_commands", {}), **runner.load_commands}
    if prev and not set(prev.get("versions", {}).items()) <= set(lab.versions.items()):
        lab.log("  note: earlier parts ran with other versions: runs.json keeps each part's weft version under `parts`")
    return summarize(lab, plan, rows, commands, load_commands, peaks, rates, t1_rate, idle_info, parts_info)


def run_sweep(lab, plan, runner, nginx_built, w: str, rates: list[int], rows: list[dict], idle_info: dict) -> None:
    """Figures 1-6 for workload `w`: every server's curve without and with
    idle connections (same server instance, the order alternating)."""
    sweep_specs = [weft(b) for b in plan.sweep_backends] + pick(anchors(nginx_built), plan.sweep_anchor_labels)
    for i, spec in enumerate(sweep_specs):
        rs = runner.start(spec)
        for idle in ((0, plan.idle) if i % 2 == 0 else (plan.idle, 0)):
            holder = None
            if idle:
                bound = len(rates) * (plan.point_s + 4) + 60
                holder, hpath, held = runner.hold_idle(rs, idle, bound)
            for r in rates:
                args, calls = load_args(w, r, plan.point_s)
                row = runner.measured(rs, url_for(rs, w), args, target=r, duration_s=plan.point_s, calls=calls, key=w)
                row.update(phase="sweep", server=spec.label, workload=w, idle=idle, rep=1)
                if idle:
                    row["idle_established"] = held
                rows.append(row)
                log_point(lab, row)
            if holder:
                idle_info[f"{spec.label} ({w})"] = runner.release_idle(holder, hpath)
        runner.stop(rs)


def accept_anchors() -> list[servers.ServerSpec]:
    """nginx beside the accept limits: `multi_accept off` (its default: one
    accept per readiness event of the listener, like limit 1) and `on`
    (accept until EAGAIN, like inf)."""
    on = nginx_edits("epoll") + [("use epoll;", "use epoll; multi_accept on;")]
    return [servers.ServerSpec("nginx multi_accept off", "nginx", {"edits": nginx_edits("epoll")}),
            servers.ServerSpec("nginx multi_accept on", "nginx", {"edits": on})]  # fmt: skip


def run_accept(lab, plan, runner, rates: list[int], rows: list[dict]) -> None:
    """Figure 7: the one-byte curve with accept limits 1, 10, inf; nginx
    with multi_accept off and on as the anchor."""
    specs = [(weft(b, limit), b, limit) for b, limit in plan.accept] + [(s, "nginx", s.label.split()[-1]) for s in accept_anchors()]
    for spec, backend, limit in specs:
        rs = runner.start(spec)
        for r in rates:
            args, calls = load_args("one-byte", r, plan.point_s)
            row = runner.measured(rs, url_for(rs, "one-byte"), args, target=r, duration_s=plan.point_s, calls=calls, key="one-byte")
            row.update(phase="accept", server=spec.label, backend=backend, accept_limit=limit, workload="one-byte", idle=0, rep=1)
            rows.append(row)
            log_point(lab, row)
        runner.stop(rs)


def rotated(specs: list, rep: int) -> list:
    k = (rep - 1) % len(specs)
    return specs[k:] + specs[:k]


def run_table1(lab, plan, runner, nginx_built, t1_rate: float, rows: list[dict]) -> None:
    """Targets (b) and (c): Table 1 at a fixed open-loop rate, then one-byte
    keep-alive, on the same server instance; repeated, order rotated."""
    specs = [weft(b) for b in plan.target_backends] + pick(anchors(nginx_built, with_built_epoll=True), plan.target_anchor_labels)
    for rep in range(1, plan.reps + 1):
        for spec in rotated(specs, rep):
            rs = runner.start(spec)
            args, _ = load_args("one-byte", t1_rate, plan.target_s)
            row = runner.measured(rs, url_for(rs, "one-byte"), args, target=t1_rate, duration_s=plan.target_s, calls=1.0, key="table1")
            row.update(phase="table1", server=spec.label, workload="one-byte", idle=0, rep=rep)
            rows.append(row)
            log_point(lab, row)
            ka = ["--clients", "50", "--duration", f"{plan.target_s:g}s"]
            row = runner.measured(rs, url_for(rs, "one-byte"), ka, target=0, duration_s=plan.target_s, calls=1.0, key="keepalive", processes=1)
            row.update(phase="keepalive", server=spec.label, workload="one-byte keep-alive", idle=0, rep=rep)
            rows.append(row)
            log_point(lab, row)
            runner.stop(rs)


def run_idle_peak(lab, plan, runner, nginx_built, rows: list[dict]) -> None:
    """Target (a): closed-loop saturation without and with idle connections,
    same server instance, back to back (order alternating); repeated, order
    of the servers rotated."""
    specs = [weft(b) for b in plan.sat_backends] + pick(anchors(nginx_built), plan.sat_anchor_labels)
    sat = ["--clients", "64", "--calls", "1", "--http10", "--local-addrs", loadgen.LOCAL_ADDRS, "--duration", f"{plan.target_s:g}s",
           "--timeout", "2s"]  # fmt: skip
    for rep in range(1, plan.reps + 1):
        for spec in rotated(specs, rep):
            rs = runner.start(spec)
            for idle in ((0, plan.idle) if rep % 2 else (plan.idle, 0)):
                holder = None
                if idle:
                    holder, hpath, held = runner.hold_idle(rs, idle, plan.target_s + 60)
                row = runner.measured(rs, url_for(rs, "one-byte"), sat, target=0, duration_s=plan.target_s, calls=1.0, key="saturation")
                row.update(phase="saturation", server=spec.label, workload="one-byte", idle=idle, rep=rep)
                if holder:
                    row["idle_established"] = held
                    row["idle_holder"] = runner.release_idle(holder, hpath)
                rows.append(row)
                log_point(lab, row)
            runner.stop(rs)


def resummarize(lab: core.Lab) -> dict:
    """Summary, tables and plots again from runs.json (no measurement)."""
    with open(os.path.join(lab.results_dir, "runs.json")) as f:
        doc = json.load(f)
    lab.versions = doc["versions"]
    lab.quick = doc["quick"]
    plan = Plan(doc["quick"])
    return summarize(lab, plan, doc["runs"], doc["commands"], doc["load_commands"], doc["peaks"], doc["rates"], doc["table1_rate"],
                     doc["idle_holders"], doc.get("parts", {}))  # fmt: skip


def log_point(lab: core.Lab, row: dict) -> None:
    ev = row.get("event_syscalls_per_reply")
    extra = f" ev/reply {ev:.3f}" if ev is not None else ""
    idle = f" idle {row['idle']}" if row.get("idle") else ""
    tgt = f" @{row['target']:,.0f}/s" if row.get("target") else ""
    rr = row.get("reply_rate")
    lab.log(f"  {row['phase']:<10} {row['server']:<24} {row['workload']:<10}{idle}{tgt}: {rr or 0:>9,.0f} replies/s, "
            f"{report.fmt_num(row.get('server_cpu_us_per_reply'), 2):>6} µs/reply, errors {row['errors']}{extra}"
            + (f"  [client-limited: {row['client_limited']}]" if row.get("client_limited") and row.get("target") else ""))  # fmt: skip


# --- summary ---------------------------------------------------------------

TABLE1_KINDS = ["accept", "read", "write", "writev", "sendfile", "close", "epoll_wait", "epoll_ctl", "poll", "select", "io_uring_enter"]


def curve(rows, server, workload, idle, phase="sweep"):
    return [(r["target"], r["reply_rate"]) for r in rows if r["phase"] == phase and r["server"] == server and r["workload"] == workload and r["idle"] == idle]


def sustained(points: list[dict], tolerance: float = 0.97) -> dict | None:
    """The highest offered rate the server kept up with (reply rate at least
    `tolerance` of the offered rate, no client timeouts), and that point."""
    ok = [r for r in points if r.get("target") and r.get("reply_rate") is not None
          and r["reply_rate"] >= tolerance * r["target"] and not r.get("timeouts")]  # fmt: skip
    return max(ok, key=lambda r: r["target"]) if ok else None


def saturation_table(rows: list[dict]) -> list[dict]:
    """Target (a): per server, median saturation reply rate without and with
    idle connections, and the drop."""
    sat = [r for r in rows if r["phase"] == "saturation"]
    out = []
    for server in dict.fromkeys(r["server"] for r in sat):
        base = report.median(r["reply_rate"] for r in sat if r["server"] == server and not r["idle"])
        idle = report.median(r["reply_rate"] for r in sat if r["server"] == server and r["idle"])
        drop = 1 - idle / base if base and idle is not None else None
        pairs = []  # same repetition, same server instance, back to back
        for rep in sorted({r["rep"] for r in sat if r["server"] == server}):
            a = [r["reply_rate"] for r in sat if r["server"] == server and r["rep"] == rep and not r["idle"]]
            b = [r["reply_rate"] for r in sat if r["server"] == server and r["rep"] == rep and r["idle"]]
            if a and b and a[0]:
                pairs.append(b[0] / a[0])
        out.append({"server": server, "no_idle": base, "idle": idle, "drop": drop, "pairs": pairs,
                    "cpu_no_idle": report.median(r["server_cpu_us_per_reply"] for r in sat if r["server"] == server and not r["idle"]),
                    "cpu_idle": report.median(r["server_cpu_us_per_reply"] for r in sat if r["server"] == server and r["idle"])})  # fmt: skip
    return out


def curve_table(pts: list[dict]) -> str:
    """Reply rate per server (rows) and offered rate (columns, from the
    points themselves); `*` marks a point where the client may have been the limit."""
    targets = sorted({r["target"] for r in pts})
    tab = []
    for s in dict.fromkeys(r["server"] for r in pts):
        by = {r["target"]: r for r in pts if r["server"] == s}
        tab.append([s] + [report.fmt_num(by[t]["reply_rate"]) + ("*" if by[t].get("client_limited") else "") if t in by else "–"
                          for t in targets])  # fmt: skip
    return report.markdown_table(["server"] + [f"{t:,.0f}" for t in targets], tab)


def table1(rows: list[dict]) -> list[dict]:
    """Target (b) and the modern Table 1: medians per server of each kind per reply."""
    t = [r for r in rows if r["phase"] == "table1"]
    out = []
    for server in dict.fromkeys(r["server"] for r in t):
        every = [r for r in t if r["server"] == server]
        # "At the same load": only the repetitions where the server kept up
        # (a server that fell behind batches more events per call).
        kept = [r for r in every if sustained([r])]
        mine = kept or every
        row = {"server": server, "kept_up": f"{len(kept)}/{len(every)}", "reply_rate": report.median(r["reply_rate"] for r in mine),
               "cpu": report.median(r["server_cpu_us_per_reply"] for r in mine),
               "event": report.median(r.get("event_syscalls_per_reply") for r in mine),
               "errors": sum(r["errors"] for r in mine)}  # fmt: skip
        for k in TABLE1_KINDS:
            row[k] = report.median(r.get("syscalls_per_reply", {}).get(k, 0) if "syscalls_per_reply" in r else None for r in mine)
        out.append(row)
    return out


def keepalive(rows: list[dict]) -> list[dict]:
    ka = [r for r in rows if r["phase"] == "keepalive"]
    out = []
    for server in dict.fromkeys(r["server"] for r in ka):
        mine = [r for r in ka if r["server"] == server]
        out.append({"server": server, "rps": report.median(r["replies"] / r["run_s"] for r in mine),
                    "cpu": report.median(r["server_cpu_us_per_reply"] for r in mine),
                    "cpus": [r["server_cpu_us_per_reply"] for r in mine],
                    "event": report.median(r.get("event_syscalls_per_reply") for r in mine)})  # fmt: skip
    return out


STANDARD_ANCHORS = ("nginx", "h2o", "lighttpd")


def best_ratio(ka: list[dict]) -> tuple:
    """(best weft label, its CPU, best anchor label, its CPU, ratio)."""
    weft_rows = [r for r in ka if r["server"].startswith("weft") and r["cpu"]]
    anchor_rows = [r for r in ka if r["server"] in STANDARD_ANCHORS and r["cpu"]]
    if not weft_rows or not anchor_rows:
        return None
    w = min(weft_rows, key=lambda r: r["cpu"])
    a = min(anchor_rows, key=lambda r: r["cpu"])
    return w["server"], w["cpu"], a["server"], a["cpu"], w["cpu"] / a["cpu"]


def sanitize(rows: list[dict]) -> int:
    """A server whose process tree lost CPU time between two samples had a
    process die (nginx's master respawning a crashed worker): its CPU figure
    for that run is unknown. Returns how many runs that hit."""
    n = 0
    for r in rows:
        if r.get("server_cpu_s") is not None and r["server_cpu_s"] < 0:
            r["server_cpu_s"] = r["server_cpu_us_per_reply"] = r["server_cpu_util"] = None
            r["server_restarted"] = True
            n += 1
    return n


def summarize(lab, plan, rows, commands, load_commands, peaks, rates, t1_rate, idle_info, parts_info) -> dict:
    d = lab.results_dir
    restarted = sanitize(rows)
    report.write_json(os.path.join(d, "runs.json"), {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "peaks": peaks,
                                                     "rates": rates, "table1_rate": t1_rate, "idle_holders": idle_info,
                                                     "parts": parts_info, "commands": commands, "load_commands": load_commands,
                                                     "runs": rows})  # fmt: skip
    # Table 1's rate as measured (the rows'), not as the current plan would pick it.
    t1_rate = next((r["target"] for r in rows if r["phase"] == "table1"), t1_rate)
    # The workloads whose curves were measured (a run of some parts only may lack one).
    workloads = [w for w in WORKLOADS if any(r["phase"] == "sweep" and r["workload"] == w for r in rows)]
    report.write_csv(os.path.join(d, "runs.csv"), rows)
    servers_in = list(dict.fromkeys(r["server"] for r in rows if r["phase"] == "sweep"))
    pngs = []
    for w in workloads:
        panels = []
        for idle in (0, plan.idle):
            series = OrderedDict((s, curve(rows, s, w, idle)) for s in servers_in)
            panels.append((f"{w}, {idle:,} idle connections", series))
        name = f"reply_rate_{w.replace('-', '_')}.png"
        report.plot_lines(os.path.join(d, name), panels, xlabel="offered requests/s", ylabel="replies/s", diagonal=True)
        pngs.append(name)
    acc = OrderedDict()
    for r in rows:
        if r["phase"] == "accept":
            acc.setdefault(r["server"], []).append((r["target"], r["reply_rate"]))
    if acc:
        report.plot_lines(os.path.join(d, "accept_limit.png"), [("one-byte, no idle connections", acc)], xlabel="offered requests/s",
                          ylabel="replies/s", diagonal=True, width=6.0)  # fmt: skip
        pngs.append("accept_limit.png")
    sat_rows = saturation_table(rows)
    if sat_rows:
        report.plot_grouped_bars(os.path.join(d, "idle_peak.png"), [r["server"].removeprefix("weft ") for r in sat_rows],
                                 OrderedDict([("no idle connections", [r["no_idle"] for r in sat_rows]),
                                              (f"{plan.idle:,} idle connections", [r["idle"] for r in sat_rows])]),
                                 ylabel="replies/s (median)", title="one-byte, saturation (64 closed-loop clients, a connection per request)",
                                 dpi=80)  # fmt: skip
        pngs.append("idle_peak.png")
    t1_rows = [r for r in table1(rows) if r["event"] is not None]
    if t1_rows:
        kinds = [k for k in core.EVENT_SYSCALLS if any(r[k] for r in t1_rows)]
        report.plot_grouped_bars(os.path.join(d, "table1_event_calls.png"), [r["server"].removeprefix("weft ") for r in t1_rows],
                                 OrderedDict((k, [r[k] for r in t1_rows]) for k in kinds),
                                 ylabel="calls per reply (median, log scale)", log=True,
                                 title=f"event system calls per reply at {t1_rate:,.0f} requests/s (one-byte, a connection per request)",
                                 dpi=80)  # fmt: skip
        pngs.append("table1_event_calls.png")
    ev = OrderedDict()
    for idle in (0, plan.idle):
        ev[idle] = OrderedDict((s, [(r["target"], r.get("event_syscalls_per_reply")) for r in rows if r["phase"] == "sweep" and r["server"] == s
                                    and r["workload"] == "one-byte" and r["idle"] == idle]) for s in servers_in if s.startswith("weft"))  # fmt: skip
    if "one-byte" in workloads:
        report.plot_lines(os.path.join(d, "event_syscalls.png"), [(f"one-byte, {k:,} idle", v) for k, v in ev.items()],
                          xlabel="offered requests/s", ylabel="event system calls per reply", logy=True)  # fmt: skip
        pngs.append("event_syscalls.png")

    md = [f"# {NAME}", ""]
    md.append(f"{'Quick' if lab.quick else 'Full'} run. Curves: one pass, {plan.point_s:g} s per point, reply rate = mean of the per-second "
              f"samples inside the arrival period (the first second skipped). Targets: {plan.reps} repetition(s), servers rotated, median. "
              f"One worker each. Probed peaks (closed loop, weft epoll): " + ", ".join(f"{w} {p:,.0f}/s" for w, p in peaks.items()) + ".")
    md += ["", report.parts_table(parts_info, NAME, lab.quick)]
    md += ["", "## (a) Peak reply rate with idle connections (one-byte, closed-loop saturation, 64 clients)", ""]
    sat = saturation_table(rows)
    md.append(report.markdown_table(["server", "replies/s, no idle", f"replies/s, {plan.idle:,} idle", "drop (medians)",
                                     "idle / no idle, each repetition", "µs/reply no idle", "µs/reply idle"],
                                    [[r["server"], report.fmt_num(r["no_idle"]), report.fmt_num(r["idle"]),
                                      f"{100 * r['drop']:.1f} %" if r["drop"] is not None else "–",
                                      " / ".join(f"{x:.2f}" for x in r["pairs"]),
                                      report.fmt_num(r["cpu_no_idle"], 2), report.fmt_num(r["cpu_idle"], 2)] for r in sat]))  # fmt: skip
    md += ["", "Each open-loop curve (one pass): the peak (max reply rate over the offered rates) and the highest offered rate "
           "sustained (replies ≥ 97 % of it, no timeouts), with the server's and the load processes' CPU there "
           "(% of one core; the load is two processes) and the 1-minute load average:", ""]  # fmt: skip
    peak_rows = []
    for w in workloads:
        for s in servers_in:
            cells = [w, s]
            for idle in (0, plan.idle):
                pts = [r for r in rows if r["phase"] == "sweep" and r["server"] == s and r["workload"] == w and r["idle"] == idle]
                pk = loadgen.peak_of(pts)
                st = sustained(pts)
                cells += [report.fmt_num(pk), report.fmt_num(st["target"]) if st else "–",
                          f"{100 * st.get('server_cpu_util', 0):.0f} / {100 * st['client_cpu_s'] / st['run_s']:.0f}"
                          + (f" / {st['loadavg_1m']:.1f}" if st.get("loadavg_1m") is not None else "")
                          if st and st.get("server_cpu_util") is not None else "–"]  # fmt: skip
            a = loadgen.peak_of([r for r in rows if r["phase"] == "sweep" and r["server"] == s and r["workload"] == w and not r["idle"]])
            b = loadgen.peak_of([r for r in rows if r["phase"] == "sweep" and r["server"] == s and r["workload"] == w and r["idle"]])
            cells.append(f"{100 * (1 - b / a):.1f} %" if a and b is not None else "–")
            peak_rows.append(cells)
    md.append(report.markdown_table(["workload", "server", "peak", "sustained", "server / load CPU %, load avg", f"peak, {plan.idle:,} idle",
                                     "sustained, idle", "server / load CPU %, load avg", "peak drop"], peak_rows, "llrrlrrlr"))  # fmt: skip
    held = [f"{k}: {v.get('held', '?')} held, {v.get('reopened', '?')} reopened" for k, v in idle_info.items()]
    md += ["", "Idle holders (sweeps): " + "; ".join(held) + "."]

    md += ["", f"## (b) Table 1: system calls per reply at {t1_rate or 0:,.0f} requests/s (one-byte, a connection per request)", "",
           "Medians over the repetitions in which the server kept up with the offered rate (`kept up`: replies ≥ 97 % of it, "
           "no timeouts); over all of them when none did.", ""]  # fmt: skip
    t1 = table1(rows)
    epoll = next((r for r in t1 if r["server"] == "weft epoll"), None)
    hdr = ["server", "kept up", "replies/s", "CPU µs/reply", "event calls/reply", "vs epoll"] + TABLE1_KINDS
    tab = []
    for r in t1:
        ratio = f"{r['event'] / epoll['event']:.2f}" if epoll and epoll["event"] and r["event"] is not None else "–"
        tab.append([r["server"], r["kept_up"], report.fmt_num(r["reply_rate"]), report.fmt_num(r["cpu"], 2),
                    f"{r['event']:.3f}" if r["event"] is not None else "–", ratio]
                   + [f"{r[k]:.3f}" if r[k] is not None else "–" for k in TABLE1_KINDS])  # fmt: skip
    md.append(report.markdown_table(hdr, tab))

    md += ["", "## (c) One-byte keep-alive: server CPU per request (`weft load --clients 50`)", ""]
    ka = keepalive(rows)
    md.append(report.markdown_table(["server", "requests/s", "CPU µs/request (median)", "per repetition", "event calls/request"],
                                    [[r["server"], report.fmt_num(r["rps"]), report.fmt_num(r["cpu"], 2),
                                      " / ".join(report.fmt_num(x, 2) for x in r["cpus"]),
                                      f"{r['event']:.3f}" if r["event"] is not None else "–"] for r in ka]))  # fmt: skip
    br = best_ratio(ka)
    if br:
        md += ["", f"Best weft ({br[0]}, {br[1]:.2f} µs) / best anchor ({br[2]}, {br[3]:.2f} µs) = **{br[4]:.2f}**"]

    md += ["", "## Curves (reply rate against offered rate)", ""]
    for w in workloads:
        for idle in (0, plan.idle):
            md += [f"### {w}, {idle:,} idle connections", ""]
            pts = [r for r in rows if r["phase"] == "sweep" and r["workload"] == w and r["idle"] == idle]
            md += [curve_table(pts), ""]
    acc_rows = [r for r in rows if r["phase"] == "accept"]
    if acc_rows:
        md += ["### accept limits (one-byte, no idle)", "", curve_table(acc_rows), ""]

    limited = [r for r in rows if r["client_limited"]]
    md += ["## Checks", ""]
    md.append(f"- points where the client may have been the limit (`*` above): {len(limited)}")
    for r in limited[:40]:
        md.append(f"  - {r['phase']} {r['server']} {r['workload']} idle {r['idle']} target {r.get('target')}: {r['client_limited']}")
    non2xx = [r for r in rows if r["replies"] != r["replies_2xx"]]
    md.append(f"- runs with non-2xx replies: {len(non2xx)}")
    if restarted:
        who = sorted({r["server"] for r in rows if r.get("server_restarted")})
        md.append(f"- runs where a server process died and was restarted (CPU unknown): {restarted} ({', '.join(who)}; see logs/)")
    cl = [r["client_cpu_s"] / r["run_s"] for r in rows if r["phase"] == "sweep" and r["run_s"]]
    if cl:
        md.append(f"- load processes' CPU during the sweeps (both together): median {100 * report.median(cl):.0f} %, "
                  f"max {100 * max(cl):.0f} % of one core (two processes: up to 200 %)")  # fmt: skip
    kept = [r["offered"] / r["target"] for r in rows if r["phase"] in ("sweep", "accept", "table1") and r.get("target")]
    if kept:
        md.append(f"- sessions started on schedule: offered/target between {min(kept):.4f} and {max(kept):.4f} at every point")
    loads = [f"weft load ({k}): {' '.join(v)}" for k, v in load_commands.items()]
    md += report.summary_end(commands, lab.versions, more_commands=loads, plots=pngs)
    report.write_summary(d, md)
    print("\n".join(md[:60]))
    return {"problems": len(non2xx)}
