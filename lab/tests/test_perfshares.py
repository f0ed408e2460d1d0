"""lab/perfshares.py's reading of perf's reports: shares are of one
command's own samples (or of all), kernel and user together; a group sums
its functions."""

from lab import perfshares

from .script_module import load_script

# scripts/booster_profile.py's groups, one function each.
PATHS = load_script("booster_profile").PATHS


OWN = """\
    60.00%  weft-worker-0    [kernel.kallsyms]
    10.00%  weft-worker-0    weft
    10.00%  weft-worker-0    libc.so.6
    15.00%  nginx            [kernel.kallsyms]
     5.00%  ksoftirqd/1      [kernel.kallsyms]
"""

KIDS = """\
    40.00%     0.10%  weft-worker-0  [k] tcp_write_xmit
    20.00%     0.00%  weft-worker-0  [k] net_rps_send_ipi
     8.00%     0.00%  weft-worker-0  [k] ksys_read
    12.00%     0.00%  nginx          [k] tcp_write_xmit
     2.00%     0.00%  weft-worker-0  [.] some_user_function
"""


def test_shares_are_of_the_commands_own_samples():
    got = perfshares.parse_shares(OWN, KIDS, PATHS, "weft-worker-0")
    assert round(got["user"], 6) == 25.0  # 20 of its 80
    assert round(got["xmit"], 6) == 50.0
    assert round(got["ipi-send"], 6) == 25.0
    assert round(got["read"], 6) == 10.0
    assert "epoll" not in got


def test_another_commands_lines_do_not_count():
    got = perfshares.parse_shares(OWN, KIDS, PATHS, "nginx")
    assert got["user"] == 0.0
    assert round(got["xmit"], 6) == 80.0  # 12 of its 15
    assert "ipi-send" not in got


def test_a_command_without_samples_has_no_shares():
    got = perfshares.parse_shares(OWN, KIDS, PATHS, "varnishd")
    assert got == {"user": 0.0}


def test_every_command_when_none_is_named():
    got = perfshares.parse_shares(OWN, KIDS, PATHS)
    assert round(got["user"], 6) == 20.0  # 20 of all 100
    assert round(got["xmit"], 6) == 52.0  # weft's 40 and nginx's 12


def test_a_group_sums_its_functions():
    kids = KIDS + "     6.00%     0.00%  weft-worker-0  [k] _copy_to_iter\n     2.00%     0.00%  weft-worker-0  [k] _copy_from_iter\n"
    got = perfshares.parse_shares(OWN, kids, [("copy", ["_copy_to_iter", "_copy_from_iter"]), ("read", ["ksys_read"])], "weft-worker-0")
    assert round(got["copy"], 6) == 10.0  # 8 of its 80
    assert round(got["read"], 6) == 10.0
