"""lard-cluster: a real cluster on this machine (issue 23; thesis Figure 3.17
and the front-end capacity of §3.5.2, Figure 3.15).

**cluster** (Figure 3.17). Back-ends are `weft serve` processes, each in its
own cgroup-v1 memory cgroup (`/sys/fs/cgroup/memory/weft-lab-cluster-*`,
`memory.limit_in_bytes`) so that its page cache is smaller than the data set,
and each serving its own copy of the data set (page cache is per inode: with
one shared copy, every back-end would hit in the pages another one read, and
the cluster would have a global cache whatever the front-end does). The data
set is `DATASET_FACTOR` × one back-end's memory limit; the request stream is a
Zipf-like draw over its files (`weft load --urls`, closed loop). In front, on
1 to 6 back-ends (quick: 4):

- `weft front --policy wrr` and `--policy lard-r` (relay mode), and
  `--policy lard-r --mode handoff --handoff-next return` (every back-end is
  `weft serve --handoff-socket`, so one set of back-ends serves both modes);
- `weft front --policy lard-r` with nginx as the (unmodified) back-ends;
- anchors in the same run: HAProxy `balance roundrobin`, HAProxy `balance uri`
  + `hash-type consistent` + `hash-balance-factor 125`, nginx `hash
  $request_uri consistent`.

Each back-end also has its own disk: a cgroup-v1 blkio throttle of
DISK_IOPS reads/s on the device holding the data (see DISK_IOPS for why;
WEFT_LAB_DISK_IOPS=0 turns it off). Before each run every copy of the data set is evicted from the page cache
(posix_fadvise DONTNEED), then a warm-up fills the back-ends' caches through
the front-end under test, then the measured run. Recorded: throughput, the
front-end's CPU per request (scheduler ns of every thread, lab/proc.py), the
back-ends' CPU and bytes read from storage per request (/proc/PID/io
`read_bytes`, the cache misses), and weft front's decision cost.

**capacity** (§3.5.2): a data set that fits in memory (no cgroups, no
misses); the front-end's CPU per request and its decisions' cost against the
number of back-ends (1-6), and the back-ends' CPU per request in the same
runs, hence how many back-ends one front-end core carries.

**handoff**: front-end CPU per request for 100 KiB responses from two weft
back-ends (all cached), relay against handoff's next-request rules `keep`,
`return`, `owner` and `close`, with one request per connection, ten, and
keep-alive; the requests go to 16 targets at random, so a connection's next
request has a different owner about half the time, and the run counts the
connections handed back per request (docs/front.md, "the next request").

The summary checks the issue's targets: LARD/R ≥ 2× WRR throughput at 4
back-ends, ≥ 1.2× HAProxy `balance uri` + bounded load; relay mode's
front-end CPU per request ≤ 0.9× HAProxy's (both at 4 back-ends); handoff's
front-end CPU per request ≤ 0.5× relay's (100 KiB).

Everything above `run` is pure and unit-tested (lab/tests/test_lard_cluster.py).
"""

from __future__ import annotations

import bisect
import os
import random
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from .. import core, env, proc, proxylab as pl, report, servers

NAME = "lard-cluster"
DESCRIPTION = "issue 23 (Fig. 3.17, §3.5.2): real cluster in memory cgroups, weft front WRR vs LARD/R vs HAProxy/nginx; front-end capacity"
PARTS = ("cluster", "capacity", "handoff")

CGROUP_ROOT = "/sys/fs/cgroup/memory"
BLKIO_ROOT = "/sys/fs/cgroup/blkio"
# Each back-end's own "disk": a cgroup-v1 blkio throttle on random reads. The
# thesis's node served a cached 32 KB file about 10 times faster than its disk
# read one (2.85 ms of CPU against ~31 ms of seek and transfer, §3.2.1); a
# back-end here serves ~5,000 cached 32 KiB requests/s of its share of the
# CPU, so its disk gets 500 reads/s. Without it every back-end reads from the
# host's cache of one virtual disk, ~6,000 reads/s shared, and a miss costs
# less than the CPU the relay spends (docs/results.md, "Cluster").
# WEFT_LAB_DISK_IOPS=0 runs without it (the set-up before, for comparison).
DISK_IOPS = int(os.environ.get("WEFT_LAB_DISK_IOPS", "500"))
CGROUP_PREFIX = "weft-lab-cluster-"
DATASET_FACTOR = 3  # data set = this × one back-end's memory limit
ZIPF_ALPHA = 0.8
URLS_IN_STREAM = 200_000
SEED = 23

# Configuration labels.
W_WRR, W_LARD, W_LARD_NGX = "weft WRR", "weft LARD/R", "weft LARD/R, nginx back-ends"
H_RR, H_URI, N_HASH = "HAProxy roundrobin", "HAProxy uri+bounded", "nginx hash consistent"
W_HANDOFF = "weft LARD/R handoff"
CONFIGS = (W_WRR, W_LARD, W_HANDOFF, W_LARD_NGX, H_RR, H_URI, N_HASH)
ANCHOR_KIND = {H_RR: "haproxy-front-rr", H_URI: "haproxy-front-uri", N_HASH: "nginx-front-hash"}
WEFT_POLICY = {W_WRR: "wrr", W_LARD: "lard-r", W_LARD_NGX: "lard-r", W_HANDOFF: "lard-r"}
# The handoff part (docs/front.md, "Handoff against relay"): weft front modes
# and the client's connection use, 100 KiB responses from two back-ends.
HANDOFF_MODES = {"relay": ["--mode", "relay"], "handoff keep": ["--mode", "handoff", "--handoff-next", "keep"],
                 "handoff return": ["--mode", "handoff", "--handoff-next", "return"],
                 "handoff owner": ["--mode", "handoff", "--handoff-next", "owner"],
                 "handoff close": ["--mode", "handoff", "--handoff-next", "close"]}  # fmt: skip
HANDOFF_CONNS = {"1 per connection": ["--close"], "10 per connection": ["--calls", "10"], "keep-alive": []}
HANDOFF_FILE_KIB = 100
HANDOFF_FILES = 16  # targets of the handoff part, requested uniformly at random
CAP_HANDOFF = "lard-r handoff"  # the capacity part's handoff front-end (`return`: every request placed)


@dataclass(frozen=True)
class Point:
    part: str  # cluster | capacity | handoff
    config: str
    backends: int
    policy: str = ""  # capacity: weft front's policy; handoff: the connection use


@dataclass
class Plan:
    rounds: int
    limit_mib: int  # memory limit per back-end (cluster)
    file_kib: int  # size of each file (cluster)
    warmup_s: float
    measure_s: float
    clients: int
    cap_files: int  # capacity: files (all cached)
    cap_file_kib: int
    cap_s: float
    points: list
    disk_iops: int = DISK_IOPS  # per back-end (cluster); 0 = no throttle

    @property
    def dataset_bytes(self) -> int:
        return DATASET_FACTOR * self.limit_mib * pl.MiB

    @property
    def files(self) -> int:
        return self.dataset_bytes // (self.file_kib * pl.KiB)

    def max_backends(self, part: str) -> int:
        return max((p.backends for p in self.points if p.part == part), default=0)

    def estimate_s(self) -> float:
        per = 0.0
        for p in self.points:
            per += (self.warmup_s + self.measure_s + 1.5) if p.part == "cluster" else (self.cap_s + 1.0)
        return per * self.rounds


def plan(quick: bool, parts: list[str] | None = None) -> Plan:
    """What a run measures (pure; the quick form must stay under ~90 s)."""
    pts: list[Point] = []
    if quick:
        pts += [Point("cluster", c, 4) for c in (W_WRR, W_LARD, W_HANDOFF, H_RR, H_URI, N_HASH)]
        for n in (1, 4):
            pts += [Point("capacity", f"weft {pol}", n, pol) for pol in ("lard-r", CAP_HANDOFF)]
        pts += [Point("handoff", m, 2, "1 per connection") for m in ("relay", "handoff keep")]
        pts += [Point("handoff", m, 2, "keep-alive") for m in HANDOFF_MODES]
        pn = Plan(rounds=1, limit_mib=24, file_kib=32, warmup_s=3.0, measure_s=2.0, clients=32, cap_files=500, cap_file_kib=8, cap_s=1.5, points=pts)
    else:
        for n in range(1, 7):
            pts += [Point("cluster", c, n) for c in CONFIGS]
        for n in range(1, 7):
            pts += [Point("capacity", f"weft {pol}", n, pol) for pol in ("wrr", "lard-r", CAP_HANDOFF)]
        pts += [Point("handoff", m, 2, c) for m in HANDOFF_MODES for c in HANDOFF_CONNS]
        pn = Plan(rounds=1, limit_mib=64, file_kib=32, warmup_s=6.0, measure_s=8.0, clients=48, cap_files=1000, cap_file_kib=8, cap_s=4.0, points=pts)
    if parts is not None:
        pn.points = [p for p in pn.points if p.part in parts]
    return pn


# ---------------------------------------------------------------------------
# Pure helpers


def file_path(i: int) -> str:
    """URL path (and path under a back-end's root) of file i."""
    return f"/f/{i:05d}"


def zipf_stream(n_files: int, alpha: float, count: int, seed: int = SEED) -> list[int]:
    """`count` file indexes drawn from Zipf(alpha) over `n_files` files; the
    popularity rank is shuffled over the indexes (hot files are not the
    first ones on disk)."""
    rng = random.Random(seed)
    ranks = list(range(n_files))
    rng.shuffle(ranks)
    cum, total = [], 0.0
    for k in range(1, n_files + 1):
        total += 1.0 / k**alpha
        cum.append(total)
    out = []
    for _ in range(count):
        r = bisect.bisect_left(cum, rng.random() * total)
        out.append(ranks[min(r, n_files - 1)])
    return out


def zipf_top_share(n_files: int, alpha: float, top: int) -> float:
    """Share of requests for the `top` most popular of `n_files` files."""
    w = [1.0 / k**alpha for k in range(1, n_files + 1)]
    return sum(w[:top]) / sum(w)


def haproxy_servers(addrs: list[str]) -> str:
    return "\n".join(f"    server b{i} {a} maxconn 1000" for i, a in enumerate(addrs))


def nginx_servers(addrs: list[str]) -> str:
    return "\n".join(f"        server {a};" for a in addrs)


def server_lines(config: str, addrs: list[str]) -> str:
    """The @SERVERS@ text of an anchor front-end's template."""
    return nginx_servers(addrs) if config == N_HASH else haproxy_servers(addrs)


def front_args(policy: str, addrs: list[str], sockets: list[str] | None = None, mode: list[str] | None = None) -> list[str]:
    """weft front's flags for `policy` over `addrs`: relay mode, or handoff
    (`mode`) to the back-ends' handoff `sockets` (one per address, in order)."""
    out = ["--policy", policy, *(mode or ["--mode", "relay"])]
    for i, a in enumerate(addrs):
        out += ["--backend", a]
        if sockets and "handoff" in (mode or []):
            out += ["--handoff", sockets[i]]
    return out


def backends_per_core(front_us: float | None, backend_us: float | None) -> float | None:
    """How many back-ends, each saturating one core of its own, one
    front-end core carries: a back-end serves 1e6/backend_us requests/s,
    the front-end core relays 1e6/front_us."""
    if not front_us or backend_us is None:
        return None
    return backend_us / front_us


def backends_at_rate(front_us: float | None, backend_rps: float) -> float | None:
    """Back-ends of `backend_rps` requests/s each one front-end core carries."""
    if not front_us or backend_rps <= 0:
        return None
    return 1e6 / front_us / backend_rps


@dataclass
class Target(pl.Threshold):
    """One of the issue's targets: value = a / b, met when value `op` limit."""

    name: str
    a: float | None
    b: float | None
    a_name: str
    b_name: str
    limit: float
    op: str  # ">=" or "<="
    unit: str

    @property
    def value(self) -> float | None:
        return pl.ratio(self.a, self.b)

    @property
    def at_least(self) -> bool:
        return self.op == ">="

    def measured(self, v: float) -> str:
        return f"{v:.2f}× (target {self.op} {self.limit:g}×)"

    def to_dict(self) -> dict:
        return {"name": self.name, "a": self.a, "b": self.b, "a_name": self.a_name, "b_name": self.b_name, "limit": self.limit,
                "op": self.op, "unit": self.unit, "value": self.value, "met": self.met}  # fmt: skip


def targets(med: dict, n: int = 4, med_ho: dict | None = None) -> list[Target]:
    """The issue's real-cluster targets from the medians keyed (config,
    backends), and the handoff part's keyed (mode, connection use)."""

    def v(config, field):
        return med.get((config, n), {}).get(field)

    def h(mode, conns):
        return (med_ho or {}).get((mode, conns), {}).get("front_us")

    return [
        Target(f"LARD/R vs WRR throughput, {n} back-ends", v(W_LARD, "rps"), v(W_WRR, "rps"), W_LARD, W_WRR, 2.0, ">=", "req/s"),
        Target(f"LARD/R vs HAProxy uri + bounded load, {n} back-ends", v(W_LARD, "rps"), v(H_URI, "rps"), W_LARD, H_URI, 1.2, ">=", "req/s"),
        Target(f"relay front-end CPU per request vs HAProxy uri, {n} back-ends", v(W_LARD, "front_us"), v(H_URI, "front_us"), W_LARD, H_URI,
               0.9, "<=", "µs/req"),  # fmt: skip
        Target(f"relay front-end CPU per request vs HAProxy roundrobin, {n} back-ends", v(W_WRR, "front_us"), v(H_RR, "front_us"), W_WRR,
               H_RR, 0.9, "<=", "µs/req"),  # fmt: skip
        Target("handoff (keep) front-end CPU per request vs relay, 100 KiB, 1 request per connection", h("handoff keep", "1 per connection"),
               h("relay", "1 per connection"), "handoff keep", "relay", 0.5, "<=", "µs/req"),  # fmt: skip
        Target("handoff (return) front-end CPU per request vs relay, 100 KiB, keep-alive", h("handoff return", "keep-alive"),
               h("relay", "keep-alive"), "handoff return", "relay", 0.5, "<=", "µs/req"),  # fmt: skip
        Target(f"LARD/R handoff (return) vs relay throughput, {n} back-ends", v(W_HANDOFF, "rps"), v(W_LARD, "rps"), W_HANDOFF, W_LARD, 1.0,
               ">=", "req/s"),  # fmt: skip
    ]


def target_rows(tg: list[Target]) -> list[list[str]]:
    out = []
    for t in tg:
        v = t.value
        out.append([t.name, f"{t.a_name} {report.fmt_num(t.a, 1)}", f"{t.b_name} {report.fmt_num(t.b, 1)}", "–" if v is None else f"{v:.2f}×",
                    f"{t.op} {t.limit:g}×", {True: "met", False: "**missed**", None: "not measured"}[t.met]])  # fmt: skip
    return out


def is_weft(config: str) -> bool:
    return config.startswith("weft")


# ---------------------------------------------------------------------------
# Memory cgroups (v1)


class CgroupError(env.EnvError):
    pass


def memory_v1_root() -> str:
    """The v1 memory controller's mount, mounting it when it is not (root
    only); CgroupError with the reason when neither works."""
    if os.path.exists(os.path.join(CGROUP_ROOT, "memory.limit_in_bytes")):
        if not os.access(CGROUP_ROOT, os.W_OK):
            raise CgroupError(f"cannot create memory cgroups under {CGROUP_ROOT} (not root?): the cluster part is skipped")
        return CGROUP_ROOT
    if os.geteuid() != 0:
        raise CgroupError("cgroup v1 memory controller not mounted and not root: lard-cluster needs it (skipped)")
    os.makedirs(CGROUP_ROOT, exist_ok=True)
    rc = os.system(f"mount -t cgroup -o memory cgroup {CGROUP_ROOT} 2>/dev/null")
    if rc != 0 or not os.path.exists(os.path.join(CGROUP_ROOT, "memory.limit_in_bytes")):
        raise CgroupError("cgroup v1 memory controller is not available here (mount -t cgroup -o memory failed): lard-cluster skipped")
    return CGROUP_ROOT


class MemCgroup:
    """One memory cgroup: created with a limit, processes moved in, removed
    (after its processes are gone) by `remove`."""

    def __init__(self, root: str, name: str, limit_bytes: int):
        self.path = os.path.join(root, name)
        os.makedirs(self.path, exist_ok=True)
        try:
            self._write("memory.limit_in_bytes", str(limit_bytes))
        except OSError:
            os.rmdir(self.path)  # not yet in the caller's list: remove it here
            raise
        self.limit = limit_bytes

    def _write(self, f: str, v: str) -> None:
        with open(os.path.join(self.path, f), "w") as fh:
            fh.write(v)

    def _read(self, f: str) -> str:
        with open(os.path.join(self.path, f)) as fh:
            return fh.read()

    def add_tree(self, root_pid: int) -> None:
        """Move a process and its descendants in (their later page cache
        reads are charged here)."""
        stats = proc._read_all_stats()
        for pid in proc.descendants(root_pid, {p: s.ppid for p, s in stats.items()}):
            try:
                self._write("cgroup.procs", str(pid))
            except OSError:
                pass  # exited

    def usage(self) -> int:
        return int(self._read("memory.usage_in_bytes"))

    def remove(self) -> None:
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)  # tasks still exiting
        raise CgroupError(f"could not remove {self.path}")


class BlkioCgroup(MemCgroup):
    """One blkio cgroup whose reads from `device` ("MAJ:MIN") are throttled
    to `iops` per second: a back-end's own disk."""

    def __init__(self, root: str, name: str, device: str, iops: int):  # pylint: disable=super-init-not-called
        self.path = os.path.join(root, name)
        os.makedirs(self.path, exist_ok=True)
        try:
            self._write("blkio.throttle.read_iops_device", f"{device} {iops}")
        except OSError:
            os.rmdir(self.path)
            raise
        self.limit = iops

    def usage(self) -> int:
        return 0


def device_of(path: str) -> str:
    """MAJ:MIN of the block device holding `path`."""
    st = os.stat(path)
    return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"


def blkio_groups(n: int, device: str, iops: int, log) -> list[BlkioCgroup]:
    """n throttled blkio cgroups, or none (said in the log) when the v1 blkio
    controller is not there."""
    if not iops or not os.path.exists(os.path.join(BLKIO_ROOT, "blkio.throttle.read_iops_device")):
        log("  no blkio throttle: back-ends read from the shared disk unthrottled")
        return []
    remove_stale_cgroups(BLKIO_ROOT, log)
    out = []
    for i in range(n):
        out.append(BlkioCgroup(BLKIO_ROOT, f"{CGROUP_PREFIX}{os.getpid()}-{i}", device, iops))
    return out


def remove_stale_cgroups(root: str, log) -> None:
    """Empty cgroups of an earlier run that could not clean up (killed)."""
    for name in os.listdir(root):
        if name.startswith(CGROUP_PREFIX):
            try:
                os.rmdir(os.path.join(root, name))
                log(f"  removed a stale cgroup {name}")
            except OSError:
                pass


# ---------------------------------------------------------------------------
# Data set


def write_dataset(root: str, n_files: int, size: int) -> None:
    """n_files deterministic files of `size` bytes under root/f/ (then
    `os.sync()` and `evict` them: dirty pages cannot be dropped)."""
    os.makedirs(os.path.join(root, "f"), exist_ok=True)
    os.chmod(root, 0o755)
    os.chmod(os.path.join(root, "f"), 0o755)
    block = bytes((i * 31 + 7) % 251 for i in range(size))
    for i in range(n_files):
        p = root + file_path(i)
        with open(p, "wb") as f:
            os.fchmod(f.fileno(), 0o644)
            f.write(block[i % 251 :] + block[: i % 251])


def evict(roots: list[str], n_files: int) -> None:
    """Drop every file of these copies from the page cache (clean pages)."""
    for root in roots:
        for i in range(n_files):
            try:
                fd = os.open(root + file_path(i), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def read_bytes(pid: int) -> int:
    """Bytes a process tree fetched from storage (/proc/PID/io read_bytes)."""
    stats = proc._read_all_stats()
    total = 0
    for p in proc.descendants(pid, {q: s.ppid for q, s in stats.items()}):
        try:
            with open(f"/proc/{p}/io") as f:
                for line in f:
                    if line.startswith("read_bytes:"):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total


# ---------------------------------------------------------------------------
# The run


class Bed:
    """What the measured runs share: the lab, a server pool, the cgroups."""

    def __init__(self, lab: core.Lab, pool: servers.ServerPool, pn: Plan, cgroups: list[MemCgroup]):
        self.lab, self.pool, self.pn, self.cgroups = lab, pool, pn, cgroups
        self.blkio: list[BlkioCgroup] = []
        self.commands: dict[str, list[str]] = {}
        self.sockets: list[str] = []  # the last weft back-ends' handoff sockets

    def start_backends(self, kind: str, roots: list[str], n: int, label: str, cgroups: bool = True) -> list[servers.RunningServer]:
        out = []
        self.sockets = []
        for i in range(n):
            self.pool.www = roots[i]
            opts: dict = {}
            if kind == "weft":
                # Every weft back-end also takes handed-off connections.
                sock = os.path.join(self.lab.scratch, f"handoff-{len(self.commands)}-{i}-{time.monotonic_ns()}.sock")
                self.sockets.append(sock)
                opts = {"workers": 1, "extra": ["--handoff-socket", sock]}
            spec = servers.ServerSpec(f"{label} b{i}", kind, opts)
            rs = self.pool.start(spec)
            if cgroups and self.cgroups:
                self.cgroups[i].add_tree(rs.pid)
            if cgroups and self.blkio:
                self.blkio[i].add_tree(rs.pid)
            out.append(rs)
            self.commands.setdefault(f"back-end ({label})", rs.command)
        return out

    @contextmanager
    def backends(self, kind: str, roots: list[str], n: int, label: str, cgroups: bool = True) -> Iterator[list[servers.RunningServer]]:
        """`start_backends` for a `with` block, whose end stops them (after an
        error the pool's own exit stops them)."""
        backends = self.start_backends(kind, roots, n, label, cgroups)
        yield backends
        for b in backends:
            self.pool.stop(b)

    def start_front(self, config: str, addrs: list[str], policy: str | None = None, mode: list[str] | None = None) -> servers.RunningServer:
        if is_weft(config):
            if mode is None and config == W_HANDOFF:
                mode = HANDOFF_MODES["handoff return"]
            extra = front_args(policy or WEFT_POLICY[config], addrs, self.sockets, mode)
            spec = servers.ServerSpec(config, "weft-front", {"workers": 1, "extra": extra})
        else:
            spec = servers.ServerSpec(config, ANCHOR_KIND[config], {"values": {"SERVERS": server_lines(config, addrs)}})
        rs = self.pool.start(spec)
        self.commands.setdefault(config if not policy else f"weft front --policy {policy}", rs.command)
        return rs

    def load(self, front: servers.RunningServer, urls: str, seconds: float, extra: list[str] | None = None) -> pl.ClientRun:
        args = ["--urls", urls, "--clients", str(self.pn.clients), "--duration", f"{seconds:g}s", "--timeout", "5s", *(extra or [])]
        return pl.run_weft_load(self.lab.weft, f"http://{front.addr}/", args, scratch=os.path.join(self.lab.scratch, "client"),
                                timeout_s=seconds + 60)  # fmt: skip


def measure(bed: Bed, front: servers.RunningServer, bends: list[servers.RunningServer], urls: str, seconds: float,
            load_extra: list[str] | None = None, **keys) -> dict:  # fmt: skip
    """One measured run: throughput, front-end and back-end CPU per request,
    bytes read from storage, weft front's decisions."""
    for rs in [front] + bends:
        if not rs.alive():
            raise servers.ServerError(f"{rs.spec.label} is not running")
    s0 = front.admin_stats()
    f0 = front.cpu_sample()
    b0 = [b.cpu_sample() for b in bends]
    r0 = sum(read_bytes(b.pid) for b in bends)
    run = bed.load(front, urls, seconds, load_extra)
    f1 = front.cpu_sample()
    b1 = [b.cpu_sample() for b in bends]
    r1 = sum(read_bytes(b.pid) for b in bends)
    s1 = front.admin_stats()
    ld = run.load
    n = ld.requests
    front_s = proc.cpu_seconds_between(f0, f1)
    back_s = sum(proc.cpu_seconds_between(x, y) for x, y in zip(b0, b1))
    row = dict(keys)
    row.update({
        "requests": n, "duration_s": ld.duration_s, "rps": ld.rps,
        "front_us": front_s * 1e6 / n if n else None,
        "backend_us": back_s * 1e6 / n if n else None,
        "client_us": run.cpu_s * 1e6 / n if n else None,
        "front_util": front_s / ld.duration_s if ld.duration_s else None,
        "disk_kib_per_req": (r1 - r0) / 1024 / n if n else None,
        "latency_ms_mean": ld.latency_ms.get("mean"), "latency_ms_p99": ld.latency_ms.get("p99"),
        "non_2xx": ld.non_2xx, "errors": ld.error_total,
    })  # fmt: skip
    if s0 and s1:
        d = int(s1["front"]["decisions"]) - int(s0["front"]["decisions"])
        ns = int(s1["front"]["decision_ns"]) - int(s0["front"]["decision_ns"])
        row["decision_ns"] = ns / d if d else None
        row["decisions_per_req"] = d / n if n else None
        row["backend_requests"] = [int(b["stats"]["requests"]) for b in s1["backends"]]
        hb = int(s1["front"].get("handed_back", 0)) - int(s0["front"].get("handed_back", 0))
        row["handed_back_per_req"] = hb / n if n else None
    return row


def write_urls(path: str, indexes: list[int]) -> None:
    pl.write_url_file(path, [file_path(i) for i in indexes])


def run_cluster(bed: Bed, pn: Plan, roots: list[str], urls: str, rnd: int, rows: list[dict]) -> None:
    lab = bed.lab
    counts = sorted({p.backends for p in pn.points if p.part == "cluster"})
    for n in counts:
        configs = [p.config for p in pn.points if p.part == "cluster" and p.backends == n]
        for kind, group in (("weft", [c for c in configs if c != W_LARD_NGX]), ("nginx", [c for c in configs if c == W_LARD_NGX])):
            if not group:
                continue
            with bed.backends(kind, roots, n, "weft serve" if kind == "weft" else "nginx") as backends:
                addrs = [b.addr for b in backends]
                for config in pl.rotate(group, rnd):
                    front = bed.start_front(config, addrs)
                    pl.check_fetch(config, f"http://{front.addr}{file_path(0)}", pn.file_kib * pl.KiB)
                    evict(roots[:n], pn.files)
                    bed.load(front, urls, pn.warmup_s)
                    row = measure(bed, front, backends, urls, pn.measure_s, part="cluster", config=config, backends=n, round=rnd + 1)
                    row["cgroup_usage_mib"] = [round(c.usage() / pl.MiB, 1) for c in bed.cgroups[:n]]
                    rows.append(row)
                    lab.log(f"  cluster {n} back-end(s) {config:<30}: {row['rps']:>8,.0f} req/s  front {report.fmt_num(row['front_us']):>6} µs/req"
                            f"  disk {report.fmt_num(row['disk_kib_per_req'], 2):>6} KiB/req")  # fmt: skip
                    bed.pool.stop(front)


def run_capacity(bed: Bed, pn: Plan, root: str, urls: str, rnd: int, rows: list[dict]) -> None:
    lab = bed.lab
    counts = sorted({p.backends for p in pn.points if p.part == "capacity"})
    for n in counts:
        with bed.backends("weft", [root] * n, n, "weft serve (capacity)", cgroups=False) as backends:
            addrs = [b.addr for b in backends]
            for p in [p for p in pn.points if p.part == "capacity" and p.backends == n]:
                if p.policy == CAP_HANDOFF:  # LARD/R handing every request off (§3.5.2's front-end)
                    front = bed.start_front(p.config, addrs, "lard-r", HANDOFF_MODES["handoff return"])
                else:
                    front = bed.start_front(p.config, addrs, p.policy)
                bed.load(front, urls, min(1.0, pn.cap_s))
                row = measure(bed, front, backends, urls, pn.cap_s, part="capacity", config=p.config, policy=p.policy, backends=n, round=rnd + 1)
                rows.append(row)
                lab.log(f"  capacity {n} back-end(s) {p.config:<14}: {row['rps']:>8,.0f} req/s  front {report.fmt_num(row['front_us']):>6} µs/req"
                        f"  decision {report.fmt_num(row.get('decision_ns'), 0)} ns")  # fmt: skip
                bed.pool.stop(front)


def run_handoff(bed: Bed, pn: Plan, root: str, urls: str, rnd: int, rows: list[dict]) -> None:
    """Front-end CPU per request, relay against handoff (keep, return), for
    100 KiB responses from two weft back-ends (docs/front.md, "Handoff
    against relay")."""
    lab = bed.lab
    pts = [p for p in pn.points if p.part == "handoff"]
    with bed.backends("weft", [root] * 2, 2, "weft serve (handoff)", cgroups=False) as backends:
        addrs = [b.addr for b in backends]
        for mode in pl.rotate(list(OrderedDict.fromkeys(p.config for p in pts)), rnd):
            front = bed.start_front(f"weft front {mode}", addrs, "lard-r", HANDOFF_MODES[mode])
            pl.check_fetch(mode, f"http://{front.addr}{file_path(0)}", HANDOFF_FILE_KIB * pl.KiB)
            for p in [p for p in pts if p.config == mode]:
                bed.load(front, urls, min(1.0, pn.cap_s), HANDOFF_CONNS[p.policy])
                row = measure(bed, front, backends, urls, pn.cap_s, HANDOFF_CONNS[p.policy], part="handoff", config=mode, policy=p.policy,
                              backends=2, round=rnd + 1)  # fmt: skip
                rows.append(row)
                lab.log(f"  handoff {mode:<15} {p.policy:<18}: {row['rps']:>8,.0f} req/s  front {report.fmt_num(row['front_us']):>6} µs/req")
            bed.pool.stop(front)


def run(lab: core.Lab) -> dict:
    pn = plan(lab.quick, lab.only)
    cg_root, skipped = "", ""
    if any(p.part == "cluster" for p in pn.points):
        try:
            cg_root = memory_v1_root()
        except CgroupError as e:
            # No memory cgroups, no cluster whose memory is smaller than its
            # data: say so and measure what does not need them.
            skipped = str(e)
            lab.log(f"  {skipped}")
            pn.points = [p for p in pn.points if p.part != "cluster"]
    lab.prepare(commands=["nginx", "haproxy"])
    rows: list[dict] = []
    commands: dict[str, list[str]] = {}
    data = os.path.join(lab.scratch, "data")
    os.makedirs(data)
    os.chmod(data, 0o755)
    lab.log(f"{NAME}: {len(pn.points)} runs, about {pn.estimate_s():.0f} s of load")
    with ExitStack() as stack:
        cgroups: list[MemCgroup] = []
        nmax = pn.max_backends("cluster")
        if nmax:
            remove_stale_cgroups(cg_root, lab.log)

            def remove_all():
                for c in cgroups:
                    try:
                        c.remove()
                    except CgroupError as e:
                        lab.log(f"  {e}")

            stack.callback(remove_all)
            for i in range(nmax):
                cgroups.append(MemCgroup(cg_root, f"{CGROUP_PREFIX}{os.getpid()}-{i}", pn.limit_mib * pl.MiB))
            blkio = blkio_groups(nmax, device_of(data), pn.disk_iops, lab.log)
            cgroups += blkio  # removed with the others
            lab.log(f"  data set {pn.files} files × {pn.file_kib} KiB = {pn.dataset_bytes / pl.MiB:.0f} MiB per back-end copy, "
                    f"{nmax} copies; memory limit {pn.limit_mib} MiB per back-end")  # fmt: skip
        pool = stack.enter_context(lab.pool(data))  # stopped before the cgroups go
        bed = Bed(lab, pool, pn, [c for c in cgroups if not isinstance(c, BlkioCgroup)])
        bed.blkio = [c for c in cgroups if isinstance(c, BlkioCgroup)]
        roots = []
        for i in range(nmax):
            root = os.path.join(data, f"b{i}")
            write_dataset(root, pn.files, pn.file_kib * pl.KiB)
            roots.append(root)
        os.sync()
        evict(roots, pn.files)
        for rnd in range(pn.rounds):
            if nmax:
                urls = os.path.join(lab.scratch, "cluster-urls.txt")
                write_urls(urls, zipf_stream(pn.files, ZIPF_ALPHA, URLS_IN_STREAM, SEED + rnd))
                run_cluster(bed, pn, roots, urls, rnd, rows)
            if pn.max_backends("capacity"):
                croot = os.path.join(data, "capacity")
                if not os.path.isdir(croot):
                    write_dataset(croot, pn.cap_files, pn.cap_file_kib * pl.KiB)
                curls = os.path.join(lab.scratch, "capacity-urls.txt")
                write_urls(curls, zipf_stream(pn.cap_files, ZIPF_ALPHA, 50_000, SEED))
                run_capacity(bed, pn, croot, curls, rnd, rows)
            if any(p.part == "handoff" for p in pn.points):
                hroot = os.path.join(data, f"handoff{HANDOFF_FILES}")
                if not os.path.isdir(hroot):
                    write_dataset(hroot, HANDOFF_FILES, HANDOFF_FILE_KIB * pl.KiB)
                hurls = os.path.join(lab.scratch, "handoff-urls.txt")
                rng = random.Random(SEED)
                write_urls(hurls, [rng.randrange(HANDOFF_FILES) for _ in range(4096)])
                run_handoff(bed, pn, hroot, hurls, rnd, rows)
        commands = bed.commands
    previous = pl.read_runs(lab.results_dir)
    rows, commands = pl.merge_parts(previous, lab.quick, lab.only, rows, commands)
    return summarize(lab, plan(lab.quick), rows, commands, skipped)


def resummarize(lab: core.Lab) -> dict:
    doc = pl.runs_to_resummarize(lab)
    return summarize(lab, plan(lab.quick), doc["runs"], doc.get("commands", {}))


# ---------------------------------------------------------------------------
# Summary

FIELDS = ["rps", "front_us", "backend_us", "client_us", "front_util", "disk_kib_per_req", "decision_ns", "latency_ms_mean", "latency_ms_p99", "handed_back_per_req"]


def summarize(lab: core.Lab, pn: Plan, rows: list[dict], commands: dict, skipped: str = "") -> dict:
    cl = [r for r in rows if r.get("part") == "cluster"]
    cap = [r for r in rows if r.get("part") == "capacity"]
    med = pl.median_rows(cl, ["config", "backends"], FIELDS)
    med_cap = pl.median_rows(cap, ["config", "backends"], FIELDS)
    med_ho = pl.median_rows([r for r in rows if r.get("part") == "handoff"], ["config", "policy"], FIELDS)
    tg = targets(med, 4, med_ho)
    problems = [(r, p) for r in rows for p in [pl.run_problems(r)] if p]
    d = lab.results_dir
    os.makedirs(d, exist_ok=True)
    report.write_json(os.path.join(d, "runs.json"), {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "commands": commands,
                                                    "runs": rows, "targets": [t.to_dict() for t in tg]})  # fmt: skip
    report.write_csv(os.path.join(d, "runs.csv"), rows)
    md = summary_lines(pn, lab.quick, med, med_cap, tg, problems)
    if med_ho:
        at = md.index("## Checks")
        md[at:at] = handoff_lines(med_ho) + [""]
    if skipped:
        md[2:2] = [f"**Not measured: {skipped}.**", ""]
    load = [f"weft load http://FRONT/ --urls ZIPF_URLS.txt --clients {pn.clients} --duration {pn.measure_s:g}s --timeout 5s "
            f"(after a {pn.warmup_s:g}s warm-up; Zipf alpha {ZIPF_ALPHA} over the data set's files, {URLS_IN_STREAM:,} draws)"]  # fmt: skip
    pl.write_summary(d, md, commands, load, "Load:", lab.versions, ["cluster_rps.png", "capacity_front_us.png"])
    plots(d, med, med_cap)
    for t in tg:
        lab.log("  " + t.describe())
    return {"problems": len(problems), "weft_problems": sum(1 for r, _ in problems if is_weft(r.get("config", ""))), "targets": [t.to_dict() for t in tg],
            "skipped": skipped}  # fmt: skip


def summary_lines(pn: Plan, quick: bool, med: dict, med_cap: dict, tg: list[Target], problems: list) -> list[str]:
    md = [f"# {NAME}", "", f"{'Quick' if quick else 'Full'} form. Every server one worker/thread; "
          f"front-end CPU = scheduler runtime of its threads (/proc/PID/task/*/schedstat) per completed request. "
          f"Back-ends: memory cgroup v1 limit {pn.limit_mib} MiB each, own copy of a {pn.dataset_bytes / pl.MiB:.0f} MiB data set "
          f"({pn.files} files × {pn.file_kib} KiB, {DATASET_FACTOR}× one back-end's memory), Zipf α {ZIPF_ALPHA} request stream, "
          f"{pn.clients} closed-loop clients, caches evicted and warmed ({pn.warmup_s:g} s) through the front-end under test before each "
          f"{pn.measure_s:g} s run. All processes share this machine's cores.", ""]  # fmt: skip
    md += ["## Targets (same run, 4 back-ends)", ""]
    md.append(report.markdown_table(["target", "weft", "against", "ratio", "target", ""], target_rows(tg), "llllll"))
    md += ["", f"Each back-end's reads are throttled to {pn.disk_iops} per second (its own disk, a cgroup-v1 blkio throttle; 0 = none).", ""]
    if med:
        configs = [c for c in CONFIGS if any(k[0] == c for k in med)]
        counts = sorted({k[1] for k in med})
        for field, title, digits in (("rps", "Throughput (requests/s)", 0), ("front_us", "Front-end CPU µs per request", 1),
                                     ("disk_kib_per_req", "Read from storage, KiB per request (back-ends' cache misses)", 2),
                                     ("backend_us", "Back-ends' CPU µs per request (sum)", 1)):  # fmt: skip
            md += ["", f"## {title} vs back-ends (Figure 3.17)", ""]
            trs = [[c] + [report.fmt_num(med.get((c, n), {}).get(field), digits) for n in counts] for c in configs]
            md.append(report.markdown_table(["config"] + [str(n) for n in counts], trs))
        dec = [[c] + [report.fmt_num(med.get((c, n), {}).get("decision_ns"), 0) for n in counts] for c in configs if is_weft(c)]
        md += ["", "weft front's decision cost (ns per decision, lock wait included):", "", report.markdown_table(["config"] + [str(n) for n in counts], dec)]
    if med_cap:
        md += ["", "## Front-end capacity (§3.5.2, Figure 3.15): all data cached", ""]
        crow = []
        for (c, n), m in sorted(med_cap.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            bpc = backends_per_core(m["front_us"], m["backend_us"])
            crow.append([c, str(n), report.fmt_num(m["rps"], 0), report.fmt_num(m["front_us"], 1), report.fmt_num(m["decision_ns"], 0),
                         report.fmt_num(m["backend_us"], 1), report.fmt_num(bpc, 1),
                         report.fmt_num(backends_at_rate(m["front_us"], 1000), 1)])  # fmt: skip
        md.append(report.markdown_table(["front-end", "back-ends", "req/s", "front µs/req", "decision ns", "back-ends µs/req",
                                         "back-ends per front core (each back-end saturating a core)", "back-ends of 1,000 req/s per front core"],
                                        crow, "llrrrrrr"))  # fmt: skip
        md += ["", "Each request runs on one back-end, so the back-ends' CPU summed over the run per request is one back-end's cost of a "
               "request. Back-ends per front-end core = that / the front-end's CPU per request: a back-end with one core serves "
               "1e6/backend_us requests/s, a front-end core relays 1e6/front_us.", ""]  # fmt: skip
    md += ["", "## Checks", ""]
    md += [f"- {r['part']} {r['config']} {r['backends']} back-end(s): {', '.join(p)}" for r, p in problems] or ["- every response 2xx, no socket errors"]
    return md


def handoff_lines(med_ho: dict) -> list[str]:
    """The handoff part's table: front-end CPU per request by mode and connection use."""
    modes = [m for m in HANDOFF_MODES if any(k[0] == m for k in med_ho)]
    conns = [c for c in HANDOFF_CONNS if any(k[1] == c for k in med_ho)]
    md = ["## Handoff against relay: front-end CPU µs per request, 100 KiB responses, 2 back-ends, 16 targets at random "
          "(req/s in brackets; hand-backs per request after `hb`)", ""]
    trs = []
    for c in conns:
        relay = med_ho.get(("relay", c), {}).get("front_us")
        cells = []
        for m in modes:
            x = med_ho.get((m, c), {})
            q = pl.ratio(x.get("front_us"), relay) if m != "relay" else None
            hb = x.get("handed_back_per_req")
            cells.append(f"{report.fmt_num(x.get('front_us'), 1)} ({report.fmt_num(x.get('rps'), 0)})" + (f", {q:.2f}×" if q else "")
                         + (f", hb {hb:.2f}" if hb is not None and m != "relay" else ""))  # fmt: skip
        trs.append([c] + cells)
    md.append(report.markdown_table(["requests per connection"] + modes, trs))
    return md


def plots(d: str, med: dict, med_cap: dict) -> None:
    if med:
        counts = sorted({k[1] for k in med})
        series = OrderedDict((c, [med.get((c, n), {}).get("rps") for n in counts]) for c in CONFIGS if any(k[0] == c for k in med))
        report.plot_series(os.path.join(d, "cluster_rps.png"), counts, series, xlabel="back-ends", ylabel="requests/s",
                           title=f"{NAME}: throughput vs back-ends (thesis Fig. 3.17)")  # fmt: skip
    if med_cap:
        counts = sorted({k[1] for k in med_cap})
        cfgs = list(OrderedDict.fromkeys(k[0] for k in med_cap))
        series = OrderedDict((c, [med_cap.get((c, n), {}).get("front_us") for n in counts]) for c in cfgs)
        report.plot_series(os.path.join(d, "capacity_front_us.png"), counts, series, xlabel="back-ends", ylabel="front-end CPU µs/request",
                           title=f"{NAME}: front-end CPU per request vs back-ends (§3.5.2)")  # fmt: skip
