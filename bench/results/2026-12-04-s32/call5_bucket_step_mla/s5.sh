#!/bin/bash
# Session 32 call 5: compare_mla.py with 256- and 1024-row bucket steps (call 4's FlashInfer setup
# failed: .peers held the folder's files one level too high), alternated 256 / 1024 / 256 in
# separate processes, the first with the peers' paths.
# carry [".peers"]. Prediction: mlakit's graph paths at N=100 -1% (budget 8192) and -3% (2048)
# with 256 (call 4's C++ A/B: -1.0% and -2.9%); the peers' paths unaffected (no graphs).
set -u
export MLAKIT_GIT_COMMIT=${RUN_COMMIT:?set RUN_COMMIT}
rm -rf build-py
source bench/device_env.sh binding flashinfer
grep -m2 -iE "flashinfer.*(ok|version)|error" /tmp/device_env_fi.txt
el setup
mla_record $OUT/a256 --cases 1:8192,100:8192,100:2048 --bucket-step 256 \
  --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph,mlakit_step_graph_native
el a256
mla_record $OUT/b1024 --cases 100:8192,100:2048 --bucket-step 1024 --paths mlakit_step_graph,mlakit_step_graph_native
el b1024
mla_record $OUT/c256 --cases 100:8192,100:2048 --bucket-step 256 --paths mlakit_step_graph,mlakit_step_graph_native
el c256
for x in a256 b1024 c256; do mv $OUT/$x/compare_mla.log $OUT/${x}_compare_mla.log; mv $OUT/$x/compare_mla.json.gz $OUT/${x}_compare_mla.json.gz; rmdir $OUT/$x; done
