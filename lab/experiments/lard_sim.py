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

Parts (`--only PART[,PART]`), the sensitivity runs of §3.3.2-§3.3.3 and
§3.1.4, on the Rice-like trace with temporal locality (`rice --locality 0.5`,
the closest of our traces to the thesis's numbers):

- **nodes**: the figures above (3.7-3.10);
- **cpu** (Figures 3.11-3.12): CPU 1, 2, 3, 4× with 1, 1.5, 2, 3× the cache,
  WRR, LARD, LARD/R against nodes;
- **disks** (Figures 3.13-3.14): 1-4 disks per node, WRR and LARD/R;
- **thresholds** (§3.1.4): T_high − T_low from 5 to 160 at T_low 25, LARD and
  LARD/R on 8 nodes: throughput and delay (the thesis: the maximal delay
  grows about linearly, throughput rises mildly then flattens);
- **training** (§3.1.4): T_low set by a training phase (one node's throughput
  against its load: the smallest load reaching 90 % of its peak), T_high by
  the rule T_high = (T_low + D/R)/2 (D = 1 s, R = the node's mean service
  time at its peak), against the defaults 25/65;
- **tiny** (§3.3.2, the Deep Blue/Kasparov trace): an IBM-like log from
  `weft load gen trace --param like=ibm` cut to a 16 MiB data set and looped
  (`weft trace cut`), a working set one node's cache holds: LARD must match WRR;
- **hot** (§3.3.2): artificial hot targets drawing 5-75 % of requests, 8, 32
  and 128 KiB, LARD/R against LARD on 8 nodes (the thesis: +0-15 %).

--quick: every part, fewer points (nodes 1, 2, 4, 8 or 4, 8; 100,000
requests): seconds once weft is built.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import OrderedDict

from .. import core, env, report

NAME = "lard-sim"
PARTS = ("nodes", "cpu", "disks", "thresholds", "training", "tiny", "hot")
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


def command(weft: str, trace_args: list[str], nodes: list[int], policies: list[str], requests: int, json_path: str,
            extra: list[str] | None = None) -> list[str]:  # fmt: skip
    """The `weft sim` invocation for one trace."""
    return [weft, "sim", *trace_args, "--nodes", ",".join(str(n) for n in nodes), "--policy", ",".join(policies),
            "--requests", str(requests), *(extra or []), "--json", json_path]  # fmt: skip


def rows_from_report(doc: dict, trace: str, part: str = "nodes") -> list[dict]:
    """One flat row per run of a `weft sim --json` document."""
    rows = []
    for r in doc["runs"]:
        rows.append({
            "part": part,
            "trace": trace,
            "policy": r["policy"],
            "nodes": r["nodes"],
            "requests": r["requests"],
            "throughput": r["throughput"],
            "miss_ratio": r["miss_ratio"],
            "idle_fraction": r["idle_fraction"],
            "delay_mean_ms": r["delay_mean_ms"],
            "delay_max_ms": r.get("delay_max_ms"),
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
    previous = lab.previous_runs()
    rows: list[dict] = []
    commands: dict[str, list[str]] = {}
    for part in lab.parts(PARTS):
        rows += PART_RUNS[part](lab, commands)
    rows = core.merge_parts(previous, lab.parts(PARTS), rows, lambda r: r.get("part", "nodes"))
    if previous:
        commands = {**previous.get("commands", {}), **commands}
    return summarize(lab, rows, commands)


def sim(lab: core.Lab, commands: dict, part: str, label: str, trace_args: list[str], nodes: list[int], policies: list[str],
        requests: int, extra: list[str] | None = None) -> list[dict]:  # fmt: skip
    """One `weft sim` invocation: its rows, labelled `label`, in `part`."""
    json_path = os.path.join(lab.scratch, f"{part}-{len(commands)}.json")
    cmd = command(lab.weft, trace_args, nodes, policies, requests, json_path, extra)
    lab.log(f"{NAME}: {part}: {label}: {len(nodes)} node counts x {len(policies)} strategies, {requests:,} requests each")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        raise env.EnvError(f"weft sim failed ({p.returncode}): {p.stderr.strip()}")
    commands[f"{part}: {label}"] = [os.path.basename(cmd[0])] + cmd[1:-2]
    return rows_from_report(load_json(json_path), label, part)


def requests_for(lab: core.Lab) -> int:
    return QUICK_REQUESTS if lab.quick else REQUESTS


def run_nodes(lab: core.Lab, commands: dict) -> list[dict]:
    nodes = QUICK_NODES if lab.quick else NODES
    policies = QUICK_POLICIES if lab.quick else POLICIES
    rows = []
    for label, trace_args in TRACES:
        rows += sim(lab, commands, "nodes", label, trace_args, nodes, policies, requests_for(lab))
    return rows


SENS_TRACE = ["rice", "--locality", "0.5"]
SENS_NODES = [1, 2, 4, 8, 12, 16]
QUICK_SENS_NODES = [4, 8]
CPU_SPEEDS = [(1, "32MiB"), (2, "48MiB"), (3, "64MiB"), (4, "96MiB")]  # §3.3.3: memory ×1.5/2/3 for 2/3/4× CPU
DISKS = [1, 2, 3, 4]
GAPS = [5, 10, 20, 40, 80, 160]  # T_high − T_low at T_low 25
QUICK_GAPS = [10, 40, 160]
TRAIN_CLIENTS = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
QUICK_TRAIN_CLIENTS = [1, 2, 4, 8, 16, 32, 64]
TRAIN_D_SECONDS = 1.0  # the delay difference D the T_high rule is given
HOT = [(share, size) for size in ("8KiB", "32KiB", "128KiB") for share in (0.05, 0.1, 0.2, 0.4, 0.6, 0.75)]
QUICK_HOT = [(0.2, "32KiB"), (0.6, "32KiB")]
HOT_COUNT = 2
TINY_DATA_SET = "4MiB"  # the prefix that fits: ~1 MiB, 92 targets of an IBM-like log


def run_cpu(lab: core.Lab, commands: dict) -> list[dict]:
    nodes = QUICK_SENS_NODES if lab.quick else SENS_NODES
    speeds = CPU_SPEEDS[::3] if lab.quick else CPU_SPEEDS
    rows = []
    for speed, cache in speeds:
        rows += sim(lab, commands, "cpu", f"cpu {speed}x, cache {cache}", SENS_TRACE, nodes, ["wrr", "lard", "lard-r"],
                    requests_for(lab), ["--cpu-speed", str(speed), "--cache-size", cache])  # fmt: skip
    return rows


def run_disks(lab: core.Lab, commands: dict) -> list[dict]:
    nodes = QUICK_SENS_NODES if lab.quick else SENS_NODES
    disks = [1, 4] if lab.quick else DISKS
    rows = []
    for d in disks:
        rows += sim(lab, commands, "disks", f"{d} disk{'s' if d > 1 else ''}", SENS_TRACE, nodes, ["wrr", "lard-r"],
                    requests_for(lab), ["--disks", str(d)])  # fmt: skip
    return rows


def run_thresholds(lab: core.Lab, commands: dict) -> list[dict]:
    rows = []
    for gap in QUICK_GAPS if lab.quick else GAPS:
        rows += sim(lab, commands, "thresholds", f"T_high - T_low = {gap}", SENS_TRACE, [8], ["lard", "lard-r"], requests_for(lab),
                    ["--t-low", "25", "--t-high", str(25 + gap)])  # fmt: skip
    return rows


def trained_thresholds(curve: list[tuple[int, float]], d_seconds: float = TRAIN_D_SECONDS) -> tuple[int, int, float]:
    """T_low, T_high and R from a training curve [(load, throughput/s)] of one
    node: T_low is the smallest load whose throughput reaches 90 % of the
    peak; R = 1 / peak throughput (the node's mean service time);
    T_high = (T_low + D/R) / 2, at least T_low + 1 (§3.1.4)."""
    peak = max(t for _, t in curve)
    t_low = min(c for c, t in curve if t >= 0.9 * peak)
    r = 1.0 / peak
    t_high = max(t_low + 1, round((t_low + d_seconds / r) / 2))
    return t_low, t_high, r


def run_training(lab: core.Lab, commands: dict) -> list[dict]:
    clients = QUICK_TRAIN_CLIENTS if lab.quick else TRAIN_CLIENTS
    requests = requests_for(lab) // 5
    curve = []
    for c in clients:
        r = sim(lab, commands, "training", f"training, load {c}", SENS_TRACE, [1], ["wrr"], requests, ["--clients", str(c)])
        curve.append((c, r[0]["throughput"]))
    t_low, t_high, svc = trained_thresholds(curve)
    lab.log(f"{NAME}: training: T_low {t_low}, T_high {t_high} (R = {1000 * svc:.1f} ms, D = {TRAIN_D_SECONDS} s)")
    rows = [{"part": "training", "trace": "training curve", "policy": "wrr", "nodes": 1, "clients": c, "throughput": t}
            for c, t in curve]  # fmt: skip
    nodes = [8] if lab.quick else [4, 8, 16]
    rows += sim(lab, commands, "training", "defaults 25/65", SENS_TRACE, nodes, ["lard", "lard-r"], requests_for(lab))
    rows += sim(lab, commands, "training", f"trained {t_low}/{t_high}", SENS_TRACE, nodes, ["lard", "lard-r"], requests_for(lab),
                ["--t-low", str(t_low), "--t-high", str(t_high)])  # fmt: skip
    return rows


def run_tiny(lab: core.Lab, commands: dict) -> list[dict]:
    """A Deep Blue/Kasparov-like trace: many requests to a small set of targets."""
    gen_dir = os.path.join(lab.scratch, "tiny")
    requests = requests_for(lab)
    gen = [lab.weft, "load", "gen", "trace", "--out", gen_dir, "--param", "like=ibm", "--param", "requests=20000"]
    log = os.path.join(lab.scratch, "tiny.log")
    cut = [lab.weft, "trace", "cut", os.path.join(gen_dir, "access.log"), "--data-set", TINY_DATA_SET, "--requests", str(requests),
           "--out", log]  # fmt: skip
    for cmd in (gen, cut):
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise env.EnvError(f"{' '.join(cmd[1:4])} failed ({p.returncode}): {p.stderr.strip()}")
        lab.log(p.stderr.strip() or p.stdout.strip())
    commands["tiny: trace"] = ["weft"] + gen[1:4] + ["--param", "like=ibm", "--param", "requests=20000", "&&", "weft", "trace", "cut",
                                                     "--data-set", TINY_DATA_SET, "--requests", str(requests)]  # fmt: skip
    nodes = QUICK_SENS_NODES if lab.quick else SENS_NODES
    return sim(lab, commands, "tiny", f"ibm-like cut to {TINY_DATA_SET}", [log], nodes, ["wrr", "lard", "lard-r"], requests)


def run_hot(lab: core.Lab, commands: dict) -> list[dict]:
    rows = []
    for share, size in QUICK_HOT if lab.quick else HOT:
        rows += sim(lab, commands, "hot", f"hot {share:.0%} x {HOT_COUNT} of {size}", SENS_TRACE, [8], ["lard", "lard-r"],
                    requests_for(lab), ["--hot", f"{share}:{HOT_COUNT}:{size}"])  # fmt: skip
    return rows


PART_RUNS = {"nodes": run_nodes, "cpu": run_cpu, "disks": run_disks, "thresholds": run_thresholds, "training": run_training,
             "tiny": run_tiny, "hot": run_hot}  # fmt: skip


def load_json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def resummarize(lab: core.Lab) -> None:
    """`python3 -m lab summarize lard-sim`: the summary and plots again from runs.json."""
    doc = load_json(os.path.join(lab.results_dir, "runs.json"))
    lab.versions = doc.get("versions", {})
    summarize(lab, doc["runs"], doc.get("commands", {}))


def fmt_ratio(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "–"
    return f"{100 * (x - 1):+.1f} %" if pct else f"{x:.2f}×"


def by_nodes_table(rows: list[dict], labels: list[str], policies: list[str]) -> list[str]:
    """Throughput per (label, policy) against nodes."""
    node_cols = sorted({r["nodes"] for r in rows if r["trace"] in labels})
    table = []
    for label in labels:
        for pol in policies:
            vals = [lookup(rows, label, pol, n, "throughput") for n in node_cols]
            if any(v is not None for v in vals):
                table.append([label, pol] + [f"{v:.0f}" if v is not None else "–" for v in vals])
    return [report.markdown_table(["variant", "policy"] + [str(n) for n in node_cols], table, "ll" + "r" * len(node_cols))]


def labels_of(rows: list[dict], part: str) -> list[str]:
    return list(OrderedDict.fromkeys(r["trace"] for r in rows if r.get("part") == part))


def sensitivity(rows: list[dict]) -> list[str]:
    """The sensitivity parts' sections (§3.1.4, §3.3.2, §3.3.3), those that ran."""
    md = []
    cpu = labels_of(rows, "cpu")
    if cpu:
        md += ["", "## CPU speed (Figures 3.11-3.12; `rice --locality 0.5`), throughput req/s", ""]
        md += by_nodes_table(rows, cpu, ["wrr", "lard", "lard-r"])
        md += ["", "LARD/R ÷ WRR at the most nodes run, per CPU speed: " + ", ".join(
            f"{lb}: {fmt_ratio(ratio(rows, lb, 'lard-r', 'wrr', max(r['nodes'] for r in rows if r['trace'] == lb)))}" for lb in cpu) +
            " (thesis: WRR gains nothing from CPU, LARD/R scales with it)."]  # fmt: skip
    disks = labels_of(rows, "disks")
    if disks:
        md += ["", "## Disks per node (Figures 3.13-3.14; `rice --locality 0.5`), throughput req/s", ""]
        md += by_nodes_table(rows, disks, ["wrr", "lard-r"])
        last = disks[-1]
        n = max(r["nodes"] for r in rows if r["trace"] == last)
        md += ["", f"WRR ÷ LARD/R with {last} at {n} nodes: {fmt_ratio(ratio(rows, last, 'wrr', 'lard-r', n))} "
               "(thesis: within 15 % with 4 disks at 16 nodes)."]  # fmt: skip
    gaps = labels_of(rows, "thresholds")
    if gaps:
        md += ["", "## T_high − T_low (§3.1.4; 8 nodes, T_low 25, `rice --locality 0.5`)", ""]
        table = [[lb, pol, f"{lookup(rows, lb, pol, 8, 'throughput'):.0f}", f"{lookup(rows, lb, pol, 8, 'delay_mean_ms'):.0f}",
                  f"{lookup(rows, lb, pol, 8, 'delay_max_ms'):.0f}"] for lb in gaps for pol in ("lard", "lard-r")
                 if lookup(rows, lb, pol, 8, "throughput") is not None]  # fmt: skip
        md.append(report.markdown_table(["gap", "policy", "req/s", "mean delay ms", "max delay ms"], table, "llrrr"))
        md += ["", "Thesis: the maximal delay difference grows about linearly with the gap; throughput rises mildly, then flattens."]
    train = [r for r in rows if r.get("part") == "training" and r["trace"] == "training curve"]
    if train:
        curve = [(r["clients"], r["throughput"]) for r in train]
        t_low, t_high, svc = trained_thresholds(curve)
        md += ["", "## T_low from a training phase (§3.1.4)", ""]
        md.append("One node's throughput against its load (closed-loop clients): " +
                  ", ".join(f"{c}: {t:.0f}" for c, t in curve) + " req/s.")  # fmt: skip
        md.append(f"T_low = {t_low} (the least load reaching 90 % of the peak), R = {1000 * svc:.1f} ms, "
                  f"T_high = (T_low + D/R)/2 = {t_high} with D = {TRAIN_D_SECONDS:g} s.")  # fmt: skip
        md.append("")
        md += by_nodes_table(rows, [lb for lb in labels_of(rows, "training") if lb != "training curve"], ["lard", "lard-r"])
    tiny = labels_of(rows, "tiny")
    if tiny:
        md += ["", "## A tiny working set (the Deep Blue/Kasparov case, §3.3.2)", ""]
        md += by_nodes_table(rows, tiny, ["wrr", "lard", "lard-r"])
        ns = sorted({r["nodes"] for r in rows if r["trace"] == tiny[0]})
        md += ["", "LARD ÷ WRR: " + ", ".join(f"{n} nodes {fmt_ratio(ratio(rows, tiny[0], 'lard', 'wrr', n))}" for n in ns) +
               "; LARD/R ÷ WRR: " + ", ".join(f"{fmt_ratio(ratio(rows, tiny[0], 'lard-r', 'wrr', n))}" for n in ns) +
               " (thesis: both closely match WRR)."]  # fmt: skip
    hot = labels_of(rows, "hot")
    if hot:
        md += ["", "## Hot targets (§3.3.2; 8 nodes, `rice --locality 0.5`)", ""]
        table = [[lb, f"{lookup(rows, lb, 'lard', 8, 'throughput'):.0f}", f"{lookup(rows, lb, 'lard-r', 8, 'throughput'):.0f}",
                  fmt_ratio(ratio(rows, lb, "lard-r", "lard", 8), pct=True)] for lb in hot]  # fmt: skip
        md.append(report.markdown_table(["hot targets", "LARD req/s", "LARD/R req/s", "LARD/R vs LARD"], table, "lrrr"))
        md += ["", "Thesis: LARD/R beats LARD by 0-15 %, most with hot targets over 20 KB drawing 10-60 % of requests."]
    return md


def summarize(lab: core.Lab, rows: list[dict], commands: dict) -> dict:
    report.write_json(os.path.join(lab.results_dir, "runs.json"), {"experiment": NAME, "quick": lab.quick, "versions": lab.versions, "commands": commands, "runs": rows})
    report.write_csv(os.path.join(lab.results_dir, "runs.csv"), rows)
    every = rows
    rows = [r for r in every if r.get("part", "nodes") == "nodes"]
    traces = [t for t, _ in TRACES if any(r["trace"] == t for r in rows)]
    policies = list(OrderedDict.fromkeys(r["policy"] for r in rows))
    plots = [("throughput", "throughput.png", "requests/s", 1.0), ("miss_ratio", "miss_ratio.png", "cache miss ratio (%)", 100.0),
             ("idle_fraction", "idle_time.png", "idle time (%)", 100.0)]  # fmt: skip
    for field, fname, ylabel, scale in plots if traces else []:
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
    md += sensitivity(every)
    md += report.summary_end(commands, lab.versions, plots=["throughput.png", "miss_ratio.png", "idle_time.png"])
    report.write_summary(lab.results_dir, md)
    return {"problems": 0}
