"""The Python examples an engine author reads first, examples/mla_prefill_vllm_style.py (prefill),
examples/mla_decode_absorbed.py (decode, MTP and V3.2 sparse in the latent space) and
examples/mla_step_serving.py (prefill, decode and MTP steps through one MlaStep), run on the
CPU and match attention over the expanded cache (each example asserts its own error bound; a
failure shows as a non-zero exit)."""
import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
EXAMPLE = os.path.join(EXAMPLES, "mla_prefill_vllm_style.py")


def test_mla_prefill_vllm_style_runs_on_cpu():
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, EXAMPLE, "--device", "cpu", "--heads", "4"], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "device=cpu" in proc.stdout


def test_mla_decode_absorbed_runs_on_cpu():
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, os.path.join(EXAMPLES, "mla_decode_absorbed.py"), "--device", "cpu",
                           "--heads", "4"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "decode/MTP: device=cpu" in proc.stdout and "DSA sparse: device=cpu" in proc.stdout
    assert "DSA sparse, fp8_ds_mla cache: device=cpu" in proc.stdout


def test_mla_step_serving_runs_on_cpu():
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, os.path.join(EXAMPLES, "mla_step_serving.py"), "--device", "cpu",
                           "--heads", "4"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 of 3 requests absorbed" in proc.stdout and "device=cpu heads=4: ok" in proc.stdout
