#!/bin/bash
# Session 36 prepared call 2: gpu-check's sanitize step (memcheck, racecheck, synccheck)
# over six of v24's sm90 tests instead of its default filter, so the call stays under its limit
# (the sm90 suite under a sanitizer takes > 300 s per process, session 32). carry ["carry1"] from
# prepare_carry.sh. Any error fails the step (summary.txt).
set -u
source bench/device_env.sh
# gpu-check's sanitize step on the carried binary (tests.log, summary.txt), over the window, causal
# q < kv, ragged and split-K tests (the new wide-window test among them), and the one with rows
# and whole items that see no key (v24 zeroes O only for items without kv tiles).
MLAKIT_BUILD_DIR=carry1/tests MLAKIT_SKIP_BUILD=1 GPU_CHECK_STEPS=sanitize SANITIZE_SOLO_FILTER= \
  SANITIZE_FILTER='*RaggedLengthsCausalAndNot/sm90_d192x128_bf16*:*CausalQueryShorterThanKv/sm90_d128x128_bf16*:*Window*sm90_d192x128_bf16*:*CausalQueryLongerThanKvHasEmptyRows/sm90_d192x128_bf16*:Shapes/CudaSplitK.EqualsConcatenatedKAndReference/sm90_h16_16_d128r64v128_bf16_causal' \
  timeout 500 scripts/gpu-check "$OUT" | grep -E "sanitize|overall"
el sanitize
