"""lard-cluster's pure parts: the plan, the request stream, the anchors'
back-end lines, weft front's flags, the targets and the summary (no servers,
no cgroups)."""

import json
import os

import pytest

from lab import core, proxylab as pl, servers
from lab.experiments import lard_cluster as lc


def test_quick_plan_is_small_and_keeps_the_targets_points():
    pn = lc.plan(True)
    assert pn.estimate_s() < 75  # with start-ups, the quick form stays under ~90 s
    at4 = {p.config for p in pn.points if p.part == "cluster" and p.backends == 4}
    assert {lc.W_WRR, lc.W_LARD, lc.W_HANDOFF, lc.H_URI, lc.H_RR, lc.N_HASH} <= at4
    assert sorted({p.backends for p in pn.points if p.part == "cluster"}) == [4]
    handoff = {(p.config, p.policy) for p in pn.points if p.part == "handoff"}
    assert ("relay", "1 per connection") in handoff and ("handoff keep", "1 per connection") in handoff
    assert ("handoff return", "keep-alive") in handoff and ("relay", "keep-alive") in handoff
    assert pn.dataset_bytes >= 3 * pn.limit_mib * 1024 * 1024


def test_full_plan_covers_one_to_six_backends_and_parts_filter():
    pn = lc.plan(False)
    assert sorted({p.backends for p in pn.points if p.part == "cluster"}) == [1, 2, 3, 4, 5, 6]
    assert {p.config for p in pn.points if p.part == "cluster"} == set(lc.CONFIGS)
    only = lc.plan(False, ["capacity"])
    assert only.points and all(p.part == "capacity" for p in only.points)
    assert only.max_backends("cluster") == 0 and only.max_backends("capacity") == 6
    assert len([p for p in pn.points if p.part == "handoff"]) == len(lc.HANDOFF_MODES) * len(lc.HANDOFF_CONNS)


def test_handoff_front_args_name_each_socket_after_its_backend():
    args = lc.front_args("lard-r", ["a:1", "b:2"], ["/s/0", "/s/1"], lc.HANDOFF_MODES["handoff return"])
    assert args == ["--policy", "lard-r", "--mode", "handoff", "--handoff-next", "return", "--backend", "a:1", "--handoff", "/s/0",
                    "--backend", "b:2", "--handoff", "/s/1"]  # fmt: skip
    assert lc.front_args("wrr", ["a:1"], ["/s/0"]) == ["--policy", "wrr", "--mode", "relay", "--backend", "a:1"]


def test_zipf_stream_is_deterministic_skewed_and_in_range():
    a = lc.zipf_stream(1000, 0.8, 20000, seed=1)
    assert a == lc.zipf_stream(1000, 0.8, 20000, seed=1)
    assert all(0 <= i < 1000 for i in a)
    counts = sorted((a.count(i) for i in set(a)), reverse=True)
    top = sum(counts[:100]) / len(a)
    assert top == pytest.approx(lc.zipf_top_share(1000, 0.8, 100), abs=0.03)
    assert top > 0.3  # the hottest 10 % of files get far more than 10 % of requests


def test_zipf_top_share_bounds():
    assert lc.zipf_top_share(10, 1.0, 10) == pytest.approx(1.0)
    assert lc.zipf_top_share(10, 0.0, 5) == pytest.approx(0.5)


def test_anchor_server_lines_render_into_the_templates():
    addrs = ["127.0.0.1:8001", "127.0.0.1:8002"]
    for config, kind in lc.ANCHOR_KIND.items():
        with open(os.path.join(servers.ANCHOR_DIR, servers.ANCHORS[kind]["template"])) as f:
            text = f.read()
        out = servers.render_template(text, {"RUN": "/r", "PORT": "9", "SERVERS": lc.server_lines(config, addrs)})
        assert "127.0.0.1:8001" in out and "127.0.0.1:8002" in out
        if config == lc.N_HASH:
            assert "hash $request_uri consistent;" in out and "server 127.0.0.1:8002;" in out
        else:
            assert "server b1 127.0.0.1:8002" in out
            # Every back-end line sits inside the backend section, after `balance`.
            assert out.index("balance") < out.index("server b0")
    with open(os.path.join(servers.ANCHOR_DIR, "haproxy_front_uri.cfg")) as f:
        uri = f.read()
    assert "balance uri" in uri and "hash-balance-factor 125" in uri and "hash-type consistent" in uri


def test_front_args_and_command():
    args = lc.front_args("lard-r", ["127.0.0.1:1", "127.0.0.1:2"])
    assert args == ["--policy", "lard-r", "--mode", "relay", "--backend", "127.0.0.1:1", "--backend", "127.0.0.1:2"]
    cmd = servers.weft_command("weft", servers.ServerSpec("f", "weft-front", {"workers": 1, "extra": args}))
    assert cmd[:4] == ["weft", "front", "--listen", "127.0.0.1:0"] and "--admin" in cmd and cmd[-1] == "127.0.0.1:2"


def test_capacity_arithmetic():
    assert lc.backends_per_core(10.0, 25.0) == pytest.approx(2.5)
    assert lc.backends_per_core(None, 25.0) is None
    assert lc.backends_at_rate(20.0, 1000) == pytest.approx(50.0)
    assert lc.backends_at_rate(0.0, 1000) is None


def med(values: dict) -> dict:
    return {(c, 4): dict(v) for c, v in values.items()}


def test_targets_met_missed_and_not_measured():
    m = med({lc.W_LARD: {"rps": 50000, "front_us": 15}, lc.W_WRR: {"rps": 20000, "front_us": 17},
             lc.H_URI: {"rps": 45000, "front_us": 30}, lc.H_RR: {"rps": 22000, "front_us": 16}})  # fmt: skip
    tg = {t.name.split(",")[0]: t for t in lc.targets(m)}
    assert tg["LARD/R vs WRR throughput"].value == pytest.approx(2.5) and tg["LARD/R vs WRR throughput"].met
    assert tg["LARD/R vs HAProxy uri + bounded load"].met is False  # 1.11× < 1.2×
    assert tg["relay front-end CPU per request vs HAProxy uri"].met  # 0.5×
    assert tg["relay front-end CPU per request vs HAProxy roundrobin"].met is False  # 1.06× > 0.9×
    handoff = [t for t in lc.targets(m) if "handoff" in t.name][0]
    assert handoff.met is None and "not measured" in handoff.describe()
    rows = lc.target_rows(lc.targets(m))
    assert rows[0][-1] == "met" and rows[1][-1] == "**missed**" and rows[-1][-1] == "not measured"
    assert lc.targets({})[0].met is None


def cluster_row(config, n, rps, **kw):
    r = {"part": "cluster", "config": config, "backends": n, "round": 1, "requests": int(rps * 2), "rps": rps, "front_us": 15.0,
         "backend_us": 20.0, "client_us": 5.0, "front_util": 0.3, "disk_kib_per_req": 1.0, "latency_ms_mean": 1.0,
         "latency_ms_p99": 3.0, "non_2xx": 0, "errors": 0}  # fmt: skip
    r.update(kw)
    return r


def test_summarize_writes_targets_tables_and_checks(tmp_path):
    pytest.importorskip("matplotlib")
    lab = core.Lab(lc.NAME, quick=True, results_root=str(tmp_path))
    try:
        rows = [cluster_row(lc.W_WRR, n, 10000 * n) for n in (1, 2, 4)] + [cluster_row(lc.W_LARD, n, 25000 * n, decision_ns=120.0) for n in (1, 2, 4)]
        rows += [cluster_row(lc.H_URI, 4, 60000, front_us=30.0), cluster_row(lc.H_RR, 4, 30000, front_us=31.0, errors=3)]
        rows += [{"part": "capacity", "config": "weft lard-r", "policy": "lard-r", "backends": n, "requests": 1000, "rps": 50000.0,
                  "front_us": 12.0, "backend_us": 6.0, "decision_ns": 150.0, "non_2xx": 0, "errors": 0} for n in (1, 2)]  # fmt: skip
        out = lc.summarize(lab, lc.plan(True), rows, {"weft LARD/R": ["weft", "front"]})
        md = open(os.path.join(lab.results_dir, "summary.md")).read()
        assert "| LARD/R vs WRR throughput, 4 back-ends |" in md and "2.50×" in md
        assert "Front-end capacity" in md and "0.5" in md  # 6 / 12 back-ends per front core
        assert "HAProxy roundrobin 4 back-end(s): 3 errors" in md
        assert out["problems"] == 1 and out["weft_problems"] == 0
        doc = json.load(open(os.path.join(lab.results_dir, "runs.json")))
        assert doc["experiment"] == lc.NAME and len(doc["runs"]) == len(rows)
        assert os.path.exists(os.path.join(lab.results_dir, "cluster_rps.png"))
    finally:
        lab.cleanup()


def test_row_problems():
    # The cluster's rows carry no body sizes: only answers, errors and replies count.
    assert pl.run_problems({"requests": 10, "non_2xx": 0, "errors": 0}) == []
    assert pl.run_problems({"requests": 0, "non_2xx": 2, "errors": 1}) == ["2 non-2xx", "1 errors", "no replies"]


def test_summary_says_what_was_skipped(tmp_path):
    pytest.importorskip("matplotlib")
    lab = core.Lab(lc.NAME, quick=True, results_root=str(tmp_path))
    try:
        rows = [{"part": "capacity", "config": "weft lard-r", "policy": "lard-r", "backends": 1, "requests": 10, "rps": 5.0,
                 "front_us": 12.0, "backend_us": 6.0, "decision_ns": 150.0, "non_2xx": 0, "errors": 0}]  # fmt: skip
        out = lc.summarize(lab, lc.plan(True), rows, {}, skipped="no memory cgroups here")
        md = open(os.path.join(lab.results_dir, "summary.md")).read()
        assert "**Not measured: no memory cgroups here.**" in md and out["skipped"]
        assert "| LARD/R vs WRR throughput, 4 back-ends |" in md and "not measured" in md
    finally:
        lab.cleanup()
