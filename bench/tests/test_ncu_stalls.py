"""bench/diagnostics/ncu_stalls.py on a synthetic Nsight Compute source page: reason totals, the
top instructions, and each mbarrier wait's samples (the wait and its retry branch) by operand."""
import csv
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "diagnostics"))

import ncu_stalls  # noqa: E402

HDR = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed", "stall_long_sb",
       "stall_barrier", "stall_long_sb (Not Issued)"]
ROWS = [
    ["0x10", "HGMMA.64x64x16.F32.BF16 R152, gdesc[UR20], R152", "5", "64", "0", "0", "0"],
    ["0x20", "SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [R200+URZ+0x36828], R215", "2", "64", "1", "0", "1"],
    ["0x30", "@!P1  BRA 0x90", "40", "64", "40", "0", "40"],
    ["0x40", "WARPGROUP.DEPBAR.LE gsb0, 0x0", "7", "64", "0", "7", "0"],
    ["0x50", "SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [R200+URZ+0x36818], R227", "0", "64", "0", "0", "0"],
    ["0x60", "@!P1  BRA 0xa0", "9", "64", "9", "0", "9"],
    ["0x70", "FMUL R1, R2, R3", "1", "64", "0", "0", "0"],
]


def write_page(path):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "k"])
        w.writerow(HDR)
        w.writerows(ROWS)


def test_mbarrier_waits_add_the_retry_branch_and_sort_by_samples(tmp_path):
    p = tmp_path / "src.csv"
    write_page(p)
    page = ncu_stalls.Page(str(p))
    assert page.total() == 64
    assert page.by_reason()["stall_long_sb"] == 50
    assert "stall_long_sb (Not Issued)" not in page.by_reason()
    assert ncu_stalls.mbarrier_waits(page) == [("R200+URZ+0x36828", 42, 64), ("R200+URZ+0x36818", 9, 64)]


def test_main_prints_each_view(tmp_path, capsys):
    p = tmp_path / "src.csv"
    write_page(p)
    ncu_stalls.main([str(p), "--mbarriers"])
    out = capsys.readouterr().out
    assert "R200+URZ+0x36828" in out and "65.6%" in out
    ncu_stalls.main([str(p), "3"])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "total samples 64"
    assert out[-3].split()[0] == "40"  # the branch where the first wait's samples land
