"""scripts/booster_profile.py's reading of perf's reports: shares are of one
command's own samples, kernel and user together."""

from .script_module import load_script


def load():
    return load_script("booster_profile")


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
    got = load().parse_shares(OWN, KIDS, "weft-worker-0")
    assert round(got["user"], 6) == 25.0  # 20 of its 80
    assert round(got["xmit"], 6) == 50.0
    assert round(got["ipi-send"], 6) == 25.0
    assert round(got["read"], 6) == 10.0
    assert "epoll" not in got


def test_another_commands_lines_do_not_count():
    got = load().parse_shares(OWN, KIDS, "nginx")
    assert got["user"] == 0.0
    assert round(got["xmit"], 6) == 80.0  # 12 of its 15
    assert "ipi-send" not in got


def test_a_command_without_samples_has_no_shares():
    got = load().parse_shares(OWN, KIDS, "varnishd")
    assert got == {"user": 0.0}
