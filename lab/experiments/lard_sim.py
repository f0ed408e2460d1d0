"""lard-sim: the thesis's simulation results (Figures 3.7-3.10) from `weft sim`.

Issue 23's lab: throughput, cache miss ratio and idle time against the number
of back-end nodes (1-16) for every strategy (WRR, WRR/GMS, LB, LB/GC, LARD,
LARD/R, and bounded-load consistent hashing) on the synthetic Rice-like and
IBM-like traces, plus the Rice-like trace with temporal locality
(`--locality 0.5`, see docs/sim.md). One `weft sim ... --json` per trace; the
simulator is deterministic, so there is one run per point (no repetitions).

The summary compares with the thesis's figures: LARD/R over WRR 3.9x at 8
nodes and 4.5x at 16 on Rice, LARD's miss ratio under 4 % at 8 nodes and
more, LARD/LARD-R idle time about 1 %, WRR/GMS under 50 % of LARD on Rice.

--quick: nodes 1, 2, 4, 8; WRR, LARD, LARD/R; 100,000 requests (seconds once
weft is built).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import OrderedDict

from .. import core, env, report

NAME = "lard-sim"
DESCRIPTION = "weft sim: throughput, miss ratio, idle time vs nodes (1-16) per strategy on Rice-/IBM-like traces (Fig. 3.7-3.10)"

# (label, weft sim arguments)
TRACES = [
    ("rice", ["rice"]),
    ("ibm", ["ibm"]),
    ("rice, locality 0.5", ["rice", "--locality", "0.5"]),
]
POLICIES = ["wrr", "wrr-gms", "lb", "lb-gc", "lard", "lard-r", "chash"]
QUICK_POLICIES = ["wrr", "lard", "lard-r"]
NODES = list(range(1, 17))
QUICK_NODES = [1, 2, 4, 8]
REQUESTS = 1_000_000
QUICK_REQUESTS = 100_000

# The thesis's numbers (§3.3.1-§3.3.4) the summary sets beside ours.
THESIS = {
    "lard-r/wrr at 8 nodes (rice)": 3.9,
    "lard-r/wrr at 16 nodes (rice)": 4.5,
    "lard miss ratio at 8+ nodes (rice)": "< 4 %",
    "lard idle time (rice)": "~1 %",
    "wrr-gms/lard (rice)": "< 50 %",
}


def command(weft: str, trace_args: list[str], nodes: list[int], policies: list[str], requests: int, json_path: str) -> list[str]:
    """The `weft sim` invocation for one trace."""
    return [weft, "sim", *trace_args, "--nodes", ",".join(str(n) for n in nodes), "--policy", ",".join(policies),
            "--requests", str(requests), "--json", json_path]  # fmt: skip


def rows_from_report(doc: dict, trace: str) -> list[dict]:
    """One flat row per run of a `weft sim --json` document."""
    rows = []
    for r in doc["runs"]:
        rows.append({
            "trace": trace,
            "policy": r["policy"],
            "nodes": r["nodes"],
            "requests": r["requests"],
            "throughput": r["throughput"],
            "miss_ratio": r["miss_ratio"],
            "idle_fraction": r["idle_fraction"],
            "delay_mean_ms": r["delay_mean_ms"],
            "disk_reads": r["disk_reads"],
            "remote_hits": r["remote_hits"],
            "wall_seconds": r.get("wall_seconds"),
        })  # fmt: skip
    return rows


def lookup(rows: list[dict], trace: str, policy: str, nodes: int, field: str):
    for r in rows:
        if (r["trace"], r["policy"], r["nodes"]) == (trace, policy, nodes):
            return r[field]
    return None


def ratio(rows: list[dict], trace: str, a: str, b: str, nodes: int, field: str = "throughput") -> float | None:
    """rows[a] / rows[b] for one trace and node count."""
    x, y = lookup(rows, trace, a, nodes, field), lookup(rows, trace, b, nodes, field)
    return x / y if x is not None and y else None


def comparison(rows: list[dict]) -> list[list[str]]:
    """The thesis's claims beside the measured figures, per trace."""
    out = []
    for trace, _ in TRACES:
        if not any(r["trace"] == trace for r in rows):
            continue
        for n in (8, 16):
            q = ratio(rows, trace, "lard-r", "wrr", n)
            thesis = THESIS.get(f"lard-r/wrr at {n} nodes (rice)") if trace.startswith("rice") else None
            out.append([trace, f"LARD/R ÷ WRR throughput, {n} nodes", f"{q:.2f}×" if q else "–", f"{thesis}×" if thesis else "–"])
        m = lookup(rows, trace, "lard", 8, "miss_ratio")
        out.append([trace, "LARD miss ratio, 8 nodes", f"{100 * m:.1f} %" if m is not None else "–", "< 4 %" if trace.startswith("rice") else "–"])
        idle = [lookup(rows, trace, p, n, "idle_fraction") for p in ("lard", "lard-r") for n in (8, 16)]
        idle = [i for i in idle if i is not None]
        out.append([trace, "LARD, LARD/R idle time, 8 and 16 nodes", f"{100 * min(idle):.1f}–{100 * max(idle):.1f} %" if idle else "–", "≈ 1 %"])
        g = ratio(rows, trace, "wrr-gms", "lard", 8)
        out.append([trace, "WRR/GMS ÷ LARD throughput, 8 nodes", f"{100 * g:.0f} %" if g else "–", "< 50 %" if trace.startswith("rice") else "within 15 % at 16"])
    return out


def run(lab: core.Lab) -> dict:
    env.ensure_python_requirements(lab.log)
    lab.weft = env.build_weft(lab.log)
    lab.versions = env.versions(lab.weft, [])
    os.makedirs(lab.results_dir, exist_ok=True)
    nodes = QUICK_NODES if lab.quick else NODES
    policies = QUICK_POLICIES if lab.quick else POLICIES
    requests = QUICK_REQUESTS if lab.quick else REQUESTS
    rows: list[dict] = []
    commands: dict[str, list[str]] = {}
    for label, trace_args in TRACES:
        json_path = os.path.join(lab.scratch, f"{trace_args[0]}-{len(commands)}.json")
        cmd = command(lab.weft, trace_args, nodes, policies, requests, json_path)
        lab.log(f"{NAME}: {label}: {len(nodes)} node counts x {len(policies)} strategies, {requests:,} requests each")
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        if p.returncode != 0:
            raise env.EnvError(f"weft sim failed ({p.returncode}): {p.stderr.strip()}")
        commands[label] = [os.path.basename(cmd[0])] + cmd[1:-2]
        doc = load_json(json_path)
        rows += rows_from_report(doc, label)
        lab.log(p.stdout.rstrip())
    return summarize(lab, rows, commands)


def load_json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def resummarize(lab: core.Lab) -> None:
    """`python3 -m lab summarize lard-sim`: the summary and plots again from runs.json."""
    doc = load_json(os.path.join(lab.results_dir, "runs.json"))
    lab.versions = doc.get("versions", {})
    summarize(lab, doc["runs"], doc.get("commands", {}))


def summarize(lab: core.Lab, rows: list[dict], commands: dict) -> dict:
    report.write_json(os.path.join(lab.results_dir, "runs.json"), {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "commands": commands, "runs": rows})
    report.write_csv(os.path.join(lab.results_dir, "runs.csv"), rows)
    traces = [t for t, _ in TRACES if any(r["trace"] == t for r in rows)]
    policies = list(OrderedDict.fromkeys(r["policy"] for r in rows))
    plots = [("throughput", "throughput.png", "requests/s", 1.0), ("miss_ratio", "miss_ratio.png", "cache miss ratio (%)", 100.0),
             ("idle_fraction", "idle_time.png", "idle time (%)", 100.0)]  # fmt: skip
    for field, fname, ylabel, scale in plots:
        panels = []
        for t in traces:
            series = OrderedDict()
            for pol in policies:
                series[pol] = [(r["nodes"], r[field] * scale) for r in rows if r["trace"] == t and r["policy"] == pol]
            panels.append((t, series))
        report.plot_lines(os.path.join(lab.results_dir, fname), panels, xlabel="nodes", ylabel=ylabel, title=f"{NAME}: {ylabel}", sharey=False)
    md = [f"# {NAME}", ""]
    md.append(f"{'Quick' if lab.quick else 'Full'} run of `weft sim` (deterministic: one run per point). "
              "Traces are synthetic, fitted to the thesis's statistics (docs/sim.md).")  # fmt: skip
    md += ["", "## Against the thesis", ""]
    md.append(report.markdown_table(["trace", "figure", "weft sim", "thesis"], comparison(rows), "llrr"))
    node_cols = sorted({r["nodes"] for r in rows})
    for field, title, fmt in (("throughput", "Throughput (requests/s)", "{:.0f}"), ("miss_ratio", "Miss ratio (%)", "{:.1f}"),
                              ("idle_fraction", "Idle time (%)", "{:.1f}")):  # fmt: skip
        scale = 1.0 if field == "throughput" else 100.0
        for t in traces:
            md += ["", f"## {title}: {t}", ""]
            table = []
            for pol in policies:
                vals = [lookup(rows, t, pol, n, field) for n in node_cols]
                table.append([pol] + [fmt.format(v * scale) if v is not None else "–" for v in vals])
            md.append(report.markdown_table(["policy"] + [str(n) for n in node_cols], table, "l" + "r" * len(node_cols)))
    md += report.summary_end(commands, lab.versions, plots=["throughput.png", "miss_ratio.png", "idle_time.png"])
    report.write_summary(lab.results_dir, md)
    return {"problems": 0}
