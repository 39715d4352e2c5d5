"""bench/seed_schedule.py reads the schedule from its one definition, tools/seed_schedule.cc
(`mlakit-bench seed --print-schedule`): the steps, each step's useful FLOP (checked here by
enumerating the visible pairs and rows) and graph bucket (mlakit.graph_rows_bucket's rule)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import seed_schedule as S  # noqa: E402

try:
    S.bench_binary()
    HAVE_BENCH = True
except RuntimeError as ex:
    HAVE_BENCH, WHY = False, str(ex)
pytestmark = pytest.mark.skipif(not HAVE_BENCH, reason="no mlakit-bench built" if HAVE_BENCH else WHY)

PER_PAIR = 2 * 3 * (128 + 64 + 128)
PER_ROW = 2 * 512 * 3 * (128 + 128)


@pytest.mark.parametrize("prompts,budget", [([37] * 5, 16), ([999] * 3, 2048), ([1], 8), ([5, 300, 2, 77], 64)])
def test_steps_and_flops_by_enumeration(prompts, budget):
    steps = S.build_schedule(prompts, budget, heads=3)
    done = [0] * len(prompts)
    attention = 0
    for st in steps:
        assert st.tokens <= budget
        for c in st.chunks:
            assert c.ctx == done[c.req]
            done[c.req] += c.new
            assert c.last == (done[c.req] == prompts[c.req])
        pairs = sum(1 for c in st.chunks for q in range(c.ctx, c.ctx + c.new) for k in range(c.ctx + c.new) if k <= q)
        rows = sum(c.ctx + c.new for c in st.chunks)
        assert st.flops == {"attention": PER_PAIR * pairs, "up_projection": PER_ROW * rows}
        attention += st.flops["attention"]
        assert st.graph_rows >= rows
    assert done == list(prompts)
    # However the budget cuts the prompts, each request's causal pairs are counted once.
    assert attention == PER_PAIR * sum(n * (n + 1) // 2 for n in prompts)
    total = S.schedule_flops(steps, layers=7)
    assert total["attention"] == 7 * attention
    assert total["total"] == total["attention"] + total["up_projection"]


def test_seed_cases():
    # N=100 at budget 8192: 13 steps, 99900 new rows and 4611 context rows up-projected per layer;
    # at 2048: 49 steps.
    steps = S.build_schedule([999] * 100, 8192)
    assert len(steps) == 13
    f = S.schedule_flops(steps, layers=1)
    assert f["up_projection"] == 2 * 512 * 16 * 256 * 104511
    assert f["attention"] == 2 * 320 * 16 * 100 * 999 * 1000 // 2
    assert sorted({st.graph_rows for st in steps}) == [2048, 8192, 8448, 8704, 8960, 8993]
    assert len(S.build_schedule([999] * 100, 2048)) == 49


def test_bad_input_names_the_problem():
    with pytest.raises(ValueError, match="budget"):
        S.build_schedule([5], 0)
    with pytest.raises(ValueError, match="prompt"):
        S.build_schedule([5, 0], 64)
