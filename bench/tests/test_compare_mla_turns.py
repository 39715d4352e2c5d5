"""bench/compare_mla.py's timed passes: taken in turns across the paths (a path run after another's
passes reads slower under the GPU's power cap), a path that raises is dropped
without costing the others their passes, and --rest-ms / --heat-ms precede every pass."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import compare_mla as C  # noqa: E402


class _Step:
    index = 0

    def load(self, bufs):
        pass


class _Clock:  # compare_mla.Clock's interface on the CPU: no events
    cuda = False

    def sync(self):
        pass

    def event(self):
        return None


class _Path:
    def __init__(self, name, order, fail_at=None):
        self.name, self.order, self.fail_at, self.calls = name, order, fail_at, 0

    def run_step(self, st):
        self.calls += 1
        self.order.append(self.name)
        if self.calls == self.fail_at:
            raise RuntimeError("boom")


def test_rounds_rotate_the_first_path():
    order = []
    paths = {n: _Path(n, order) for n in "abc"}
    passes, failed = C.time_paths(paths, [_Step()], None, _Clock(), 4)
    assert order == list("abc" "bca" "cab" "abc")
    assert failed == {}
    assert {n: len(p) for n, p in passes.items()} == {"a": 4, "b": 4, "c": 4}
    assert all(len(one_pass) == 1 for p in passes.values() for one_pass in p)  # one entry per step


def test_a_failing_path_is_dropped_and_the_others_keep_their_passes():
    order = []
    paths = {"a": _Path("a", order), "b": _Path("b", order, fail_at=2), "c": _Path("c", order)}
    passes, failed = C.time_paths(paths, [_Step()], None, _Clock(), 3)
    assert order == list("abc" "bca" "ca")  # b raised in round 2 and is not run again
    assert list(failed) == ["b"] and str(failed["b"]) == "boom"
    assert len(passes["a"]) == 3 and len(passes["c"]) == 3 and len(passes["b"]) == 1
    case = {"paths": {}}
    C.path_failed(case, "b", failed["b"], trace=False)
    assert case["paths"]["b"] == {"skipped": "error: RuntimeError: boom"}


def test_rest_and_heat_precede_every_pass(monkeypatch):
    order = []

    class _HeatClock(_Clock):
        def sync(self):
            order.append("sync")

        def heat(self, seconds):
            order.append(("heat", seconds))

    monkeypatch.setattr(C.time, "sleep", lambda s: order.append(("sleep", s)))
    paths = {n: _Path(n, order) for n in "ab"}
    C.time_paths(paths, [_Step()], None, _HeatClock(), 2, rest_s=0.3, heat_s=0.2)
    # Per pass: the rest (after a sync), then the heat, then run_pass's sync, the step, its sync.
    want = []
    for name in "abba":
        want += ["sync", ("sleep", 0.3), ("heat", 0.2), "sync", name, "sync"]
    assert order == want
    # Neither (the default): no sleep and no heat (the plain stand-in has no heat() at all).
    order.clear()
    C.time_paths(paths, [_Step()], None, _Clock(), 1)
    assert order == list("ab")
