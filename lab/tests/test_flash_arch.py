"""flash-arch's target arithmetic on made-up rows (no server runs)."""

from lab import report
from lab.experiments import flash_arch


def row(server, size, rep, rps, cpu, part="inmem"):
    return {"part": part, "server": server, "size": size, "rep": rep, "rps": rps, "cpu_us_per_req": cpu, "errors": 0}


def test_inmem_target_pairs_by_repetition():
    # The host slowed down between repetitions; each pair is still 0.98 / 1.00 apart.
    rows = [row("amped", "8 KiB", 1, 98.0, 2.0), row("sped", "8 KiB", 1, 100.0, 2.0),
            row("amped", "8 KiB", 2, 49.0, 4.4), row("sped", "8 KiB", 2, 50.0, 4.0),
            row("sped", "8 KiB", 3, 50.0, 4.0)]  # fmt: skip
    [t] = flash_arch.inmem_target(rows)
    assert t[:3] == ["8 KiB", "2", "0.98 (0.98–0.98)"]
    assert t[3].startswith("1.05 (") and t[-1] == "yes"


def test_quartiles_interpolate():
    v = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert [report.quartile(v, q) for q in (0, 1, 2, 3, 4)] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert report.quartile([1.0, 2.0], 1) == 1.25
    assert report.median_iqr([]) == "–"


def test_inmem_target_misses_below_095():
    rows = [row("amped", "100 KiB", r, 90.0, 1.0) for r in (1, 2, 3)] + [row("sped", "100 KiB", r, 100.0, 1.0) for r in (1, 2, 3)]
    [t] = flash_arch.inmem_target(rows)
    assert t[2] == "0.90 (0.90–0.90)" and t[-1] == "no"


def test_inmem_target_skips_unpaired_sizes():
    assert flash_arch.inmem_target([row("amped", "1 MiB", 1, 10.0, 1.0)]) == []


def test_cpu_target_against_the_best_anchor():
    rows = [row(flash_arch.OBJECTS.label, "8 KiB", 1, 0, 3.0, "cpu"), row("nginx", "8 KiB", 1, 0, 4.0, "cpu"),
            row("lighttpd", "8 KiB", 1, 0, 3.6, "cpu")]  # fmt: skip
    [t] = flash_arch.cpu_target(rows)
    assert t[3] == "lighttpd" and t[5] == "0.83" and t[6] == "0.83 (0.83–0.83)" and t[7] == "yes"


def test_cgi_shares_round_by_round():
    from lab.experiments import cgi

    rows = [{"rep": 1, "server": "weft static", "rps": 100.0}, {"rep": 1, "server": "weft fastcgi unix", "rps": 80.0},
            {"rep": 2, "server": "weft static", "rps": 50.0}, {"rep": 2, "server": "weft fastcgi unix", "rps": 45.0},
            {"rep": 3, "server": "weft fastcgi unix", "rps": 45.0}]  # fmt: skip
    assert cgi.round_shares(rows, "weft fastcgi unix", "weft static") == [0.8, 0.9]
    assert report.median_iqr([0.8, 0.9], ".0%") == "85% (82%–88%)"
