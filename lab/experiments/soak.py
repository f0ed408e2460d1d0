"""soak: the PolyMix-4-like workload through `weft proxy` for a long time at
70 % of its peak, with the proxy's resident memory and descriptor count
sampled every 10 s (issue 17 §4): after a warm-up, both stay within ±5 % of
their mean, and the run has zero errors.

The peak is measured first, in the same run: `weft load --workload polymix`
at rising offered rates for a few seconds each, through a fresh proxy; the
peak is the highest offered rate whose reply rate still grew in proportion
(at least 90 % of the rate the lowest step's replies per offered request
predict) with no error. The soak then runs at 70 % of it on a fresh proxy
with an empty cache (the cache fills during the warm-up: PolyMix's working
set grows with time, so memory is allowed to grow until the warm-up ends,
the first third of the run).

Full: 30 minutes (`python3 -m lab run soak`); quick: 20 s at 70 % of the
quick peak, samples every 5 s, a 32 MiB cache (`--quick`, CI's smoke list:
zero errors asserted, flatness only reported: 20 s is far too short for
PolyMix's thousands of think-time connections to settle).
"""

from __future__ import annotations

import os
import statistics
import threading
import time

from .. import core, proxylab as pl, report, servers

NAME = "soak"
DESCRIPTION = "issue 17: PolyMix through weft proxy at 70 % of peak for 30 min: RSS and descriptors flat (±5 % after warm-up), zero errors"

ORIGIN_ARGS = ["--think", "norm(2.5s,1s)", "--conn-requests", "zipf(16)"]
STEPS_FULL = (1000, 2000, 4000, 8000)
STEPS_QUICK = (500, 1500)
FLAT = 0.05


def proc_sample(pid: int) -> tuple[int, int]:
    """(RSS in KiB, open descriptors) of a process."""
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def flatness(values: list[float], warmup: int) -> float | None:
    """The largest deviation from the mean after `warmup` samples, as a
    fraction of the mean (pure)."""
    after = values[warmup:]
    if len(after) < 2:
        return None
    m = statistics.fmean(after)
    return max(abs(v - m) for v in after) / m if m else None


def peak_of(steps: list[tuple[int, float, int]]) -> int:
    """The highest offered rate whose replies kept up (pure): `steps` are
    (offered, replies/s, errors); a step keeps up when it has no error and
    at least 90 % of the replies the first step's ratio predicts."""
    if not steps:
        return 0
    base = steps[0][1] / steps[0][0] if steps[0][0] else 0
    best = 0
    for offered, rps, errors in steps:
        if errors == 0 and rps >= 0.9 * base * offered:
            best = offered
        else:
            break
    return best or steps[0][0]


def load_args(rate: int, duration_s: float, proxy: str) -> list[str]:
    return ["--workload", "polymix", "--rate", str(rate), "--proxy", proxy, "--http10", "--duration", f"{duration_s:g}s",
            "--timeout", "10s", "--seed", "1"]  # fmt: skip


def errors_of(doc: dict) -> int:
    replies = doc.get("replies", {})
    return int(doc.get("error_details", {}).get("total", 0)) + replies.get("5xx", 0)


def run(lab: core.Lab) -> dict:
    quick = lab.quick
    steps = STEPS_QUICK if quick else STEPS_FULL
    soak_s = 20.0 if quick else 1800.0
    every = 5.0 if quick else 10.0
    step_s = 5.0 if quick else 10.0
    lab.prepare()
    scratch = os.path.join(lab.scratch, "client")
    commands: dict[str, list[str]] = {}
    with lab.pool(lab.scratch) as pool:
        origin = pool.start(servers.ServerSpec("weft origin", "weft-origin", {"extra": ORIGIN_ARGS}))
        commands["weft origin"] = origin.command
        url = f"http://{origin.addr}/"
        measured = []
        rs = pool.start(pl.weft_forward("weft proxy"))
        for rate in steps:
            c = pl.run_weft_load(lab.weft, url, load_args(rate, step_s, rs.addr), scratch=scratch, timeout_s=step_s + 90)
            doc = c.doc
            rps = doc.get("replies", {}).get("total", 0) / max(doc.get("duration_s", step_s), 1e-9)
            measured.append((rate, rps, errors_of(doc)))
            lab.log(f"  peak search: {rate}/s offered -> {rps:,.0f} replies/s, {errors_of(doc)} errors")
        pool.stop(rs)
        peak = peak_of(measured)
        rate = max(1, int(0.7 * peak))
        lab.log(f"{NAME}: peak {peak}/s offered; soaking at {rate}/s for {soak_s:g} s, samples every {every:g} s")
        # Quick: a small cache, full within seconds (the full run's 256 MiB
        # fills during its warm-up).
        rs = pool.start(pl.weft_forward("weft proxy", "auto", *(["--cache-size", "32MiB"] if quick else [])))
        commands["weft proxy"] = rs.command
        samples: list[tuple[float, int, int]] = []
        done = threading.Event()

        def sampler():
            t0 = time.monotonic()
            while not done.wait(every) and time.monotonic() - t0 <= soak_s:
                try:
                    rss, fds = proc_sample(rs.pid)
                except OSError:
                    break
                samples.append((time.monotonic() - t0, rss, fds))
                # Progress for a half-hour run: a line a minute.
                if len(samples) % max(1, round(60 / every)) == 0:
                    t = samples[-1][0]
                    lab.log(f"  soak {t:4.0f}/{soak_s:g} s: RSS {rss / 1024:,.0f} MiB, {fds:,} descriptors")

        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        args = load_args(rate, soak_s, rs.addr)
        try:
            client = pl.run_weft_load(lab.weft, url, args, scratch=scratch, timeout_s=soak_s + 120)
        finally:
            done.set()
            th.join(timeout=5)
        stats = rs.admin_stats() or {}
        pool.stop(rs)
    doc = client.doc
    # Samples while the load ran only; the first third (half in the quick
    # form) is the warm-up.
    warm = max(1, len(samples) // (2 if quick else 3))
    rss_dev = flatness([s[1] for s in samples], warm)
    fd_dev = flatness([s[2] for s in samples], warm)
    errors = errors_of(doc)
    problems = []
    if errors:
        problems.append(f"{errors} errors or 5xx")
    # A minute is too short for PolyMix's connections to settle (thousands
    # wait out 2.5 s think times and zipf(16) requests each): the quick form
    # reports the flatness, only the full run asserts it.
    if not quick and (rss_dev is None or rss_dev > FLAT):
        problems.append(f"RSS moved {report.fmt_num(100 * (rss_dev or 0))} % after warm-up")
    if not quick and (fd_dev is None or fd_dev > FLAT):
        problems.append(f"descriptors moved {report.fmt_num(100 * (fd_dev or 0))} % after warm-up")
    row = {"peak": peak, "rate": rate, "duration_s": soak_s, "replies": doc.get("replies", {}).get("total", 0), "errors": errors,
           "rss_kib": [s[1] for s in samples], "fds": [s[2] for s in samples], "t": [round(s[0], 1) for s in samples],
           "rss_dev": rss_dev, "fd_dev": fd_dev, "peak_steps": measured, "weft": {k: stats.get("total", {}).get(k) for k in ("requests", "hits", "errors_502", "errors_504", "timeouts")},
           "error_kinds": doc.get("errors", {}),
           "cache": doc.get("cache", {}).get("hits"), "response_time_ms": doc.get("response_time_ms", {})}  # fmt: skip
    d = lab.results_dir
    report.write_json(os.path.join(d, "runs.json"), {"experiment": NAME, "quick": quick, "versions": lab.versions, "commands": commands, "runs": [row]})
    shown = " ".join(pl.weft_load_command("weft", "http://ORIGIN/", load_args(rate, soak_s, "PROXY"), "FILE"))
    rss = [s[1] for s in samples]
    fds = [s[2] for s in samples]
    md = [f"# {NAME}", "", f"{'Quick' if quick else 'Full'} run: peak {peak}/s offered (steps: "
          + ", ".join(f"{o}/s -> {r:,.0f} replies/s, {e} errors" for o, r, e in measured) + f"); soak at {rate}/s for {soak_s:g} s.", "",
          report.markdown_table(["replies", "errors + 5xx", "RSS KiB after warm-up (min–max)", "RSS deviation", "fds after warm-up (min–max)", "fd deviation"],
                                [[row["replies"], errors, f"{min(rss[warm:], default=0)}–{max(rss[warm:], default=0)}", pct(rss_dev),
                                  f"{min(fds[warm:], default=0)}–{max(fds[warm:], default=0)}", pct(fd_dev)]], "rrrrrr"),
          "", "Samples (s, RSS KiB, fds): " + ", ".join(f"{t:.0f}:{r}/{f}" for t, r, f in samples)]  # fmt: skip
    md += pl.checks([(row, problems)] if problems else [], lambda r: "soak", f"zero errors; RSS and descriptors within ±{FLAT:.0%} after warm-up")
    pl.write_summary(d, md, commands, [shown], "Load:", lab.versions, [])
    lab.log(f"{NAME}: {row['replies']} replies, {errors} errors, RSS ±{pct(rss_dev)} %, fds ±{pct(fd_dev)} %")
    return {"problems": len(problems), "weft_problems": len(problems)}


def pct(v: float | None) -> str:
    return report.fmt_num(100 * v if v is not None else None, 2)
