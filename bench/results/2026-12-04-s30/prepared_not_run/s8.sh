#!/bin/bash
# Prepared in session 30, not run (the session's device time ran out): the record with PDL on by
# default (the binding built here by device_env.sh takes CMake's default, MLAKIT_PDL=ON), beside the
# peers, and compare_mla.py's three cases (the budget-2048 case was not run in session 30).
# carry [".peers"]; ~6-7 minutes.
# Predictions: the kernel table as session 29's within its spread, 1x999 and 799/200 (short
# launches) possibly a few % faster if compare.py's back-to-back calls let PDL overlap them;
# the MLA step: N=1 ~0.95-1.0 ms (session 30: 0.99-1.02), N=100 budget 8192 56-59 ms.
set -u
rm -rf build-py
source bench/device_env.sh binding flashinfer
grep -m1 "PDL launches" /tmp/device_env_pybuild.txt
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader
record $OUT/record
el record
mla_record $OUT --cases 1:8192,100:8192,100:2048 \
  --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph,mlakit_step_graph_native
el compare_mla
tar czf $OUT/record.tgz -C $OUT record && cp $OUT/record/summary.txt $OUT/record_summary.txt && rm -rf $OUT/record
