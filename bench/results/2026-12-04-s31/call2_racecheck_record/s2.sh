#!/bin/bash
# Session 31 call 2: (1) can racecheck cover the MLA step's own kernels if it leaves cuBLAS's
# kernels uninstrumented (--kernel-name-exclude)? Session 30 found the tuned GEMM's test ends
# racecheck's process with no report; 2026-12-02 found hazards reported inside nvjet_* kernels.
# (2) a second pass of the kernel record beside the peers with PDL on (call 1 was the first).
# carry ["carry1", ".peers"] (carry1: binaries built at 30b65f4, PDL on; src unchanged to HEAD).
# Predictions: with nvjet excluded the GEMM test passes under racecheck and the MLA step and graph
# tests report 0 hazards (their own kernels are racecheck-clean as the prefill ones are); if some
# tuned candidate is not an nvjet kernel, the GEMM test still dies and the log names it.
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
compute-sanitizer --version | tail -1
compute-sanitizer --help 2>&1 | grep -A8 -E "^ *--kernel-name-exclude" | head -12
G=carry1/mlakit_gpu_tests
san() {  # name, timeout, filter, extra args...
  local name=$1 to=$2 filt=$3; shift 3
  timeout "$to" compute-sanitizer --tool racecheck --error-exitcode 9 --print-limit 20 "$@" $G \
    --gtest_filter="$filt" > $OUT/$name.txt 2>&1
  echo "$name: rc=$? $(grep -c '^\[       OK' $OUT/$name.txt) ok, $(grep -E 'RACECHECK SUMMARY|Error:' $OUT/$name.txt | tr '\n' ' ')"
}
# run 1 (exclude kns=nvjet) ended every test with "Internal Sanitizer Error: The Sanitizer failed to
# handle a hardware exception" (rc_*.txt of run 1 kept as run1_*). Run 2: check only mlakit's own
# kernels (--kernel-name kns=mlakit: every mlakit kernel's mangled name holds it), launches
# blocking so the failing launch is the one that reports, cuBLASLt's log naming the algorithms.
export CUDA_LAUNCH_BLOCKING=1
san rc_gemm_only_mlakit 150 'DTypes/CudaMlaGemm.EveryTunableCandidateComputesTheFirstChoicesBits/bf16' --kernel-name kns=mlakit
el gemm_only_mlakit
CUBLASLT_LOG_LEVEL=2 CUBLASLT_LOG_FILE=$OUT/cublaslt_%i.log san rc_gemm_nvjet_only 150 'DTypes/CudaMlaGemm.EveryTunableCandidateComputesTheFirstChoicesBits/bf16' --kernel-name kns=nvjet
el gemm_nvjet_only
san rc_mla_only_mlakit 300 'Shapes/CudaMlaStep.*/sm90_h16_bs16_*:Upload/CudaMlaGraph.*/upload_in_run:BlockSizes/CudaMlaGatherOp.*' --kernel-name kns=mlakit
el mla_only_mlakit
unset CUDA_LAUNCH_BLOCKING
rm -rf build-py
export MLAKIT_GIT_COMMIT=${RUN_COMMIT:?set RUN_COMMIT}  # the tree, not carry1
source bench/device_env.sh binding flashinfer
record $OUT/record
el record
tar czf $OUT/record.tgz -C $OUT record && cp $OUT/record/summary.txt $OUT/record_summary.txt && rm -rf $OUT/record
