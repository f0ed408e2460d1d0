import json

import pytest

from lab import core
from lab.experiments import lard_sim as ls


def report_doc(policy_throughput: dict, nodes=(8, 16)) -> dict:
    runs = []
    for n in nodes:
        for policy, tp in policy_throughput.items():
            runs.append({
                "policy": policy, "nodes": n, "requests": 1000, "throughput": tp * n, "miss_ratio": 0.02 if policy != "wrr" else 0.6,
                "idle_fraction": 0.01, "delay_mean_ms": 5.0, "disk_reads": 20, "remote_hits": 0, "wall_seconds": 0.1,
            })  # fmt: skip
    return {"trace": {"kind": "synthetic", "name": "rice"}, "runs": runs}


def test_command_names_every_node_count_and_strategy():
    cmd = ls.command("weft", ["rice", "--locality", "0.5"], [1, 2, 4], ["wrr", "lard-r"], 1000, "/tmp/x.json")
    assert cmd == ["weft", "sim", "rice", "--locality", "0.5", "--nodes", "1,2,4", "--policy", "wrr,lard-r",
                   "--requests", "1000", "--json", "/tmp/x.json"]  # fmt: skip


def test_rows_ratios_and_the_comparison_with_the_thesis():
    rows = ls.rows_from_report(report_doc({"wrr": 100.0, "wrr-gms": 150.0, "lard": 380.0, "lard-r": 390.0}), "rice")
    assert len(rows) == 8 and rows[0]["trace"] == "rice"
    assert ls.ratio(rows, "rice", "lard-r", "wrr", 8) == pytest.approx(3.9)
    assert ls.ratio(rows, "rice", "lard-r", "wrr", 3) is None
    table = ls.comparison(rows)
    by_figure = {r[1]: r for r in table}
    assert by_figure["LARD/R ÷ WRR throughput, 8 nodes"][2:] == ["3.90×", "3.9×"]
    assert by_figure["LARD miss ratio, 8 nodes"][2] == "2.0 %"
    assert by_figure["WRR/GMS ÷ LARD throughput, 8 nodes"][2] == "39 %"


def test_summarize_writes_the_tables_and_plots(tmp_path):
    pytest.importorskip("matplotlib")
    lab = core.Lab("lard-sim", quick=True, results_root=str(tmp_path))
    try:
        lab.versions = {"weft": "test"}
        (tmp_path / "lard-sim-quick").mkdir()
        rows = ls.rows_from_report(report_doc({"wrr": 100.0, "lard-r": 300.0}), "rice")
        ls.summarize(lab, rows, {"rice": ["weft", "sim", "rice"]})
        out = tmp_path / "lard-sim-quick"
        text = (out / "summary.md").read_text()
        assert "LARD/R ÷ WRR throughput, 16 nodes" in text and "3.00×" in text
        assert json.loads((out / "runs.json").read_text())["runs"] == rows
        for png in ("throughput.png", "miss_ratio.png", "idle_time.png"):
            assert (out / png).stat().st_size > 0
        ls.resummarize(lab)
    finally:
        lab.cleanup()


def test_trained_thresholds_follow_the_rule():
    # Peak 60 req/s (R = 1/60 s), 90 % of it first reached at load 2; D = 1 s: T_high = (2 + 60) / 2 = 31.
    t_low, t_high, r = ls.trained_thresholds([(1, 50.0), (2, 58.0), (4, 60.0), (8, 60.0)])
    assert (t_low, t_high) == (2, 31) and r == pytest.approx(1 / 60)
    # T_high stays above T_low when D/R is small.
    assert ls.trained_thresholds([(1, 1.0), (40, 2.0)], d_seconds=1.0)[:2] == (40, 41)


def test_every_part_has_a_runner():
    assert set(ls.PART_RUNS) == set(ls.PARTS)
