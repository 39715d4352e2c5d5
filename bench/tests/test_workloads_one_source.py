"""The named workloads have one definition, bench/workloads.txt: bench/workloads.py parses it and
mlakit-bench compiles it in; both must read the same workloads (names, lengths, mask, heads)."""
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import seed_schedule as S  # noqa: E402
import workloads as W  # noqa: E402


def test_python_and_mlakit_bench_read_the_same_workloads():
    try:
        binary = S.bench_binary()
    except RuntimeError as ex:
        pytest.skip(str(ex))
    out = subprocess.run([binary, "--list-json"], capture_output=True, text=True, check=True).stdout
    cpp = json.loads(out)
    py = [{"name": w.name, "q_lens": w.q_lens, "kv_lens": w.kv_lens, "causal": w.causal, "heads": w.heads,
           "kv_heads": w.kv_heads, "dqk": w.dqk, "dvo": w.dvo} for w in W.named_workloads()]
    assert cpp == py
    assert len(py) >= 9 and {"1x999", "100x999", "1x32768", "ctx_799_vs_200"} <= {w["name"] for w in py}


def test_parse_rejects_bad_lines():
    assert [w.name for w in W.parse_workloads("# c\n\nx  3,2 4,1 causal 2  # trailing\n")] == ["x"]
    for bad in ("x 3 4 causal", "x 3 4 sideways 2", "x 3,2 4 causal 2", "x 3 4 causal 2 extra"):
        with pytest.raises(ValueError):
            W.parse_workloads(bad)
