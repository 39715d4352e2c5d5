#!/bin/bash
# Session 30 call 7: PDL on by default (CMake MLAKIT_PDL=ON): synccheck over the sanitize filter on
# call 6's PDL binaries (call 6's time limit cut it), then compare_mla.py's N=1 and N=100 budget-8192
# cases on a binding built here with the new default.
set -u
source bench/device_env.sh
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=carry1 GPU_CHECK_STEPS=sanitize SANITIZE_TOOLS=synccheck \
  timeout 110 scripts/gpu-check $OUT > $OUT/gpu_check_stdout.txt 2>&1; echo "gpu-check synccheck rc=$?"
grep -E "sanitize" $OUT/summary.txt
el "synccheck"
rm -rf build-py
source bench/device_env.sh binding flashinfer
grep -m1 "PDL launches" /tmp/device_env_pybuild.txt
timeout 150 python3 bench/compare_mla.py --cases 1:8192,100:8192 --json $OUT/compare_mla.json > $OUT/compare_mla.log 2>&1
echo "compare_mla rc=$?"
grep -E "^  N=(1|100) budget 8192 |target" $OUT/compare_mla.log | head -30
el "compare_mla"
