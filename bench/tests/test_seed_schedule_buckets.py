"""bench/seed_schedule.py's graph_bucket repeats tools/seed_schedule.cc's rule (compare_mla.py and
mlakit-bench seed must replay the same buckets): the cases of tests/cpu/test_seed_schedule.cc."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import seed_schedule as S  # noqa: E402


def test_single_rows():
    assert S.GRAPH_BUCKET_STEP_ABOVE == 256
    assert [S.graph_bucket(r, 8192) for r in (1, 256, 257, 999, 1025)] == [256, 256, 512, 1024, 1280]
    assert S.graph_bucket(8192, 8993) == 8192
    assert S.graph_bucket(8392, 8993) == 8448
    assert S.graph_bucket(8961, 8993) == 8993  # capped at the workspace rows
    assert S.graph_bucket(100, 200) == 200
    assert S.graph_bucket(999, 8192, 1024) == 1024
    assert S.graph_bucket(1025, 8192, 1024) == 2048
    assert S.graph_bucket(8193, 8993, 1024) == 8993
    assert S.graph_bucket(2049, 8192, 100) == 2100
    with pytest.raises(ValueError):
        S.graph_bucket(9000, 8993)
    with pytest.raises(ValueError):
        S.graph_bucket(2049, 8192, 0)


@pytest.mark.parametrize("n,budget,step,want", [
    (1, 8192, 256, {1024}),
    (100, 8192, 256, {2048, 8192, 8448, 8704, 8960, 8993}),
    (100, 2048, 256, {2048, 2304, 2560, 2816, 2999}),
    (100, 8192, 1024, {2048, 8192, 8993}),
    (100, 2048, 1024, {2048, 2999}),
])
def test_the_seed_schedules_buckets(n, budget, step, want):
    steps = S.build_schedule([999] * n, budget)
    cap = budget + max(st.context_tokens for st in steps)
    got = set()
    for st in steps:
        rows = st.tokens + st.context_tokens
        b = S.graph_bucket(rows, cap, step)
        assert b >= rows
        got.add(b)
    assert got == want
