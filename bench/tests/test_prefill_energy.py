"""bench/diagnostics/prefill_energy.py without a GPU: a window's figures from its raw counts,
the median over turns, and the order the methods take turns in."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "diagnostics"))

import prefill_energy as E  # noqa: E402


def test_window_figures():
    # 1000 launches in 4000 ms, the last 400 in 1700 ms; 2.6 kJ; 1800 MHz overall, 1700 late.
    r = E.summarize(1000, 4000.0, 400, 1700.0, 2.6e6, {"sm_clock_mhz": 1800.0}, {"sm_clock_mhz": 1700.0})
    assert r["ms"] == pytest.approx(4.0)
    assert r["ms_late"] == pytest.approx(4.25)
    assert r["j_per_launch"] == pytest.approx(2.6)
    assert r["power_w"] == pytest.approx(650.0)
    assert r["mcycles"] == pytest.approx(4.25 * 1.7)  # 4.25 ms at 1.7 GHz: 7.225 M cycles


def test_window_without_nvml_or_late_half():
    r = E.summarize(10, 20.0, 0, 0.0, None, None, None)
    assert r["ms_late"] == pytest.approx(2.0)
    assert r["j_per_launch"] is None and r["power_w"] is None and r["mcycles"] is None
    r = E.summarize(10, 20.0, 5, 12.0, None, {"sm_clock_mhz": 1500.0}, None)
    assert r["mcycles"] == pytest.approx(2.4 * 1.5)  # the whole window's clock when the late half has none
    with pytest.raises(ValueError):
        E.summarize(0, 0.0, 0, 0.0, None, None, None)


def test_median_of_turns_skips_missing():
    m = E.median_of_turns([{"ms": 1.0, "mhz": None}, {"ms": 3.0, "mhz": 1600.0}, {"ms": 2.0, "mhz": 1700.0}])
    assert m["ms"] == 2.0 and m["mhz"] == 1650.0 and m["turns"] == 3


def test_each_method_goes_first_in_turn():
    # compare.py's turn order, which this tool takes.
    assert E.C.turn_orders(["a", "b"], 3) == [["a", "b"], ["b", "a"], ["a", "b"]]


def test_gpu_check_runs_it_as_the_energy_step():
    repo = os.path.dirname(os.path.dirname(HERE))
    text = open(os.path.join(repo, "scripts", "gpu-check")).read()
    steps = next(line for line in text.splitlines() if line.startswith("ALL_STEPS=("))
    assert "energy" in steps.split()
    assert "bench/diagnostics/prefill_energy.py --methods mlakit,flashinfer_fa3" in text
    assert '--json "$RESULTS/energy.json"' in text
