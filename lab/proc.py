"""Server CPU time from /proc: utime + stime of a process and all its descendants.

/proc/PID/stat counts every thread of a process, in clock ticks (usually
100 per second). A server's cost for a run is the difference of two samples
taken just before and just after the load, summed over its process tree (nginx
has a master and a worker; weft has one process with several threads).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class StatLine:
    """The fields of /proc/PID/stat the lab uses."""

    pid: int
    comm: str
    ppid: int
    utime: int  # clock ticks
    stime: int  # clock ticks


def parse_stat(text: str) -> StatLine:
    """Parse one /proc/PID/stat line. `comm` may hold spaces and parentheses,
    so the fields are split after its last ')'."""
    open_paren = text.index("(")
    close_paren = text.rindex(")")
    pid = int(text[:open_paren].strip())
    comm = text[open_paren + 1 : close_paren]
    rest = text[close_paren + 1 :].split()
    # rest[0] is field 3 (state); field N is rest[N - 3].
    return StatLine(pid=pid, comm=comm, ppid=int(rest[1]), utime=int(rest[11]), stime=int(rest[12]))


def descendants(root: int, parent_of: dict[int, int]) -> set[int]:
    """`root` and every process whose chain of parents reaches it."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parent_of.items():
        children.setdefault(ppid, []).append(pid)
    tree = {root}
    stack = [root]
    while stack:
        for c in children.get(stack.pop(), []):
            if c not in tree:
                tree.add(c)
                stack.append(c)
    return tree


def _read_all_stats(proc: str = "/proc") -> dict[int, StatLine]:
    out: dict[int, StatLine] = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/stat", encoding="utf-8", errors="replace") as f:
                out[int(name)] = parse_stat(f.read())
        except (OSError, ValueError, IndexError):
            continue  # exited between listdir and open
    return out


def tree_cpu_ticks(root: int, proc: str = "/proc") -> int:
    """utime + stime (ticks) of `root` and its live descendants."""
    stats = _read_all_stats(proc)
    tree = descendants(root, {pid: s.ppid for pid, s in stats.items()})
    return sum(stats[p].utime + stats[p].stime for p in tree if p in stats)


def tree_pids(root: int, proc: str = "/proc") -> list[int]:
    """`root` and its live descendants, sorted (for `perf record -p`)."""
    stats = _read_all_stats(proc)
    return sorted(p for p in descendants(root, {pid: s.ppid for pid, s in stats.items()}) if p in stats)


def ticks_to_seconds(ticks: int) -> float:
    return ticks / CLK_TCK


def cpu_us_per_request(ticks: int, requests: int) -> float | None:
    """Server CPU microseconds per completed request (None without requests)."""
    if requests <= 0:
        return None
    return ticks_to_seconds(ticks) * 1e6 / requests


# ---------------------------------------------------------------------------
# Nanosecond CPU time: the scheduler's exec runtime of every thread.
#
# utime + stime come in clock ticks (10 ms): fine for a saturated 10 s run,
# coarse for a proxy at a fixed low request rate (a 4 KiB miss costs ~20 µs;
# at 500 requests/s a 4 s run is ~40 ms, four ticks). /proc/PID/task/TID/
# schedstat's first field is the thread's runtime in ns (the same clock the
# kernel scales utime + stime to). It covers live threads only, so a sample
# also keeps the tick total and the thread ids: when a thread of the first
# sample is gone by the second, the tick delta is used instead.


@dataclass(frozen=True)
class CpuSample:
    """CPU time of a process tree at one instant."""

    ns: int  # sum of the live threads' runtimes
    ticks: int  # utime + stime of the processes (includes exited threads)
    tids: frozenset  # the threads the ns sum covers
    # Times each live thread was put on a CPU (schedstat's third field), by
    # thread id: one per wake-up or preemption, what an exchange between
    # processes pays.
    slices: dict = field(default_factory=dict)


def parse_schedstat(text: str) -> int:
    """Runtime in ns from one /proc/.../schedstat line ("run wait slices")."""
    return int(text.split()[0])


def parse_schedstat_slices(text: str) -> int:
    """Times the thread was put on a CPU, from one schedstat line."""
    return int(text.split()[2])


def _thread_ns(pid: int, proc: str) -> tuple[int, dict[int, int], set[int]]:
    total, slices, tids = 0, {}, set()
    try:
        names = os.listdir(f"{proc}/{pid}/task")
    except OSError:
        return 0, slices, tids
    for t in names:
        try:
            with open(f"{proc}/{pid}/task/{t}/schedstat") as f:
                line = f.read()
            total += parse_schedstat(line)
            slices[int(t)] = parse_schedstat_slices(line)
            tids.add(int(t))
        except (OSError, ValueError, IndexError):
            continue
    return total, slices, tids


def tree_cpu_sample(root: int, proc: str = "/proc") -> CpuSample:
    """CPU time of `root` and its live descendants, in ns and in ticks."""
    stats = _read_all_stats(proc)
    tree = descendants(root, {pid: s.ppid for pid, s in stats.items()})
    ns, slices, tids = 0, {}, set()
    for p in tree:
        if p in stats:
            n, k, t = _thread_ns(p, proc)
            ns += n
            slices.update(k)
            tids |= t
    ticks = sum(stats[p].utime + stats[p].stime for p in tree if p in stats)
    return CpuSample(ns=ns, ticks=ticks, tids=frozenset(tids), slices=slices)


def switches_between(before: CpuSample, after: CpuSample) -> int:
    """Times the tree's threads were put on a CPU between two samples: the
    threads in both, and the ones born since in full (a thread that ended
    in between takes its count with it)."""
    return sum(max(k - before.slices.get(tid, 0), 0) for tid, k in after.slices.items())


def kernel_threads_ns(proc: str = "/proc") -> int:
    """Runtime in ns of every kworker and ksoftirqd thread: kernel work no
    process is charged for (a sockmap psock sends from a kworker; softirqs
    that overflow run in ksoftirqd). Machine-wide, so it counts whatever
    else the machine does meanwhile."""
    total = 0
    for pid in os.listdir(proc):
        if not pid.isdigit():
            continue
        try:
            with open(f"{proc}/{pid}/comm") as f:
                if not f.read().startswith(("kworker", "ksoftirqd")):
                    continue
            with open(f"{proc}/{pid}/schedstat") as f:
                total += parse_schedstat(f.read())
        except (OSError, ValueError, IndexError):
            continue
    return total


def cpu_seconds_between(before: CpuSample, after: CpuSample) -> float:
    """CPU seconds spent between two samples: the ns delta when every thread
    of `before` is still there, else the tick delta."""
    if before.tids <= after.tids:
        return max(after.ns - before.ns, 0) / 1e9
    return max(after.ticks - before.ticks, 0) / CLK_TCK
