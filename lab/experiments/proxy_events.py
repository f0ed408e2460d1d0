"""proxy-events: the proxy's event mechanism and its body path together
(issue 27; paper 000 Figure 8 and Figures 11-13, §5.3-5.4).

Paper 000's proxy gained from two changes: user-level connection tracking
(uselect) for its accepted and connected sockets, and kernel splicing of
bodies; and the two savings did not add up. weft runs its proxy on every
event backend (`--event select|epoll|uring|tracked...`), so both can be
compared in one run:

1. **fig8** — Figure 8, splice with user-level tracking: no-store misses
   (every request a miss, every body spliced) of 16-256 KiB through `weft
   proxy --splice on` in reverse mode under epoll, uring and tracked, at a
   fixed request rate (open loop: `weft load --rate`, sessions of 10
   keep-alive requests 10 ms apart), HAProxy with splicing beside as the
   anchor; in the full form also uring with linked chains (`--uring-linked`:
   one io_uring_enter per chunk). System calls per miss by kind, and weft's
   calls per body path (`calls_linked` among them).
2. **polymix** — Figures 11-13: the PolyMix-4-like load of the `polymix`
   experiment (same origin, robots and seed) through forward proxies: weft
   under select, epoll and tracked, each with copy (`--splice off`) and with
   splice (`--splice on`), Squid beside. Proxy CPU (Fig. 11), hit and miss
   response times (Figs. 12, 13), event system calls per request, and
   whether the savings add: (copy − splice) + (epoll − tracked) against
   (epoll copy − tracked splice).
3. **busy** — the same PolyMix load at BUSY_RATE requests/s, epoll,
   tracked, and tracked with `--wake-interval BUSY_WAKE` (1 ms), all with
   splice: thousands of connections open at once (misses wait
   out the origin's think times), the regime of the paper's Figures 4-5 and
   of its PolyMix runs, where Squid was CPU-busy. At 200-500/s the proxy
   sleeps between arrivals and every wake-up is one blocking call whatever
   the mechanism; only where events arrive while the loop works can a
   user-level table answer without the kernel.

Target (issue 27): under PolyMix, weft with `tracked` makes at most 0.2× the
event system calls per request (epoll_wait, epoll_ctl, poll, select,
io_uring_enter) of weft with epoll; checked on the `polymix` points (with and
without wake-up batching) and on the `busy` ones apart.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .. import core, proxylab as pl, report, servers
from . import polymix

NAME = "proxy-events"
DESCRIPTION = "issue 27: proxy under select/epoll/uring/tracked x copy/splice: Fig. 8 misses (HAProxy beside) and PolyMix (Squid beside)"

PARTS = ("fig8", "polymix", "busy")
# The sections that run the PolyMix load (the origin emulator, weft load --workload polymix).
POLYMIX_SECTIONS = ("polymix", "busy")
CALLS, THINK = 10, "10ms"
HS, SF = "HAProxy splice", "Squid"
PATH_CALLS = ("calls_copy_read", "calls_client_send", "calls_splice_in", "calls_splice_out", "calls_tee", "calls_tee_read", "calls_linked",
              "calls_splice_up", "sockmap_sessions", "sockmap_bodies", "sockmap_declined")  # fmt: skip


@dataclass(frozen=True)
class Point:
    section: str  # fig8 | polymix | busy
    proxy: str  # weft_label(...) or an anchor label
    size: int = 0  # fig8
    rate: int = 0  # requests/s


# uring linked chains (`--uring-linked`: splice in, tee, splice out in one
# io_uring_enter per chunk), full form only.
LINKED = "weft uring linked splice"

# The wake-up batching interval of the batched tracked configuration.
WAKE = "5ms"
# The busy part's batched configuration: a shorter interval, since under
# load a batch fills sooner (the kernel releases a wait once the expected
# completions are there, docs/events.md).
BUSY_WAKE = "1ms"

# The busy part's offered rate: with misses waiting out the origin's think
# times (seconds), some thousands of connections are open at once, within
# the 20,000 descriptors a process may hold here (a miss holds two in the
# proxy).
BUSY_RATE = 2000


def weft_label(event: str, splice: str, wake: str = "") -> str:
    return f"weft {event}{' wake ' + wake if wake else ''} {'splice' if splice == 'on' else 'copy'}"


def parse_label(label: str) -> tuple[str, str, str]:
    """(event, splice on|off, wake interval or "") of a weft_label (pure)."""
    words = label.split(" ")
    wake = words[3] if len(words) == 5 and words[2] == "wake" else ""
    return words[1], "on" if words[-1] == "splice" else "off", wake


def plan(quick: bool, parts: list[str] | None = None) -> pl.Plan:
    """What a run measures (pure). Quick: about 70 s of load and drain."""
    if quick:
        pts = [Point("fig8", p, 64 * pl.KiB, 500) for p in (weft_label("epoll", "on"), weft_label("tracked", "on"), HS)]
        pts += [Point("polymix", weft_label(e, s), 0, 300) for e in ("epoll", "tracked") for s in ("on", "off")]
        pts += [Point("polymix", weft_label("tracked", "on", WAKE), 0, 300)]
        pn = pl.Plan(1, 5.0, pts, 5.0)
    else:
        pts = [Point("fig8", weft_label(e, "on"), k * pl.KiB, 500) for k in (16, 64, 256) for e in ("epoll", "uring", "tracked")]
        pts += [Point("fig8", LINKED, k * pl.KiB, 500) for k in (16, 64, 256)]
        pts += [Point("fig8", HS, k * pl.KiB, 500) for k in (16, 64, 256)]
        pts += [Point("polymix", weft_label(e, s), 0, r) for r in (200, 500) for e in ("select", "epoll", "tracked") for s in ("off", "on")]
        pts += [Point("polymix", weft_label("tracked", s, WAKE), 0, r) for r in (200, 500) for s in ("off", "on")]
        pts += [Point("polymix", SF, 0, r) for r in (200, 500)]
        pts += [Point("busy", weft_label(e, "on"), 0, BUSY_RATE) for e in ("epoll", "tracked")]
        pts += [Point("busy", weft_label("tracked", "on", BUSY_WAKE), 0, BUSY_RATE)]
        pn = pl.Plan(1, 20.0, pts, polymix.RUN_OVERHEAD_S)
    if parts is not None:
        pn.points = [p for p in pn.points if p.section in parts]
    return pn


def spec(p: Point, origin_port: int) -> servers.ServerSpec:
    if p.proxy == HS:
        return pl.anchor(HS, "haproxy-splice", origin_port)
    if p.proxy == SF:
        return pl.anchor(SF, "squid-forward")
    if p.proxy == LINKED:
        upstream = ["--upstream", f"127.0.0.1:{origin_port}"]
        return servers.ServerSpec(p.proxy, "weft-proxy", {"event": "uring", "extra": ["--splice", "on", "--uring-linked", *upstream]})
    event, splice, wake = parse_label(p.proxy)
    upstream = ["--upstream", f"127.0.0.1:{origin_port}"] if p.section == "fig8" else []
    batching = ["--wake-interval", wake] if wake else []
    return servers.ServerSpec(p.proxy, "weft-proxy", {"event": event, "extra": ["--splice", splice, *upstream, *batching]})


def per_request(weft: dict, requests: int) -> dict:
    """System calls by kind, event calls and calls by body path, per request (pure)."""
    if not weft or not requests:
        return {}
    calls = weft.get("syscalls", {})
    out = {"syscalls": {k: v / requests for k, v in sorted(calls.items(), key=lambda kv: -kv[1]) if v}}
    out["event_calls"] = sum(calls.get(k, 0) for k in core.EVENT_SYSCALLS) / requests
    out["paths"] = {k.removeprefix("calls_"): weft.get(k, 0) / requests for k in PATH_CALLS if weft.get(k)}
    return out


def run(lab: core.Lab) -> dict:
    pn = plan(lab.quick, lab.only)
    sections = {p.section for p in pn.points}
    lab.prepare(commands=sorted({"nginx", "haproxy"} if "fig8" in sections else set()) + (["squid"] if any(p.proxy == SF for p in pn.points) else []))
    www = pl.size_files(lab.scratch, sorted({p.size for p in pn.points if p.size}))
    scratch = os.path.join(lab.scratch, "client")
    lab.log(f"{NAME}: {len(pn.points)} configurations, about {pn.estimate_s() / 60:.1f} min of load")
    book = pl.RunBook()
    shown: dict[str, str] = {}
    with lab.pool(www) as pool:
        for section in ("fig8", *POLYMIX_SECTIONS):
            pts = [p for p in pn.points if p.section == section]
            if not pts:
                continue
            if section == "fig8":
                origin = book.start(pool, servers.ServerSpec("nginx origin", "nginx-origin"))
            else:
                origin = book.start(pool, servers.ServerSpec("weft origin", "weft-origin", {"extra": polymix.ORIGIN_ARGS}))
            for i, p in enumerate(pts):
                rs = book.start(pool, spec(p, origin.port))
                if section == "fig8":
                    name = pl.size_name(p.size)
                    pl.check_fetch(p.proxy, f"http://{rs.addr}/nc/{name}", p.size)
                    url = f"http://{rs.addr}/nc/{name}"
                    args = ["--rate", f"{p.rate / CALLS:g}", "--calls", str(CALLS), "--think", THINK, "--duration", f"{pn.duration_s:g}s", "--timeout", "5s"]
                else:
                    url = f"http://{origin.addr}/"
                    args = polymix.load_args(polymix.Point(p.proxy, p.rate), pn.duration_s, rs.addr, 1 + p.rate)
                shown.setdefault(section, " ".join(pl.weft_load_command("weft", url.replace(rs.addr, "PROXY"), args, "FILE")).replace(rs.addr, "PROXY"))
                s = pl.measure(rs, origin, lambda: pl.run_weft_load(lab.weft, url, args, scratch=scratch, timeout_s=pn.duration_s + 60))
                pool.stop(rs)
                row = s.row(part=section, section=section, proxy=p.proxy, size=pl.size_label(p.size) if p.size else "", size_bytes=p.size, rate=p.rate, round=1)
                if section in POLYMIX_SECTIONS:
                    row.update(polymix.hit_figures(s.client.doc))
                row["per_req"] = per_request(s.weft, s.weft.get("requests", 0) if s.weft else 0)
                book.rows.append(row)
                ev = row["per_req"].get("event_calls")
                lab.log(f"  [{section} {i + 1}/{len(pts)}] {p.proxy:<20} {pl.size_label(p.size) if p.size else '':>8} {p.rate:>5}/s: {row['rps']:>7,.0f} replies/s"
                        f"  proxy {report.fmt_num(row['proxy_us'])} µs/req  event calls/req {report.fmt_num(ev, 3)}")  # fmt: skip
            pool.stop(origin)
    rows, commands = book.merged(lab)
    return summarize(lab, plan(lab.quick), rows, commands, shown)


def resummarize(lab: core.Lab) -> dict:
    doc = pl.runs_to_resummarize(lab)
    return summarize(lab, plan(lab.quick), doc["runs"], doc.get("commands", {}), doc.get("load_commands", {}))


FIELDS = ["rps", "proxy_us", "proxy_util", "hit_ratio", "hit_ms", "miss_ms", "latency_ms_mean", "event_calls"]


def additivity(med: dict, rate: int) -> str | None:
    """Do the savings add (pure)? epoll copy → tracked copy, epoll copy →
    epoll splice, each alone, against epoll copy → tracked splice."""
    v = {k: med.get(("polymix", weft_label(e, s), 0, rate), {}).get("proxy_us") for k, (e, s) in
         {"ec": ("epoll", "off"), "tc": ("tracked", "off"), "es": ("epoll", "on"), "ts": ("tracked", "on")}.items()}  # fmt: skip
    if any(x is None for x in v.values()):
        return None
    track, splice, both = v["ec"] - v["tc"], v["ec"] - v["es"], v["ec"] - v["ts"]
    if track <= 0 or splice <= 0:
        verdict = "one of them saved nothing here"
    else:
        verdict = "they add up" if both >= 0.9 * (track + splice) else "they do not add up"
    return (f"{rate}/s: tracking saves {track:.1f} µs/req, splicing {splice:.1f}, both together {both:.1f} "
            f"(sum of the two alone: {track + splice:.1f}; {verdict})")


def targets(med: dict) -> list[pl.Target]:
    """tracked (plain, and with wake-up batching) against epoll: event calls
    per request, the mean over the PolyMix points of each, and over the busy
    part's points apart (pure)."""

    def ev(event, wake="", section="polymix"):
        vals = [m["event_calls"] for (sec, proxy, _, _), m in med.items()
                if sec == section and proxy.startswith("weft ") and parse_label(proxy)[::2] == (event, wake) and m.get("event_calls")]  # fmt: skip
        return sum(vals) / len(vals) if vals else None

    name = "PolyMix: event system calls per request"
    return [pl.Target(f"{name}, tracked vs epoll", ev("tracked"), ev("epoll"), "weft epoll", 0.2, unit="calls/req"),
            pl.Target(f"{name}, tracked with --wake-interval {WAKE} vs epoll", ev("tracked", WAKE), ev("epoll"), "weft epoll", 0.2,
                      unit="calls/req"),
            pl.Target(f"{name} at {BUSY_RATE}/s (busy), tracked vs epoll", ev("tracked", section="busy"), ev("epoll", section="busy"),
                      "weft epoll", 0.2, unit="calls/req"),
            pl.Target(f"{name} at {BUSY_RATE}/s (busy), tracked with --wake-interval {BUSY_WAKE} vs epoll",
                      ev("tracked", BUSY_WAKE, section="busy"), ev("epoll", section="busy"), "weft epoll", 0.2, unit="calls/req")]  # fmt: skip


def summarize(lab: core.Lab, pn: pl.Plan, rows: list[dict], commands: dict, shown: dict) -> dict:
    for r in rows:
        r["event_calls"] = r.get("per_req", {}).get("event_calls")
    med = pl.median_rows(rows, ["section", "proxy", "size_bytes", "rate"], FIELDS)
    problems = [(r, p) for r in rows for p in [pl.run_problems(r) if r["section"] == "fig8" else pl.run_problems(dict(r, non_2xx=0))] if p]
    tg = targets(med)
    d = lab.results_dir
    report.write_json(os.path.join(d, "runs.json"), {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "commands": commands,
                                                    "load_commands": shown, "runs": rows, "targets": [t.to_dict() for t in tg]})  # fmt: skip
    report.write_csv(os.path.join(d, "runs.csv"), [{k: v for k, v in r.items() if k not in ("weft", "per_req")} for r in rows])
    report.write_csv(os.path.join(d, "medians.csv"), [dict(zip(["section", "proxy", "size_bytes", "rate"], k), **v) for k, v in med.items()])
    last = {(r["section"], r["proxy"], r["size_bytes"], r["rate"]): r for r in rows}
    md = [f"# {NAME}", "", f"{'Quick' if lab.quick else 'Full'} run, {pn.duration_s:g} s per point, one worker per proxy, each on a fresh proxy. "
          "CPU = the scheduler's runtime of the proxy's threads per completed request. Event calls = epoll_wait + epoll_ctl + poll + select + "
          "io_uring_enter, per request the proxy handled.", "", "## Targets", ""] + [f"- {t.describe()}" for t in tg]  # fmt: skip
    for sec, title in (("fig8", "Fig. 8: no-store misses, spliced, fixed rate"), ("polymix", "Figs. 11-13: PolyMix-4-like load, forward proxies"),
                       ("busy", f"PolyMix-4-like load at {BUSY_RATE}/s: thousands of connections open (busy)")):  # fmt: skip
        tab = []
        for key, m in med.items():
            if key[0] != sec:
                continue
            pr = last[key].get("per_req", {})
            paths = ", ".join(f"{k} {v:.2f}" for k, v in pr.get("paths", {}).items()) or "–"
            calls = ", ".join(f"{k} {v:.2f}" for k, v in pr.get("syscalls", {}).items() if v >= 0.01) or "–"
            extra = [report.fmt_num(100 * m["hit_ratio"]) if m.get("hit_ratio") is not None else "–", report.fmt_num(m.get("hit_ms"), 2),
                     report.fmt_num(m.get("miss_ms"))] if sec in POLYMIX_SECTIONS else []  # fmt: skip
            tab.append([key[1], pl.size_label(key[2]) if key[2] else "", key[3], report.fmt_num(m["rps"]), report.fmt_num(m["proxy_us"]),
                        report.fmt_num(m.get("event_calls"), 3), *extra, paths, calls])  # fmt: skip
        if not tab:
            continue
        head = ["proxy", "size", "offered/s", "replies/s", "proxy µs/req", "event calls/req"]
        head += ["hit % (client)", "hit ms", "miss ms"] if sec in POLYMIX_SECTIONS else []
        md += ["", f"## {title}", "", report.markdown_table(head + ["weft calls per request by body path", "weft system calls per request"], tab,
                                                             "lrrrrr" + ("rrr" if sec in POLYMIX_SECTIONS else "") + "ll")]  # fmt: skip
    adds = [a for r in sorted({k[3] for k in med if k[0] == "polymix"}) if (a := additivity(med, r))]
    if adds:
        md += ["", "## Do the savings add? (proxy CPU per request)", ""] + [f"- {a}" for a in adds]
    md += pl.checks(problems, lambda r: f"{r['section']} {r['proxy']} {r.get('size', '')} {r['rate']}/s", "no socket errors or short bodies in any run")
    pl.write_summary(d, md, commands, [v for _, v in sorted(shown.items())], "Load:", lab.versions, [])
    return {"problems": len(problems), "weft_problems": pl.weft_rows(problems), "targets_met": [t.met for t in tg]}
