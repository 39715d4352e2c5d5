"""bench/diagnostics/prefill_ab.py without a GPU: what it reads from mlakit-bench's and
prefill_energy.py's JSON, the turns and the table with a stand-in runner, and end to end with the
build's mlakit-bench on the CPU backend."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "diagnostics"))

import prefill_ab  # noqa: E402


def test_reads_mlakit_bench_results_and_checks():
    doc = {"results": [
        {"workload": "1x999", "ok": True, "pass": True, "ms": 0.022},
        {"workload": "1x16384", "ok": True, "pass": False, "ms": 1.8},  # its check failed
        {"workload": "v3_128h_8192", "ok": False, "error": "x"},
    ]}
    assert prefill_ab.parse_bench(doc) == {
        "1x999": (0.022, True), "1x16384": (1.8, False), "v3_128h_8192": (None, False)}


def test_reads_the_mlakit_rows_of_prefill_energy():
    doc = {"rows": [{"workload": "1x16384", "method": "mlakit", "ms": 2.02, "j_per_launch": 1.40},
                    {"workload": "1x16384", "method": "flashinfer_fa3", "ms": 2.0, "j_per_launch": 1.41},
                    {"workload": "v3_128h_8192", "method": "mlakit", "ms": 4.2, "j_per_launch": None}]}
    assert prefill_ab.parse_energy(doc) == {
        "1x16384 sustained": (2.02, True), "1x16384 energy": (1.40, True),
        "v3_128h_8192 sustained": (4.2, True), "v3_128h_8192 energy": (None, False)}
    assert prefill_ab.unit_of("1x16384 energy") == "J" and prefill_ab.unit_of("1x16384 sustained") == "ms"


def test_turns_table_and_units(capsys):
    calls = []

    def runner(build_dir, workloads, extra, timeout):
        calls.append(build_dir)
        fast = build_dir == "B"
        return {"1x16384": (1.8 if fast else 2.0, True), "1x16384 energy": (1.3 if fast else 1.4, True)}

    rc = prefill_ab.main(["--build", "a=A", "--build", "b=B", "--rounds", "2", "--energy-workload", "1x16384"],
                         runner=runner)
    assert rc == 0
    assert calls == ["A", "B", "B", "A"]
    out = capsys.readouterr().out
    assert "| 1x16384 | 2.0000 ms x1.000 | 1.8000 ms x0.900 |" in out
    assert "| 1x16384 energy | 1.4000 J x1.000 | 1.3000 J x0.929 |" in out


def test_end_to_end_on_the_cpu_backend(tmp_path, capsys):
    # Two build dirs holding the build's mlakit-bench, run on the CPU backend (no energy rows:
    # those need a GPU).
    bench = os.environ.get("MLAKIT_BENCH")
    if not bench or not os.path.exists(bench):
        pytest.skip("MLAKIT_BENCH names no mlakit-bench binary (scripts/run-tests sets it)")
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        os.symlink(bench, tmp_path / name / "mlakit-bench")
    rc = prefill_ab.main(["--build", f"a={tmp_path / 'a'}", "--build", f"b={tmp_path / 'b'}", "--rounds", "1",
                          "--workload", "1x999", "--device", "cpu", "--iters", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "| 1x999 | " in out and " x1.000 | " in out and "FAIL" not in out


def test_gpu_check_step_times_the_given_builds_and_its_own(tmp_path):
    # scripts/gpu-check's prefill-ab step: the builds of PREFILL_AB_BUILDS, then the build dir as
    # `this`, timed in turns (here on the CPU backend); its log, JSON and summary line. Without
    # builds it does nothing.
    import json
    import subprocess

    bench = os.environ.get("MLAKIT_BENCH")
    if not bench or not os.path.exists(bench):
        pytest.skip("MLAKIT_BENCH names no mlakit-bench binary (scripts/run-tests sets it)")
    for d in (tmp_path / "base", tmp_path / "build"):
        d.mkdir()
        os.symlink(bench, d / "mlakit-bench")
    repo = os.path.abspath(os.path.join(HERE, "..", ".."))
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    env = dict(os.environ, PATH=path, MLAKIT_SKIP_BUILD="1", MLAKIT_BUILD_DIR=str(tmp_path / "build"),
               GPU_CHECK_STEPS="prefill-ab", MLAKIT_GIT_COMMIT="test")
    run = lambda out, **e: subprocess.run(["bash", os.path.join(repo, "scripts", "gpu-check"), str(out)],  # noqa: E731
                                          env=dict(env, **e), capture_output=True, text=True, timeout=600)
    proc = run(tmp_path / "none")
    assert proc.returncode == 0 and "no PREFILL_AB_BUILDS; skipped" in proc.stdout, proc.stdout + proc.stderr
    out = tmp_path / "out"
    proc = run(out, PREFILL_AB_BUILDS=f"base={tmp_path / 'base'}",
               PREFILL_AB_ARGS="--rounds 1 --workload 1x999 --device cpu --iters 1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((out / "prefill_ab.json").read_text())
    assert list(doc["builds"]) == ["base", "this"]
    assert "| 1x999 | " in (out / "prefill_ab.log").read_text()
    assert "prefill-ab: ok" in (out / "summary.txt").read_text()
