"""Server CPU time from /proc: utime + stime of a process and all its descendants.

/proc/PID/stat counts every thread of a process, in clock ticks (usually
100 per second). A server's cost for a run is the difference of two samples
taken just before and just after the load, summed over its process tree (nginx
has a master and a worker; weft has one process with several threads).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

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


def ticks_to_seconds(ticks: int) -> float:
    return ticks / CLK_TCK


def cpu_us_per_request(ticks: int, requests: int) -> float | None:
    """Server CPU microseconds per completed request (None without requests)."""
    if requests <= 0:
        return None
    return ticks_to_seconds(ticks) * 1e6 / requests
