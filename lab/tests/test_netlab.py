"""lab/netlab.py without root: the topology file, the derived TCP counts,
and WanNet refusing a veth network whose offloads stayed on (a stand-in
`weft` that only writes its ready file)."""

import pytest

from lab import netlab

FAKE_WEFT = """#!/bin/sh
# weft wan -c CONFIG --hold --quiet --ready FILE --stats FILE
while [ $# -gt 0 ]; do [ "$1" = --ready ] && r=$2; shift; done
echo '{"hosts": {"a": {"ns": "x", "addr": "10.0.0.1"}}, "offloads": "%s", "notes": ["ethtool is not installed"]}' > "$r"
exec sleep 30
"""


def fake_weft(tmp_path, offloads: str) -> str:
    p = tmp_path / "weft"
    p.write_text(FAKE_WEFT % offloads)
    p.chmod(0o755)
    return str(p)


def test_wannet_refuses_offloads_left_on(tmp_path):
    with pytest.raises(RuntimeError, match="stayed on.*ethtool is not installed"):
        with netlab.WanNet(fake_weft(tmp_path, "on"), [{"name": "a"}], [], mode="veth"):
            pass


def test_wannet_runs_with_offloads_off(tmp_path):
    with netlab.WanNet(fake_weft(tmp_path, "off"), [{"name": "a"}], [], mode="veth") as net:
        assert net.addr("a") == "10.0.0.1" and net.ns("a") == "x"
    assert net.proc.poll() is not None


def test_delta_adds_data_and_ack_counts():
    before = {"TcpOutSegs": 10, "TcpExtTCPOrigDataSent": 8, "TcpRetransSegs": 0, "TcpExtTCPPureAcks": 1}
    after = {"TcpOutSegs": 110, "TcpExtTCPOrigDataSent": 98, "TcpRetransSegs": 3, "TcpExtTCPPureAcks": 30, "TcpExtTCPHPAcks": 10, "TcpExtTCPBacklogCoalesce": 5}
    d = netlab.delta(after, before)
    assert d["TcpOutSegs"] == 100 and d["data_segs_out"] == 93 and d["acks_out"] == 10 and d["acks_in"] == 44
    assert "data_segs_out" not in netlab.delta(after, before, keys=("TcpOutSegs",))


def test_topology_toml():
    t = netlab.topology([{"name": "c", "sack": False}], [{"a": "c", "b": "s", "up": {"rate": "28kbit"}}], mode="veth", seed=3)
    assert 'mode = "veth"' in t and "seed = 3" in t and "sack = false" in t and 'up = { rate = "28kbit" }' in t
