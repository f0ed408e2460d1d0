import pytest

from lab import drivers

WRK_TEXT = """Running 2s test @ http://127.0.0.1:40000/file-1.bin
  1 threads and 50 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   283.51us  101.23us   4.21ms   91.00%
    Req/Sec   176.05k     6.11k  183.25k    80.00%
  350342 requests in 2.00s, 85.53MB read
  Socket errors: connect 0, read 3, write 0, timeout 1
  Non-2xx or 3xx responses: 7
Requests/sec: 175171.00
Transfer/sec:     42.76MB
"""


def test_parse_wrk_summary_text():
    r = drivers.parse_wrk(WRK_TEXT)
    assert r.requests == 350342
    assert r.duration_s == pytest.approx(2.0)
    assert r.bytes_received == int(85.53 * 1024 * 1024)
    assert r.non_2xx == 7
    assert r.errors == {"connect": 0, "read": 3, "write": 0, "timeout": 1}
    assert r.error_total == 4
    assert r.latency_ms["mean"] == pytest.approx(0.28351)
    assert r.latency_ms["max"] == pytest.approx(4.21)
    assert r.rps == pytest.approx(175171, rel=1e-3)


def test_parse_wrk_prefers_the_json_line():
    out = WRK_TEXT + (
        'WRK_JSON {"requests":350342,"duration_us":2000500,"bytes":89683552,'
        '"errors":{"connect":0,"read":3,"write":0,"status":7,"timeout":1},'
        '"latency_us":{"mean":283.51,"stdev":101.23,"max":4210,"p50":270,"p90":350,"p99":610}}\n'
    )
    r = drivers.parse_wrk(out, ["wrk", "-t1"])
    assert r.duration_s == pytest.approx(2.0005)
    assert r.bytes_received == 89683552
    assert r.non_2xx == 7
    assert r.errors == {"connect": 0, "read": 3, "write": 0, "timeout": 1}
    assert r.latency_ms["p99"] == pytest.approx(0.61)
    assert r.command == ["wrk", "-t1"]


def test_parse_wrk_rejects_garbage():
    with pytest.raises(drivers.DriverError):
        drivers.parse_wrk("unable to connect to 127.0.0.1:1 Connection refused\n")


def test_wrk_command_line():
    cmd = drivers.WrkDriver().command("http://h/x", connections=50, duration_s=10, threads=1)
    assert cmd == ["wrk", "-t1", "-c50", "-d10s", "http://h/x"]


def test_parse_weft_load_contract():
    doc = {
        "requests": 1000,
        "replies": {"total": 990, "1xx": 0, "2xx": 980, "3xx": 0, "4xx": 10, "5xx": 0},
        "reply_rate": {"min": 90, "avg": 99, "max": 110, "stddev": 3, "samples": [99] * 10},
        "request_rate": {"min": 90, "avg": 100, "max": 110, "stddev": 3, "samples": [100] * 10},
        "conn_rate": 5.0,
        "connections": 50,
        "response_time_ms": {"mean": 1.5, "p50": 1.2, "p90": 2.0, "p99": 4.0, "p999": 9.0, "max": 12.0},
        "connect_time_ms": {"mean": 0.1, "p50": 0.1, "p99": 0.3},
        "bytes": {"sent": 50000, "received": 300000},
        "errors": {"refused": 0, "reset": 1, "timeout": 2, "fd_unavailable": 0, "addr_unavailable": 0,
                   "bad_response": 0, "verify": 0, "other": 0},
        "duration_s": 10.0,
        "cpu": {"user_s": 1.0, "sys_s": 2.0},
        "config": {"clients": 50},
    }
    r = drivers.parse_weft_load(doc)
    assert r.tool == "weft-load"
    assert r.requests == 990
    assert r.rps == pytest.approx(99.0)
    assert r.non_2xx == 10
    assert r.error_total == 3
    assert r.bytes_received == 300000
    assert r.latency_ms == {"mean": 1.5, "p50": 1.2, "p90": 2.0, "p99": 4.0, "max": 12.0}


def test_weft_load_command_line_follows_the_contract():
    cmd = drivers.WeftLoadDriver("/x/weft").command("http://h/f", connections=50, duration_s=2, json_path="/t/o.json")
    assert cmd[:3] == ["/x/weft", "load", "http://h/f"]
    for flag, value in [("--clients", "50"), ("--duration", "2s"), ("--json", "/t/o.json")]:
        assert cmd[cmd.index(flag) + 1] == value


def test_make_driver():
    assert isinstance(drivers.make_driver("wrk", "w"), drivers.WrkDriver)
    assert isinstance(drivers.make_driver("weft-load", "w"), drivers.WeftLoadDriver)
    with pytest.raises(ValueError):
        drivers.make_driver("ab", "w")
