import os
import re
import socket
import time

import pytest

from lab import servers


def test_render_template_replaces_every_placeholder():
    out = servers.render_template("root @WWW@; listen 127.0.0.1:@PORT@; pid @RUN@/x.pid;", {"WWW": "/w", "PORT": 8, "RUN": "/r"})
    assert out == "root /w; listen 127.0.0.1:8; pid /r/x.pid;"
    with pytest.raises(ValueError, match="@CONF@"):
        servers.render_template("include @CONF@/a;", {"WWW": "/w"})


def test_anchor_templates_have_a_port_placeholder_and_nothing_fixed():
    values = {"WWW": "/w", "RUN": "/r", "CONF": "/c", "PORT": "1", "ORIGIN_HOST": "127.0.0.9", "ORIGIN_PORT": "2",
              "SERVERS": "    server b0 127.0.0.9:2"}  # the cluster front-ends' back-end lines  # fmt: skip
    for kind, a in servers.ANCHORS.items():
        with open(os.path.join(servers.ANCHOR_DIR, a["template"])) as f:
            text = f.read()
        if not a["template"].endswith(".vcl"):  # varnishd takes its port on the command line
            assert "@PORT@" in text, kind
        rendered = servers.render_template(text, values)
        # No port of the shared templates (18080-18149) is left behind.
        assert not re.search(r"\b181[0-4]\d\b|\b1808\d\b", rendered), kind
        if kind.startswith(("haproxy", "varnish", "nginx-proxy", "squid-reverse")):
            assert "127.0.0.9" in rendered and "2" in rendered, f"{kind} names its origin"
    assert "{port}" in " ".join(servers.ANCHORS["varnish-hit"]["cmd"])


def test_wrk_forward_scripts_send_absolute_uris():
    for name in ("wrk_fwd_hit.lua", "wrk_fwd_miss.lua"):
        with open(os.path.join(servers.ANCHOR_DIR, name)) as f:
            text = servers.render_template(f.read(), {"ORIGIN_HOST": "127.0.0.1", "ORIGIN_PORT": "9", "PATH": "/c/8KiB", "RUNID": "r1"})
        assert "http://127.0.0.1:9/c/8KiB" in text, name
        assert 'wrk.headers["Host"] = "127.0.0.1:9"' in text, name


def test_weft_commands_for_each_kind():
    serve = servers.weft_command("/b/weft", servers.ServerSpec("s", "weft", {"send": "copy"}), "/www")
    assert serve[:3] == ["/b/weft", "serve", "/www"] and "copy" in serve and "--admin" in serve
    proxy = servers.weft_command("/b/weft", servers.ServerSpec("p", "weft-proxy", {"extra": ["--splice", "on"]}))
    assert proxy[:2] == ["/b/weft", "proxy"] and proxy[-2:] == ["--splice", "on"] and "--admin" in proxy
    origin = servers.weft_command("/b/weft", servers.ServerSpec("o", "weft-origin", {"workers": 2}))
    assert origin[:2] == ["/b/weft", "origin"] and "--admin" not in origin and origin[origin.index("--workers") + 1] == "2"
    assert servers.ServerSpec("p", "weft-proxy", {"extra": ["--splice", "off"]}).describe() == "weft proxy --splice off"


def test_free_port_is_bindable():
    p = servers.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", p))


def test_slug():
    assert servers.slug("nginx no-sendfile") == "nginx-no-sendfile"
    assert servers.slug("weft tracked:epoll-et") == "weft-tracked-epoll-et"


def test_stats_delta_and_exit_stats():
    before = {"requests": 10, "syscalls": {"read": 5}, "tracker": {"user_passes": 1}}
    after = {"requests": 25, "syscalls": {"read": 9, "write": 4}, "tracker": {"user_passes": 3}}
    assert servers.stats_delta(before, after) == {"requests": 15, "syscalls": {"read": 4, "write": 4}, "tracker": {"user_passes": 2}}
    text = "weft: info something\n{\"requests\":3,\"syscalls\":{\"read\":1}}\n"
    assert servers.weft_exit_stats(text) == {"requests": 3, "syscalls": {"read": 1}}
    assert servers.weft_exit_stats("no json here") is None


def test_pool_stops_a_process_group_that_ignores_sigterm(tmp_path):
    # A stand-in "anchor": a shell that ignores SIGTERM and has a child.
    pool = servers.ServerPool(str(tmp_path), str(tmp_path), "/nonexistent/weft", log=lambda m: None)
    script = "trap '' TERM; sleep 60 & sleep 60"
    log = tmp_path / "log"
    p = pool._spawn(["sh", "-c", script], str(log))
    rs = servers.RunningServer(servers.ServerSpec("stub", "stub"), p, 0, ["sh"], log_path=str(log))
    pool.running.append(rs)
    time.sleep(0.2)
    t0 = time.monotonic()
    pool.stop(rs, timeout_s=0.5)
    assert time.monotonic() - t0 < 5
    assert p.poll() is not None
    # Nothing of the group is left running (zombies wait for init to reap
    # them). SIGKILL reaches the group's other members asynchronously: give
    # them a moment to die.
    deadline = time.monotonic() + 3
    while live_members(p.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_members(p.pid) == []
    assert pool.running == []


def live_members(pgid):
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            text = open(f"/proc/{name}/stat").read()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(name))
    return out


def test_start_tries_again_when_the_address_is_in_use(tmp_path, monkeypatch):
    pool = servers.ServerPool(str(tmp_path), str(tmp_path), "/bin/false", log=lambda m: None)
    calls = []

    def flaky(spec, timeout_s):
        calls.append(1)
        if len(calls) < 3:
            raise servers.ServerError("weft epoll exited with 1: cannot listen on admin address 127.0.0.1:0: Address already in use")
        return "started"

    monkeypatch.setattr(pool, "_start_weft", flaky)
    monkeypatch.setattr(servers.time, "sleep", lambda s: None)
    assert pool.start(servers.ServerSpec("weft epoll", "weft")) == "started" and len(calls) == 3

    def broken(spec, timeout_s):
        raise servers.ServerError("weft epoll exited with 2: bad flag")

    monkeypatch.setattr(pool, "_start_weft", broken)
    with pytest.raises(servers.ServerError, match="bad flag"):
        pool.start(servers.ServerSpec("weft epoll", "weft"))
