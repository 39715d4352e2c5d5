// How a raw score q.k becomes a base-2 logit: scaled by sm_scale * log2(e), or, with a soft cap c,
// c * tanh(s * sm_scale / c) * log2(e). Architecture-neutral; both kernels use it.
#pragma once

#include "cuda/common/ptx.cuh"
#include "contract/schedule_layout.h"

namespace mlakit {
namespace cuda {

struct ScoreTransform {
  float scale_log2;      // sm_scale * log2(e)
  float cap_exp_scale;   // 2 log2(e) sm_scale / soft_cap (soft cap on): tanh's exponent per raw score
  float soft_cap;        // 0 = off

  __device__ __forceinline__ static ScoreTransform from(const plan::ScheduleHeader& h) {
    return {h.sm_scale_log2, h.soft_cap > 0.f ? 2.f * 1.4426950408889634f * h.sm_scale / h.soft_cap : 0.f,
            h.soft_cap};
  }
  __device__ __forceinline__ bool capped() const { return soft_cap > 0.f; }
  // Soft-capped logit in base 2 (the caller then uses scale 1 instead of scale_log2), with
  // tanh(y) = 1 - 2 / (1 + 2^(2 y log2 e)): one ex2 and one reciprocal (MUFU) and three FMA-pipe
  // instructions. tanhf's inlined body (a range split and a polynomial per element, 64 elements
  // per tile, two soft-capped softmax variants at two call sites) was 58% of the sm90 consumer's
  // code (10.2k SASS instructions, 4.3k without soft cap); with this form it is 7.4k.
  // The absolute error of the tanh is a few 1e-7 (ex2.approx and rcp.approx are ~1 ulp), so the
  // logit's is a few 1e-7 x c: far below the bf16/fp16 rounding of P. Saturates to +-c for large
  // |s| (2^(+inf) = inf gives 1, 2^(-inf) = 0 gives -1).
  __device__ __forceinline__ float cap_log2(float s) const {
    const float e = fast_exp2(s * cap_exp_scale);
    return soft_cap * 1.4426950408889634f * (1.f - __fdividef(2.f, 1.f + e));
  }
};

}  // namespace cuda
}  // namespace mlakit
