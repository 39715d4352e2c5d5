#!/usr/bin/env bash
# check_sample_times.sh BIN: mlakit-bench's launch-state probes (--gap-ms, --l2-flush-mb) and its
# time-based warm-up (--warmup-ms) run on the CPU backend, and --json lists one time per timed
# sample (the median among them) and the warm-up launches. Exit 77 (skipped) without python3.
set -u
bin=$1
command -v python3 >/dev/null || { echo "skip: no python3"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" --device cpu --lens 3x17 --heads 2 --dqk 64 --dvo 64 --iters 5 --gap-ms 2 --l2-flush-mb 1 \
  --warmup 0 --warmup-ms 30 --json "$tmp/b.json" >/dev/null || { echo "FAIL: mlakit-bench exited $?"; exit 1; }
python3 - "$tmp/b.json" <<'PY'
import json, sys
r = [x for x in json.load(open(sys.argv[1]))["results"] if "ms" in x][0]
s = r["sample_ms"]
assert len(s) == r["samples"] == 5, (len(s), r["samples"])
assert all(v > 0 for v in s), s
assert sorted(s)[2] == r["ms"] and min(s) == r["ms_min"], (s, r["ms"], r["ms_min"])
# --warmup-ms 30 with --warmup 0: launches until 30 ms had passed, each ~0.1 ms on this tiny case
assert r["warmup_launches"] >= 2, r["warmup_launches"]
print("ok: %d samples, median %.4f ms" % (len(s), r["ms"]))
PY
