"""bench/sm90_trace.py on synthetic traces (no GPU): the T lines' parsing and the lockstep /
taking-turns classification of the two consumer warpgroups."""
import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("sm90_trace", ROOT / "bench" / "sm90_trace.py")
sm90_trace = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sm90_trace)

HEADER = "# times in ns\nB 0 0 10000\nI 0 0 4 0 0 0 0 100 9000 -1 -1 -1 -1 -1\nI 0 1 4 0 128 0 0 100 9000 -1 -1 -1 -1 -1\n"


def write(tmp_path, t_lines):
    p = tmp_path / "trace.txt"
    p.write_text(HEADER + "".join(t_lines))
    return p


def test_lockstep_items_are_classified_as_lockstep(tmp_path):
    # Both warpgroups finish each tile within 50 cycles of each other, period 2800.
    lines = []
    for k in range(2):
        lines.append(f"T 0 {k} 0 0 2800 5600 8400 -1 -1 -1 -1\n")
        lines.append(f"T 0 {k} 1 30 2830 5650 8420 -1 -1 -1 -1\n")
    rows = sm90_trace.warpgroup_phase(sm90_trace.read_tiles(write(tmp_path, lines)))
    assert [r[0] for r in rows] == [0, 1, 2, 3]  # tiles past n_tiles (-1) are dropped
    t1 = rows[1]
    assert t1[1] == 2 and t1[2] == 2800
    assert t1[4] == 1.0 and t1[5] == 0.0


def test_half_period_offsets_are_taking_turns(tmp_path):
    lines = []
    for k in range(2):
        lines.append(f"T 0 {k} 0 0 2600 5200 7800 -1 -1 -1 -1\n")
        lines.append(f"T 0 {k} 1 1300 3900 6500 9100 -1 -1 -1 -1\n")
    rows = sm90_trace.warpgroup_phase(sm90_trace.read_tiles(write(tmp_path, lines)))
    t2 = rows[2]
    assert t2[3] == 1300
    assert t2[5] == 1.0 and t2[4] == 0.0


def test_traces_without_t_lines_give_no_rows(tmp_path):
    p = write(tmp_path, [])
    assert sm90_trace.warpgroup_phase(sm90_trace.read_tiles(p)) == []
    blocks, items = sm90_trace.read_trace(p)
    assert len(items) == 2 and blocks[0] == (0, 10000)
