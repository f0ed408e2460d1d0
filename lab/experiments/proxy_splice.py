"""proxy-splice: what splicing saves a caching proxy (issue 5; paper 000
Figures 7-10, paper 001 Figures 4-5), and issue 5's CPU targets.

An nginx origin (the anchor `nginx_origin.conf`: `/c/NAME` cacheable for an
hour, `/nc/NAME` `no-store`) serves files of every size; in front of it, one
worker each, all started once and measured in interleaved rounds:

- `weft splice` (`weft proxy --upstream O --splice on`) and `weft copy`
  (`--splice off`), reverse mode; `weft fwd` (forward mode, defaults);
- HAProxy with and without splicing, nginx as a reverse proxy, Varnish
  (`varnish_hit.vcl`, and `varnish_pass.vcl` for no-store misses), Squid as
  an accelerator and as a forward proxy.

Three sections:

1. **targets** — `wrk -t1 -c50` closed loop, as the anchors were measured:
   no-store misses 64 KiB-1 MiB through every proxy; cache hits of 100 KiB
   and 1 MiB (weft, Varnish, Squid); forward-proxy hits and misses of 8 KiB
   with absolute URIs (weft, Squid; `wrk_fwd_hit.lua` / `wrk_fwd_miss.lua`).
2. **sizes** — Figure 7: a fixed request rate (open loop, `weft load --rate`
   sessions of 10 keep-alive requests 10 ms apart), 0 % hits, objects of
   4 KiB-1 MiB, non-cacheable (`/nc/`) and cacheable (`/c/` with a unique
   query per request: every one a miss that KeepCopy tees into the cache),
   weft splice vs copy, HAProxy (non-cacheable) and Varnish (cacheable)
   beside.
3. **rates** — Figures 9-10: 8 KiB objects, the request rate growing; proxy
   CPU and mean response time.

Every run records the proxy's, the origin's and the client's CPU (splicing
moves cost between them) and weft's counters (bytes spliced / tee'd / copied,
sessions by outcome, system calls). Median of 3 rounds (1 with --quick).
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from dataclasses import dataclass

from .. import core, proxylab as pl, report, servers

NAME = "proxy-splice"
DESCRIPTION = "issue 5: proxy miss/hit CPU, splice vs copy vs KeepCopy, 4 KiB-1 MiB and a rate sweep; HAProxy, nginx, Varnish, Squid"

CONNECTIONS = 50
CALLS = 10  # requests per open-loop session
THINK = "10ms"  # between a session's requests

# Configuration labels.
WS, WC, WF = "weft splice", "weft copy", "weft fwd"
HS, HC, NP = "HAProxy splice", "HAProxy copy", "nginx proxy"
VH, VP = "Varnish", "Varnish pass"
SR, SF = "Squid", "Squid fwd"


@dataclass(frozen=True)
class Point:
    """One measured configuration: which proxy, which object, which load."""

    section: str  # targets | sizes | rates
    proxy: str  # a label above
    size: int
    mode: str  # nc (no-store miss) | c (cacheable miss) | hit | fwd-hit | fwd-miss
    rate: int = 0  # requests/s (sizes, rates); 0: closed loop (wrk)

    @property
    def config(self) -> str:
        """The series name: the proxy and what it moved."""
        return config_name(self.proxy, self.mode)


MODE_LABEL = {"nc": "no-store", "c": "cacheable", "hit": "hit", "fwd-hit": "hit", "fwd-miss": "miss"}


def config_name(proxy: str, mode: str) -> str:
    return f"{proxy} {MODE_LABEL[mode]}"


@dataclass
class Plan:
    rounds: int
    wrk_s: float
    warmup_s: float
    rate_s: float
    fixed_rate: int
    points: list[Point]

    def proxies(self) -> list[str]:
        seen: list[str] = []
        for p in self.points:
            if p.proxy not in seen:
                seen.append(p.proxy)
        return seen

    def estimate_s(self) -> float:
        """Seconds of load (plus warm-ups and a 1 s drain per open-loop run)."""
        per = 0.0
        for p in self.points:
            per += self.wrk_s + self.warmup_s if p.rate == 0 else self.rate_s + 1.0
        return per * self.rounds


PARTS = ("targets", "sizes", "rates")


def plan(quick: bool, parts: list[str] | None = None) -> Plan:
    """What a run measures (pure: unit-tested for the quick form's length);
    `part`: only that section (each full section is one locked run of about
    ten minutes)."""
    pts: list[Point] = []
    if quick:
        for size in (100 * pl.KiB, pl.MiB):
            pts += [Point("targets", p, size, "nc") for p in (WS, WC, HS, NP)]
        pts += [Point("targets", p, pl.MiB, "hit") for p in (WS, VH)]
        pts += [Point("targets", p, 8 * pl.KiB, "fwd-hit") for p in (WF, SF)]
        for size in (8 * pl.KiB, 256 * pl.KiB):
            pts += [Point("sizes", WS, size, m, 500) for m in ("nc", "c")] + [Point("sizes", WC, size, m, 500) for m in ("nc", "c")]
        for rate in (5000, 20000):
            pts += [Point("rates", p, 8 * pl.KiB, "nc", rate) for p in (WS, WC)]
        pn = Plan(rounds=1, wrk_s=2.0, warmup_s=0.0, rate_s=2.0, fixed_rate=500, points=pts)
    else:
        for size in (64 * pl.KiB, 100 * pl.KiB, 256 * pl.KiB, pl.MiB):
            pts += [Point("targets", p, size, "nc") for p in (WS, WC, HS, HC, NP, VP, SR)]
        for size in (100 * pl.KiB, pl.MiB):
            pts += [Point("targets", p, size, "hit") for p in (WS, VH, SR)]
        for mode in ("fwd-hit", "fwd-miss"):
            pts += [Point("targets", p, 8 * pl.KiB, mode) for p in (WF, SF)]
        for size in (4, 8, 16, 64, 256, 1024):
            s = size * pl.KiB
            pts += [Point("sizes", p, s, m, 500) for p, m in ((WS, "nc"), (WC, "nc"), (WS, "c"), (WC, "c"), (HS, "nc"), (VH, "c"))]
        for rate in (2000, 5000, 10000, 20000, 30000, 40000):
            pts += [Point("rates", p, 8 * pl.KiB, m, rate) for p, m in ((WS, "nc"), (WC, "nc"), (WS, "c"), (WC, "c"), (HS, "nc"), (HC, "nc"))]
        pn = Plan(rounds=3, wrk_s=3.0, warmup_s=1.0, rate_s=3.0, fixed_rate=500, points=pts)
    if parts is not None:
        pn.points = [p for p in pn.points if p.section in parts]
    return pn


def specs(origin_port: int) -> dict[str, servers.ServerSpec]:
    o = f"127.0.0.1:{origin_port}"
    return {
        WS: pl.weft_reverse(WS, o, "on"),
        WC: pl.weft_reverse(WC, o, "off"),
        WF: pl.weft_forward(WF),
        HS: pl.anchor(HS, "haproxy-splice", origin_port),
        HC: pl.anchor(HC, "haproxy-copy", origin_port),
        NP: pl.anchor(NP, "nginx-proxy", origin_port),
        VH: pl.anchor(VH, "varnish-hit", origin_port),
        VP: pl.anchor(VP, "varnish-pass", origin_port),
        SR: pl.anchor(SR, "squid-reverse", origin_port),
        SF: pl.anchor(SF, "squid-forward", origin_port),
    }


ANCHOR_COMMANDS = {HS: "haproxy", HC: "haproxy", NP: "nginx", VH: "varnishd", VP: "varnishd", SR: "squid", SF: "squid"}


def run(lab: core.Lab) -> dict:
    pn = plan(lab.quick, lab.only)
    needed = pn.proxies()
    lab.prepare(commands=sorted({"nginx"} | {ANCHOR_COMMANDS[p] for p in needed if p in ANCHOR_COMMANDS}))
    sizes = sorted({p.size for p in pn.points})
    www = core.size_site(lab.scratch, sizes, pl.size_name)
    scratch = os.path.join(lab.scratch, "client")
    lab.log(f"{NAME}: {len(pn.points)} configurations x {pn.rounds} round(s), about {pn.estimate_s() / 60:.0f} min of load")
    book = pl.RunBook(len(pn.points) * pn.rounds)
    load_commands: dict[str, str] = {}
    with lab.pool(www) as pool:
        origin = book.start(pool, servers.ServerSpec("nginx origin", "nginx-origin"))
        oport = origin.port
        okey = {"ORIGIN_HOST": "127.0.0.1", "ORIGIN_PORT": str(oport)}
        all_specs = specs(oport)
        running = {label: book.start(pool, all_specs[label]) for label in needed}
        # Every proxy answers with the right bytes before anything is measured.
        for label, rs in running.items():
            if label in (WF, SF):
                pl.check_fetch(label, f"http://127.0.0.1:{oport}/nc/{pl.size_name(sizes[0])}", sizes[0], proxy=rs.addr)
            else:
                pl.check_fetch(label, f"http://{rs.addr}/nc/{pl.size_name(sizes[0])}", sizes[0])
        for rnd in range(pn.rounds):
            for section in ("targets", "sizes", "rates"):
                pts = pl.rotate([p for p in pn.points if p.section == section], rnd * 3)
                for p in pts:
                    rs = running[p.proxy]
                    client, shown, warmup = make_client(lab, p, rs, okey, pn, scratch, rnd)
                    load_commands.setdefault(f"{p.section} {p.mode}", shown)
                    s = pl.measure(rs, origin, client, warmup)
                    row = s.row(part=p.section, section=p.section, proxy=p.proxy, config=p.config, mode=p.mode, size=pl.size_label(p.size),
                                size_bytes=p.size, rate=p.rate, round=rnd + 1)  # fmt: skip
                    if p.mode in ("c", "nc") and row.get("weft"):
                        row["hit_share"] = row["weft"]["hits"] / row["requests"] if row["requests"] else None
                    tag = book.add(row)
                    lab.log(f"  {tag} r{rnd + 1} {p.section:<7} {p.config:<26} {pl.size_label(p.size):>8}"
                            f"{(' @' + str(p.rate) + '/s') if p.rate else '':>9}: {row['rps']:>9,.0f} req/s  proxy {report.fmt_num(row['proxy_us']):>7}"
                            f"  origin {report.fmt_num(row['origin_us']):>7}  client {report.fmt_num(row['client_us']):>7} µs/req")  # fmt: skip
        for label, rs in list(running.items()):
            pool.stop(rs)
    previous = pl.read_runs(lab.results_dir)
    rows, commands = pl.merge_parts(previous, lab.quick, lab.only, book.rows, book.commands)
    if lab.only and previous and bool(previous.get("quick")) == lab.quick:
        load_commands = dict(previous.get("load_commands", {}), **load_commands)
    return summarize(lab, plan(lab.quick), rows, commands, load_commands)


def resummarize(lab: core.Lab) -> dict:
    """Summary and plots again from runs.json (`python3 -m lab summarize proxy-splice`)."""
    doc = pl.runs_to_resummarize(lab)
    return summarize(lab, plan(lab.quick), doc["runs"], doc.get("commands", {}), doc.get("load_commands", {}))


def make_client(lab, p: Point, rs: servers.RunningServer, okey: dict, pn: Plan, scratch: str, rnd: int):
    """The load for one point: a callable running it, and its command as shown."""
    name = pl.size_name(p.size)
    run_id = f"r{rnd}-{time.monotonic_ns()}"
    if p.rate == 0:
        url, prelude = f"http://{rs.addr}/nc/{name}", ""
        if p.mode == "hit":
            url = f"http://{rs.addr}/c/{name}"
            pl.check_fetch(p.proxy, url, p.size)  # fill the cache
        elif p.mode == "fwd-hit":
            url = f"http://{rs.addr}/"
            prelude = pl.anchor_script("wrk_fwd_hit.lua", dict(okey, PATH=f"/c/{name}"))
            pl.check_fetch(p.proxy, f"http://127.0.0.1:{okey['ORIGIN_PORT']}/c/{name}", p.size, proxy=rs.addr)
        elif p.mode == "fwd-miss":
            url = f"http://{rs.addr}/"
            prelude = pl.anchor_script("wrk_fwd_miss.lua", dict(okey, PATH=f"/nc/{name}", RUNID=run_id))

        def warmup():
            pl.run_wrk(url, connections=CONNECTIONS, duration_s=pn.warmup_s, scratch=scratch, prelude=prelude)

        def client():
            return pl.run_wrk(url, connections=CONNECTIONS, duration_s=pn.wrk_s, scratch=scratch, prelude=prelude)

        script = {"fwd-hit": " -s wrk_fwd_hit.lua", "fwd-miss": " -s wrk_fwd_miss.lua"}.get(p.mode, "")
        return client, f"wrk -t1 -c{CONNECTIONS} -d{pn.wrk_s:g}s{script} {url.replace(rs.addr, 'PROXY')}", (warmup if pn.warmup_s else None)
    args = ["--rate", f"{p.rate / CALLS:g}", "--calls", str(CALLS), "--think", THINK, "--duration", f"{pn.rate_s:g}s", "--timeout", "5s"]
    if p.mode == "c":
        url = f"http://{rs.addr}/"
        n = int(p.rate * pn.rate_s * 1.3) + 1000
        urls = os.path.join(scratch, f"urls-{run_id}.txt")
        os.makedirs(scratch, exist_ok=True)
        pl.write_url_file(urls, pl.unique_paths(f"/c/{name}", run_id, n))
        args += ["--urls", urls]
    else:
        url = f"http://{rs.addr}/nc/{name}"

    def client():
        try:
            return pl.run_weft_load(lab.weft, url, args, scratch=scratch, timeout_s=pn.rate_s + 60)
        finally:
            if p.mode == "c":
                os.unlink(urls)

    shown = " ".join(pl.weft_load_command("weft", url.replace(rs.addr, "PROXY"), args, "FILE"))
    if p.mode == "c":
        shown = shown.replace(urls, "UNIQUE_URLS.txt")
    return client, shown, None


# ---------------------------------------------------------------------------
# Summary


FIELDS = ["rps", "proxy_us", "origin_us", "client_us", "proxy_ms_per_mib", "proxy_util", "latency_ms_mean", "hit_share"]


def targets(med: dict) -> list[pl.Target]:
    """The issue's targets from the medians of the targets section."""

    def v(proxy, size, mode="nc", field="proxy_us"):
        return med.get(("targets", proxy, mode, size), {}).get(field)

    out = []
    mib, k100 = pl.MiB, 100 * pl.KiB
    out.append(pl.Target("1 MiB no-store misses, CPU per MiB", v(WS, mib, field="proxy_ms_per_mib"), v(HS, mib, field="proxy_ms_per_mib"),
                         "HAProxy splice", 0.9, unit="ms/MiB"))  # fmt: skip
    best_name, best = pl.best_of({HS: v(HS, k100), HC: v(HC, k100), NP: v(NP, k100)})
    out.append(pl.Target("100 KiB no-store misses", v(WS, k100), best, f"best of HAProxy/nginx ({best_name})", 0.9))
    for size in (k100, mib):
        out.append(pl.Target(f"{pl.size_label(size)} cache hits", v(WS, size, "hit"), v(VH, size, "hit"), "Varnish", 0.9))
    out.append(pl.Target("8 KiB forward-proxy hits", v(WF, 8 * pl.KiB, "fwd-hit"), v(SF, 8 * pl.KiB, "fwd-hit"), "Squid", 0.5))
    for size in sorted({k[3] for k in med if k[0] == "targets" and k[2] == "nc" and k[3] >= 64 * pl.KiB}):
        out.append(pl.Target(f"splice vs copy, {pl.size_label(size)} no-store misses", v(WS, size), v(WC, size), "weft copy", 0.4, kind="saving"))
    return [t for t in out if t.weft is not None or t.anchor is not None]


def summarize(lab: core.Lab, pn: Plan, rows: list[dict], commands: dict, load_commands: dict) -> dict:
    med = pl.median_rows(rows, ["section", "proxy", "mode", "size_bytes"], FIELDS)
    med_rate = pl.median_rows(rows, ["section", "config", "size_bytes", "rate"], FIELDS)
    tg = targets(med)
    problems = [(r, pl.run_problems(r)) for r in rows]
    problems = [(r, p) for r, p in problems if p]
    d = lab.results_dir
    report.write_json(os.path.join(d, "runs.json"), {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "commands": commands,
                                                    "load_commands": load_commands, "runs": rows, "targets": [t.to_dict() for t in tg]})  # fmt: skip
    report.write_csv(os.path.join(d, "runs.csv"), rows)
    flat_med = [dict(zip(["section", "config", "size_bytes", "rate"], k), **v) for k, v in med_rate.items()]
    report.write_csv(os.path.join(d, "medians.csv"), flat_med)

    md = [f"# {NAME}", "", f"{'Quick' if lab.quick else 'Full'} run: {pn.rounds} round(s), configurations interleaved (order rotated each round), "
          "median shown. One worker per server. CPU = the scheduler's runtime of every thread of the process tree (/proc/PID/task/*/schedstat) "
          "before and after each run, per completed request; client CPU = the load tool's rusage.", ""]  # fmt: skip
    md += ["## Targets (same run, proxy CPU)", ""]
    trows = []
    for t in tg:
        val = t.value
        shown = "–" if val is None else (f"{100 * val:.0f} % less" if t.kind == "saving" else f"{val:.2f}×")
        lim = f"≥ {100 * t.limit:.0f} % less" if t.kind == "saving" else f"≤ {t.limit:g}×"
        trows.append([t.name, f"{report.fmt_num(t.weft, 2)} {t.unit}", f"{t.anchor_name} {report.fmt_num(t.anchor, 2)}", shown, lim,
                      {True: "met", False: "**missed**", None: "–"}[t.met]])  # fmt: skip
    md.append(report.markdown_table(["target", "weft", "anchor (same run)", "weft vs anchor", "target", ""], trows, "llllll"))

    # Section 1: closed-loop misses, hits, forward proxy.
    md += ["", f"## Closed loop (`wrk -t1 -c{CONNECTIONS} -d{pn.wrk_s:g}s`): CPU µs per request", ""]
    t_rows = []
    for key, m in med.items():
        sec, proxy, mode, size = key
        if sec != "targets":
            continue
        tot = sum(x for x in (m["proxy_us"], m["origin_us"], m["client_us"]) if x is not None)
        t_rows.append([f"{pl.size_label(size)} {mode}", proxy, report.fmt_num(m["proxy_us"]), report.fmt_num(m["proxy_ms_per_mib"], 2),
                       report.fmt_num(m["origin_us"]), report.fmt_num(m["client_us"]), report.fmt_num(tot), report.fmt_num(m["rps"])])  # fmt: skip
    t_rows.sort(key=lambda r: r[0])
    md.append(report.markdown_table(["object", "proxy", "proxy µs/req", "proxy ms/MiB", "origin µs/req", "client µs/req", "sum", "req/s"], t_rows, "llrrrrrr"))

    # Section 2: fixed rate, sizes.
    size_rows = [(k, m) for k, m in med_rate.items() if k[0] == "sizes"]
    if size_rows:
        md += ["", f"## Fixed rate ({pn.fixed_rate} requests/s, 0 % hits): proxy CPU (Figure 7)", ""]
        configs = list(OrderedDict.fromkeys(k[1] for k, _ in size_rows))
        szs = sorted({k[2] for k, _ in size_rows})
        cell = {(k[1], k[2]): m for k, m in size_rows}
        rows_util = [[c] + [report.fmt_num(100 * cell[(c, s)]["proxy_util"], 2) if (c, s) in cell and cell[(c, s)]["proxy_util"] is not None else "–" for s in szs] for c in configs]
        md.append("Proxy CPU, % of one core:")
        md += ["", report.markdown_table(["config"] + [pl.size_label(s) for s in szs], rows_util), ""]
        rows_us = [[c] + [report.fmt_num(cell[(c, s)]["proxy_us"]) if (c, s) in cell else "–" for s in szs] for c in configs]
        md.append("Proxy CPU µs per request:")
        md += ["", report.markdown_table(["config"] + [pl.size_label(s) for s in szs], rows_us), ""]
        sv = []
        for mode, label in (("nc", "no-store: splice vs copy"), ("c", "cacheable: KeepCopy vs copy")):
            vals = [pl.saving(cell.get((config_name(WS, mode), s), {}).get("proxy_us"), cell.get((config_name(WC, mode), s), {}).get("proxy_us")) for s in szs]
            sv.append([label] + ["–" if x is None else f"{100 * x:.0f} %" for x in vals])
        vals = [pl.saving(cell.get((config_name(HS, "nc"), s), {}).get("proxy_us"), cell.get((config_name(HC, "nc"), s), {}).get("proxy_us")) for s in szs]
        if any(x is not None for x in vals):
            sv.append(["HAProxy: splice vs copy"] + ["–" if x is None else f"{100 * x:.0f} %" for x in vals])
        md.append("Proxy CPU saved per request by splicing:")
        md += ["", report.markdown_table(["what"] + [pl.size_label(s) for s in szs], sv), ""]
        series = OrderedDict((c, [100 * cell[(c, s)]["proxy_util"] if (c, s) in cell and cell[(c, s)]["proxy_util"] is not None else None for s in szs]) for c in configs)
        report.plot_series(os.path.join(d, "sizes_cpu.png"), [s / pl.KiB for s in szs], series, xlabel="object size (KiB)", ylabel="proxy CPU (% of one core)",
                          title=f"{NAME}: proxy CPU at {pn.fixed_rate} req/s, 0 % hits (000 Fig. 7)", logx=True, logy=True,
                          xticklabels=[pl.size_label(s).replace(" ", "") for s in szs], styles=line_styles(configs))  # fmt: skip

    # Section 3: rate sweep.
    rate_rows = [(k, m) for k, m in med_rate.items() if k[0] == "rates"]
    if rate_rows:
        md += ["", "## Rate sweep (8 KiB, 0 % hits): proxy CPU and mean response time (Figures 9-10)", ""]
        configs = list(OrderedDict.fromkeys(k[1] for k, _ in rate_rows))
        rates = sorted({k[3] for k, _ in rate_rows})
        cell = {(k[1], k[3]): m for k, m in rate_rows}
        rr = []
        for c in configs:
            for r in rates:
                m = cell.get((c, r))
                if m:
                    rr.append([c, f"{r:,}", report.fmt_num(m["rps"]), report.fmt_num(100 * m["proxy_util"] if m["proxy_util"] is not None else None),
                               report.fmt_num(m["proxy_us"]), report.fmt_num(m["latency_ms_mean"], 3)])  # fmt: skip
        md.append(report.markdown_table(["config", "offered req/s", "achieved req/s", "proxy CPU %", "proxy µs/req", "mean response ms"], rr, "lrrrrr"))
        styles = line_styles(configs)
        series = OrderedDict((c, [100 * cell[(c, r)]["proxy_util"] if (c, r) in cell and cell[(c, r)]["proxy_util"] is not None else None for r in rates]) for c in configs)
        report.plot_series(os.path.join(d, "rates_cpu.png"), rates, series, xlabel="offered requests/s", ylabel="proxy CPU (% of one core)",
                          title=f"{NAME}: proxy CPU vs request rate, 8 KiB, 0 % hits (000 Fig. 9)", styles=styles)  # fmt: skip
        series = OrderedDict((c, [cell[(c, r)]["latency_ms_mean"] if (c, r) in cell else None for r in rates]) for c in configs)
        report.plot_series(os.path.join(d, "rates_latency.png"), rates, series, xlabel="offered requests/s", ylabel="mean response time (ms)",
                          title=f"{NAME}: mean response time vs request rate, 8 KiB (000 Fig. 10)", logy=True, styles=styles)  # fmt: skip

    # weft's counters: where the bytes went, sessions, system calls.
    md += ["", "## weft's counters (last round)", ""]
    crow = []
    seen = set()
    for r in reversed(rows):
        key = (r["section"], r["config"], r["size_bytes"], r["rate"])
        w = r.get("weft")
        if not w or key in seen:
            continue
        seen.add(key)
        n = r["requests"] or 1
        crow.append([r["section"], r["config"], r["size"] + (f" @{r['rate']}/s" if r["rate"] else ""), pl.body_paths(w),
                     f"{w.get('hits', 0) / n:.2f}", pl.sessions_per_request(w, n), pl.calls_per_request(w)])  # fmt: skip
    crow.reverse()
    md.append(report.markdown_table(["section", "config", "object", "body bytes by path", "hits/req", "sessions per request", "system calls per request"], crow, "lllllll"))

    md += pl.checks(problems, lambda r: f"round {r['round']} {r['section']} {r['config']} {r['size']} {r['rate'] or ''}",
                    "every response 2xx, no socket errors, every body complete")
    hit_runs = [r for r in rows if r["mode"] in ("c", "nc") and r.get("hit_share")]
    if hit_runs:
        md.append(f"- {len(hit_runs)} miss run(s) saw weft cache hits (max {max(r['hit_share'] for r in hit_runs):.3f} per request)")
    else:
        md.append("- weft's miss runs had 0 cache hits (unique URLs for cacheable objects)")
    pl.write_summary(d, md, commands, [f"{k}: {v}" for k, v in load_commands.items()], "Load:", lab.versions,
                     ["sizes_cpu.png", "rates_cpu.png", "rates_latency.png"])  # fmt: skip
    for t in tg:
        lab.log("  " + t.describe())
    return {"problems": len(problems), "weft_problems": pl.weft_rows(problems), "targets": [t.to_dict() for t in tg]}


def line_styles(configs) -> dict:
    """Same colour per proxy, dashed for cacheable (KeepCopy) series."""
    colours = {WS: "tab:blue", WC: "tab:orange", HS: "tab:green", HC: "tab:red", VH: "tab:purple", NP: "tab:brown", SR: "tab:gray"}
    out = {}
    for c in configs:
        proxy, _, what = c.rpartition(" ")
        st = {"color": colours.get(proxy, None)}
        if what == "cacheable":
            st["linestyle"] = "--"
        out[c] = {k: v for k, v in st.items() if v is not None}
    return out
