import pytest

from lab import loadgen


def doc(**over):
    d = {
        "requests": 3000, "sessions": 3000, "duration_s": 3.4,
        "replies": {"total": 2990, "2xx": 2990, "1xx": 0, "3xx": 0, "4xx": 0, "5xx": 0},
        "reply_rate": {"samples": [900.0, 1000.0, 1000.0, 90.0]},
        "request_rate": {"samples": [1000.0, 1000.0, 1000.0]},
        "errors": {"timeout": 10, "fd_unavailable": 0, "addr_unavailable": 0, "reset": 0},
        "response_time_ms": {"mean": 0.5, "p50": 0.4, "p99": 2.0},
        "cpu": {"user_s": 0.2, "sys_s": 0.6},
        "idle": {"held": 0, "reopened": 0},
        "max_open_connections": 40,
    }  # fmt: skip
    d.update(over)
    return d


def test_steady_skips_the_first_second_and_the_drain():
    assert loadgen.steady([900, 1000, 1100, 50, 10], 3.0) == 1050
    assert loadgen.steady([900, 1000, 1100, 50], 4.0) == pytest.approx((1000 + 1100 + 50) / 3)
    # Short runs: every sample of the arrival period.
    assert loadgen.steady([800, 1000, 5], 2.0) == 900
    assert loadgen.steady([], 3.0) is None


def test_point_reads_offered_rate_errors_and_cpu():
    r = loadgen.point(doc(), target=1000, duration_s=3.0)
    assert r["offered"] == 1000
    assert r["reply_rate"] == 1000 and r["request_rate"] == 1000
    assert r["errors"] == 10 and r["timeouts"] == 10 and r["client_errors"] == 0
    assert r["client_cpu_s"] == pytest.approx(0.8)
    assert r["client_limited"] == ""
    # SPECweb99-style sessions carry several requests each.
    s = loadgen.point(doc(sessions=411), target=3000, duration_s=3.0, calls_per_session=7.3)
    assert s["offered"] == pytest.approx(411 * 7.3 / 3)


def test_client_limited_names_each_reason():
    r = loadgen.point(doc(errors={"fd_unavailable": 5, "timeout": 1}, sessions=2000, cpu={"user_s": 1.0, "sys_s": 2.5}),
                      target=1000, duration_s=3.0)  # fmt: skip
    assert "5 client-side errors" in r["client_limited"]
    assert "offered 667/s of 1000/s" in r["client_limited"]
    assert "client CPU 3.5s" in r["client_limited"]
    # Two processes may use two cores.
    r2 = loadgen.point(doc(cpu={"user_s": 1.0, "sys_s": 2.5}), target=1000, duration_s=3.0, processes=2)
    assert r2["client_limited"] == ""


def test_sweep_rates_and_peak():
    assert loadgen.sweep_rates(40000, [0.3, 0.6, 1.0, 1.25]) == [12000, 24000, 40000, 50000]
    assert loadgen.sweep_rates(1000, [0.01, 0.02], step=500) == [500]
    assert loadgen.peak_of([{"reply_rate": 3}, {"reply_rate": None}, {"reply_rate": 7}]) == 7
    assert loadgen.peak_of([]) is None


PROC_NET_TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0200007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
   2: 0200007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:1F90 0300007F:9C41 06 00000000:00000000 03:00000123 00000000     0        0 0 3 0000000000000000
   4: 0100007F:1F90 0300007F:9C42 01 00000000:00000000 00:00000000 00000000     0        0 4 1 0000000000000000 20 4 30 10 -1
"""


def test_count_established_counts_the_servers_side_only():
    # Port 8080 = 0x1F90: the listener (0A), a TIME_WAIT (06) and the client's side do not count.
    assert loadgen.count_established(PROC_NET_TCP, 8080) == 2
    assert loadgen.count_established(PROC_NET_TCP, 40000) == 1


def test_merge_adds_counts_and_samples_and_weights_the_mean():
    a = doc()
    b = doc(replies={"total": 1010, "2xx": 1000, "1xx": 0, "3xx": 0, "4xx": 10, "5xx": 0},
            reply_rate={"samples": [100.0, 200.0]}, response_time_ms={"mean": 2.5, "p50": 1.0, "p99": 9.0},
            duration_s=3.9, idle={"held": 5, "reopened": 1})  # fmt: skip
    m = loadgen.merge([a, b])
    assert m["replies"]["total"] == 4000 and m["replies"]["4xx"] == 10
    assert m["reply_rate"]["samples"] == [1000.0, 1200.0, 1000.0, 90.0]
    assert m["response_time_ms"]["mean"] == pytest.approx((0.5 * 2990 + 2.5 * 1010) / 4000)
    assert m["response_time_ms"]["p99"] == 9.0
    assert m["duration_s"] == 3.9
    assert m["cpu"]["sys_s"] == pytest.approx(1.2)
    assert m["idle"] == {"held": 5, "reopened": 1}
    assert m["errors"]["timeout"] == 20
    assert loadgen.merge([a]) is a


def test_split_args_shares_rate_and_clients_and_seeds():
    args = ["--rate", "30000", "--clients", "5", "--duration", "3s"]
    assert loadgen.split_args(args, 2, 0) == ["--rate", "15000", "--clients", "3", "--duration", "3s", "--seed", "1"]
    assert loadgen.split_args(args, 2, 1) == ["--rate", "15000", "--clients", "2", "--duration", "3s", "--seed", "2"]
    assert loadgen.split_args(["--idle", "10"], 1, 0) == ["--idle", "10", "--seed", "1"]


def test_shown_hides_paths_and_urls():
    cmd = ["/x/target/release/weft", "load", "http://127.0.0.1:4/one.bin", "--rate", "5", "--quiet", "--json", "/tmp/a.json"]
    assert loadgen.shown(cmd) == ["weft", "load", "URL", "--rate", "5"]
