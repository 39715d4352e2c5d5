#!/bin/bash
# Session 13, device call 2: block timelines of single launches (MLAKIT_SM90_TRACE build);
# the global longest-first tile order against the per-sequence runs; CUDA graph launch cost by
# node count; the graph-replayed N=1 MLA step's host time split (plan vs replay).
set -u
export MLAKIT_GIT_COMMIT=$(cat carry4/COMMIT)
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
mkdir -p /tmp/tr
for w in "--workload 1x999:1x999" "--lens 2x999:2x999" "--workload 8x999+200:8x999+200" "--lens 8x999:8x999" "--workload 100x999:100x999" "--workload v3_128h_8192:v3" "--workload 1x16384:1x16384" "--workload 1x32768:1x32768"; do
  arg=${w%%:*}; name=${w##*:}
  MLAKIT_SM90_TRACE_FILE=/tmp/tr/$name timeout 40 carry4/v2/tr/mlakit-bench --kernel sm90 $arg --iters 5 --warmup 2 --no-check 2>&1 | grep -E "cuda:0"
  python3 bench/sm90_trace.py /tmp/tr/$name.d192_bf16.txt > /tmp/tr/$name.summary.txt 2>&1; cat /tmp/tr/$name.summary.txt
done
el trace
tar czf $OUT/tr.tgz -C /tmp tr
{ for r in 1 2; do for b in base to; do
  echo "== bench $b round $r"
  timeout 45 carry4/v2/$b/mlakit-bench --kernel sm90 --workload 8x999+200 --workload 100x999 --workload 1x999 --workload v3_128h_8192 --workload 1x16384 --iters 30 --no-check 2>&1 | grep -E "cuda:0"
  timeout 20 carry4/v2/$b/mlakit-bench --kernel sm90 --lens 2x999 --iters 30 --no-check 2>&1 | grep -E "cuda:0"
  timeout 20 carry4/v2/$b/mlakit-bench --kernel sm90 --lens 8x999 --iters 30 --no-check 2>&1 | grep -E "cuda:0"
done; done; } > $OUT/order.txt 2>&1
timeout 30 carry4/v2/to/mlakit-bench --kernel sm90 --workload 8x999+200 --workload 1x999 --iters 3 2>&1 | grep -E "cuda:0" >> $OUT/order.txt
el order; cat $OUT/order.txt
timeout 60 python3 bench/graph_launch_probe.py 2>&1 | tee $OUT/graph_probe.txt; el probe
timeout 60 bash -c 'cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j16 >> /tmp/pyb.txt 2>&1' || tail -20 /tmp/pyb.txt
el pybuild
PYTHONPATH=$PWD/build-py/python:$PWD/python timeout 120 python3 bench/compare_mla.py --cases 1:8192 --paths mlakit_step_graph,mlakit_step --reps 7 --json /tmp/cm.json > $OUT/mla_host.txt 2>&1
grep -E "host per step|total|host share" $OUT/mla_host.txt | head; el mla
