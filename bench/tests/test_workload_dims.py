"""bench/workloads.py's --dims helpers (compare.py --dims 128x128): the same lengths at other head
dims, renamed so anchors and mlakit-bench's names never match them; FLOPs follow the dims."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import workloads as W  # noqa: E402


def test_parse_dims():
    assert W.parse_dims("128x128") == (128, 128)
    assert W.parse_dims("192X128") == (192, 128)
    for bad in ("128", "128x", "ax128", "0x128", "128x128x1"):
        with pytest.raises(ValueError):
            W.parse_dims(bad)


def test_with_dims_renames_and_recounts():
    w = W.find("8x999+200")
    d = W.with_dims(w, 128, 128)
    assert (d.dqk, d.dvo) == (128, 128)
    assert d.name == "8x999+200 d128x128"
    assert d.q_lens == w.q_lens and d.kv_lens == w.kv_lens and d.causal == w.causal
    assert d.name not in W.ANCHOR_CASE and d.name not in W.ANCHOR_B_ROW
    assert d.flops() == pytest.approx(w.flops() * 256 / 320)
    # The workload's own dims: unchanged, same name.
    assert W.with_dims(w, 192, 128) is w
