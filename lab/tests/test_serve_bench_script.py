"""scripts/serve_bench.py's pieces that need no server: its server and path
options and the rate ceiling it prints with --perf."""

import pytest

from .script_module import load_script

sb = load_script("serve_bench")


def test_variants_and_paths_parse_and_bad_ones_name_themselves():
    variants, paths = sb.parse_servers(["objects=--object-cache 64MiB", "pool=--cgi /app={fcgi_app}"], ["pool=/app/x?size={bytes}"])
    assert variants == {"objects": ["--object-cache", "64MiB"], "pool": ["--cgi", "/app={fcgi_app}"]}
    assert paths["pool"] == "app/x?size={bytes}"
    assert paths["weft"] == paths["objects"] == paths["h2o"] == ""
    for variant, path, named in [(["weft=--x"], [], "--variant 'weft=--x'"), (["a=1", "a=2"], [], "--variant 'a=2'"),
                                 (["noequals"], [], "--variant 'noequals'"), ([], ["zz=x"], "--path 'zz=x'"),
                                 ([], ["weft=/"], "--path 'weft=/'")]:  # fmt: skip
        with pytest.raises(SystemExit, match=named):
            sb.parse_servers(variant, path)


def test_rate_ceiling_shares_the_cpus_between_client_and_kernel_time():
    assert sb.rate_ceiling(2, 10.0, 10.0) == pytest.approx(100_000)
    assert sb.rate_ceiling(1, 4.0, 6.0) == pytest.approx(100_000)


def test_ceilings_are_printed_against_plain_weft(capsys, monkeypatch):
    monkeypatch.setattr(sb.os, "cpu_count", lambda: 2)
    med = {(65536, "weft"): {"rps": 80_000.0, "client_us": 11.0}, (65536, "pool"): {"rps": 40_000.0, "client_us": 12.0}}
    sb.print_ceilings(med, [65536], ["weft", "pool"], {(65536, "weft"): 8.0, (65536, "pool"): 28.0})
    out = capsys.readouterr().out
    assert "pool 50,000 req/s = 0.62× weft's 80,000" in out
    assert out.count("req/s =") == 1, "plain weft is the reference, not a row of its own"
    # A size where plain weft was not measured has no reference: no line.
    sb.print_ceilings({(8192, "pool"): {"rps": 1.0, "client_us": 5.0}}, [8192], ["pool"], {(8192, "pool"): 4.0})
    assert capsys.readouterr().out == ""
