"""bench/compare.py --gap-ms: each timed call (not the warm-ups, not the wall-clock pass) starts
after a device synchronize and a host sleep, so long launches run before the GPU's power cap;
without it the timed calls stay back to back. A fake torch records the order of the calls."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import compare as C  # noqa: E402


class FakeCuda:
    def __init__(self, log):
        self.log = log
        outer = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                outer.log.append("record")
                self.t = len(outer.log)

            def elapsed_time(self, end):
                return float(end.t - self.t)

        self.Event = Event

    def synchronize(self):
        self.log.append("sync")


class FakeTorch:
    def __init__(self, log):
        self.cuda = FakeCuda(log)


def run(monkeypatch, gap_ms, warmup=2, iters=3):
    log = []
    monkeypatch.setattr(C.time, "sleep", lambda s: log.append(f"sleep {s * 1000:.1f}"))
    C.time_cuda(FakeTorch(log), lambda i: log.append(f"call {i}"), 2, warmup, iters, gap_ms)
    return log


def test_back_to_back_by_default(monkeypatch):
    log = run(monkeypatch, 0.0)
    assert not any(x.startswith("sleep") for x in log)
    # warm-ups, one synchronize, then record/call/record x 3 with nothing between them
    assert log[:3] == ["call 0", "call 1", "sync"]
    assert log[3:12] == ["record", "call 0", "record", "record", "call 1", "record", "record", "call 0", "record"]


def test_gap_rests_before_each_timed_call_only(monkeypatch):
    log = run(monkeypatch, 5.0)
    assert log[:3] == ["call 0", "call 1", "sync"]  # warm-ups back to back
    timed = log[3:3 + 3 * 5]
    assert timed == ["sync", "sleep 5.0", "record", "call 0", "record"] + \
        ["sync", "sleep 5.0", "record", "call 1", "record"] + ["sync", "sleep 5.0", "record", "call 0", "record"]
    assert sum(1 for x in log if x.startswith("sleep")) == 3  # not in the wall-clock pass


@pytest.mark.parametrize("bad", ["-1", "20000"])
def test_gap_out_of_range_is_a_usage_error(bad, capsys):
    with pytest.raises(SystemExit) as e:
        C.main(["--gap-ms", bad, "--workload", "1x999"])
    assert e.value.code == 2
    assert "--gap-ms must be between 0 and 10000" in capsys.readouterr().err
