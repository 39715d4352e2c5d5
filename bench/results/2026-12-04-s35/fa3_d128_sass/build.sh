#!/bin/bash
# FlashInfer's fa3 ragged prefill kernels at (128, 128), causal and not, compiled here (no GPU) from
# the offline copy's JIT sources with the flags its JIT uses (jit/core.py: -use_fast_math, sm_90a,
# its defines), to read their kv loops' SASS beside mlakit's (scripts/sm90-loop-path). The offline
# copy has prebuilt modules for (192, 128) only; (128, 128) is otherwise compiled on the device.
#   bench/results/2026-12-04-s35/fa3_d128_sass/build.sh      (about 1 minute on 2 cores)
# Needs nvcc (13.0 here), python3 with jinja2, cuobjdump (scripts/sm90-sass-report says where).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../../.." && pwd)
W=${W:-/tmp/fa3_d128}
mkdir -p "$W/fi"
[ -d "$W/fi/flashinfer" ] || tar xJf "$ROOT/.peers/flashinfer/flashinfer_pruned.tar.xz" -C "$W/fi"
D=$W/fi/flashinfer/data
cd "$W"
FI_CSRC=$D/csrc/ python3 "$HERE/render.py"
sed 's/MaskMode::kCausal/MaskMode::kNone/' ragged_causal.cu > ragged_none.cu
for m in causal none; do
  nvcc -std=c++17 -O3 -use_fast_math -cubin -gencode=arch=compute_90a,code=sm_90a \
    -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -DFLASHINFER_ENABLE_F16 -DFLASHINFER_ENABLE_BF16 \
    -DFLASHINFER_ENABLE_FP8_E4M3 -DFLASHINFER_ENABLE_FP8_E5M2 -DFLASHINFER_ENABLE_FP8_E8M0 \
    -DFLASHINFER_ENABLE_FP4_E2M1 -DNDEBUG --expt-relaxed-constexpr -static-global-template-stub=false -w \
    -I. -I$D/cccl/libcudacxx/include -I$D/cccl/cub -I$D/cccl/thrust -I$D/include -I$D/cutlass/include \
    -I$D/cutlass/tools/util/include -o ragged_$m.cubin ragged_$m.cu
  cuobjdump -sass ragged_$m.cubin > ragged_$m.sass
  # Its two kernels (persistent and plain tile schedulers), counted as mlakit's: the kv loop holds
  # 16 HGMMAs (causal, 128-key tiles: 8 for S, 8 for P V) or 20 (non-causal, 192-key tiles: 8 + 12).
  echo "== $m: $(grep -o 'AttentionKernelTraitsILb1ELi[0-9]*ELi[0-9]*ELi[0-9]*ELi[0-9]*ELi[0-9]' ragged_$m.sass | head -1)"
  "$ROOT/scripts/sm90-loop-path" --sass ragged_$m.sass --hgmma $([ $m = causal ] && echo 16 || echo 20)
done
