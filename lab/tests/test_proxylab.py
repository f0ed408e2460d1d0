import os

import pytest

from lab import proxylab as pl
from lab.experiments import polymix, proxy_splice, proxy_ssl


def test_sizes_names_and_parsing():
    assert pl.size_name(4096) == "4KiB"
    assert pl.size_name(1 << 20) == "1MiB"
    assert pl.size_name(100 * 1024) == "100KiB"
    assert pl.size_name(100) == "100B"
    assert pl.size_label(256 * 1024) == "256 KiB"
    assert pl.parse_size("64KiB") == 65536
    assert pl.parse_size(" 1MiB ") == 1 << 20
    assert pl.parse_size("100") == 100
    with pytest.raises(ValueError):
        pl.parse_size("1 GB")


def test_bench_url_names_the_size_or_puts_its_bytes_in_the_path():
    class Server:
        addr = "127.0.0.1:8080"

    rs = Server()
    assert pl.bench_url(rs, "", "weft", 8 * pl.KiB) == "http://127.0.0.1:8080/8KiB"
    assert pl.bench_url(rs, "o/", "weft", 1) == "http://127.0.0.1:8080/o/1B"
    paths = {"weft": "", "pool": "app/x?size={bytes}"}
    assert pl.bench_url(rs, paths, "weft", 64 * pl.KiB) == "http://127.0.0.1:8080/64KiB"
    assert pl.bench_url(rs, paths, "pool", 64 * pl.KiB) == "http://127.0.0.1:8080/app/x?size=65536"


def test_per_mib_saving_ratio_best():
    assert pl.ms_per_mib(250.0, 1 << 20) == pytest.approx(0.25)
    assert pl.ms_per_mib(25.0, 100 * 1024) == pytest.approx(0.256)  # 100 KiB is 0.0977 MiB
    assert pl.ms_per_mib(None, 1) is None
    assert pl.saving(60.0, 100.0) == pytest.approx(0.4)
    assert pl.saving(1.0, 0) is None
    assert pl.ratio(9.0, 10.0) == pytest.approx(0.9)
    assert pl.best_of({"a": 3.0, "b": None, "c": 2.0}) == ("c", 2.0)
    assert pl.best_of({"a": None}) == (None, None)


def test_targets_ratio_and_saving():
    t = pl.Target("x", weft=0.2, anchor=0.25, anchor_name="HAProxy", limit=0.9, unit="ms/MiB")
    assert t.value == pytest.approx(0.8) and t.met is True
    assert "met" in t.describe() and "0.80×" in t.describe()
    t = pl.Target("y", weft=95.0, anchor=100.0, anchor_name="Varnish", limit=0.9)
    assert t.met is False and "MISSED" in t.describe()
    s = pl.Target("z", weft=55.0, anchor=100.0, anchor_name="copy", limit=0.4, kind="saving")
    assert s.value == pytest.approx(0.45) and s.met is True
    assert pl.Target("n", weft=None, anchor=1.0, anchor_name="a", limit=1).met is None
    assert s.to_dict()["met"] is True


def test_unique_paths_and_rotation():
    p = pl.unique_paths("/c/8KiB", "r1", 3)
    assert p == ["/c/8KiB?u=r1-0", "/c/8KiB?u=r1-1", "/c/8KiB?u=r1-2"]
    assert pl.unique_paths("/x?a=1", "q", 1) == ["/x?a=1&u=q-0"]
    assert len(set(pl.unique_paths("/c/1", "r", 1000))) == 1000
    assert pl.rotate([1, 2, 3], 1) == [2, 3, 1]
    assert pl.rotate([1, 2, 3], 4) == [2, 3, 1]
    assert pl.rotate([], 2) == []


def test_weft_counters_and_body_paths():
    delta = {"requests": 10, "hits": 2, "bytes_spliced": 900, "bytes_copied": 100, "bytes_teed": 450, "sessions_splice": 8,
             "syscalls": {"splice": 20, "read": 30, "tee": 0}}  # fmt: skip
    c = pl.weft_counters(delta, 10)
    assert c["hits"] == 2 and c["sessions_splice"] == 8 and c["bytes_cache"] == 0
    assert c["syscalls_per_req"] == {"splice": 2.0, "read": 3.0}
    assert pl.body_paths(c) == "splice 90% + copy 10% (tee'd 45%)"
    assert pl.body_paths({}) == "–"
    assert pl.weft_counters({}, 5) == {}
    assert pl.body_paths({"tunnel_bytes_spliced": 5}) == "splice 100%"
    # Bodies and tunnels the sockmap program moved (issue 27).
    c = pl.weft_counters({"bytes_spliced": 100, "sockmap_body_bytes": 300, "sockmap_bodies": 1, "bytes_spliced_up": 7}, 1)
    assert c["sockmap_bodies"] == 1 and c["bytes_spliced_up"] == 7
    assert pl.body_paths(c) == "splice 25% + sockmap 75%"


def test_run_problems():
    ok = {"requests": 10, "non_2xx": 0, "errors": 0, "size_bytes": 100, "body_bytes_per_reply": 100.0}
    assert pl.run_problems(ok) == []
    bad = dict(ok, non_2xx=2, errors=1, body_bytes_per_reply=50.0)
    assert pl.run_problems(bad) == ["2 non-2xx", "1 errors", "50 body bytes per reply < 100"]
    assert pl.run_problems({"requests": 0}) == ["no replies"]


def test_median_rows():
    rows = [{"p": "a", "s": 1, "v": 1.0}, {"p": "a", "s": 1, "v": 3.0}, {"p": "a", "s": 1, "v": None}, {"p": "b", "s": 1, "v": 5.0}]
    m = pl.median_rows(rows, ["p", "s"], ["v", "w"])
    assert m[("a", 1)] == {"n": 3, "v": 2.0, "w": None}
    assert m[("b", 1)]["v"] == 5.0


def test_wrk_script_carries_the_json_hook():
    s = pl.wrk_script('wrk.path = "/x"')
    assert s.startswith('wrk.path = "/x"\n') and "WRK_JSON" in s and "done = function" in s
    assert pl.wrk_script().lstrip().startswith("done = function")


def test_quick_forms_fit_in_two_minutes():
    # Load time only; each experiment also starts its servers (a few seconds).
    assert proxy_splice.plan(True).estimate_s() < 75
    assert proxy_ssl.plan(True).estimate_s() < 75
    assert polymix.plan(True).estimate_s() < 75
    full = proxy_splice.plan(False)
    assert full.rounds == 3 and {p.section for p in full.points} == {"targets", "sizes", "rates"}


def test_proxy_splice_targets_from_medians():
    P = proxy_splice
    k, mib = 100 * 1024, 1 << 20
    med = {
        ("targets", P.WS, "nc", mib): {"proxy_us": 200.0, "proxy_ms_per_mib": 0.2},
        ("targets", P.HS, "nc", mib): {"proxy_us": 250.0, "proxy_ms_per_mib": 0.25},
        ("targets", P.WC, "nc", mib): {"proxy_us": 500.0, "proxy_ms_per_mib": 0.5},
        ("targets", P.WS, "nc", k): {"proxy_us": 20.0},
        ("targets", P.WC, "nc", k): {"proxy_us": 30.0},
        ("targets", P.HS, "nc", k): {"proxy_us": 35.0},
        ("targets", P.NP, "nc", k): {"proxy_us": 30.0},
        ("targets", P.WS, "hit", mib): {"proxy_us": 100.0},
        ("targets", P.VH, "hit", mib): {"proxy_us": 180.0},
        ("targets", P.WF, "fwd-hit", 8192): {"proxy_us": 5.0},
        ("targets", P.SF, "fwd-hit", 8192): {"proxy_us": 29.0},
    }
    tg = {t.name: t for t in P.targets(med)}
    assert tg["1 MiB no-store misses, CPU per MiB"].value == pytest.approx(0.8)
    best = tg["100 KiB no-store misses"]
    assert best.anchor == 30.0 and "nginx" in best.anchor_name and best.met is True
    assert tg["1 MiB cache hits"].met is True
    assert "100 KiB cache hits" not in tg  # nothing measured
    assert tg["8 KiB forward-proxy hits"].value == pytest.approx(5 / 29)
    assert tg["splice vs copy, 1 MiB no-store misses"].value == pytest.approx(0.6)
    assert tg["splice vs copy, 100 KiB no-store misses"].met is False


def test_point_configs_and_styles():
    P = proxy_splice
    assert P.Point("sizes", P.WS, 8192, "c", 500).config == "weft splice cacheable"
    assert P.Point("targets", P.SF, 8192, "fwd-hit").config == "Squid fwd hit"
    st = P.line_styles(["weft splice cacheable", "weft splice no-store", "HAProxy copy no-store"])
    assert st["weft splice cacheable"]["linestyle"] == "--" and "linestyle" not in st["weft splice no-store"]
    assert st["weft splice cacheable"]["color"] == st["weft splice no-store"]["color"]


def test_ssl_and_polymix_load_arguments():
    a = proxy_ssl.load_args(proxy_ssl.Point(proxy_ssl.WS, 16384, 60), 4.0, "127.0.0.1:9")
    assert a[a.index("--clients") + 1] == "60" and a[a.index("--calls") + 1] == "1"
    assert "size=16384" in a and a[-2:] == ["--proxy", "127.0.0.1:9"]
    assert "--proxy" not in proxy_ssl.load_args(proxy_ssl.Point(proxy_ssl.HS, 1024, 20), 4.0, None)
    b = polymix.load_args(polymix.Point(polymix.SF, 500), 60.0, "127.0.0.1:8", 7)
    assert b[b.index("--rate") + 1] == "500" and b[b.index("--seed") + 1] == "7" and "--http10" in b


def test_polymix_hit_figures():
    doc = {"replies": {"total": 200}, "cache": {"hits": 50, "misses": 150, "hit_response_time_ms": {"mean": 0.5, "p50": 0.2},
                                               "miss_response_time_ms": {"mean": 2500.0, "p50": 2400.0}}}  # fmt: skip
    f = polymix.hit_figures(doc)
    assert f["hit_ratio"] == 0.25 and f["hit_ms"] == 0.5 and f["miss_ms"] == 2500.0 and f["miss_p50_ms"] == 2400.0
    none = polymix.hit_figures({"replies": {"total": 0}, "cache": {"hits": 0, "misses": 0}})
    assert none["hit_ratio"] is None and none["hit_ms"] is None


def test_full_parts_fit_in_a_locked_run_and_cover_the_plan():
    for mod in (proxy_splice, proxy_ssl, polymix):
        whole = mod.plan(False)
        union = []
        for part in mod.PARTS:
            pn = mod.plan(False, [part])
            assert pn.points and pn.estimate_s() <= 600, (mod.NAME, part, pn.estimate_s())
            union += pn.points
        assert sorted(map(repr, union)) == sorted(map(repr, whole.points)), mod.NAME


def test_merge_parts_replaces_only_the_part_run():
    prev = {"quick": False, "commands": {"a": ["x"]}, "runs": [{"part": "sizes", "v": 1}, {"part": "rates", "v": 2}]}
    rows, cmds = pl.merge_parts(prev, False, ["sizes"], [{"part": "sizes", "v": 3}], {"b": ["y"]})
    assert rows == [{"part": "rates", "v": 2}, {"part": "sizes", "v": 3}] and cmds == {"a": ["x"], "b": ["y"]}
    # A whole run, or a run of the other form (quick vs full), starts afresh.
    assert pl.merge_parts(prev, False, None, [{"part": "sizes"}], {})[0] == [{"part": "sizes"}]
    assert pl.merge_parts(prev, True, ["sizes"], [{"part": "sizes"}], {})[0] == [{"part": "sizes"}]
    assert pl.merge_parts(None, False, ["sizes"], [], {}) == ([], {})


def test_run_book_keeps_rows_commands_and_progress(tmp_path):
    class Pool:
        def start(self, spec):
            return type("Running", (), {"command": ["start", spec.label]})()

    from lab import servers

    book = pl.RunBook(total=2)
    book.start(Pool(), servers.ServerSpec("weft origin", "weft-origin"))
    assert book.commands == {"weft origin": ["start", "weft origin"]}
    assert [book.add({"part": "sizes", "v": 1}), book.add({"part": "rates", "v": 2})] == ["[1/2]", "[2/2]"]
    lab = _fake_lab(tmp_path, "run-book")
    lab.only = ["rates"]
    # No earlier runs.json: this run's rows and commands alone.
    assert book.merged(lab) == (book.rows, book.commands)


def _fake_lab(tmp_path, name):
    from lab import core

    lab = core.Lab(name, True, results_root=str(tmp_path))  # the quick plans below
    lab.cleanup()  # summaries need no scratch directory
    lab.versions = {"weft": "test"}
    os.makedirs(lab.results_dir, exist_ok=True)
    return lab


def _row(proxy_us, **keys):
    r = {"requests": 1000, "duration_s": 2.0, "rps": 500.0, "proxy_us": proxy_us, "origin_us": 10.0, "client_us": 5.0,
         "proxy_cpu_s": proxy_us * 1e-3, "proxy_util": proxy_us * 5e-4, "latency_ms_mean": 1.5, "non_2xx": 0, "errors": 0,
         "round": 1}  # fmt: skip
    r.update(keys)
    if "size_bytes" in keys:
        r["body_bytes_per_reply"] = float(keys["size_bytes"])
        r["proxy_ms_per_mib"] = pl.ms_per_mib(proxy_us, keys["size_bytes"])
    return r


def test_proxy_splice_summary_from_rows(tmp_path):
    P = proxy_splice
    lab = _fake_lab(tmp_path, P.NAME)
    rows = []
    for p in P.plan(True).points:
        us = {P.WS: 100.0, P.WC: 200.0}.get(p.proxy, 150.0)
        w = {"bytes_spliced": p.size, "hits": 0, "syscalls_per_req": {"splice": 2.0}} if p.proxy.startswith("weft") else None
        r = _row(us, part=p.section, section=p.section, proxy=p.proxy, config=p.config, mode=p.mode, size=pl.size_label(p.size),
                 size_bytes=p.size, rate=p.rate)  # fmt: skip
        if w:
            r["weft"] = w
        rows.append(r)
    out = P.summarize(lab, P.plan(True), rows, {"weft splice": ["weft", "proxy"]}, {"targets nc": "wrk ..."})
    md = open(os.path.join(lab.results_dir, "summary.md")).read()
    assert out["problems"] == 0 and "## Targets (same run, proxy CPU)" in md
    assert "splice vs copy, 1 MiB no-store misses" in md and "50 % less" in md
    for png in ("sizes_cpu.png", "rates_cpu.png", "rates_latency.png"):
        assert os.path.getsize(os.path.join(lab.results_dir, png)) > 1000
    # The summary is rebuilt from runs.json alone.
    lab2 = _fake_lab(tmp_path, P.NAME)
    os.remove(os.path.join(lab.results_dir, "summary.md"))
    P.resummarize(lab2)
    assert open(os.path.join(lab.results_dir, "summary.md")).read() == md


def test_proxy_ssl_and_polymix_summaries_from_rows(tmp_path):
    lab = _fake_lab(tmp_path, proxy_ssl.NAME)
    rows = [_row(50.0 if p.proxy == proxy_ssl.WS else 80.0, part=pl.size_name(p.size), proxy=p.proxy, size=pl.size_label(p.size),
                 size_bytes=p.size, clients=p.clients, handshakes=1000) for p in proxy_ssl.plan(True).points]  # fmt: skip
    assert proxy_ssl.summarize(lab, proxy_ssl.plan(True), rows, {}, "weft load ...")["problems"] == 0
    md = open(os.path.join(lab.results_dir, "summary.md")).read()
    assert "| weft | 16 KiB | 38 % | 38 % |" in md
    assert os.path.exists(os.path.join(lab.results_dir, "util_16KiB.png"))
    lab = _fake_lab(tmp_path, polymix.NAME)
    rows = [dict(_row(90.0, part="300", proxy=p.proxy, rate=p.rate), hit_ratio=0.5, hit_ms=0.2, miss_ms=2500.0, replies_4xx=0,
                 replies_5xx=0 if p.proxy != polymix.SF else 3) for p in polymix.plan(True).points]  # fmt: skip
    out = polymix.summarize(lab, polymix.plan(True), rows, {}, "weft load ...")
    assert out["problems"] == 1 and out["weft_problems"] == 0, "Squid's 5xx are reported, not weft's"
    md = open(os.path.join(lab.results_dir, "summary.md")).read()
    assert "3 5xx" in md and "| weft splice | 300 |" in md


def test_kernel_time_is_the_median_less_the_user_time():
    rows = [
        {"size": 65536, "proxy": "weft-splice", "shares": {"user": 20.0, "copy": 2.0}},
        {"size": 65536, "proxy": "haproxy-splice", "shares": {"user": 25.0}},
        {"size": 65536, "proxy": "weft-copy", "shares": {}},  # perf recorded nothing
    ]
    med = {(65536, "weft-splice"): {"proxy_us": 10.0}, (65536, "weft-copy"): {"proxy_us": 14.0}}
    got = pl.kernel_times(rows, med, "proxy")
    assert got == {(65536, "weft-splice"): 8.0}  # HAProxy has no median here, weft-copy no shares
    # A profiled run dearer than the median (perf's work at context
    # switches): its user time as measured, so the floor stays under the truth.
    rows[0]["proxy_us"] = 20.0
    assert pl.kernel_times(rows, med, "proxy") == {(65536, "weft-splice"): 6.0}
    rows[0]["proxy_us"] = 5.0  # a cheaper profiled run changes nothing
    assert pl.kernel_times(rows, med, "proxy") == {(65536, "weft-splice"): 8.0}
