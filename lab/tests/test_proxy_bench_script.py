"""scripts/proxy_bench.py --perf: a proxy's kernel time is its median times
its share of samples outside user space."""

from .script_module import load_script


def test_kernel_time_is_the_median_less_the_user_share():
    bench = load_script("proxy_bench")
    rows = [
        {"size": 65536, "proxy": "weft-splice", "shares": {"user": 20.0, "copy": 2.0}},
        {"size": 65536, "proxy": "haproxy-splice", "shares": {"user": 25.0}},
        {"size": 65536, "proxy": "weft-copy", "shares": {}},  # perf recorded nothing
    ]
    med = {(65536, "weft-splice"): {"proxy_us": 10.0}, (65536, "weft-copy"): {"proxy_us": 14.0}}
    got = bench.kernel_times(rows, med)
    assert got == {(65536, "weft-splice"): 8.0}  # HAProxy has no median here, weft-copy no shares
