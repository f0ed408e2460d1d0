"""What every experiment shares: progress output, the results folder, the
scratch directory, the weft binary, the load driver, and one measured run
(server CPU from /proc before and after, weft's counters from its admin
endpoint, the driver's totals).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

from . import drivers, env, proc, report, servers

LAB_DIR = os.path.dirname(os.path.abspath(__file__))
RESULTS_DIR = os.path.join(LAB_DIR, "results")

# Event-related system calls (the µserver study's concern).
EVENT_SYSCALLS = ("epoll_wait", "epoll_ctl", "poll", "select", "io_uring_enter")


class Lab:
    """One experiment's run: where to write, how to report progress."""

    def __init__(self, name: str, quick: bool, driver: str = "wrk", results_root: str = RESULTS_DIR):
        self.name = name
        self.quick = quick
        self.driver_name = driver
        self.t0 = time.monotonic()
        # Quick runs (CI's smoke tests, scripts/test) write beside the full
        # results, never over them: a full experiment is assembled from
        # several locked runs and costs an hour to measure again.
        self.results_dir = os.path.join(results_root, name + ("-quick" if quick else ""))
        self.scratch = tempfile.mkdtemp(prefix=f"weft-lab-{name}-")
        # Anchors started as root drop to an unprivileged user (nginx's and
        # h2o's `nobody`): the document root must be readable by everyone.
        os.chmod(self.scratch, 0o755)
        self.weft = ""
        self.driver = None
        self.versions: dict = {}
        self.load_command: list[str] = []
        self.only: list[str] | None = None  # `--only`: the parts to run (experiments with PARTS), None = all
        self.resume = False  # `--resume`: keep the points runs.json holds (experiments with RESUMABLE)

    def parts(self, all_parts) -> list[str]:
        """The parts this run measures, in the experiment's order."""
        return [p for p in all_parts if self.only is None or p in self.only]

    def previous_runs(self) -> dict | None:
        """The results' runs.json when this run adds parts to it (`--only`)
        and it is of the same form (quick or full); otherwise None: a whole
        run starts afresh."""
        if self.only is None:
            return None
        try:
            with open(os.path.join(self.results_dir, "runs.json")) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            return None
        return doc if doc.get("quick") == self.quick and doc.get("experiment") == self.name else None

    def log(self, msg: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.1f}s] {msg}", flush=True)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def prepare(self, commands=()) -> None:
        """Requirements, weft release build, the anchors and tools `commands`."""
        env.ensure_python_requirements(self.log)
        self.weft = env.build_weft(self.log)
        tools = list(commands)
        if self.driver_name == "wrk":
            tools.append("wrk")
        env.ensure_commands(tools, self.log)
        self.driver = drivers.make_driver(self.driver_name, self.weft)
        if not self.driver.available():
            raise env.EnvError(f"load driver {self.driver_name} is not available here")
        self.versions = env.versions(self.weft, tools)
        os.makedirs(self.results_dir, exist_ok=True)

    def pool(self, www: str) -> servers.ServerPool:
        return servers.ServerPool(self.scratch, www, self.weft, log=self.log)

    def cleanup(self) -> None:
        # WEFT_LAB_KEEP=1 keeps the scratch directory (the servers' logs
        # and stderr, the load reports) to read after a failed run.
        if os.environ.get("WEFT_LAB_KEEP"):
            self.log(f"scratch kept (WEFT_LAB_KEEP): {self.scratch}")
            return
        shutil.rmtree(self.scratch, ignore_errors=True)



class ServerRounds:
    """The servers of a comparison, each started in turn in `pool`, `reps`
    times over, each repetition's order rotated by one so that no server
    always runs first. Iterating yields `(rep, spec, running server, base
    URL)` and stops the server when the caller moves on; `tick()` counts the
    measured runs for the progress line; `commands` keeps each server's
    command line for the results.
    """

    def __init__(self, lab: Lab, name: str, pool: servers.ServerPool, specs, reps: int, items: int, what: str, duration_s: float):
        self.pool, self.specs, self.reps = pool, list(specs), reps
        self.total = reps * len(self.specs) * items
        self.done = 0
        self.commands: dict[str, list[str]] = {}
        lab.log(f"{name}: {reps} repetition(s) x {len(self.specs)} servers x {items} {what}, {duration_s:g}s each ({self.total} runs)")

    def __iter__(self):
        for rep in range(self.reps):
            k = rep % len(self.specs)
            for spec in self.specs[k:] + self.specs[:k]:
                rs = self.pool.start(spec)
                self.commands[spec.label] = rs.command
                yield rep, spec, rs, f"http://127.0.0.1:{rs.port}/"
                self.pool.stop(rs)

    def tick(self) -> str:
        """One more run measured: its `[done/total]` progress tag."""
        self.done += 1
        return f"[{self.done}/{self.total}]"


@contextlib.contextmanager
def size_site_rounds(lab: Lab, name: str, sizes, specs, reps: int, items: int, what: str, duration_s: float) -> Iterator[ServerRounds]:
    """The `ServerRounds` of a comparison over a document root of one file
    per size (`size_site`), in a pool of its own that stops every server
    when the block ends."""
    with lab.pool(size_site(lab.scratch, sizes)) as pool:
        yield ServerRounds(lab, name, pool, specs, reps, items, what, duration_s)


def interleaved(lab: Lab, name: str, pool: servers.ServerPool, specs, items, rounds: int, slice_s: float):
    """Every server of `specs` running side by side in `pool`, each to be
    loaded in turn, `rounds` rounds per item, the order rotated by one every
    round (two servers: ABBA). Single runs of one server spread by ±20 %
    on this shared host from one run to the next; short slices, interleaved,
    put that drift on every server alike, so ratios within a round compare.
    `items` are `(label, path)`, a path under each server's root or a dict
    of paths by server label (fetched once from each before its rounds).
    Yields `(round from 1, spec, running server, item label, URL)` and logs
    progress every ten slices; the servers are stopped at the end."""
    specs = list(specs)
    running = {spec.label: pool.start(spec) for spec in specs}
    total, done = len(items) * rounds * len(specs), 0
    lab.log(f"{name}: {len(specs)} servers side by side x {len(items)} items x {rounds} rounds, {slice_s:g}s slices ({total} slices)")
    for label, path in items:
        url = {spec.label: f"http://127.0.0.1:{rs.port}/{path[spec.label] if isinstance(path, dict) else path}" for spec in specs for rs in [running[spec.label]]}
        for u in url.values():
            fetch(u)
        for rep in range(rounds):
            k = rep % len(specs)
            for spec in specs[k:] + specs[:k]:
                yield rep + 1, spec, running[spec.label], label, url[spec.label]
                done += 1
                if done % 10 == 0 or done == total:
                    lab.log(f"  [{done}/{total}] {label}, last {spec.label}")
    for rs in running.values():
        pool.stop(rs)


def interleaved_slices(lab: Lab, name: str, pool: servers.ServerPool, specs, items, rounds: int, slice_s: float, *, connections: int = 50) -> list[dict]:
    """[`interleaved`] with one wrk -c`connections` slice of `slice_s`
    seconds per turn. One row per slice: `rep` (the round), `server`,
    `size` (the item's label), `rps`, `cpu_us_per_req`, `errors`."""
    rows = []
    for rep, spec, rs, label, url in interleaved(lab, name, pool, specs, items, rounds, slice_s):
        m = measure(lab, rs, url, connections=connections, duration_s=slice_s)
        rows.append({"rep": rep, "server": spec.label, "size": label, "rps": m.load.rps,
                     "cpu_us_per_req": m.cpu_us_per_request, "errors": m.load.non_2xx + m.load.error_total})  # fmt: skip
    return rows


def write_runs(lab: Lab, name: str, rows: list[dict], commands: dict[str, list[str]], medians: list[dict], **more) -> None:
    """A server comparison's raw results in its results folder: runs.json
    (with each server's command line, the load command and `more`),
    runs.csv and medians.csv."""
    d = lab.results_dir
    report.write_json(os.path.join(d, "runs.json"), {"experiment": name, "quick": lab.quick, "versions": lab.versions, "commands": commands,
                                                    "load_command": lab.load_command, "runs": rows, **more})  # fmt: skip
    report.write_csv(os.path.join(d, "runs.csv"), rows)
    report.write_csv(os.path.join(d, "medians.csv"), medians)


def utc_now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime())


def merge_parts(previous: dict | None, parts_run: list[str], rows: list[dict], part_of) -> list[dict]:
    """Rows of a run that measured `parts_run`, after the previous run's rows
    of every other part (`part_of(row)` names a row's part)."""
    kept = [r for r in (previous or {}).get("runs", []) if part_of(r) not in parts_run]
    return kept + rows


def make_file(path: str, size: int) -> None:
    """A file of `size` deterministic bytes (same content for every server)."""
    pattern = bytes((i * 31 + 7) % 251 for i in range(4096))
    with open(path, "wb") as f:
        os.fchmod(f.fileno(), 0o644)
        left = size
        while left > 0:
            n = min(left, len(pattern))
            f.write(pattern[:n])
            left -= n


def file_name(size: int) -> str:
    """The test file of `size` bytes in a document root from `size_site`."""
    return f"file-{size}.bin"


def size_site(scratch: str, sizes, name=file_name) -> str:
    """A document root `scratch`/www with one `make_file` per size, named by
    `name` (`file-SIZE.bin` unless told)."""
    www = os.path.join(scratch, "www")
    os.makedirs(www)
    for n in sizes:
        make_file(os.path.join(www, name(n)), n)
    return www


def fetch(url: str, timeout_s: float = 10.0) -> tuple[int, int]:
    """GET `url`; returns (status, body length)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return r.status, len(r.read())
    except urllib.error.HTTPError as e:
        return e.code, 0


@dataclass
class Measurement:
    """One load run against one server."""

    server: str
    load: drivers.LoadResult
    cpu_ticks: int
    weft: dict = field(default_factory=dict)  # counter deltas from /stats (weft only)

    @property
    def cpu_us_per_request(self) -> float | None:
        return proc.cpu_us_per_request(self.cpu_ticks, self.load.requests)

    def syscalls_per_request(self) -> dict[str, float]:
        n = self.load.requests
        calls = self.weft.get("syscalls", {}) if self.weft else {}
        return {k: v / n for k, v in calls.items()} if n else {}

    def event_syscalls_per_request(self) -> float | None:
        if not self.weft or not self.load.requests:
            return None
        calls = self.weft.get("syscalls", {})
        return sum(calls.get(k, 0) for k in EVENT_SYSCALLS) / self.load.requests


def measure(lab: Lab, rs: servers.RunningServer, url: str, *, connections: int, duration_s: float, threads: int = 1) -> Measurement:
    """Load `url` once; server CPU and weft counters sampled just before and after."""
    if not rs.alive():
        raise servers.ServerError(f"{rs.spec.label} is not running")
    before_stats = rs.admin_stats()
    before = rs.cpu_ticks()
    load = lab.driver.run(url, connections=connections, duration_s=duration_s, threads=threads)
    after = rs.cpu_ticks()
    after_stats = rs.admin_stats()
    weft = {}
    if before_stats and after_stats:
        weft = servers.stats_delta(before_stats["total"], after_stats["total"])
    return Measurement(rs.spec.label, load, after - before, weft)
