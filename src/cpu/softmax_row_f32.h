// One row's step of the fp32 paths' online softmax over a chunk (attention_fp32.cc,
// latent_fp32.cc): the chunk's base-2 scores srow[0, n), of which [ja, jb) are visible (ja < jb),
// the row's running max m and sum l, and its output row o[0, width). srow becomes P (0 outside
// [ja, jb)), and o is rescaled when the max moves.
#pragma once

#include <algorithm>
#include <cmath>

namespace mlakit {
namespace cpu {

inline void softmax_row_f32(float* srow, int n, int ja, int jb, float& m, float& l, float* o, int width) {
  float mx = srow[ja];
  for (int j = ja + 1; j < jb; ++j) mx = std::max(mx, srow[j]);
  const float m_new = std::max(m, mx);
  const float alpha = std::exp2(m - m_new);  // 0 on the row's first visible keys
  float sum = 0.0f;
  for (int j = 0; j < ja; ++j) srow[j] = 0.0f;
  for (int j = ja; j < jb; ++j) {
    const float e = std::exp2(srow[j] - m_new);
    srow[j] = e;
    sum += e;
  }
  for (int j = jb; j < n; ++j) srow[j] = 0.0f;
  l = l * alpha + sum;
  m = m_new;
  if (alpha != 1.0f)
    for (int d = 0; d < width; ++d) o[d] *= alpha;
}

}  // namespace cpu
}  // namespace mlakit
