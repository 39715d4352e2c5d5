"""bench/diagnostics/timeline_kernels.py: per-kernel totals and the idle time between activities, from the
per-step activity lists compare_mla.py --timeline writes."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "diagnostics"))
import timeline_kernels as tk  # noqa: E402


def test_short_names_drop_templates_and_parameters():
    assert tk.short("void prefill_sm90_kernel<__nv_bfloat16, Sm90Shape<192, 128>>(Sm90Params)") == \
        "prefill_sm90_kernel"
    assert tk.short("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64") == \
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesiz"


def test_totals_and_idle_by_pair():
    # Two steps: gather 0-5, gemm 7-57, attention 60-160 (gaps 2 and 3 us); the second step
    # lists its activities out of order and overlaps gemm with gather (no idle there).
    p = {"path": "p", "steps": {
        "0": {"activities": [["void gather_kernel<x>(a)", 0, 5], ["gemm", 7, 50], ["attn(a)", 60, 100]]},
        "1": {"activities": [["attn(a)", 58, 100], ["void gather_kernel<x>(a)", 0, 5], ["gemm", 4, 50]]},
    }}
    out = tk.summarize(p, top=5)
    lines = out.splitlines()
    assert lines[0] == "p: 2 steps, kernel time 0.31 ms, idle between activities 0.01 ms"
    attn = next(l for l in lines if l.strip().startswith("attn"))
    assert attn.split()[1:4] == ["2", "0.200", "100.00"]
    pairs = {l.split(" ms ", 1)[1].strip(): float(l.split()[0]) for l in lines if "->" in l}
    assert pairs == {"gemm -> attn": 0.007, "gather_kernel -> gemm": 0.002}
