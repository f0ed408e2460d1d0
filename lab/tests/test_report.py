import csv
import json
from collections import OrderedDict

from lab import report


def test_median_ignores_missing_values():
    assert report.median([3, None, 1, 2]) == 2
    assert report.median([None]) is None
    assert report.median([1.0, float("nan"), 3.0]) == 2.0


def test_group_medians_keeps_first_seen_order():
    rows = [
        {"s": "b", "z": 1, "v": 10}, {"s": "a", "z": 1, "v": 1},
        {"s": "b", "z": 1, "v": 30}, {"s": "b", "z": 1, "v": 20},
        {"s": "a", "z": 1, "v": None},
    ]  # fmt: skip
    out = report.group_medians(rows, ["s", "z"], ["v"])
    assert out == [{"s": "b", "z": 1, "n": 3, "v": 20}, {"s": "a", "z": 1, "n": 2, "v": 1}]


def test_flatten_and_csv_union_of_columns(tmp_path):
    rows = [{"a": 1, "w": {"x": 2, "y": {"z": 3}}}, {"a": 4, "b": [1, 2]}]
    assert report.flatten(rows[0]) == {"a": 1, "w.x": 2, "w.y.z": 3}
    p = tmp_path / "r.csv"
    report.write_csv(str(p), rows)
    got = list(csv.DictReader(p.open()))
    assert list(got[0].keys()) == ["a", "w.x", "w.y.z", "b"]
    assert got[1]["b"] == "1 2" and got[1]["w.x"] == ""


def test_write_json_is_atomic_and_readable(tmp_path):
    p = tmp_path / "sub" / "r.json"
    report.write_json(str(p), {"k": [1, 2]})
    assert json.loads(p.read_text()) == {"k": [1, 2]}
    assert not (tmp_path / "sub" / "r.json.tmp").exists()


def test_fmt_num():
    assert report.fmt_num(None) == "–"
    assert report.fmt_num(2.345) == "2.3"
    assert report.fmt_num(2.345, 2) == "2.35"
    assert report.fmt_num(123456.7) == "123,457"


def test_markdown_table_and_pivot():
    rows = [
        {"srv": "weft", "size": "1 B", "cpu": 2.5},
        {"srv": "nginx", "size": "1 B", "cpu": 5.0},
        {"srv": "weft", "size": "8 KiB", "cpu": 3.25},
    ]
    cols, table = report.pivot(rows, "srv", "size", "cpu")
    assert cols == ["1 B", "8 KiB"]
    assert table == [["weft", "2.5", "3.2"], ["nginx", "5.0", "–"]]
    md = report.markdown_table(["server"] + cols, table)
    assert md.splitlines()[0] == "| server | 1 B | 8 KiB |"
    assert md.splitlines()[1] == "| :--- | ---: | ---: |"
    assert md.splitlines()[3] == "| nginx | 5.0 | – |"


def test_plot_writes_a_png(tmp_path):
    import pytest

    pytest.importorskip("matplotlib")
    p = tmp_path / "p.png"
    report.plot_grouped_bars(str(p), ["1 B", "8 KiB"], OrderedDict([("a", [1.0, 2.0]), ("b", [None, 3.0])]), ylabel="y", title="t", log=True)
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
