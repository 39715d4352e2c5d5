"""bench/device_env.sh's ab_rounds and mla_record: the blocks the device scripts share. ab_rounds
runs here with stand-in binaries that print mlakit-bench table rows, so the rows it keeps, the
build it names each row by, the round order and the per-workload summary are checked without a
GPU; mla_record runs compare_mla.py's CPU smoke mode."""
import gzip
import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

REPO = os.path.join(os.path.dirname(__file__), "..", "..")

# A stand-in for mlakit-bench: a header line, then one table row per workload whose TFLOP/s
# (column 6 of the bench row, 8 once ab_rounds has prefixed the build and round) comes from the
# binary's name and a per-binary call counter, so every round reads differently; it also logs the
# arguments it got.
FAKE = r"""#!/bin/bash
n=$(( $(cat "$0.count" 2>/dev/null || echo 0) + 1 )); echo $n > "$0.count"
echo "$*" >> "$0.args"
echo "workload  device  batch  q/kv  ms  TFLOP/s"
echo "1x999                      cuda:0/sm90     1       999/999     0.023       $((BASE + n)).5   28.2%"
echo "100x999                    cuda:0/sm90   100   99900/99900     1.034       $((BASE + 10 * n)).0   63.9%"
echo "an error line on stderr" >&2
"""


@pytest.fixture
def fakes(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    paths = []
    for name, base in (("mb-a", 200), ("mb-b", 300)):
        p = tmp_path / name
        p.write_text(FAKE.replace("$((BASE", f"$(({base}"))
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
        paths.append(str(p))
    return tmp_path, paths


def run_ab(tmp_path, args):
    script = f'source bench/device_env.sh > /dev/null; ab_rounds {tmp_path}/ab.txt {" ".join(args)}'
    out = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines(), (tmp_path / "ab.txt").read_text().splitlines()


def test_rounds_alternate_builds_and_summary_sorts_each_build(fakes):
    tmp_path, (a, b) = fakes
    summary, rows = run_ab(tmp_path, ["3", a, b])
    # Rounds alternate the builds: a r1, b r1, a r2, ... ; only the table rows are kept.
    assert [r.split()[:3] for r in rows] == [
        [bld, f"r{r}", w] for r in (1, 2, 3) for bld in ("mb-a", "mb-b") for w in ("1x999", "100x999")]
    # Per workload, one line per build with its TFLOP/s over the rounds, sorted.
    assert summary == [
        "100x999 mb-a 210.0 220.0 230.0 ",
        "100x999 mb-b 310.0 320.0 330.0 ",
        "1x999 mb-a 201.5 202.5 203.5 ",
        "1x999 mb-b 301.5 302.5 303.5 ",
    ]
    # The default arguments: every named workload on the sm90 kernel, 20 timed samples, unchecked.
    assert open(a + ".args").read().split("\n")[0] == "--kernel sm90 --all --iters 20 --warmup-ms 0 --no-check"


def test_arguments_after_the_separator_replace_the_defaults(fakes):
    tmp_path, (a, _) = fakes
    summary, rows = run_ab(tmp_path, ["1", a, "--", "--workload", "1x999", "--iters", "5"])
    assert len(rows) == 2 and summary[0].startswith("100x999 mb-a ")
    assert open(a + ".args").read().strip() == "--workload 1x999 --iters 5"


def test_mla_record_keeps_the_log_and_the_gzipped_json(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    pytest.importorskip("torch")
    out_dir = tmp_path / "mla"
    script = (f"source bench/device_env.sh > /dev/null; mla_record {out_dir} --smoke --device cpu "
              "--cases 1:8192 --paths fa2_vllm,mlakit_step --no-profile")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "compare_mla rc=0", (out.stdout, (out_dir / "compare_mla.log").read_text()[-2000:])
    # The per-path totals and the target lines, from the log it kept.
    assert any("mlakit_step" in ln and " ms wall" in ln for ln in lines[1:])
    assert any(ln.rstrip().endswith(": met") or ": MISSED" in ln for ln in lines[1:])
    assert (out_dir / "compare_mla.log").stat().st_size > 0
    assert not (out_dir / "compare_mla.json").exists()
    with gzip.open(out_dir / "compare_mla.json.gz", "rt") as f:
        cases = json.load(f)["cases"]
    assert [(c["requests"], c["budget"]) for c in cases] == [(1, 8192)]
    assert set(cases[0]["paths"]) == {"fa2_vllm", "mlakit_step"}
