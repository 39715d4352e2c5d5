// How a raw score q.k becomes a base-2 logit: scaled by sm_scale * log2(e), or, with a soft cap c,
// c * tanh(s * sm_scale / c) * log2(e). Architecture-neutral; both kernels use it.
#pragma once

#include "plan/schedule_layout.h"

namespace mlakit {
namespace cuda {

struct ScoreTransform {
  float scale_log2;      // sm_scale * log2(e)
  float scale_over_cap;  // sm_scale / soft_cap (soft cap on)
  float soft_cap;        // 0 = off

  __device__ __forceinline__ static ScoreTransform from(const plan::ScheduleHeader& h) {
    return {h.sm_scale_log2, h.soft_cap > 0.f ? h.sm_scale / h.soft_cap : 0.f, h.soft_cap};
  }
  __device__ __forceinline__ bool capped() const { return soft_cap > 0.f; }
  // Soft-capped logit in base 2 (the caller then uses scale 1 instead of scale_log2).
  __device__ __forceinline__ float cap_log2(float s) const {
    return soft_cap * 1.4426950408889634f * tanhf(s * scale_over_cap);
  }
};

}  // namespace cuda
}  // namespace mlakit
