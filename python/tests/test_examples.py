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


def run_example(name):
    """examples/<name> on the CPU at 4 heads, with this interpreter's import path; its stdout."""
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, os.path.join(EXAMPLES, name), "--device", "cpu", "--heads", "4"],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_mla_prefill_vllm_style_runs_on_cpu():
    assert "device=cpu" in run_example("mla_prefill_vllm_style.py")


def test_mla_decode_absorbed_runs_on_cpu():
    out = run_example("mla_decode_absorbed.py")
    assert "decode/MTP: device=cpu" in out and "DSA sparse: device=cpu" in out
    assert "DSA sparse, fp8_ds_mla cache: device=cpu" in out
    assert "FlashMLA's interface, MTP: device=cpu" in out


def test_mla_step_serving_runs_on_cpu():
    out = run_example("mla_step_serving.py")
    assert "3 of 3 requests absorbed" in out and "device=cpu heads=4: ok" in out
