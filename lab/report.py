"""Results: aggregation (medians over repetitions), raw data as JSON and CSV,
markdown tables, and PNG plots.

Everything but `plot_grouped_bars` is pure and unit-tested; plotting imports
matplotlib (Agg backend) only when called.
"""

from __future__ import annotations

import csv
import json
import math
import os
import statistics
from collections import OrderedDict
from typing import Callable, Iterable, Sequence


def median(values: Iterable[float | None]) -> float | None:
    """Median of the values that are not None (None when there are none)."""
    v = [x for x in values if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return statistics.median(v) if v else None


def quartile(v: Sequence[float], q: int) -> float:
    """The q-th quartile (0 to 4) of sorted `v`, linear between the nearest ranks."""
    at = (len(v) - 1) * q / 4
    lo = int(at)
    return v[lo] + (v[min(lo + 1, len(v) - 1)] - v[lo]) * (at - lo)


def median_iqr(values: Iterable[float], spec: str = ".2f") -> str:
    """`median (Q1-Q3)` of `values` formatted with `spec`, or a dash when
    there are none: the spread of ratios taken round by round."""
    v = sorted(values)
    if not v:
        return "–"
    return f"{statistics.median(v):{spec}} ({quartile(v, 1):{spec}}–{quartile(v, 3):{spec}})"


def group_medians(rows: Sequence[dict], keys: Sequence[str], fields: Sequence[str]) -> list[dict]:
    """One row per distinct combination of `keys` (first-seen order) with the
    median of each of `fields` and the number of repetitions `n`."""
    groups: "OrderedDict[tuple, list[dict]]" = OrderedDict()
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    out = []
    for key, members in groups.items():
        row = dict(zip(keys, key))
        row["n"] = len(members)
        for f in fields:
            row[f] = median(m.get(f) for m in members)
        out.append(row)
    return out


def flatten(d: dict, prefix: str = "") -> dict:
    """Nested dicts to one level with dotted keys (for CSV)."""
    out = {}
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, name + "."))
        elif isinstance(v, (list, tuple)):
            out[name] = " ".join(str(x) for x in v)
        else:
            out[name] = v
    return out


def write_json(path: str, doc) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def summary_end(commands: dict[str, list[str]], versions: dict, *, more_commands: Sequence[str] = (),
                plots: Sequence[str] | None = None, raw: Sequence[str] = ("runs.json", "runs.csv")) -> list[str]:
    """The closing sections of an experiment's summary.md: `## Commands` (each
    labelled command line, then `more_commands`, in one code block), `##
    Versions`, and a line naming the plots and raw data files (when `plots`
    is given)."""
    md = ["", "## Commands", "", "```"] + [f"{k}: {' '.join(v)}" for k, v in commands.items()] + list(more_commands)
    md += ["```", "", "## Versions", ""] + [f"- {k}: {v}" for k, v in versions.items()]
    if plots is not None:
        md += ["", f"Plots: {', '.join(f'`{p}`' for p in plots)}. Raw data: {', '.join(f'`{r}`' for r in raw)}."]
    return md + [""]


def versions_section(versions: dict) -> list[str]:
    """A summary's `## Versions` section: a line per program, then a blank line."""
    return ["## Versions", ""] + [f"- {k}: {v}" for k, v in versions.items()] + [""]


def write_summary(d: str, md: Sequence[str]) -> None:
    """Write an experiment's summary.md into its results folder `d`: the
    lines joined, ending in one newline (a text file's last line ends too)."""
    text = "\n".join(md)
    with open(os.path.join(d, "summary.md"), "w") as f:
        f.write(text if text.endswith("\n") else text + "\n")


def write_csv(path: str, rows: Sequence[dict]) -> None:
    """Rows (possibly nested) as CSV; columns are the union, in first-seen order."""
    flat = [flatten(r) for r in rows]
    cols: list[str] = []
    for r in flat:
        for k in r:
            if k not in cols:
                cols.append(k)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r in flat:
            w.writerow(r)


def fmt_num(v: float | None, digits: int = 1) -> str:
    """Human figures: thousands separated, `digits` decimals under 100, '–' for None."""
    if v is None:
        return "–"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def parts_table(parts: dict, name: str, quick: bool) -> str:
    """When and how long each part of an experiment ran (`--only`), and the
    command that runs it again."""
    if not parts:
        return ""
    q = " --quick" if quick else ""
    rows = [[f"`{p}`", v.get("at", "?"), f"{v.get('duration_s', 0):.0f} s", v.get("weft") or "?",
             f"`python3 -m lab run {name}{q} --only {p}`"] for p, v in parts.items()]  # fmt: skip
    return "Parts:\n\n" + markdown_table(["part", "measured (UTC)", "took", "weft", "again"], rows, "llrll")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str | None = None) -> str:
    """A GitHub markdown table; `align` is one of l/r per column (default: first l, rest r)."""
    if align is None:
        align = "l" + "r" * (len(header) - 1)
    sep = ["---:" if a == "r" else ":---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    for r in rows:
        lines.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(lines)


def pivot(rows: Sequence[dict], row_key: str, col_key: str, value: str, fmt: Callable[[float | None], str] = fmt_num):
    """Rows × columns table of `value` (cells missing → '–'); keys in first-seen order."""
    row_names: list = []
    col_names: list = []
    cell: dict = {}
    for r in rows:
        if r[row_key] not in row_names:
            row_names.append(r[row_key])
        if r[col_key] not in col_names:
            col_names.append(r[col_key])
        cell[(r[row_key], r[col_key])] = r.get(value)
    table = [[str(rn)] + [fmt(cell.get((rn, cn))) for cn in col_names] for rn in row_names]
    return [str(c) for c in col_names], table


def plot_grouped_bars(path: str, groups: Sequence[str], series: "OrderedDict[str, list[float | None]]", *, ylabel: str, title: str, log: bool = False,
                      dpi: int = 110) -> None:
    """One group of bars per entry of `groups`, one bar per series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(len(series), 1)
    width = 0.8 / n
    fig, ax = plt.subplots(figsize=(min(max(6.0, 1.6 * len(groups) + 2), 12.0), 4.2))
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        ys = [v if v is not None else 0 for v in values]
        ax.bar(xs, ys, width, label=name)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=8 if len(groups) > 6 else None, rotation=20 if len(groups) > 6 else 0)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if log:
        ax.set_yscale("log")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


# Fifteen distinct colours (tab10, then five more) for up to fifteen series.
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
           "#000000", "#b8860b", "#000080", "#ff1493", "#556b2f"]  # fmt: skip


def series_style(label: str, i: int) -> dict:
    """weft's lines solid with round markers, anchors dashed with squares;
    colours in series order."""
    anchor = not label.startswith("weft")
    return {"linestyle": "--" if anchor else "-", "marker": "s" if anchor else "o", "color": PALETTE[i % len(PALETTE)]}


def plot_lines(path: str, panels, *, xlabel: str, ylabel: str, title: str = "", diagonal: bool = False,
               logx: bool = False, logy: bool = False, width: float = 5.2, height: float = 3.9, sharey: bool = True,
               ylabels: list[str] | None = None) -> None:
    """Line plots side by side: `panels` is [(panel title, {series label:
    [(x, y), ...]})]; points with y None are left out. `diagonal` draws y = x
    (reply rate = request rate). Small files: the docs embed them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.ticker import FixedLocator, NullLocator

    fig, axes = plt.subplots(1, len(panels), figsize=(width * len(panels), height), squeeze=False, sharey=sharey)
    for k, (ax, (ptitle, series)) in enumerate(zip(axes[0], panels)):
        top = 0.0
        xs_all: set = set()
        for i, (label, pts) in enumerate(series.items()):
            pts = sorted((x, y) for x, y in pts if x is not None and y is not None)
            if not pts:
                continue
            st = series_style(label, i)
            xs, ys = zip(*pts)
            xs_all.update(xs)
            top = max(top, max(xs), max(ys))
            ax.plot(xs, ys, linestyle=st["linestyle"], marker=st["marker"], markersize=3.5, linewidth=1.2,
                    color=st["color"], label=label)  # fmt: skip
        if diagonal and top:
            ax.plot([0, top], [0, top], color="0.75", linewidth=0.8, zorder=0)
        ax.set_title(ptitle, fontsize=10)
        ax.set_xlabel(xlabel)
        if logx:
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(FixedLocator(sorted(xs_all)))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xticklabels([f"{x:,g}" for x in sorted(xs_all)], fontsize=8)
        if logy:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        if ylabels:
            ax.set_ylabel(ylabels[k])
    if not ylabels:
        axes[0][0].set_ylabel(ylabel)
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes[0][1:]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, fontsize=7, loc="center right", frameon=False)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0, 0.84, 1))
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot_series(path: str, xs: Sequence[float], series: "OrderedDict[str, list[float | None]]", *, xlabel: str, ylabel: str,
               title: str, logx: bool = False, logy: bool = False, xticklabels: Sequence[str] | None = None,
               styles: dict | None = None) -> None:  # fmt: skip
    """One panel, one line per series over the same x values (None: no point
    there), with the x ticks named (`xticklabels`) and each series' look
    chosen by the caller (`styles`: series name -> matplotlib keyword
    arguments, e.g. one colour per proxy, dashed for its cacheable runs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    for name, ys in series.items():
        pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
        if not pts:
            continue
        kw = {"marker": "o", "markersize": 4}
        kw.update((styles or {}).get(name, {}))
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=name, **kw)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    if xticklabels is not None:
        ax.set_xticks(list(xs))
        ax.set_xticklabels(list(xticklabels))
        ax.minorticks_off()
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
