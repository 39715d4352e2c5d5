"""scripts/gpu-check's sanitize step, run here with a stand-in compute-sanitizer on PATH: which
gtest filter each tool gets in which process (racecheck without the tests that run a cuBLASLt
GEMM; the merge kernel's tests in a process of their own per tool, SANITIZE_SOLO_FILTER; a
tool's tests split into balanced processes when the test binary lists them), that the passed
counts and every process's summary reach the summary, and that one failing process fails the
step."""
import os
import shutil
import stat
import subprocess

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# Logs "<tool> <filter>" per call, prints gtest's closing line and a sanitizer summary; exits 9
# (with one error) when FAIL_ON names the tool and the filter holds FAIL_IF.
FAKE_SANITIZER = r"""#!/bin/bash
tool=; filter=
for a in "$@"; do
  case "$a" in --gtest_filter=*) filter=${a#--gtest_filter=} ;; esac
done
while [ $# -gt 0 ]; do [ "$1" = --tool ] && tool=$2; shift; done
echo "$tool $filter" >> "$SAN_LOG"
n=$(tr ':' '\n' <<< "$filter" | wc -l)
echo "[  PASSED  ] $n tests."
if [ "$tool" = "${FAIL_ON:-}" ] && [[ "$filter" == *"${FAIL_IF:-@}"* ]]; then
  echo "========= ERROR SUMMARY: 1 error"; exit 9
fi
echo "========= ERROR SUMMARY: 0 errors"
"""


def run_sanitize(tmp_path, gpu_tests="#!/bin/sh\nexit 1\n", **env_extra):
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    bin_dir = tmp_path / "bin"
    build = tmp_path / "build"
    bin_dir.mkdir()
    build.mkdir()
    for path, text in ((bin_dir / "compute-sanitizer", FAKE_SANITIZER),
                       (build / "mlakit_gpu_tests", gpu_tests)):
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "san.log"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", SAN_LOG=str(log),
               MLAKIT_SKIP_BUILD="1", MLAKIT_BUILD_DIR=str(build), GPU_CHECK_STEPS="sanitize",
               MLAKIT_GIT_COMMIT="test", **env_extra)
    out = tmp_path / "out"
    proc = subprocess.run(["bash", os.path.join(REPO, "scripts", "gpu-check"), str(out)], env=env,
                          capture_output=True, text=True, timeout=120)
    # The tools run at once: their calls in a fixed order, per tool the main filter's parts first
    # and the solo filter's last.
    solo = env_extra.get("SANITIZE_SOLO_FILTER", "Types/CudaMerge.*")
    calls = sorted((line.split(" ", 1) for line in log.read_text().splitlines()),
                   key=lambda c: (c[0], c[1] == solo, c[1]))
    return proc, calls, (out / "summary.txt").read_text()


def test_each_tool_runs_the_filter_then_the_merge_tests_in_a_second_process(tmp_path):
    proc, calls, summary = run_sanitize(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [tool for tool, _ in calls] == ["memcheck", "memcheck", "racecheck", "racecheck",
                                           "synccheck", "synccheck"]
    for i in (1, 3, 5):
        assert calls[i][1] == "Types/CudaMerge.*"
    for tool, filt in (calls[0], calls[4]):
        assert "CudaMlaGemm" in filt and "CudaMlaStep" in filt and "CudaPrefill" in filt, tool
        assert "CudaMerge" not in filt
    for tool, filt in (calls[0], calls[4]):  # the MLA step on FP8 caches, eager and graph-replayed
        assert "CudaMlaStepFp8Cache" in filt and "CudaMlaGraphFp8Cache" in filt, tool
    race = calls[2][1]
    assert "CudaPrefill" in race and "CudaMlaGatherOp" in race
    # The FP8 (e4m3) kernel's cases go under every tool.
    for _, filt in calls[0], calls[2], calls[4]:
        assert "CudaPrefill.*/sm90_d192x128_e4m3" in filt and "CudaFp8" in filt
    for name in ("CudaMlaGemm", "CudaMlaStep", "CudaMlaGraph"):  # the FP8-cache suites' names too
        assert name not in race
    main_tests = calls[0][1].count(":") + 1
    line = next(l for l in summary.splitlines() if "sanitize memcheck:" in l)
    assert f"{main_tests + 1} tests passed" in line
    assert line.endswith("ERROR SUMMARY: 0 errors; ERROR SUMMARY: 0 errors")
    assert "sanitize: ok" in summary


def test_a_failing_second_process_fails_the_step(tmp_path):
    proc, calls, summary = run_sanitize(tmp_path, FAIL_ON="synccheck", FAIL_IF="CudaMerge")
    assert proc.returncode != 0
    assert len(calls) == 6  # the tools after a failure still run
    line = next(l for l in summary.splitlines() if "sanitize synccheck:" in l)
    assert "exit 9" in line and "1 error" in line
    assert "sanitize: FAILED (exit 9)" in summary


def test_an_empty_solo_filter_runs_one_process_per_tool(tmp_path):
    proc, calls, _ = run_sanitize(tmp_path, SANITIZE_SOLO_FILTER="", SANITIZE_TOOLS="memcheck")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(calls) == 1 and calls[0][0] == "memcheck"


# Lists four tests for --gtest_list_tests (whatever the filter), as the real binary lists a filter's.
LISTING_TESTS = """#!/bin/sh
for a in "$@"; do
  if [ "$a" = --gtest_list_tests ]; then
    printf 'Dims/CudaFp8.\n  WithoutDescales/d192x128\n  NanInRows/d192x128\nCudaLatentTest.\n  AttentionSink\n  LongDecodeSplitsAndMerges\n'
    exit 0
  fi
done
exit 1
"""


def test_a_tools_tests_split_into_processes_that_run_each_once(tmp_path):
    proc, calls, summary = run_sanitize(tmp_path, gpu_tests=LISTING_TESTS, SANITIZE_PROCS="2",
                                        SANITIZE_SOLO_FILTER="", SANITIZE_TOOLS="memcheck racecheck")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    want = sorted(["Dims/CudaFp8.WithoutDescales/d192x128", "Dims/CudaFp8.NanInRows/d192x128",
                   "CudaLatentTest.AttentionSink", "CudaLatentTest.LongDecodeSplitsAndMerges"])
    for tool in ("memcheck", "racecheck"):
        parts = [f for t, f in calls if t == tool]
        assert len(parts) == 2, parts
        assert sorted(n for f in parts for n in f.split(":")) == want
        line = next(l for l in summary.splitlines() if f"sanitize {tool}:" in l)
        assert "4 tests passed in 2 processes" in line, line
