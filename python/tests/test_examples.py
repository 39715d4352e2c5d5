"""The Python example an engine author reads first, examples/mla_prefill_vllm_style.py, runs on the
CPU and matches naive attention over the expanded cache (the example asserts its own error bound;
a failure shows as a non-zero exit)."""
import os
import subprocess
import sys

import pytest

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "mla_prefill_vllm_style.py")


def test_mla_prefill_vllm_style_runs_on_cpu():
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, EXAMPLE, "--device", "cpu", "--heads", "4"], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "device=cpu" in proc.stdout
