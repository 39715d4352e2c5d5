#!/usr/bin/env bash
set -u
export MLAKIT_GIT_COMMIT=$(cat carry3/COMMIT)
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
B=carry3/bld/mlakit-bench; T=carry3/bld/tests/mlakit_gpu_tests
{ for a in "1x999 auto" "1x999 off" "1x999 auto" "1x999 off" "8x999+200 on" "8x999+200 off" "100x999 on" "100x999 off"; do
    set -- $a; echo "== $1 kv-split $2"; timeout 10 $B --workload $1 --device cuda --kv-split $2 --iters 30 2>&1 | grep -E "^[0-9]+x" | tail -1; done
  echo "== 1x999 auto, PDL off"; MLAKIT_DISABLE_PDL=1 timeout 10 $B --workload 1x999 --device cuda --iters 30 2>&1 | grep -E "^1x999" | tail -1
} > $OUT/split.txt 2>&1
el split; cat $OUT/split.txt
timeout 45 $T --gtest_filter='*Split*:*BatchInvariant*/sm90:CudaMlaGraph.*:CudaPlanReuse.*:KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_d192x128_bf16:Kernels/CudaGraph*/sm90' > /tmp/t.txt 2>&1
grep -E "^\[  (FAILED|PASSED) |tests ran|Failure|SKIPPED \]" /tmp/t.txt > $OUT/tests.txt; el tests; cat $OUT/tests.txt
timeout 40 bash -c 'cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j16 >> /tmp/pyb.txt 2>&1' || tail -20 /tmp/pyb.txt
cp $B build-py/; el pybuild
mkdir -p /tmp/g
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare timeout 120 scripts/gpu-check /tmp/g > /tmp/g/console.txt 2>&1
el compare; tar czf $OUT/g.tgz -C /tmp g
export PYTHONPATH="$(pwd)/build-py/python:$(pwd)/python:${PYTHONPATH:-}"
{ timeout 18 python3 bench/compare_mla.py --cases 1:8192 --paths mlakit_step_graph --reps 3 2>&1 | grep -E "mlakit_step_graph|host share" | head -4
  echo "== PDL off"; MLAKIT_DISABLE_PDL=1 timeout 18 python3 bench/compare_mla.py --cases 1:8192 --paths mlakit_step_graph --reps 3 2>&1 | grep -E "mlakit_step_graph|host share" | head -4; } > $OUT/mla.txt 2>&1
el done; cat $OUT/mla.txt
