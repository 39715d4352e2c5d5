"""bench/diagnostics/sm90_trace.py on synthetic traces (no GPU): the T lines' parsing and the lockstep /
taking-turns classification of the two consumer warpgroups."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "diagnostics"))
import sm90_trace  # noqa: E402

HEADER = "# times in ns\nB 0 0 10000\nI 0 0 4 0 0 0 0 100 9000 -1 -1 -1 -1\nI 0 1 4 0 128 0 0 100 9000 -1 -1 -1 -1\n"


def phase_rows(tmp_path, wg0, wg1):
    """warpgroup_phase of a trace whose two items both have the stamps wg0 / wg1 (4 tiles, the
    other 4 of the 8 slots unstamped)."""
    stamps = lambda v: " ".join(map(str, v)) + " -1 -1 -1 -1"  # noqa: E731
    lines = "".join(f"T 0 {k} 0 {stamps(wg0)}\nT 0 {k} 1 {stamps(wg1)}\n" for k in range(2))
    p = tmp_path / "trace.txt"
    p.write_text(HEADER + lines)
    return sm90_trace.warpgroup_phase(sm90_trace.read_tiles(p))


def test_lockstep_items_are_classified_as_lockstep(tmp_path):
    # Both warpgroups finish each tile within 50 cycles of each other, period 2800.
    rows = phase_rows(tmp_path, [0, 2800, 5600, 8400], [30, 2830, 5650, 8420])
    assert [r[0] for r in rows] == [0, 1, 2, 3]  # tiles past n_tiles (-1) are dropped
    t1 = rows[1]
    assert t1[1] == 2 and t1[2] == 2800
    assert t1[4] == 1.0 and t1[5] == 0.0


def test_half_period_offsets_are_taking_turns(tmp_path):
    rows = phase_rows(tmp_path, [0, 2600, 5200, 7800], [1300, 3900, 6500, 9100])
    t2 = rows[2]
    assert t2[3] == 1300
    assert t2[5] == 1.0 and t2[4] == 0.0


def test_traces_without_t_lines_give_no_rows(tmp_path):
    p = tmp_path / "trace.txt"
    p.write_text(HEADER)
    assert sm90_trace.warpgroup_phase(sm90_trace.read_tiles(p)) == []
    blocks, items = sm90_trace.read_trace(p)
    assert len(items) == 2 and blocks[0] == (0, 10000)


def test_tile_breakdown_splits_each_tile_between_s_softmax_and_pack(tmp_path):
    # Warpgroup 0, tiles 0..2: S issued at 0 / 3000 / 6000, landed 800 later, softmax 1500, then
    # P ready 200 after the softmax; the next issue follows P by 500.
    t_lines = "T 0 0 0 2500 5500 8500 -1 -1 -1 -1 -1\n"
    u = []
    for t in range(3):
        i = 3000 * t
        u += [i, i + 800, i + 2300]
    u_line = "U 0 0 0 " + " ".join(map(str, u)) + " -1 -1 -1" * 5 + "\n"
    p = tmp_path / "trace.txt"
    p.write_text(HEADER + t_lines + u_line)
    rows = sm90_trace.tile_breakdown(sm90_trace.read_tiles(p), sm90_trace.read_tile_phases(p))
    assert [r[0] for r in rows] == [1, 2]
    t, n, s_lat, smx, pack, nxt = rows[0]
    assert (n, s_lat, smx, pack, nxt) == (1, 800, 1500, 200, 500)
    assert rows[1][5] is None  # tile 3 was not run: no next issue


def test_traces_without_u_lines_give_no_breakdown(tmp_path):
    p = tmp_path / "trace.txt"
    p.write_text(HEADER + "T 0 0 0 0 2800 -1 -1 -1 -1 -1 -1\n")
    assert sm90_trace.tile_breakdown(sm90_trace.read_tiles(p), sm90_trace.read_tile_phases(p)) == []
