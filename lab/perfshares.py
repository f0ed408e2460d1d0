"""Where a process's CPU goes, from `perf record -g`: the share of its
samples in user space and under named kernel functions. Used by the
developer scripts that explain a figure (scripts/booster_profile.py for the
origin behind the booster, scripts/proxy_bench.py --perf for a proxy's miss).

A share under a function counts its callees (perf's children mode), so one
path's share may hold another's: `tcp_v4_rcv` runs inside a `sendto` on
loopback, where the sender also does the receiver's work. The groups a
caller names should not nest within one group (a copy routine and the
routine it calls would count the same sample twice).
"""

import subprocess
import threading
import time
from collections.abc import Sequence

# (name, kernel functions): each group's share is the sum of its functions'.
Paths = Sequence[tuple[str, Sequence[str]]]

# Groups a server's or proxy's profile is read by (scripts/proxy_bench.py and
# scripts/serve_bench.py --perf). The copies are the three routines a body's
# bytes cross user space through on this kernel, reads and writes alike. A
# system call is its kernel body (its work, not the scheduling on the way
# back out), named as perf sees it on this kernel: read's and write's x64
# entries are inlined, their ksys_ bodies are not. `tcp-rcv` is the loopback
# receive the kernel runs for a peer inside a send.
COPY = ("copy", ["_copy_to_iter", "_copy_from_iter", "_copy_from_iter_nocache", "__check_object_size"])
SEND = ("send", ["__sys_sendto", "__sys_sendmsg", "ksys_write", "do_writev"])
SPLICE = ("splice", ["__do_splice", "__x64_sys_tee"])
SENDFILE = ("sendfile", ["do_sendfile"])
RECV = ("recv", ["__sys_recvfrom", "__sys_recvmsg", "ksys_read", "do_readv"])
EPOLL = ("epoll", ["do_epoll_wait", "do_epoll_ctl"])
TCP_RCV = ("tcp-rcv", ["tcp_v4_rcv"])
# Switching a CPU to another task and waking one: what an exchange between
# processes (a server and its FastCGI application) costs beyond the bytes.
# Both run inside system calls (a read that sleeps, a send that wakes the
# peer), so this group overlaps the system calls' groups, not itself.
SWITCH = ("switch", ["__schedule", "try_to_wake_up"])


def record(out: str, target: Sequence[str], delay: float, secs: float) -> threading.Thread:
    """`perf record -g` of `target` (perf's own selector, e.g. `["-C", "1"]`
    or `["-p", "12,34"]`) for `secs`, starting `delay` from now, into the
    file `out`; a thread to join."""

    def rec():
        time.sleep(delay)
        cmd = ["perf", "record", "-q", "-g", *target, "-o", out, "--", "sleep", f"{secs:g}"]
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=secs + 60)

    t = threading.Thread(target=rec, daemon=True)
    t.start()
    return t


def shares(data: str, paths: Paths, comm: str | None = None) -> dict:
    """Percent of the samples in the perf data file `data` (of `comm`'s
    alone when given) under each group of `paths`, and in user space."""
    base = ["perf", "report", "-i", data, "-q", "-g", "none"]
    own = subprocess.run(base + ["--no-children", "--sort", "comm,dso"], capture_output=True, text=True, timeout=300).stdout
    kids = subprocess.run(base + ["--children", "--sort", "comm,sym"], capture_output=True, text=True, timeout=300).stdout
    return parse_shares(own, kids, paths, comm)


def parse_shares(own: str, kids: str, paths: Paths, comm: str | None = None) -> dict:
    """`own`: `perf report --no-children --sort comm,dso`; `kids`: `perf
    report --children --sort comm,sym`. Both are sorted by comm rather than
    filtered with `--comm`: with that filter, perf report sometimes leaves
    the kernel's line out of a sort by dso, and every sample looks like user
    time. Shares are of the samples of `comm` (of every command when None);
    a group with no sample is left out, `user` is always there."""
    rows = [ln.split(None, 2) for ln in own.splitlines() if ln.strip()]
    rows = [(float(r[0].rstrip("%")), r[2].strip()) for r in rows if len(r) == 3 and comm in (None, r[1])]
    total = sum(pct for pct, _ in rows) or 1.0
    got = {"user": 100.0 * sum(pct for pct, dso in rows if not dso.startswith("[kernel")) / total}
    group_of = {sym: name for name, syms in paths for sym in syms}
    for line in kids.splitlines():
        parts = line.split()
        if len(parts) >= 5 and comm in (None, parts[2]) and parts[-1] in group_of:
            name = group_of[parts[-1]]
            got[name] = got.get(name, 0.0) + 100.0 * float(parts[0].rstrip("%")) / total
    return got
