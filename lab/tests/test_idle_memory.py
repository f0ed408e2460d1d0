import os

from lab.experiments import idle_memory as im


def test_plan_quick_has_every_weft_role_and_nginx():
    quick = [label for label, *_ in im.plan(True)]
    assert quick == ["weft serve", "weft proxy (hit)", "weft front (relay)", "weft front (booster)", "nginx"]
    full = [label for label, *_ in im.plan(False)]
    assert len(full) == 9 and full[:5] == quick
    modes = [opts["extra"][opts["extra"].index("--mode") + 1] for _, kind, opts, _ in im.plan(False) if kind == "weft-front"]
    assert modes == ["relay", "booster"]


def test_per_connection_and_rss_of_this_process():
    assert im.per_connection_kib(1000, 1500, 1000) == 0.5
    assert im.tree_rss_kib(os.getpid()) > 0


def test_table_has_one_row_per_server_and_a_column_per_count():
    rows = [{"server": "a", "connections": 1000, "kib_per_conn": 0.5},
            {"server": "a", "connections": 5000, "kib_per_conn": 0.25},
            {"server": "b", "connections": 1000, "kib_per_conn": 2.0}]
    header, body = im.table(rows, [1000, 5000])
    assert header == ["server", "1,000 conns", "5,000 conns"]
    assert body[0] == ["a", "0.50", "0.25"] and body[1][0] == "b"


def test_anchor_edits_match_the_templates():
    from lab import servers
    for kind, edits in im.EDITS.items():
        with open(os.path.join(servers.ANCHOR_DIR, servers.ANCHORS[kind]["template"])) as f:
            text = f.read()
        for old, _ in edits:
            assert old in text, (kind, old)
    assert "timeout_idle=600" in servers.ANCHORS["varnish-hit-idle"]["cmd"]
