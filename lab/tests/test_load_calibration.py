from lab.experiments import load_calibration as lc
from lab import drivers

HTTPERF = """httperf --client=0/1 --server=127.0.0.1 --port=80 --uri=/one.bin --rate=1000 --send-buffer=4096 --recv-buffer=16384 --num-conns=5000 --num-calls=1
Maximum connect burst length: 1

Total: connections 5000 requests 5000 replies 4990 test-duration 4.999 s

Reply rate [replies/s]: min 998.0 avg 999.6 max 1000.2 stddev 0.9 (1 samples)
Errors: total 10 client-timo 10 socket-timo 0 connrefused 0 connreset 0
Errors: fd-unavail 0 addrunavail 0 ftab-full 0 other 0
"""

WEFT = {
    "requests": 1000, "duration_s": 2.0,
    "replies": {"total": 998, "1xx": 0, "2xx": 990, "3xx": 0, "4xx": 8, "5xx": 0},
    "reply_rate": {"min": 498.0, "avg": 499.0, "max": 500.0, "stddev": 1.0, "overall": 499.0, "samples": [498.0, 500.0]},
    "errors": {"refused": 0, "reset": 1, "timeout": 1, "fd_unavailable": 0, "addr_unavailable": 0,
               "bad_response": 0, "verify": 0, "other": 0},
    "error_details": {"total": 2, "other_errno": None, "fd_limit": None, "local_port_range": None},
    "response_time_ms": {"mean": 0.1, "p50": 0.1, "p90": 0.2, "p99": 0.3, "p999": 0.4, "max": 1.0},
    "bytes": {"sent": 1, "received": 2},
}


def test_parse_httperf():
    r = lc.parse_httperf(HTTPERF)
    assert r["replies"] == 4990
    assert abs(r["req_rate"] - 5000 / 4.999) < 1e-6
    assert r["errors"] == 10


def test_parse_weft_counts_errors_and_non_2xx():
    r = lc.parse_weft(WEFT)
    assert r["rate"] == 499.0
    assert r["req_rate"] == 500.0
    assert r["errors"] == 2 + 8


def test_lab_driver_reads_the_weft_load_contract():
    r = drivers.parse_weft_load(WEFT)
    assert r.requests == 998
    assert r.non_2xx == 8
    assert r.error_total == 2
    assert r.latency_ms["p99"] == 0.3


def test_wrk_summary():
    out = "  1000 requests in 1.00s, 1.00MB read\n  Non-2xx or 3xx responses: 3\nRequests/sec:   1000.00\n"
    assert lc.parse_wrk(out) == {"rate": 1000.0, "replies": 1000, "errors": 3}


def test_spread_is_the_largest_distance_from_the_median():
    assert abs(lc.spread([100.0, 103.0, 98.0]) - 0.03) < 1e-9
    assert lc.spread([100.0]) != lc.spread([100.0])  # nan: nothing to compare
    assert lc.spread([100.0, float("nan"), 100.0]) == 0.0


def test_sweep_rows_are_well_formed():
    keys = [k for k, *_ in lc.SWEEP]
    assert keys[-2:] == ["fin", "ports"], "FIN rows last, ports after fin: their TIME_WAIT entries would slow the others"
    assert set(lc.QUICK_SWEEP) == set(keys)


def _sweep_row(key, r, achieved, nginx_s, wall=4.0):
    run = {"req_rate": achieved, "cpu": 0.4 * wall, "scpu": nginx_s, "wall": wall, "replies": int(achieved * wall),
           "load": 1.0, "samples": [achieved]}  # fmt: skip
    return (key, "label", r, [run], [], False)


def test_sweep_verdict_ignores_saturated_server_and_other_variants():
    sweep = [
        _sweep_row("reset", 10000, 9990.0, 0.4),   # held (0.1 %)
        _sweep_row("reset", 20000, 19500.0, 0.8),  # 2.5 % short, nginx below saturation: missed
        _sweep_row("reset", 50000, 30000.0, 3.9),  # nginx saturated (0.975 cores): not judged
        _sweep_row("reset", 60000, 50000.0, 3.4),  # weft 0.4 + nginx 0.85 cores: judged
        _sweep_row("fin", 20000, 3000.0, 0.4),     # not the main variant
    ]
    v = lc.sweep_verdict(sweep)
    assert v["rates"] == [10000, 20000, 60000]
    assert [m[0] for m in v["missed"]] == [20000, 60000]
    assert abs(v["dev"] - 1 / 6) < 1e-9
    assert [x[0] for x in v["saturated"]] == [50000]
    text = "\n".join(lc.verdict(0.03, [("saturation", 0.8)], v))
    assert "within 5 % at equal offered load: **met**" in text
    assert "at or below wrk's: **met**" in text
    assert "**not met** (largest deviation 16.67 %" in text
    assert "Saturated (not judged): 50000/s" in text


def test_verdict_flags_cpu_above_wrk():
    v = {"dev": 0.001, "missed": [], "rates": [2000], "saturated": []}
    text = "\n".join(lc.verdict(0.06, [("closed", 0.9), ("close", 1.1)], v))
    assert "equal offered load: **not met**" in text
    assert "above at close (1.10)" in text
    assert "**met** (largest deviation 0.10 %" in text
    assert "none up to the highest rate" in text
