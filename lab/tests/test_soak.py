"""Pure parts of the soak experiment."""

from lab.experiments import soak


def test_flatness_ignores_the_warm_up():
    assert soak.flatness([10, 50, 100, 101, 99, 100], 2) == 0.01
    assert soak.flatness([100], 0) is None


def test_peak_is_the_last_step_that_kept_up():
    steps = [(1000, 2200.0, 0), (2000, 4400.0, 0), (4000, 6000.0, 0), (8000, 6100.0, 3)]
    assert soak.peak_of(steps) == 2000
    assert soak.peak_of([(1000, 2200.0, 5)]) == 1000
