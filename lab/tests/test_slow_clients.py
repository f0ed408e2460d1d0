"""When slow-clients calls weft's p99 rise a problem."""

from lab.experiments import slow_clients


def row(server, alone, attacked):
    return {"server": server, "p99_ms_alone": alone, "p99_ms_attacked": attacked, "ratio": attacked / alone}


def test_noise_the_anchor_also_saw_is_not_a_problem():
    # CI, 2026-12-01: weft 0.665 -> 1.886 ms while nginx went 0.845 -> 1.265 ms.
    assert slow_clients.p99_problems([row("weft", 0.665, 1.886), row("nginx", 0.845, 1.265)]) == []


def test_small_or_sub_millisecond_rises_are_not_problems():
    assert slow_clients.p99_problems([row("weft", 0.3, 0.9)]) == []
    assert slow_clients.p99_problems([row("weft", 2.0, 3.9)]) == []


def test_a_starved_worker_is_a_problem_with_or_without_the_anchor():
    starved = row("weft", 0.6, 25.0)
    assert slow_clients.p99_problems([starved, row("nginx", 0.8, 1.3)]) == ["weft p99 rose 41.7x"]
    assert slow_clients.p99_problems([starved]) == ["weft p99 rose 41.7x"]


def test_missing_figures_are_not_judged():
    assert slow_clients.p99_problems([{"server": "weft", "p99_ms_alone": None, "p99_ms_attacked": 2.0, "ratio": None}]) == []
    assert slow_clients.p99_problems([]) == []
