"""bench/diagnostics/latent_launch.py on the CPU: it builds a compare_latent workload as the
benchmark does (dense and sparse by slots), runs it and reports the plan; an unknown name fails."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "diagnostics"))
sys.path.insert(0, os.path.join(HERE, ".."))


@pytest.mark.parametrize("name,extra", [("decode_h16", []), ("sparse_h16", ["--slots"])])
def test_runs_a_workload_as_the_benchmark_builds_it(name, extra, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("mlakit")
    import latent_launch
    import latent_workloads as LW

    latent_launch.main([name, "--smoke", "--device", "cpu", "--runs", "3"] + extra)
    line = capsys.readouterr().out.strip().splitlines()[-1]
    (w,) = LW.select([name], smoke=True)
    assert line.startswith(f"{name}: {w.describe()}; 3 runs;")
    assert f"'visible_pairs': {w.visible_pairs()}" in line
    assert line.endswith("out finite: True")


def test_unknown_workload_fails():
    pytest.importorskip("torch")
    import latent_launch

    with pytest.raises(ValueError):
        latent_launch.main(["decode_h7", "--smoke", "--device", "cpu"])
