#!/bin/bash
# Device call 3 of session 22: the Python per-call path before (81ab9c0) and after (5116dce: torch
# tensors through the DLPack exchange table, out allocated in the extension), A/B in alternating
# processes pinned to one core (host speed moved ~1.5x between processes in call 2: fa3's 1x999
# read 0.037 and 0.063 ms a few seconds apart), with FlashInfer fa3 and cuDNN in every process as
# controls. Prediction: mlakit's 1x999 (compare.py's method) ~0.040 -> ~0.025-0.030 ms while fa3
# stays where it is; ctx 799/200 likewise (0.030 -> ~0.022). Then the per-call cost table
# (compare.py --overhead 1x999) of the new path. Run with carry [".peers", "carry2"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
mkdir -p /tmp/oldtree
tar --exclude=./build-py --exclude=./.peers --exclude='./carry*' --exclude=./bench/results -cf - . | tar -xf - -C /tmp/oldtree
rm -rf /tmp/oldtree/python/src /tmp/oldtree/python/mlakit
cp -r carry2/old/python/src carry2/old/python/mlakit /tmp/oldtree/python/
cfg="-DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3)"
(cmake -S . -B build-py $cfg > /tmp/pyb_new.txt 2>&1 && cmake --build build-py -j8 >> /tmp/pyb_new.txt 2>&1) &
(cmake -S /tmp/oldtree -B /tmp/oldtree/build-py $cfg > /tmp/pyb_old.txt 2>&1 && cmake --build /tmp/oldtree/build-py -j8 >> /tmp/pyb_old.txt 2>&1) &
wait
tail -1 /tmp/pyb_new.txt /tmp/pyb_old.txt
el builds
FI_USE_PREBUILT=1 source .peers/flashinfer/setup_flashinfer.sh > /tmp/fi.txt 2>&1 || tail -5 /tmp/fi.txt
el flashinfer
BASE_PP="${PYTHONPATH:-}"
for r in 1 2 3 4; do
  for which in old new; do
    if [ $which = old ]; then PP="/tmp/oldtree/build-py/python:/tmp/oldtree/python"; else PP="$PWD/build-py/python:$PWD/python"; fi
    echo "== round $r $which"
    PYTHONPATH="$PP${BASE_PP:+:$BASE_PP}" taskset -c 5 timeout 90 python3 bench/compare.py --workload 1x999 --workload ctx_799_vs_200 \
      --methods mlakit,flashinfer_fa3,sdpa_cudnn --overhead none --no-ceilings --plan-iters 3 \
      --json $OUT/compare_${which}_r$r.json 2>&1 | grep -E "^(1x999|ctx_799)|mlakit source" | head -8
  done
  el round$r
done
echo "== per-call cost table, new path"
PYTHONPATH="$PWD/build-py/python:$PWD/python${BASE_PP:+:$BASE_PP}" taskset -c 5 timeout 150 python3 bench/compare.py --workload 1x999 \
  --methods mlakit --no-ceilings --plan-iters 3 --json $OUT/overhead_new.json 2>&1 | sed -n '/Per-call cost/,$p' | head -30
el overhead
