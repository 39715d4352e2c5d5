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
san rc_gemm_listing 150 'DTypes/CudaMlaGemm.TunedGemmMatchesFirstChoiceAndReference/bf16' --kernel-name-exclude kns=nvjet
el gemm_excl
san rc_gemm_all_excl 240 'DTypes/CudaMlaGemm.*' --kernel-name-exclude kns=nvjet
el gemm_all_excl
san rc_mla_excl 300 'Shapes/CudaMlaStep.*/sm90_h16_bs16_*:Upload/CudaMlaGraph.*/upload_in_run:BlockSizes/CudaMlaGatherOp.*' --kernel-name-exclude kns=nvjet
el mla_excl
grep -h -o "Kernel name[^\n]*\|kernel [a-zA-Z_0-9]*" $OUT/rc_*.txt | sort | uniq -c | head -20
rm -rf build-py
export MLAKIT_GIT_COMMIT=${RUN_COMMIT:?set RUN_COMMIT to the tree's commit}  # not carry1's
source bench/device_env.sh binding flashinfer
record $OUT/record
el record
tar czf $OUT/record.tgz -C $OUT record && cp $OUT/record/summary.txt $OUT/record_summary.txt && rm -rf $OUT/record
