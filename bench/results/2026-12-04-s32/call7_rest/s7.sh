#!/bin/bash
# Session 32 call 7: why mlakit's N=100 step reads 55.0 ms in compare_mla.py processes that run
# every path and 58.3-59.1 ms in processes that run only mlakit's paths (calls 4-5), and the C++
# step 58.4 ms. Hypothesis: the power cap. Before a pass in the first kind of process the GPU has
# often run a host-bound peer path (FlashInfer's: 40% busy) and rested; mlakit's paths alone run
# back to back. mlakit's two graph paths alone, alternated processes, --rest-ms 0 / 300 / 0 / 300.
# carry [] (the binding is built here from the tree). Prediction: rest 300 -> ~55 ms, rest 0
# -> ~58.5 ms; the profiled pass's busy time (~53 ms) the same in both.
set -u
export MLAKIT_GIT_COMMIT=${RUN_COMMIT:?set RUN_COMMIT}
rm -rf build-py
source bench/device_env.sh binding
el setup
for x in r0a:0 r300a:300 r0b:0 r300b:300; do
  n=${x%%:*}; ms=${x##*:}
  MLA_RECORD_TIMEOUT=120 mla_record $OUT/$n --cases 100:8192 --rest-ms $ms \
    --paths mlakit_step_graph,mlakit_step_graph_native
  el $n
  mv $OUT/$n/compare_mla.log $OUT/${n}_compare_mla.log; mv $OUT/$n/compare_mla.json.gz $OUT/${n}_compare_mla.json.gz; rmdir $OUT/$n
done
