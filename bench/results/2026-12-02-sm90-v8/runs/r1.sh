#!/bin/bash
# Session 10, device run 1: A/B base vs uniform-descriptor kernel, ncu of mlakit and FI fa3 at 1x16384,
# GPU pytest (verifies ed9cb5e), C++ seed.
set -u
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
WL="--workload 1x16384 --workload 1x32768 --workload v3_128h_8192 --workload 100x999 --workload 8x999+200 --workload 1x999"
for r in 1 2; do for b in bld v1; do
  echo "== bench $b round $r"
  timeout 90 carry3/$b/mlakit-bench --kernel sm90 $WL --iters 30 --no-check 2>&1 | grep -E "cuda:0" | awk '{print}'
done; done
echo "== ncu mlakit v1"
timeout 120 ncu --clock-control none --set full --import-source yes -k regex:prefill_sm90 --launch-skip 3 --launch-count 1 -o /tmp/ml carry3/v1/mlakit-bench --kernel sm90 --workload 1x16384 --iters 2 --warmup 3 --no-check --rotate 1 > /tmp/ncu_ml.log 2>&1; echo rc=$?; tail -3 /tmp/ncu_ml.log
ncu -i /tmp/ml.ncu-rep --page details > $OUT/ml_details.txt 2>&1
ncu -i /tmp/ml.ncu-rep --page source --print-source sass --csv > $OUT/ml_src.csv 2>&1
echo "== flashinfer"
set +u; FI_USE_PREBUILT=1 source .peers/flashinfer/setup_flashinfer.sh > /tmp/fi_setup.log 2>&1; set -u; tail -2 /tmp/fi_setup.log
FIPP=$PYTHONPATH
echo "== ncu fi fa3"
timeout 200 ncu --clock-control none --set full -k regex:"Prefill|prefill" --launch-skip 2 --launch-count 1 -o /tmp/fi python3 bench/compare.py --workload 1x16384 --methods flashinfer_fa3 --iters 2 --warmup 1 --no-ceilings --overhead none --no-fi-setup > /tmp/ncu_fi.log 2>&1; echo rc=$?; tail -3 /tmp/ncu_fi.log
ncu -i /tmp/fi.ncu-rep --page details > $OUT/fi_details.txt 2>&1
ncu -i /tmp/fi.ncu-rep --page source --print-source sass --csv > $OUT/fi_src.csv 2>&1
echo "== python binding"
cmake -S . -B build-py -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/py_build.log 2>&1 && cmake --build build-py -j16 >> /tmp/py_build.log 2>&1; echo build rc=$?; tail -2 /tmp/py_build.log
export MLAKIT_BUILD_DIR=build-py PYTHONPATH=$PWD/build-py/python:$PWD/python:$FIPP
timeout 120 python3 -m pytest -q -rs python/tests/test_gpu_varlen.py python/tests/test_gpu_torch.py python/tests/test_gpu_mla_torch.py > $OUT/pytest.log 2>&1; echo pytest rc=$?; tail -5 $OUT/pytest.log
echo "== seed (C++)"
timeout 120 carry3/bld/mlakit-bench seed --json /tmp/seed.json > $OUT/seed.log 2>&1; echo "seed rc=$?"
grep -E "^check|Mode|Requests|Token budget|Total step time, wall|Total step time, device|Host share of total" $OUT/seed.log | head -40
