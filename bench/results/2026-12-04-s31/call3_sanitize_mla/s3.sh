#!/bin/bash
# Session 31 call 3: gpu-check's sanitize step with the merge kernel's tests added to its filter
# (memcheck, racecheck, synccheck; carried binaries from 30b65f4, src unchanged to HEAD), then a
# further pass of the MLA step's two budget-8192 cases beside the peers' paths.
# carry ["carry1", ".peers"]. Predictions: 0 errors / hazards in all three tools, CudaMerge's 2
# tests passing in each; the MLA step N=1 ~1.0 ms, N=100 55-59 ms.
set -u
export MLAKIT_GIT_COMMIT=${RUN_COMMIT:?set RUN_COMMIT}  # the tree, not carry1
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=carry1 GPU_CHECK_STEPS=sanitize timeout 330 scripts/gpu-check $OUT/san > $OUT/gpu_check_stdout.txt 2>&1
echo "gpu-check sanitize rc=$?"; grep -E "sanitize" $OUT/san/summary.txt
gzip -f $OUT/san/tests.log; mv $OUT/san/tests.log.gz $OUT/sanitize_tests.log.gz; cp $OUT/san/summary.txt $OUT/sanitize_summary.txt; rm -rf $OUT/san
rm -rf build-py
source bench/device_env.sh binding flashinfer
el setup
mla_record $OUT --cases 1:8192,100:8192 --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph,mlakit_step_graph_native
el compare_mla
