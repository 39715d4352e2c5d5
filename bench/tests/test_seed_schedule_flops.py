"""bench/seed_schedule.py's step_flops (the useful work compare_mla.py states every path's rate
against) counts what tools/seed_schedule.cc's seed_step_flops counts: visible pairs by
enumeration, the real rows, and a total that chunking does not change."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import seed_schedule as S  # noqa: E402

DIMS = S.MlaDims(heads=3)
PER_PAIR = 2 * 3 * (128 + 64 + 128)
PER_ROW = 2 * 512 * 3 * (128 + 128)


@pytest.mark.parametrize("prompts,budget", [([37] * 5, 16), ([999] * 3, 2048), ([1], 8), ([5, 300, 2, 77], 64)])
def test_step_flops_by_enumeration(prompts, budget):
    steps = S.build_schedule(prompts, budget)
    attention = 0
    for st in steps:
        pairs = sum(1 for c in st.chunks for q in range(c.ctx, c.ctx + c.new) for k in range(c.ctx + c.new) if k <= q)
        rows = sum(c.ctx + c.new for c in st.chunks)
        f = S.step_flops(st, DIMS)
        assert f == {"attention": PER_PAIR * pairs, "up_projection": PER_ROW * rows}
        attention += f["attention"]
    # However the budget cuts the prompts, each request's causal pairs are counted once.
    assert attention == PER_PAIR * sum(n * (n + 1) // 2 for n in prompts)
    total = S.schedule_flops(steps, layers=7, dims=DIMS)
    assert total["attention"] == 7 * attention
    assert total["total"] == total["attention"] + total["up_projection"]


def test_seed_case_rows():
    # N=100 at budget 8192: 99900 new rows and 4611 context rows up-projected per layer (the C++ test's).
    steps = S.build_schedule([999] * 100, 8192)
    f = S.schedule_flops(steps, layers=1)
    assert f["up_projection"] == 2 * 512 * 16 * 256 * 104511
    assert f["attention"] == 2 * 320 * 16 * 100 * 999 * 1000 // 2
