"""bench/gpu_clock.py's window statistics: only the samples inside the timed window count, and a
window with too few samples gives no figure rather than a misleading one."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import gpu_clock  # noqa: E402


def test_window_stats_takes_only_the_samples_in_the_window():
    samples = [(0.0, 1980.0, 300.0), (1.0, 1755.0, 690.0), (1.1, 1740.0, 700.0), (1.2, 1725.0, 710.0),
               (1.3, 1710.0, 700.0), (5.0, 1980.0, 120.0)]
    s = gpu_clock.window_stats(samples, 0.9, 1.35)
    assert s["clock_samples"] == 4
    assert s["sm_clock_mhz"] == 1732.5
    assert abs(s["power_w"] - 700.0) < 1e-9


def test_window_stats_refuses_a_window_of_fewer_than_three_samples():
    samples = [(1.0, 1755.0, 690.0), (1.1, 1740.0, 700.0), (9.0, 1980.0, 100.0)]
    assert gpu_clock.window_stats(samples, 0.9, 1.2) is None
    assert gpu_clock.window_stats([], 0.0, 1.0) is None
