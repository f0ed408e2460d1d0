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
    assert keys[-1] == "fin", "FIN rows last: their TIME_WAIT entries would slow the others"
    assert set(lc.QUICK_SWEEP) == set(keys)
