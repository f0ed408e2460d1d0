"""polymix: the PolyMix-4-like workload through a caching forward proxy
(issue 5; paper 000 Figures 11-13).

`weft origin` plays Polygraph's server (think time norm(2.5 s, 1 s) before
every response, persistent connections closed after zipf(16) requests);
`weft load --workload polymix --rate R --proxy P` plays its robots (0.4
requests/s each, up to 4 connections, zipf(64) requests per connection,
68.75 % re-references for an offered 55 % hit ratio, content types with
their sizes and cacheability, IMS/reload/POST/HEAD mixes; docs/load.md).

Proxies, one worker each, every run on a fresh (empty) cache, as the paper's
runs started empty: `weft splice` (`weft proxy --splice on`: every miss body
spliced, cacheable ones tee'd into the cache), `weft copy` (`--splice off`)
and Squid; `weft auto` (the default: bodies of 16 KiB and more) is defined
too but left out of the plan to keep each part one short locked run.

Per run: the proxy's CPU (utilisation and µs per request; Figure 11), the hit
ratio the client saw (replies with an Age field) and the proxy's own count,
and the mean response times of hits and of misses (Figures 12 and 13) — a
reply carrying Age came from the cache (RFC 9111 §5.1: weft and Squid send
it on every hit and never on a miss). No WAN emulation and no disk store, so
misses cost the origin's think time plus loopback transfers.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass

from .. import core, proxylab as pl, report, servers

NAME = "polymix"
DESCRIPTION = "issue 5: PolyMix-4-like load through weft (splice/auto/copy) and Squid forward proxies: hit ratio, CPU, hit/miss response times"

WS, WA, WC, SF = "weft splice", "weft auto", "weft copy", "Squid"
ORIGIN_ARGS = ["--think", "norm(2.5s,1s)", "--conn-requests", "zipf(16)"]


@dataclass(frozen=True)
class Point:
    proxy: str
    rate: int


# Each run drains its misses (up to ~5 s of think time) and restarts its proxy.
RUN_OVERHEAD_S = 7.0


RATES = (200, 500, 1000)
PARTS = tuple(str(r) for r in RATES)  # one offered rate per part (about three minutes each)


def plan(quick: bool, parts: list[str] | None = None) -> pl.Plan:
    if quick:
        pn = pl.Plan(1, 8.0, [Point(p, 300) for p in (WS, WC, SF)], RUN_OVERHEAD_S)
    else:
        pn = pl.Plan(1, 40.0, [Point(p, r) for r in RATES for p in (WS, WC, SF)], RUN_OVERHEAD_S)
    if parts is not None:
        pn.points = [p for p in pn.points if str(p.rate) in parts]
    return pn


def spec(label: str) -> servers.ServerSpec:
    if label == SF:
        return pl.anchor(SF, "squid-forward")
    return pl.weft_forward(label, {WS: "on", WA: "auto", WC: "off"}[label])


def load_args(p: Point, duration_s: float, proxy_addr: str, seed: int) -> list[str]:
    """weft load's arguments for one run (pure). The same seed for every
    proxy of a round: they all see the same request stream."""
    return ["--workload", "polymix", "--rate", str(p.rate), "--proxy", proxy_addr, "--http10", "--duration", f"{duration_s:g}s",
            "--timeout", "10s", "--seed", str(seed)]  # fmt: skip


def hit_figures(doc: dict) -> dict:
    """Hit ratio and hit/miss response times from weft load's report (pure)."""
    c = doc.get("cache", {})
    total = doc.get("replies", {}).get("total", 0)
    hits = c.get("hits", 0)
    return {
        "hit_ratio": hits / total if total else None,
        "hit_ms": c.get("hit_response_time_ms", {}).get("mean") if hits else None,
        "miss_ms": c.get("miss_response_time_ms", {}).get("mean") if c.get("misses") else None,
        "hit_p50_ms": c.get("hit_response_time_ms", {}).get("p50") if hits else None,
        "miss_p50_ms": c.get("miss_response_time_ms", {}).get("p50") if c.get("misses") else None,
    }


def run(lab: core.Lab) -> dict:
    pn = plan(lab.quick, lab.only)
    lab.prepare(commands=["squid"])
    scratch = os.path.join(lab.scratch, "client")
    lab.log(f"{NAME}: {len(pn.points)} configurations x {pn.rounds} round(s), about {pn.estimate_s() / 60:.0f} min")
    book = pl.RunBook(len(pn.points) * pn.rounds)
    load_shown = ""
    with lab.pool(lab.scratch) as pool:
        origin = book.start(pool, servers.ServerSpec("weft origin", "weft-origin", {"extra": ORIGIN_ARGS}))
        for rnd in range(pn.rounds):
            for i, p in enumerate(pl.rotate(pn.points, rnd)):
                rs = book.start(pool, spec(p.proxy))  # a fresh, empty cache
                seed = 1 + rnd * 100 + p.rate
                args = load_args(p, pn.duration_s, rs.addr, seed)
                load_shown = load_shown or " ".join(pl.weft_load_command("weft", "http://ORIGIN/", load_args(p, pn.duration_s, "PROXY", 1), "FILE"))
                url = f"http://{origin.addr}/"
                s = pl.measure(rs, origin, lambda: pl.run_weft_load(lab.weft, url, args, scratch=scratch, timeout_s=pn.duration_s + 90))
                pool.stop(rs)
                row = s.row(part=str(p.rate), proxy=p.proxy, rate=p.rate, round=rnd + 1, seed=seed)
                row.update(hit_figures(s.client.doc))
                replies = s.client.doc.get("replies", {})
                row["replies_4xx"], row["replies_5xx"] = replies.get("4xx", 0), replies.get("5xx", 0)
                if s.weft:
                    n = s.weft.get("requests", 0)
                    row["proxy_hit_ratio"] = s.weft.get("hits", 0) / n if n else None
                    moved = sum(s.weft.get(k, 0) for k in ("bytes_spliced", "bytes_copied", "bytes_cache"))
                    row["byte_hit_ratio"] = s.weft.get("bytes_cache", 0) / moved if moved else None
                tag = book.add(row)
                lab.log(f"  {tag} r{rnd + 1} {p.proxy:<12} {p.rate:>5}/s: {row['rps']:>7,.0f} replies/s  hits {report.fmt_num(100 * (row['hit_ratio'] or 0))} %"
                        f"  proxy {report.fmt_num(100 * (row['proxy_util'] or 0))} % CPU, {report.fmt_num(row['proxy_us'])} µs/req"
                        f"  hit {report.fmt_num(row['hit_ms'], 2)} ms  miss {report.fmt_num(row['miss_ms'])} ms")  # fmt: skip
    rows, commands = book.merged(lab)
    return summarize(lab, plan(lab.quick), rows, commands, load_shown)


def resummarize(lab: core.Lab) -> dict:
    """Summary and plots again from runs.json (`python3 -m lab summarize polymix`)."""
    doc = pl.runs_to_resummarize(lab)
    return summarize(lab, plan(lab.quick), doc["runs"], doc.get("commands", {}), doc.get("load_command", ""))


FIELDS = ["rps", "proxy_util", "proxy_us", "origin_us", "client_us", "hit_ratio", "proxy_hit_ratio", "byte_hit_ratio", "hit_ms", "miss_ms",
          "hit_p50_ms", "miss_p50_ms", "latency_ms_mean"]  # fmt: skip


def summarize(lab: core.Lab, pn: pl.Plan, rows: list[dict], commands: dict, load_shown: str) -> dict:
    med = pl.median_rows(rows, ["proxy", "rate"], FIELDS)
    d = lab.results_dir
    problems = []
    for r in rows:
        # 304s answer the IMS requests: only errors and 4xx/5xx are problems.
        p = [f"{r[k]} {k.removeprefix('replies_')}" for k in ("replies_4xx", "replies_5xx") if r.get(k)]
        p += [f"{r['errors']} errors"] if r.get("errors") else []
        p += ["no replies"] if not r.get("requests") else []
        if p:
            problems.append((r, p))
    report.write_json(os.path.join(d, "runs.json"), {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "commands": commands,
                                                    "load_command": load_shown, "runs": rows})  # fmt: skip
    report.write_csv(os.path.join(d, "runs.csv"), rows)
    report.write_csv(os.path.join(d, "medians.csv"), [dict(zip(["proxy", "rate"], k), **v) for k, v in med.items()])
    proxies = list(OrderedDict.fromkeys(k[0] for k in med))
    rates = sorted({k[1] for k in med})

    def pct(v):
        return report.fmt_num(100 * v if v is not None else None)

    md = [f"# {NAME}", "", f"{'Quick' if lab.quick else 'Full'} run: {pn.rounds} round(s) of {pn.duration_s:g} s per point (each on a fresh proxy, "
          "the same request stream for every proxy of a round), median shown. Proxy CPU from /proc (ns) over the whole load run, "
          "utilisation = CPU s / wall s. Hits = replies carrying Age.", ""]  # fmt: skip
    tab = []
    for p in proxies:
        for r in rates:
            m = med.get((p, r))
            if not m:
                continue
            tab.append([p, r, report.fmt_num(m["rps"]), pct(m["hit_ratio"]), pct(m["proxy_hit_ratio"]), pct(m["byte_hit_ratio"]), pct(m["proxy_util"]),
                        report.fmt_num(m["proxy_us"]), report.fmt_num(m["hit_ms"], 2), report.fmt_num(m["hit_p50_ms"], 2), report.fmt_num(m["miss_ms"]),
                        report.fmt_num(m["miss_p50_ms"])])  # fmt: skip
    md.append(report.markdown_table(["proxy", "offered req/s", "replies/s", "hit % (client)", "hit % (proxy)", "byte hit %", "proxy CPU %", "proxy µs/req",
                                     "hit ms (mean)", "hit ms (p50)", "miss ms (mean)", "miss ms (p50)"], tab, "lrrrrrrrrrrr"))  # fmt: skip
    # weft's counters.
    md += ["", "## weft's counters (last round)", ""]
    seen, crow = set(), []
    for r in reversed(rows):
        w = r.get("weft")
        key = (r["proxy"], r["rate"])
        if not w or key in seen:
            continue
        seen.add(key)
        n = w.get("requests") or 1
        crow.append([r["proxy"], r["rate"], f"hits {w.get('hits', 0) / n:.2f}, misses {w.get('misses', 0) / n:.2f}, stored {w.get('stored', 0) / n:.2f}",
                     pl.body_paths(w), pl.sessions_per_request(w, n), pl.calls_per_request(w, 0.05)])  # fmt: skip
    crow.reverse()
    md.append(report.markdown_table(["config", "req/s", "per request", "body bytes by path", "sessions per request", "system calls per request"], crow, "lrllll"))
    styles = {WS: {"color": "tab:blue"}, WA: {"color": "tab:cyan"}, WC: {"color": "tab:orange"}, SF: {"color": "tab:gray"}}
    for key, ylabel, fname, title in (("proxy_util", "proxy CPU (% of one core)", "cpu.png", "proxy CPU (000 Fig. 11)"),
                                      ("hit_ms", "mean hit response time (ms)", "hit_time.png", "hit response time (000 Fig. 12)"),
                                      ("miss_ms", "mean miss response time (ms)", "miss_time.png", "miss response time (000 Fig. 13)")):  # fmt: skip
        scale = 100 if key == "proxy_util" else 1
        series = OrderedDict((p, [scale * med[(p, r)][key] if (p, r) in med and med[(p, r)][key] is not None else None for r in rates]) for p in proxies)
        report.plot_series(os.path.join(d, fname), rates, series, xlabel="offered requests/s", ylabel=ylabel, title=f"{NAME}: {title}", styles=styles)
    md += pl.checks(problems, lambda r: f"round {r['round']} {r['proxy']} {r['rate']}/s", "no socket errors, timeouts, 4xx or 5xx in any run")
    pl.write_summary(d, md, commands, [load_shown], "Load:", lab.versions, ["cpu.png", "hit_time.png", "miss_time.png"])
    return {"problems": len(problems), "weft_problems": pl.weft_rows(problems)}
