"""bench/compare.py --turns: every method timed again per workload, the methods in turns (turn t
starts at method t), so under the GPU's power cap no method always runs right after another's
calls; a method's time is the median of its turns, and its rates follow it. Fakes stand in for
torch and the builders; the call order is recorded."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import compare as C  # noqa: E402


def test_turn_orders_start_at_each_method_in_turn():
    assert C.turn_orders(["a", "b"], 4) == [["a", "b"], ["b", "a"], ["a", "b"], ["b", "a"]]
    assert C.turn_orders(["a", "b", "c"], 3) == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert C.turn_orders(["a"], 2) == [["a"], ["a"]]
    assert C.turn_orders([], 2) == [[], []]


class _Cuda:
    def synchronize(self):
        pass


class _Torch:
    cuda = _Cuda()


class _Args:
    turns = 3
    gap_ms = 0.0
    peak_tflops = 1000.0


def test_more_turns_times_in_turns_and_takes_the_median(monkeypatch):
    calls = []
    times = {"mlakit": iter([2.0, 4.0]), "flashinfer_fa3": iter([3.0, 9.0])}

    def build(torch, m, *rest):
        return (m, None, None)

    def time_cuda(torch, run, nsets, warmup, iters, gap_ms=0.0, window=None):
        calls.append(run)
        return next(times[run]), 0.0

    monkeypatch.setattr(C, "build_method", build)
    monkeypatch.setattr(C, "time_cuda", time_cuda)
    case = {"results": {"mlakit": {"ms": 1.0}, "flashinfer_fa3": {"ms": 5.0},
                        "sdpa_cudnn": {"skipped": "no"}, "fa2_varlen_padV": {"ms": 7.0, "source": "mlakit-bench"}}}
    methods = ["mlakit", "flashinfer_fa3", "sdpa_cudnn", "fa2_varlen_padV"]
    C.more_turns(_Torch(), case, methods, None, None, None, None, None, _Args(), 1, 0, 1, 2e9, 500.0, {})
    # Turn 1 was the caller's (mlakit, then fa3); turns 2 and 3 start at fa3, then at mlakit.
    assert calls == ["flashinfer_fa3", "mlakit", "mlakit", "flashinfer_fa3"]
    r = case["results"]
    assert r["mlakit"]["ms_turns"] == [1.0, 2.0, 4.0] and r["mlakit"]["ms"] == 2.0
    assert r["flashinfer_fa3"]["ms_turns"] == [5.0, 3.0, 9.0] and r["flashinfer_fa3"]["ms"] == 5.0
    assert r["mlakit"]["tflops"] == pytest.approx(2e9 / 2e-3 / 1e12)
    assert r["mlakit"]["pct_ceiling"] == pytest.approx(100.0 * r["mlakit"]["tflops"] / 500.0)
    # Skipped methods and the mlakit-bench fallback are left as they were.
    assert r["sdpa_cudnn"] == {"skipped": "no"}
    assert r["fa2_varlen_padV"] == {"ms": 7.0, "source": "mlakit-bench"}


def test_turns_below_one_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        C.main(["--turns", "0", "--workload", "1x999"])
    assert e.value.code == 2
    assert "--turns must be >= 1" in capsys.readouterr().err
