"""bench/diagnostics/latent_trace.py on a synthetic trace: the period of the pairs inside an item,
every step's offset from warpgroup 0's pair top, and the gap between items."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "diagnostics"))

import latent_trace  # noqa: E402


def write_trace(path):
    # One block, one item of 12 tiles (6 pairs of 1000 cycles), then a second item 300 cycles
    # after the first item's last P1 V1_L. Warpgroup 1's steps sit 50 cycles after warpgroup 0's.
    # The last pair's slot also holds the item change's steps, 40 / 80 / 120 / 160 cycles after
    # its P1 V1_L.
    lines = ["# P block pair item first_tile tiles wg ..."]
    for p in range(6):
        top = 1000 * p
        for wg in (0, 1):
            stamps = [top + 100 * i + 50 * wg for i in range(8)] + [-1, -1]
            stamps += [5700 + 40 * (i + 1) for i in range(4)] if p == 5 else [-1] * 4
            lines.append(" ".join(str(x) for x in ["P", 0, p, 7, 2 * p, 12, wg] + stamps))
    top = 5000 + 700 + 300
    for wg in (0, 1):
        stamps = [top + 100 * i for i in range(8)]
        lines.append(" ".join(str(x) for x in ["P", 0, 6, 9, 0, 4, wg] + stamps))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def test_periods_offsets_and_gaps(tmp_path):
    path = tmp_path / "t.latent_bf16.txt"
    write_trace(path)
    rows, periods, gaps, item_rows = latent_trace.summarize(latent_trace.read(path))
    # Pairs with first tile 2 to 8 of 12 are inside the item; 0 is its first pair, 10 its last.
    assert periods == [1000, 1000, 1000, 1000]
    assert gaps == [300]
    by = {(wg, name): med for wg, name, med, lo, hi in rows}
    assert by[(0, "top")] == 0
    assert by[(0, "P1 V1_L done")] == 700
    assert by[(1, "top")] == 50
    assert by[(1, "P1 V1_R done")] == 750
    change = {(wg, name): med for wg, name, med in item_rows}
    assert change[(0, "pair loop left")] == 40
    assert change[(1, "next q landed")] == 160
    assert change[(0, "next top")] == 300
    assert (0, "stage 0 refill issued") not in by


def test_main_prints_a_table(tmp_path, capsys):
    path = tmp_path / "t.latent_bf16.txt"
    write_trace(path)
    assert latent_trace.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "pair period: median 1000 cycles" in out
    assert "| 1 | P0 received | 350 |" in out
