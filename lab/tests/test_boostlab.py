"""The booster experiment's pure helpers: fits, the 100 % extrapolation,
relief time, per-interval points."""

from lab import boostlab


def test_fit_and_extrapolation_to_full_load():
    xs = [10.0, 20.0, 30.0, 40.0]
    f = boostlab.fit(xs, [0.1 + 0.02 * x for x in xs])
    assert f is not None and abs(f[0] - 0.1) < 1e-9 and abs(f[1] - 0.02) < 1e-9
    assert abs(boostlab.at_full_load(f) - 45.0) < 1e-9
    assert boostlab.fit([1.0, 1.0, 1.0], [0.1, 0.2, 0.3]) is None
    assert boostlab.fit([1.0, 2.0], [0.1, 0.2]) is None
    assert boostlab.fit([100.0, 101.0, 102.0], [0.1, 0.2, 0.3], min_spread=0.3) is None
    assert boostlab.at_full_load((0.1, -0.01)) is None


def test_relief_time_is_when_half_the_drop_holds():
    # 0.8 cores until t0 = 10, then a step down to 0.2 reached at 10.5.
    series = [(t / 10, 0.8 if t < 105 else 0.2) for t in range(80, 160)]
    t, before, after = boostlab.relief_time(series, 10.0, settle_s=2.0, hold_s=0.5)
    assert (before, after) == (0.8, 0.2)
    assert 0.2 <= t <= 0.5
    t90, _, _ = boostlab.relief_time(series, 10.0, settle_s=2.0, hold_s=0.5, share=0.9)
    assert t90 >= t
    # No drop: no relief.
    flat = [(t / 10, 0.5) for t in range(80, 160)]
    assert boostlab.relief_time(flat, 10.0)[0] is None


def test_points_are_differences_per_interval():
    def sample(t, busy, idle, requests, tx):
        return {"t": t, "cpu": {"user": busy, "system": 0, "idle": idle, "irq": 0, "softirq": 0, "steal": 0},
                "sirq": {"NET_RX": 0, "NET_TX": 0}, "intr": {"device": 0, "CAL": 0, "RES": 0, "LOC": 0},
                "net": {"tx_bytes": tx, "InSegs": 0, "OutSegs": 0}, "origin_ns": int(t * 1e8), "ut": (0, 0), "requests": requests}  # fmt: skip

    p = boostlab.points([sample(0.0, 0, 0, 0, 0), sample(0.5, 25, 25, 500, 1_000_000)])
    assert len(p) == 1
    assert p[0]["req_s"] == 1000.0 and p[0]["mb_s"] == 2.0
    # The origin's own 0.1 core is its load (no softirq here); CPU 1's other
    # half-busy is someone else's.
    assert abs(p[0]["origin"] - 0.1) < 1e-6 and abs(p[0]["load"] - 0.1) < 1e-6
    assert p[0]["cpu1_busy"] == 0.5 and abs(p[0]["cpu1_other"] - 0.5) < 1e-6
