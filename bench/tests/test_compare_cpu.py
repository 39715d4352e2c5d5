"""bench/compare_cpu.py --smoke on the CPU: it runs end to end in one process, mlakit agrees with
PyTorch on every shape and on the MLA step, and the JSON holds the ceiling, the per-shape figures,
the thread scaling, the MLA step and what ran (mlakit.info())."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "compare_cpu.py")


def test_smoke_runs_and_records(tmp_path):
    pytest.importorskip("torch")
    mlakit = pytest.importorskip("mlakit")
    out = tmp_path / "cpu.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    run = subprocess.run([sys.executable, SCRIPT, "--smoke", "--json", str(out)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "bf16 matrix product 2048^3" in run.stdout
    res = json.loads(out.read_text())
    assert res["bf16_matmul_ceiling_gflops"] > 0
    assert res["mlakit_info"]["cpu_isa"] == mlakit.info()["cpu_isa"]
    assert len(res["attention"]) == 2
    for row in res["attention"]:
        assert row["rel_err"]["mlakit_vs_torch_flash"] < 2e-2
        assert all(v > 0 for v in row["gflops"].values())
    if res["threads"] > 1:
        assert res["scaling"][0]["mlakit_gflops"]["1"] > 0
    assert res["mla"]["rel_err_last_step"] < 3e-2 and res["mla"]["ratio"] > 0
