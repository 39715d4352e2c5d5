"""bench/compare_cpu.py --smoke on the CPU: it runs end to end in one process, every mlakit path it
times agrees with PyTorch on every shape and on the MLA step, and the JSON holds the ceiling, the
per-shape figures of each path, the thread scaling, the MLA step, the targets and what ran
(mlakit.info(), the paths, OpenMP's wait policy)."""
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
    info = mlakit.info()
    assert res["mlakit_info"]["cpu_isa"] == info["cpu_isa"]
    # The best path first, and avx512bf16 beside amx where amx is the best.
    assert res["paths"][0] == info["cpu_isa_best"]
    assert res["paths"] == (["amx", "avx512bf16"] if info["cpu_isa_best"] == "amx" else [info["cpu_isa_best"]])
    assert res["omp_wait_policy"] == os.environ.get("OMP_WAIT_POLICY", "PASSIVE")
    assert len(res["attention"]) == 2
    for row in res["attention"]:
        for p in res["paths"]:
            assert row["rel_err"][f"mlakit_{p}_vs_torch_flash"] < 2e-2
            assert row["gflops"][f"mlakit_{p}"] > 0
        assert all(v > 0 for v in row["gflops"].values())
        assert row["ratio_vs_torch_flash"] == row["gflops"]["mlakit"] / row["gflops"]["torch_flash"]
    if res["threads"] > 1:
        sc = res["scaling"][0]
        assert sc["mlakit_gflops"]["1"] > 0
        assert set(sc["gflops"]) >= {"1", str(res["threads"])}
    assert res["mla"]["rel_err_last_step"] < 3e-2 and res["mla"]["ratio"] > 0
    assert set(res["mla"]["ratios"]) == set(res["paths"])
    assert res["targets"] and all(isinstance(t["met"], bool) for t in res["targets"])
