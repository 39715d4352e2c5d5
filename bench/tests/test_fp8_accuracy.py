"""bench/diagnostics/fp8-accuracy, the CPU replay of the FP8 kernel's arithmetic that docs/fp8.md quotes: on
random inputs the kernel's own error (against the reference of the dequantized inputs) stays
within the FP8 issue's 3e-2 and is what P's rounding to e4m3 costs (well above bf16's), on
outlier-channel inputs it is smaller (peaked attention), and quantizing the inputs costs more than
the kernel."""
import importlib.machinery
import importlib.util
import pathlib

import pytest

pytest.importorskip("ml_dtypes")
ROOT = pathlib.Path(__file__).resolve().parents[2]


def load():
    path = ROOT / "bench" / "diagnostics" / "fp8-accuracy"
    loader = importlib.machinery.SourceFileLoader("fp8_accuracy", str(path))
    spec = importlib.util.spec_from_loader("fp8_accuracy", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def test_kernel_error_bounds_on_random_and_outlier_inputs():
    mod = load()
    rows = {(kind, causal): (deq, exact, bf) for kind, causal, deq, exact, bf in
            mod.main(["--lq", "384", "--lk", "384", "--heads", "1", "--seed", "3"])}
    for causal in (False, True):
        deq, exact, bf = rows[("normal", causal)]
        assert 1e-2 < deq < 3e-2, deq      # P's 3-bit mantissa, within the bound
        assert bf < deq / 3                # bf16 P for scale
        assert exact > deq                 # the inputs' quantization adds to it
        deq_o, exact_o, _ = rows[("outliers", causal)]
        assert deq_o < deq                 # peaked attention: fewer probabilities matter
        assert exact_o > exact             # outliers cost the per-tensor quantization most


def test_rounding_helpers_match_the_e4m3_definition():
    mod = load()
    import numpy as np
    x = np.array([0.3, 464.0, -1e9, 2.0 ** -10, 1.5 * 2.0 ** -9])
    assert list(mod.e4m3(x)) == [0.3125, 448.0, -448.0, 0.0, 2.0 ** -8]
