"""bench/diagnostics/latent_ab.py without a GPU: the order builds run in, what it reads from a
compare_latent.py JSON, the medians and ratios it prints, and its exit status, with a stand-in
for the benchmark runs."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "diagnostics"))

import latent_ab  # noqa: E402


def test_rounds_alternate_the_order():
    assert latent_ab.schedule(["a", "b", "c"], 3) == [
        (0, "a"), (0, "b"), (0, "c"), (1, "c"), (1, "b"), (1, "a"), (2, "a"), (2, "b"), (2, "c")]


def test_reads_mlakit_times_and_checks():
    doc = {"cases": [
        {"workload": "decode_h128", "results": {"mlakit": {"ms": 0.3, "check": "PASS"}}},
        {"workload": "mtp4_h128", "results": {"mlakit": {"ms": 0.5, "check": "FAIL"}}},
        {"workload": "sparse_h16", "results": {"mlakit": {"not_applicable": "x"}}},
    ]}
    assert latent_ab.parse_cases(doc) == {
        "decode_h128": (0.3, True), "mtp4_h128": (0.5, False), "sparse_h16": (None, False)}


def test_medians_ratios_and_failures():
    runs = [
        ("base", {"w1": (1.0, True), "w2": (2.0, True)}),
        ("new", {"w1": (0.8, True), "w2": (2.2, False)}),
        ("new", {"w1": (0.9, True), "w2": (2.4, True)}),
        ("base", {"w1": (1.2, True), "w2": (2.0, True)}),
    ]
    rows = dict(latent_ab.summarize(["base", "new"], runs))
    (_, b_ms, b_ratio, b_ok), (_, n_ms, n_ratio, n_ok) = rows["w1"]
    assert (b_ms, b_ratio, b_ok) == (pytest.approx(1.1), pytest.approx(1.0), True)
    assert (n_ms, n_ratio, n_ok) == (pytest.approx(0.85), pytest.approx(0.85 / 1.1), True)
    assert rows["w2"][1][3] is False  # one of its runs failed the check


def test_main_runs_each_build_in_turn(tmp_path, capsys):
    calls = []

    def runner(build_dir, workloads, extra, timeout):
        calls.append((build_dir, tuple(workloads), tuple(extra)))
        return {"decode_h16": (0.2 if build_dir == "A" else 0.1, True)}

    out_json = tmp_path / "ab.json"
    rc = latent_ab.main(["--build", "a=A", "--build", "b=B", "--workload", "decode_h16", "--device", "cpu",
                         "--json", str(out_json)], runner=runner)
    assert rc == 0
    assert [c[0] for c in calls] == ["A", "B", "B", "A"]
    assert calls[0][1:] == (("decode_h16",), ("--device", "cpu"))
    text = capsys.readouterr().out
    assert "| decode_h16 | 0.2000 ms x1.000 | 0.1000 ms x0.500 |" in text
    assert out_json.exists()


def test_a_failed_or_missing_run_fails(capsys):
    def runner(build_dir, workloads, extra, timeout):
        return {} if build_dir == "B" else {"decode_h16": (0.2, True)}

    assert latent_ab.main(["--build", "a=A", "--build", "b=B", "--rounds", "1"], runner=runner) == 1
    assert "no result" in capsys.readouterr().out


def test_bad_build_argument():
    with pytest.raises(SystemExit):
        latent_ab.main(["--build", "nodir"], runner=lambda *a: {})


def test_times_two_copies_of_the_installed_extension_on_the_cpu(tmp_path, capsys):
    # End to end: compare_latent.py in a process per build, each with its own copy of the
    # extension file first on PYTHONPATH.
    pytest.importorskip("torch")
    mlakit = pytest.importorskip("mlakit")
    import shutil

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        shutil.copy(mlakit._C.__file__, tmp_path / name)
    rc = latent_ab.main(["--build", f"a={tmp_path / 'a'}", "--build", f"b={tmp_path / 'b'}", "--rounds", "1",
                         "--workload", "decode_h16", "--device", "cpu", "--smoke"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "| decode_h16 | " in out and " x1.000 | " in out and "FAIL" not in out


def run_gpu_check_latent_ab(tmp_path, **env_extra):
    import subprocess

    repo = os.path.abspath(os.path.join(HERE, "..", ".."))
    # gpu-check runs `python3`: this interpreter's (its torch and mlakit).
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    env = dict(os.environ, PATH=path, MLAKIT_SKIP_BUILD="1", MLAKIT_BUILD_DIR=str(tmp_path / "build"),
               GPU_CHECK_STEPS="latent-ab", MLAKIT_GIT_COMMIT="test", **env_extra)
    out = tmp_path / "out"
    proc = subprocess.run(["bash", os.path.join(repo, "scripts", "gpu-check"), str(out)], env=env,
                          capture_output=True, text=True, timeout=600)
    return proc, out


def test_gpu_check_step_times_the_given_builds_and_its_own(tmp_path):
    # scripts/gpu-check's latent-ab step: the builds of LATENT_AB_BUILDS, then the build dir's
    # python/ as `this`, timed in turns; its log, JSON and summary line.
    pytest.importorskip("torch")
    mlakit = pytest.importorskip("mlakit")
    import json
    import shutil

    (tmp_path / "base").mkdir()
    (tmp_path / "build" / "python").mkdir(parents=True)
    for d in (tmp_path / "base", tmp_path / "build" / "python"):
        shutil.copy(mlakit._C.__file__, d)
    proc, out = run_gpu_check_latent_ab(
        tmp_path, LATENT_AB_BUILDS=f"base={tmp_path / 'base'}",
        LATENT_AB_ARGS="--rounds 1 --workload decode_h16 --device cpu --smoke")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((out / "latent_ab.json").read_text())
    assert list(doc["builds"]) == ["base", "this"]
    assert [r["build"] for r in doc["runs"]] == ["base", "this"]
    assert "| decode_h16 | " in (out / "latent_ab.log").read_text()
    assert "latent-ab: ok" in (out / "summary.txt").read_text()


def test_gpu_check_step_without_builds_does_nothing(tmp_path):
    proc, out = run_gpu_check_latent_ab(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no LATENT_AB_BUILDS; skipped" in proc.stdout
    assert not (out / "latent_ab.json").exists()
