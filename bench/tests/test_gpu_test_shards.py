"""scripts/gpu_test_shards.py (the GPU tests' balanced processes) and scripts/gpu-check's gpu-tests
step with a stand-in mlakit_gpu_tests: every listed test runs in exactly one process, the
processes' work is balanced by the seconds table, and a TERM to gpu-check alone kills them."""
import os
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import gpu_test_shards as shards  # noqa: E402

LIST = """Running main() from ./googletest/src/gtest_main.cc
CudaPlanReuse.
  OnePlanManyLayers
Dims/CudaFp8.
  WithoutDescales/d128x128  # GetParam() = 128
  WithoutDescales/d192x128  # GetParam() = 192
Kernels/CudaScale.  # TypeParam = int
  ThousandShortSequences/sm90  # GetParam() = 4-byte object <5A-00 00-00>
"""
NAMES = ["CudaPlanReuse.OnePlanManyLayers", "Dims/CudaFp8.WithoutDescales/d128x128",
         "Dims/CudaFp8.WithoutDescales/d192x128", "Kernels/CudaScale.ThousandShortSequences/sm90"]


def test_the_list_gives_full_names_without_comments():
    assert shards.parse_test_list(LIST) == NAMES


def test_costs_come_from_ok_skipped_and_failed_lines_keeping_the_longest():
    log = "\n".join([
        "[       OK ] A.x (1500 ms)",
        "[  SKIPPED ] B.y/sm80 (0 ms)",
        "[  FAILED  ] Dims/C.z/d128, where GetParam() = 128 (6904 ms)",
        "[  FAILED  ] Dims/C.z/d128, where GetParam() = 128",  # gtest's closing list: no time
        "[       OK ] A.x (900 ms)",
        "[ RUN      ] D.w",
    ])
    assert shards.costs_from_log(log) == {"A.x": 1.5, "B.y/sm80": 0.0, "Dims/C.z/d128": 6.904}


def test_every_test_lands_once_and_the_longest_go_first_to_the_least_loaded():
    costs = {f"T.t{i}": float(c) for i, c in enumerate([60, 50, 40, 30, 20, 10, 5, 5, 5, 5])}
    names = sorted(costs) + ["T.new"]  # not in the table: the median (7.5 s... 15 s here)
    out = shards.balanced_shards(names, costs, 4)
    flat = [n for s in out for n in s]
    assert sorted(flat) == sorted(names)
    loads = [sum(costs.get(n, 15.0) for n in s) for s in out]
    # List scheduling, longest first: no process beyond the mean plus the longest test.
    assert max(loads) <= sum(loads) / 4 + 60
    assert out[0][0] == "T.t0" and out[1][0] == "T.t1"  # the two longest start on their own
    assert shards.balanced_shards(names, costs, 4) == out  # the same split every time


def test_fewer_tests_than_processes_leaves_no_empty_process():
    assert shards.balanced_shards(["A.a", "A.b"], {}, 8) == [["A.a"], ["A.b"]]


# Lists NAMES for --gtest_list_tests; otherwise logs its filter, then prints a RUN/OK pair per
# test in it and gtest's closing line; with FAKE_SLEEP, first sleeps (its pid in $FAKE_PIDS).
FAKE_TESTS = r"""#!/bin/bash
filter=
for a in "$@"; do
  case "$a" in --gtest_list_tests) printf '%s' "$FAKE_LIST"; exit 0 ;; --gtest_filter=*) filter=${a#--gtest_filter=} ;; esac
done
echo "$filter" >> "$FAKE_LOG"
if [ -n "${FAKE_SLEEP:-}" ]; then echo $$ >> "$FAKE_PIDS"; sleep "$FAKE_SLEEP"; fi
n=0
for t in $(tr ':' ' ' <<< "$filter"); do echo "[ RUN      ] $t"; echo "[       OK ] $t (1 ms)"; n=$((n+1)); done
echo "[  PASSED  ] $n tests."
"""


def gpu_check(tmp_path, wait=True, steps="gpu-tests", **env_extra):
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    build = tmp_path / "build"
    build.mkdir()
    fake = build / "mlakit_gpu_tests"
    fake.write_text(FAKE_TESTS)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, MLAKIT_SKIP_BUILD="1", MLAKIT_BUILD_DIR=str(build), GPU_CHECK_STEPS=steps,
               MLAKIT_GIT_COMMIT="test", FAKE_LIST=LIST, FAKE_LOG=str(tmp_path / "filters.log"),
               FAKE_PIDS=str(tmp_path / "pids"), **env_extra)
    proc = subprocess.Popen(["bash", os.path.join(REPO, "scripts", "gpu-check"), str(tmp_path / "out")], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if wait:
        proc.communicate(timeout=120)
    return proc


def test_each_listed_test_runs_in_exactly_one_balanced_process(tmp_path):
    proc = gpu_check(tmp_path, GPU_TEST_SHARDS="3")
    filters = (tmp_path / "filters.log").read_text().splitlines()
    assert len(filters) == 3
    ran = [t for f in filters for t in f.split(":")]
    assert sorted(ran) == sorted(NAMES)
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "gpu tests: 4 passed, 0 failed" in summary, summary
    assert proc.returncode == 0


def test_a_term_kills_the_test_processes_and_no_later_step_runs(tmp_path):
    proc = gpu_check(tmp_path, wait=False, steps="gpu-tests,pytest", GPU_TEST_SHARDS="2", FAKE_SLEEP="60")
    pids_file = tmp_path / "pids"
    deadline = time.time() + 30
    while time.time() < deadline and (not pids_file.exists() or len(pids_file.read_text().split()) < 2):
        time.sleep(0.1)
    pids = [int(p) for p in pids_file.read_text().split()]
    assert len(pids) == 2
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    for pid in pids:
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"test process {pid} outlived gpu-check's TERM")
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "stopped by a signal" in summary, summary
    assert "pytest: skipped" in summary, summary
    assert proc.returncode != 0
