"""bench/compare_cpu_latent.py --smoke on the CPU: it runs end to end in one process, mlakit and
both PyTorch paths agree on every workload (dense decode, MTP, sparse), and the JSON holds the
ceiling, the per-workload figures and the plans."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "compare_cpu_latent.py")


def test_smoke_runs_and_records(tmp_path):
    pytest.importorskip("torch")
    mlakit = pytest.importorskip("mlakit")
    out = tmp_path / "cpu_latent.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    run = subprocess.run([sys.executable, SCRIPT, "--smoke", "--json", str(out)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "bf16 matrix product 2048^3" in run.stdout
    res = json.loads(out.read_text())
    assert res["bf16_matmul_ceiling_gflops"] > 0
    assert res["mlakit_info"]["cpu_isa"] == mlakit.info()["cpu_isa"]
    assert [r["workload"].split()[0] for r in res["latent"]] == ["decode", "mtp2", "sparse", "decode_fp8", "sparse_fp8"]
    for row in res["latent"]:
        assert row["rel_err"]["mlakit_vs_torch_matmul"] < 2e-2
        assert row["rel_err"]["torch_sdpa_vs_torch_matmul"] < 2e-2
        assert all(v > 0 for v in row["gflops"].values()) and row["ratio_vs_best_torch"] > 0
        assert row["plan"]["num_items"] > 0
