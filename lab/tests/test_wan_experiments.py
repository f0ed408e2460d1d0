"""The pure parts of the WAN experiments (wan-proxy, wan-polymix, wan-events, wan-server)."""

import os

import pytest

from lab import netlab, report
from lab.experiments import wan_events, wan_polymix, wan_proxy, wan_server


def by_ends(links):
    return {frozenset((link["a"], link["b"])): link for link in links}


@pytest.mark.parametrize("setting,ps_loss,cp_ms,no_proxy_loss", [("corporate", 0.01, 10, "1.1%"), ("modem", 0.01, 50, "1.1%"), ("modem", 0.02, 50, "2.1%")])
def test_wan_proxy_links_are_table_ii(setting, ps_loss, cp_ms, no_proxy_loss):
    links = by_ends(wan_proxy.links(setting, ps_loss))
    cp, ps, cs = links[frozenset(("client", "proxy"))], links[frozenset(("proxy", "server"))], links[frozenset(("client", "server"))]
    # Client-proxy: 0.1 % first loss always; proxy-server 1 or 2 %; 40 % after a loss on every link.
    assert (cp["delay"], cp["loss"]) == (f"{cp_ms}ms", "0.1%")
    assert (ps["delay"], ps["loss"]) == ("90ms", f"{ps_loss * 100:g}%")
    # No proxy: the delays and first-loss rates summed.
    assert (cs["delay"], cs["loss"]) == (f"{cp_ms + 90}ms", no_proxy_loss)
    assert all(link["loss_after_loss"] == "40%" for link in (cp, ps, cs))
    # Modems: 56 kbit/s down, 28 kbit/s up per connection on the client's links only.
    for link in (cp, cs):
        if setting == "modem":
            assert link["rate_per"] == "flow" and link["up"] == {"rate": "28kbit"} and link["down"] == {"rate": "56kbit"}
        else:
            assert "rate_per" not in link and "up" not in link
    assert "rate_per" not in ps and "up" not in ps and "down" not in ps


@pytest.mark.parametrize("sack", [False, True])
def test_wan_proxy_sack_off_on_clients_toggled_on_server_and_proxy(sack):
    hosts = {h["name"]: h for h in wan_proxy.hosts(sack)}
    assert hosts["client"]["sack"] is False
    assert hosts["proxy"]["sack"] is sack and hosts["server"]["sack"] is sack
    assert all(h["congestion"] == "reno" for h in hosts.values())
    toml = netlab.topology(wan_proxy.hosts(sack), wan_proxy.links("modem", 0.02))
    assert 'name = "client"\nsack = false' in toml and f'name = "server"\nsack = {"true" if sack else "false"}' in toml
    assert 'up = { rate = "28kbit" }' in toml


def test_wan_proxy_plan_sweeps_sizes_with_both_sack_sets():
    full = wan_proxy.plan(False)
    assert [(s, loss) for s, loss, _, _ in full[::2]] == list(wan_proxy.TABLE_II)
    assert {sack for _, _, sack, _ in full} == {False, True}
    assert all(sizes == wan_proxy.SIZES_KIB and len(sizes) == 13 for *_, sizes in full)
    assert len(wan_proxy.PARTS) == 6 and len(wan_proxy.plan(False, ["modem-2-sack-on"])) == 1
    quick = wan_proxy.plan(True)
    assert [(s, loss, sack) for s, loss, sack, _ in quick] == [("corporate", 0.01, False), ("modem", 0.01, False)]
    assert wan_proxy.estimate_s(True) <= 50
    assert wan_proxy.window_s("modem", 128, False) == 128 and wan_proxy.window_s("modem", 1, False) == 10


def test_wan_proxy_server_figures_and_improvement():
    d = netlab.derived({"TcpOutSegs": 150, "TcpRetransSegs": 5, "TcpExtTCPOrigDataSent": 100, "TcpExtTCPPureAcks": 30, "TcpExtTCPHPAcks": 20, "TcpExtTCPBacklogCoalesce": 2})
    assert d == {"data_segs_out": 105, "acks_out": 50, "acks_in": 52}
    f = wan_proxy.server_figures({**d, "TcpExtTCPTimeouts": 2, "TcpRetransSegs": 5})
    assert f["server_data_per_ack"] == pytest.approx(105 / 52) and f["server_rtos_per_1000"] == pytest.approx(2000 / 105)
    assert wan_proxy.server_figures({"data_segs_out": 0, "acks_in": 0, "TcpExtTCPTimeouts": 0, "TcpRetransSegs": 0})["server_data_per_ack"] is None
    assert wan_proxy.improvement(200.0, 150.0) == pytest.approx(25.0)
    assert wan_proxy.improvement(None, 1.0) is None
    med = [{"setting": "modem", "ps_loss_pct": 1.0, "sack": False, "size_kib": 4, "path": p, "rt_mean_ms": m, "rt_cv": cv}
           for p, m, cv in (("no proxy", 1000.0, 0.5), ("proxy splice", 800.0, 0.25), ("proxy copy", 1000.0, 0.5))]  # fmt: skip
    (c,) = wan_proxy.comparisons(med)
    assert c["noproxy_less_splice_ms"] == 200.0 and c["latency_decrease_pct"] == pytest.approx(20.0) and c["cv_improvement_pct"] == pytest.approx(50.0)
    assert c["splice_vs_copy_latency_pct"] == pytest.approx(20.0)


def test_wan_proxy_points_are_complete_with_every_path_and_run():
    row = lambda part, size, path, rep: {"part": part, "size_kib": size, "path": path, "rep": rep}  # noqa: E731
    rows = [row("modem-1-sack-off", 1, p, rep) for p in wan_proxy.PATHS for rep in (1, 2)]
    rows += [row("modem-1-sack-off", 5, p, 1) for p in wan_proxy.PATHS]  # one run of two
    rows += [row("modem-1-sack-on", 1, p, rep) for p in wan_proxy.PATHS[:2] for rep in (1, 2)]  # a path short
    assert wan_proxy.complete_points(rows, 2) == {("modem-1-sack-off", 1)}
    assert wan_proxy.complete_points(rows, 1) == {("modem-1-sack-off", 1), ("modem-1-sack-off", 5)}


def test_wan_proxy_checkpoint_keeps_other_parts_written_meanwhile(tmp_path):
    from lab import core

    lab = core.Lab("wan-proxy", False, results_root=str(tmp_path))
    os.makedirs(lab.results_dir)
    lab.only = ["modem-1-sack-off"]
    other = {"part": "modem-1-sack-on", "size_kib": 1}
    report.write_json(os.path.join(lab.results_dir, "runs.json"), {"quick": False, "runs": [other, {"part": "modem-1-sack-off", "size_kib": 9}]})
    mine = [{"part": "modem-1-sack-off", "size_kib": 1}]
    # The part's earlier rows are replaced; another part's are kept as the file has them now.
    assert wan_proxy.checkpoint(lab, ["modem-1-sack-off"], mine) == [other] + mine
    # A whole run (no --only) replaces everything.
    lab.only = None
    assert wan_proxy.checkpoint(lab, list(wan_proxy.PARTS), mine) == mine
    lab.cleanup()


def test_polymix4_wan_is_server_side_only():
    links = wan_polymix.links("PolyMix-4 WAN")
    cp = next(link for link in links if {link["a"], link["b"]} == {"client", "proxy"})
    ps = next(link for link in links if {link["a"], link["b"]} == {"proxy", "server"})
    assert "delay" not in cp and "loss" not in cp
    assert ps["delay"] == "40ms" and ps["loss"] == "0.05%"
    assert all("delay" not in link for link in wan_polymix.links("no WAN"))


def test_event_calls_count_every_mechanism():
    stats = {"syscalls": {"epoll_wait": 3, "epoll_ctl": 2, "read": 9, "io_uring_enter": 1, "select": 4, "poll": 5}}
    assert wan_events.event_calls(stats) == 15
    assert wan_events.event_calls({}) == 0


def test_wan_server_plan_scales_clients_with_delay():
    full = wan_server.plan(False)
    fig212 = [p for p in full if p[0] == 120]
    assert fig212[0][1:3] == (0, 64) and fig212[-1][1:3] == (150, 900)
    assert all(a[2] <= b[2] for a, b in zip(fig212, fig212[1:]))
    assert {p[2] for p in full if p[0] == 90} == {64, 256, 512, 900}
    assert len(wan_server.plan(True)) == 2


def test_wan_server_object_cache_row():
    assert "weft object cache" in wan_server.SERVERS and "nginx" in wan_server.SERVERS
    assert wan_server.weft_args("weft object cache", 64 << 20) == ["--object-cache", str(32 << 20)]
    assert wan_server.weft_args("weft copy", 64 << 20) == ["--send", "copy"]


def test_wan_events_counts_select_refusals_apart_from_failures():
    ok = {"requests": 1000, "replies_2xx": 990, "refused_fd_limit": 0, "errors": {"timeout": 10}}
    assert wan_events.shortfall(ok) == 0
    # 300 missing, all refused at FD_SETSIZE: select's documented limit, not a fault.
    at_limit = {"requests": 1000, "replies_2xx": 700, "refused_fd_limit": 300, "errors": {"reset": 300}}
    assert wan_events.shortfall(at_limit) == 0
    assert "server refused 300 at its descriptor limit" in wan_events.missing_note(at_limit)
    # 300 missing, 100 refused: 200 unexplained, 150 past the 5 % allowance.
    failing = {"requests": 1000, "replies_2xx": 700, "refused_fd_limit": 100, "errors": {"reset": 100, "timeout": 200}}
    assert wan_events.shortfall(failing) == 150
    assert wan_events.missing_note(failing) == "  [300 without a 2xx: reset 100, timeout 200; server refused 100 at its descriptor limit]"
    assert wan_events.missing_note({"requests": 5, "replies_2xx": 5}) == ""


def test_wan_events_error_kinds_keep_only_nonzero_counts():
    assert wan_events.error_kinds({"errors": {"reset": 0, "timeout": 3}}) == {"timeout": 3}
    assert wan_events.error_kinds({}) == {}
