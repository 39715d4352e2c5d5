"""bench/compare_latent.py's host parts on the CPU: the workloads' counting, the method list, and a
--device cpu --smoke run end to end (inputs, the float32 reference check, tables, JSON; the GPU
peers reported as skipped with their reason); and that scripts/gpu-check lists its step."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..")
REPO = os.path.join(BENCH, "..")
sys.path.insert(0, BENCH)

import latent_workloads as LW  # noqa: E402


def test_counting_follows_the_peers():
    w = LW.LatentWorkload("t", "mtp", 16, 3, [10, 5])
    assert w.visible_pairs() == (8 + 9 + 10) + (3 + 4 + 5)  # bottom-right causal among the new tokens
    assert w.flops() == 2 * (576 + 512) * 16 * w.visible_pairs()
    assert w.dense_bytes() == 15 * 1152
    s = LW.LatentWorkload("s", "sparse", 64, 4, [300], topk=128)
    assert s.visible_pairs() == 4 * 128 and s.sparse and not s.causal
    full = {x.name: x for x in LW.all_workloads()}
    assert full["decode_h128"].flops() == 2176 * 128 * 128 * 4096
    assert full["sparse_h16"].total_q == 4096 and full["sparse_h16"].topk == 2048
    lens = full["ragged_h16"].kv_lens
    assert len(lens) == 128 and 512 <= min(lens) and max(lens) <= 8192 and lens == full["ragged_h128"].kv_lens
    assert [x.name for x in LW.select(["sparse"])] == ["sparse_h128", "sparse_h64", "sparse_h32", "sparse_h16"]
    with pytest.raises(ValueError):
        LW.select(["nope"])


def test_methods_and_aliases():
    import compare_latent as CL
    assert CL.parse_methods("mlakit,torch") == ["mlakit", "torch_sdpa", "torch_matmul"]
    assert CL.parse_methods("flashinfer_fa3_p64") == ["flashinfer_fa3_p64"]
    assert "mlakit" not in CL.parse_methods("peers")
    with pytest.raises(ValueError):
        CL.parse_methods("flashinfer_fa9_p16")


def test_cpu_smoke_runs_and_records(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("mlakit")
    out = tmp_path / "latent.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    cmd = [sys.executable, os.path.join(BENCH, "compare_latent.py"), "--device", "cpu", "--smoke",
           "--methods", "mlakit,mlakit_slots,torch,flashmla,flashmla_sparse,flashinfer_fa3_p16",
           "--workload", "decode_h16", "--workload", "mtp4_h16", "--workload", "sparse_h16", "--json", str(out)]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "sparse prefill (DSA)" in run.stdout and "MTP / extend" in run.stdout
    doc = json.loads(out.read_text())
    assert doc["smoke"] and doc["ceilings"] and not doc["failed"]
    cases = {c["workload"]: c for c in doc["cases"]}
    assert list(cases) == ["decode_h16", "mtp4_h16", "sparse_h16"]
    for name, c in cases.items():
        res = c["results"]
        for m in ("mlakit", "torch_sdpa", "torch_matmul"):
            assert res[m]["check"] == "PASS" and res[m]["ms"] > 0 and res[m]["tflops"] > 0, (name, m, res[m])
        assert res["mlakit"]["vs_mlakit"] == 1.0 and res["mlakit"]["plan_us"] > 0
        assert res["mlakit"]["plan_info"]["visible_pairs"] == c["visible_pairs"]
        peer = "flashmla_sparse" if c["topk"] else "flashmla"
        assert res[peer]["skipped"] == "needs a CUDA device"
        assert "not_applicable" in res["flashmla" if c["topk"] else "flashmla_sparse"]
    assert cases["sparse_h16"]["results"]["mlakit_slots"]["check"] == "PASS"
    assert cases["sparse_h16"]["gathered_bytes"] == 64 * 128 * 1152


def test_gpu_check_lists_the_step():
    text = open(os.path.join(REPO, "scripts", "gpu-check")).read()
    steps = next(line for line in text.splitlines() if line.startswith("ALL_STEPS=("))
    assert "compare-latent" in steps.split()
    assert "bench/compare_latent.py --json \"$RESULTS/compare_latent.json\"" in text
