import os

import pytest

from lab import env, report, servers
from lab.experiments import connection_scaling as cs
from lab.experiments import epoll_study as es


def rendered(kind):
    a = servers.ANCHORS[kind]
    with open(os.path.join(servers.ANCHOR_DIR, a["template"])) as f:
        return servers.render_template(f.read(), {"WWW": "/w", "RUN": "/r", "CONF": "/c", "PORT": "8"})


def test_nginx_variants_change_the_event_method_and_keep_idle_connections():
    text = rendered("nginx")
    for use in ("epoll", "poll", "select"):
        out = servers.edit_config(text, es.nginx_edits(use))
        assert f"use {use};" in out
        assert "client_header_timeout 600s;" in out
        assert ("worker_connections 1024;" in out) == (use == "select")
    assert "server.max-read-idle = 600" in servers.edit_config(rendered("lighttpd"), es.LIGHTTPD_EDITS)


def test_edit_config_fails_loudly_when_the_template_changed():
    with pytest.raises(ValueError, match="use kqueue"):
        servers.edit_config("events { use epoll; }", [("use kqueue;", "use poll;")])


def test_anchor_specs_use_the_built_nginx_for_select_and_poll():
    specs = {s.label: s for s in es.anchors("/cache/nginx", with_built_epoll=True)}
    assert "binary" not in specs["nginx"].options
    assert specs["nginx poll"].options["binary"] == "/cache/nginx"
    assert specs["nginx epoll (built)"].options["binary"] == "/cache/nginx"
    assert list(specs)[-2:] == ["h2o", "lighttpd"]
    assert [s.label for s in es.anchors(None)] == ["nginx", "h2o", "lighttpd"]


def test_weft_specs_keep_idle_connections_and_set_the_accept_limit():
    s = es.weft("tracked", "10")
    assert s.label == "weft tracked accept 10"
    assert s.options["event"] == "tracked"
    assert s.options["extra"] == ["--idle-timeout", "600s", "--accept-limit", "10"]


def test_load_args_one_byte_and_specweb():
    a, calls = es.load_args("one-byte", 20000, 3.0)
    assert calls == 1.0
    assert a[:2] == ["--rate", "20000"] and "--http10" in a and "--local-addrs" in a
    b, calls = es.load_args("specweb99", 7300, 3.0)
    assert calls == pytest.approx(7.3)
    assert b[:2] == ["--rate", "1000.0"] and "specweb99" in b


def test_plan_quick_is_small():
    q, f = es.Plan(True), es.Plan(False)
    assert q.reps == 1 and f.reps == 3
    assert len(q.sweep_backends) < len(f.sweep_backends) == 8
    assert f.idle == 10000


def rows():
    out = []
    for rep in (1, 2, 3):
        for server, base, idle in (("weft epoll", 40000, 39000), ("weft poll", 38000, 9000), ("h2o", 30000, 29500)):
            out.append({"phase": "saturation", "server": server, "idle": 0, "reply_rate": base + rep, "server_cpu_us_per_reply": 10.0, "rep": rep})
            out.append({"phase": "saturation", "server": server, "idle": 10000, "reply_rate": idle + rep, "server_cpu_us_per_reply": 11.0,
                        "rep": rep})
        for server, cpu, ev in (("weft epoll", 3.0, 1.4), ("weft uring", 2.5 + rep, 0.7), ("nginx", 5.0, None), ("h2o", 4.0, None)):
            sc = {"epoll_wait": ev} if ev else {}
            out.append({"phase": "table1", "server": server, "reply_rate": 20000, "server_cpu_us_per_reply": cpu, "target": 20000, "timeouts": 0,
                        "event_syscalls_per_reply": ev, "errors": 0, **({"syscalls_per_reply": sc} if ev else {})})
            out.append({"phase": "keepalive", "server": server, "replies": 100000, "run_s": 1.0, "server_cpu_us_per_reply": cpu,
                        "event_syscalls_per_reply": ev})
    return out


def test_saturation_table_medians_and_drop():
    t = {r["server"]: r for r in es.saturation_table(rows())}
    assert t["weft epoll"]["no_idle"] == 40002 and t["weft epoll"]["idle"] == 39002
    assert t["weft epoll"]["drop"] == pytest.approx(1 - 39002 / 40002)
    assert t["weft poll"]["drop"] > 0.7
    assert t["h2o"]["pairs"] == pytest.approx([29501 / 30001, 29502 / 30002, 29503 / 30003])


def test_table1_and_keepalive_best_ratio():
    t = {r["server"]: r for r in es.table1(rows())}
    assert t["weft uring"]["cpu"] == 4.5 and t["weft uring"]["event"] == 0.7
    assert t["weft uring"]["kept_up"] == "3/3"
    # A repetition where the server fell behind is left out of the medians.
    rs = rows()
    rs[[i for i, r in enumerate(rs) if r["phase"] == "table1" and r["server"] == "weft uring"][0]].update(reply_rate=9000, timeouts=5)
    t = {r["server"]: r for r in es.table1(rs)}
    assert t["weft uring"]["kept_up"] == "2/3" and t["weft uring"]["cpu"] == 5.0
    assert t["weft epoll"]["epoll_wait"] == 1.4 and t["nginx"]["epoll_wait"] is None
    ka = es.keepalive(rows())
    best = es.best_ratio(ka)
    assert best[0] == "weft epoll" and best[2] == "h2o"
    assert best[4] == pytest.approx(3.0 / 4.0)
    assert es.best_ratio([r for r in ka if r["server"].startswith("weft")]) is None


def test_connection_scaling_think_time_gives_the_connection_count():
    # Little's law: sessions/s × lifetime = connections.
    for conns in (250, 10000):
        t = cs.think_s(conns, 10000, 5)
        assert (10000 / 5) * (5 - 1) * t == pytest.approx(conns)
        assert cs.ramp_s(conns, 10000, 5) == pytest.approx(conns * 5 / 10000)
    a = cs.load_args(2500, 10000, 5, 8, 40)
    assert a[a.index("--rate") + 1] == "2000" and a[a.index("--calls") + 1] == "5"
    assert a[a.index("--think") + 1] == "exp(312ms)"


def test_connection_scaling_window_rate():
    samples = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]
    assert cs.window_rate(samples, 1.5, 3.0) == 35.0  # seconds 2 and 3
    assert cs.window_rate(samples, 0.2, 1.0) is None


def test_nginx_version_and_deb_src_lines():
    assert env.nginx_upstream_version("nginx version: nginx/1.22.1") == "1.22.1"
    assert env.nginx_upstream_version("garbage") is None
    deb822 = """Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://example/ignored
Suites: x
"""
    assert env.deb_src_lines(deb822) == [
        "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main",
        "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-updates main",
    ]


def test_line_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    p = tmp_path / "lines.png"
    panels = [("a", {"weft epoll": [(1, 1), (2, 2)], "nginx": [(1, None), (2, 1.5)]}), ("b", {"weft epoll": []})]
    report.plot_lines(str(p), panels, xlabel="x", ylabel="y", diagonal=True, logy=False)
    assert p.stat().st_size > 1000
    assert report.series_style("nginx", 16) == {"linestyle": "--", "marker": "s", "color": report.PALETTE[1]}
    report.plot_lines(str(p), panels, xlabel="x", ylabel="", logx=True, sharey=False, ylabels=["a", "b"])


def test_sustained_is_the_highest_rate_kept_up_with():
    pts = [{"target": 1000, "reply_rate": 1000, "timeouts": 0}, {"target": 2000, "reply_rate": 1990, "timeouts": 0},
           {"target": 3000, "reply_rate": 2980, "timeouts": 4}, {"target": 4000, "reply_rate": 2000, "timeouts": 0}]
    assert es.sustained(pts)["target"] == 2000
    assert es.sustained([{"target": 1000, "reply_rate": None}]) is None
