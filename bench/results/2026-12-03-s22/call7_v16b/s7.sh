#!/bin/bash
# Device call 7 of session 22: call 6 measured v16 1.9% slower than v15 on H=128 4096 (both
# rounds) and its consumer SASS grew 7322 -> 7441 instructions (the epilogue's output map taken
# from the kernel parameter). v16b keeps the consumer as v15 had it (output map from the block's
# copy, which an eager launch now copies and publishes unchanged) and the loads on the
# parameter's maps. v15 / v16 / v16b, three rounds, --warmup-ms 200; then v16b's sm90 GPU tests.
# Prediction: v16b keeps most of v16's short-launch gain (1x999 +1%, 799/200 +3%) and H=128 4096
# back at v15's level. Run with carry ["carry5"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
for r in 1 2 3; do
  for b in v15 v16 v16b; do
    timeout 60 carry5/mb-$b --kernel sm90 --workload 1x999 --workload ctx_799_vs_200 --workload v3_128h_4096 \
      --workload v3_128h_8192 --workload ctx_8x1024_vs_4096 --workload 100x999 --lens 2x999 --causal --heads 16 \
      --iters 20 --warmup-ms 200 --no-check 2>&1 | grep "cuda:0/" | awk -v b=$b -v r=$r '{print b, "r" r, $1, $5, $6}'
  done
done > $OUT/ab3.txt 2>&1
el ab
python3 - $OUT/ab3.txt <<'PY'
import sys, collections, statistics
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 5:
        d[(f[2], f[0])].append(float(f[4]))
names = sorted({k[0] for k in d})
for n in names:
    base = statistics.median(d[(n, 'v15')])
    print(f"{n:28s} " + "  ".join(f"{b} {statistics.median(d[(n, b)]) / 1000:8.1f} ({(statistics.median(d[(n, b)]) / base - 1) * 100:+5.1f}%)" for b in ('v15', 'v16', 'v16b')))
PY
timeout 150 carry5/mlakit_gpu_tests --gtest_filter='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_*:Kernels/CudaScale.*/sm90*:Shapes/CudaSplitK.*/sm90*:Kernels/CudaGraph*/sm90' > /tmp/t.log 2>&1; echo "tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" /tmp/t.log | head; cp /tmp/t.log $OUT/gpu_v16b.log
el tests
