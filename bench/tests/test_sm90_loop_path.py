"""bench/diagnostics/sm90-loop-path's walk of the kv loop, on a synthetic SASS listing shaped like the sm90
consumer's: a loop of one kv tile's HGMMAs, an mbarrier wait whose retry loop sits past the kernel's
end, lane 0's arrive skipped by the other lanes, a soft-cap test and a mask test choosing among
four softmax variants that end in jumps to one join. The walk must take the variant laid out last
(the masked walk: the one before it) and count everything else the warp issues."""
import importlib.machinery
import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_script():
    path = ROOT / "bench" / "diagnostics" / "sm90-loop-path"
    loader = importlib.machinery.SourceFileLoader("sm90_loop_path", str(path))
    spec = importlib.util.spec_from_loader("sm90_loop_path", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def listing(rows):
    """rows: (label, text), addresses 0x10 apart from 0x100; '{label}' in a text -> that address."""
    addr = {label: 0x100 + 0x10 * i for i, (label, _) in enumerate(rows) if label}
    lines = ["        /*%04x*/                   USETMAXREG.TRY_ALLOC.CTAPOOL P0, 0xe8 ;" % 0xF0]
    for i, (_, text) in enumerate(rows):
        lines.append("        /*%04x*/                   %s ;" % (0x100 + 0x10 * i, text.format(**{k: hex(v) for k, v in addr.items()})))
    lines.append("        /*%04x*/                   USETMAXREG.DEALLOC 0x28 ;" % (0x100 + 0x10 * len(rows)))
    return lines


ROWS = [
    ("head", "UIADD3 UR46, UR46, 0x1, URZ"),
    ("", "SYNCS.PHASECHK.TRANS64.TRYWAIT P3, [UR45+0x2c010], R20"),
    ("", "@!P3 BRA {retry}"),
    ("", "HGMMA.64x128x16.F32.BF16 R88, gdesc[UR16], RZ, !UPT"),
    ("", "HGMMA.64x128x16.F32.BF16 R88, gdesc[UR16], R88, gsb0"),
    ("", "HGMMA.64x128x16.F32.BF16 R24, R180, gdesc[UR16].tnspB, R24, gsb0"),
    ("", "WARPGROUP.DEPBAR.LE gsb0, 0x1"),
    ("", "@P5 BRA {after_arrive}"),
    ("", "SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR45+0x2c020], RZ"),
    ("after_arrive", "S2UR UR18, SR_CgaCtaId"),
    ("", "@!P0 BRA {nocap}"),
    ("", "@!P3 BRA P4, {cap_full}"),
    ("", "MUFU.TANH R1, R1"),            # capped, masked
    ("", "BRA {join}"),
    ("cap_full", "MUFU.TANH R2, R2"),    # capped, full
    ("", "BRA {join}"),
    ("nocap", "@!P3 BRA P4, {common}"),
    ("", "ISETP.GE.AND P6, PT, R9, 0x19, PT"),  # uncapped, masked
    ("", "FSEL R3, R3, -INF , !P6"),
    ("", "BRA {join}"),
    ("common", "FFMA R4, R4, R5, -R6"),  # uncapped, full: falls through to the join
    ("", "MUFU.EX2 R4, R4"),
    ("join", "F2FP.BF16.F32.PACK_AB R7, R4, R4"),
    ("", "@!P3 BRA {head}"),
    ("", "EXIT"),
    ("retry", "SYNCS.PHASECHK.TRANS64.TRYWAIT P3, [UR45+0x2c010], R20"),
    ("", "BRA {retry}"),
]


def test_walk_takes_the_common_variant_and_counts_the_rest():
    mod = load_script()
    addrs, ops = mod.consumer_region(listing(ROWS))
    path = [ops[i] for i in mod.loop_path(addrs, ops, hgmma_per_tile=3)]
    text = "\n".join(path)
    # The uncapped, unmasked variant and everything the warp issues on the way to it...
    assert "FFMA R4, R4, R5, -R6" in text and "MUFU.EX2 R4, R4" in text
    assert "SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR45+0x2c020], RZ" in text  # lane 0's arrive: issued
    assert "S2UR UR18, SR_CgaCtaId" in text
    # ...and none of the other three variants or the out-of-line retry loop.
    assert "MUFU.TANH" not in text and "FSEL R3" not in text
    assert sum("TRYWAIT" in op for op in path) == 1
    # The head through the cap test (11 rows), the uncapped variants' dispatch (1), the common
    # variant, the join and the back-edge (4).
    assert len(path) == 16
    assert path[0].startswith("UIADD3") and path[-1].startswith("@!P3 BRA")


def test_masked_walk_takes_the_variant_before_the_common_one():
    mod = load_script()
    addrs, ops = mod.consumer_region(listing(ROWS))
    path = [ops[i] for i in mod.loop_path(addrs, ops, hgmma_per_tile=3, masked=True)]
    text = "\n".join(path)
    assert "FSEL R3, R3, -INF" in text and "ISETP.GE.AND P6" in text
    assert "FFMA R4" not in text and "MUFU.TANH" not in text
    # The same head and dispatch (12 rows), the masked variant with its jump to the join (3), the
    # join and the back-edge (2).
    assert len(path) == 17
    assert path[-1].startswith("@!P3 BRA")


def test_loop_is_found_by_its_hgmma_count():
    mod = load_script()
    addrs, ops = mod.consumer_region(listing(ROWS))
    try:
        mod.loop_path(addrs, ops, hgmma_per_tile=4)
    except ValueError as e:
        assert "no kv loop with 4 HGMMAs" in str(e)
    else:
        raise AssertionError("a loop of 3 HGMMAs must not be taken for one of 4")


def test_listing_mode_counts_every_kernel_and_names_the_ones_without_a_loop(tmp_path):
    # Another library's listing: one row per `Function :`, the same walk as for mlakit's objects.
    mod = load_script()
    body = listing(ROWS)
    text = ["\tFunction : with_loop"] + body + ["\tFunction : without_loop"] + body[:4] + body[-1:]
    path = tmp_path / "peer.sass"
    path.write_text("\n".join(text) + "\n")
    rows = list(mod.listing_rows(str(path), 3))
    assert len(rows) == 2
    assert rows[0].split()[:3] == ["peer.sass#0", "16", "16"]  # no rescale to skip: lean = path
    assert rows[0].split()[-2] == "17"  # the masked walk
    assert "no kv loop with 3 HGMMAs" in rows[1]


def test_lean_walk_skips_a_branch_over_fmuls_only():
    # O's rescale behind a warp vote: the common walk issues it (a lane may take it), the lean walk
    # takes the branch over it; a branch over other code stays a fall-through in both.
    mod = load_script()
    rows = list(ROWS)
    at = [label for label, _ in rows].index("after_arrive")
    rows[at + 1:at + 1] = [
        ("", "@!P2 BRA {after_rescale}"),
        ("", "FMUL R24, R24, R40"),
        ("", "FMUL R25, R25, R40"),
        ("after_rescale", "@!P1 BRA {after_other}"),
        ("", "FADD R26, R26, R41"),
        ("after_other", "NOP"),
    ]
    addrs, ops = mod.consumer_region(listing(rows))
    common = [ops[i] for i in mod.loop_path(addrs, ops, hgmma_per_tile=3)]
    lean = [ops[i] for i in mod.loop_path(addrs, ops, hgmma_per_tile=3, lean=True)]
    assert len(common) == 16 + 6
    assert len(lean) == 16 + 4
    assert not any(op.startswith("FMUL") for op in lean) and any(op.startswith("FADD") for op in lean)
    row = mod.row("k", listing(rows), 3).split()
    assert row[1:3] == ["22", "20"]
    assert row[-1] == "%.1f" % ((20 - 3) / 3)
