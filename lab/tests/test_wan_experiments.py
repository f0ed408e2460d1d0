"""The pure parts of the WAN experiments (wan-polymix, wan-events, wan-server)."""

from lab.experiments import wan_events, wan_polymix, wan_server


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
