#!/bin/bash
# Session 36 prepared call 4, for after the merge (run it on `main` once the winning step of
# s1.sh-s3.sh is merged there): the numbers of record beside the peers (compare.py through
# gpu-check's flashinfer and compare steps, on a binding built from the tree) and the MLA step
# beside its peers' paths at N=1 and N=100 (budget 8192). carry [".peers"]; RUN_COMMIT=<the
# merged commit> in the environment (the device copy's .git may name an older HEAD).
# Prediction (v24 merged): 100x999 past 500 TFLOP/s (v20's records: 498-502), 8x999+200 and 1x999
# 2-5% above session 31's (453 / 445 TFLOP/s, 0.035 / 0.023 ms), the long work within its
# power-cap spread (+1-3% at most); the MLA step at N=100 ~1-2% faster (its attention is ~61% of
# the step), x3 over FlashInfer's path still short on a fast host.
set -u
export MLAKIT_GIT_COMMIT=${RUN_COMMIT:?set RUN_COMMIT}
rm -rf build-py
source bench/device_env.sh binding flashinfer
el setup
record $OUT/record
el record
tar czf $OUT/record.tgz -C $OUT record && cp $OUT/record/summary.txt $OUT/record_summary.txt && rm -rf $OUT/record
MLA_RECORD_TIMEOUT=200 mla_record $OUT/mla --cases 1:8192,100:8192 \
  --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph,mlakit_step_graph_native
el mla
