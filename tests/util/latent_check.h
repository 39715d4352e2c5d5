// Comparison of a latent attention run against its float64 reference, row by row.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "util/latent_case.h"

namespace mlakit {
namespace test {

// Tolerances by dtype: bf16 P and output rounding, or fp16 on the fp32 path.
inline double out_tolerance(DType t) { return t == DType::kBF16 ? 1e-2 : 2e-3; }

// The first T rows against the reference: each (token, head) row within the dtype's relative
// error (rows with no key exactly 0), lse and max_logits within 1e-3 (-inf where no key), and
// every row past T still holding its poison.
inline void expect_matches(const LatentResult& r, const LatentCase& m, const LatentRef& ref, bool lse_ht = false) {
  const int64_t T = m.total_q(), H = m.cfg.num_heads, L = m.cfg.kv_lora_rank;
  const double tol = out_tolerance(m.cfg.dtype);
  const std::vector<double> lse_want = ref.lse.to_doubles(), max_want = ref.max.to_doubles();
  std::vector<double> got(static_cast<size_t>(L)), want(static_cast<size_t>(L));
  int bad_rows = 0;
  double worst = 0.0;
  for (int64_t i = 0; i < T * H; ++i) {
    double num = 0.0, den = 0.0;
    bool nan = false;
    for (int64_t d = 0; d < L; ++d) {
      const double g = r.out.get(i * L + d), w = ref.out.get(i * L + d);
      nan = nan || std::isnan(g);
      num += (g - w) * (g - w);
      den += w * w;
    }
    const bool empty = std::isinf(lse_want[static_cast<size_t>(i)]);
    const double e = nan ? INFINITY : empty ? std::sqrt(num) : std::sqrt(num) / (std::sqrt(den) + 1e-3 * std::sqrt(L));
    worst = std::max(worst, e);
    if (!(empty ? num == 0.0 : e <= tol) && bad_rows++ < 5) {
      ADD_FAILURE() << "row " << i / H << " head " << i % H << ": error " << e << (empty ? " (row with no key)" : "");
    }
  }
  EXPECT_EQ(bad_rows, 0) << "worst row error " << worst;
  EXPECT_LE(lse_error(rows_th(r.lse, T, H, lse_ht), lse_want), 1e-3) << "lse";
  EXPECT_LE(lse_error(rows_th(r.max, T, H, lse_ht), max_want), 1e-3) << "max_logits";
  // Rows past the plan's tokens are never written.
  const size_t es = dtype_size(m.cfg.dtype);
  const auto& ob = r.out.bytes();
  for (size_t b = static_cast<size_t>(T * H * L) * es; b < ob.size(); ++b) {
    if (ob[b] != 0xFF) {
      ADD_FAILURE() << "out written past the plan's " << T << " tokens (byte " << b << ")";
      break;
    }
  }
  if (!lse_ht) {
    const auto& lb = r.lse.bytes();
    for (size_t b = static_cast<size_t>(T * H) * 4; b < lb.size(); ++b) {
      if (lb[b] != 0xFF) {
        ADD_FAILURE() << "lse written past the plan's tokens";
        break;
      }
    }
  }
}

inline bool same_bits(const HostTensor& a, const HostTensor& b) { return a.bytes() == b.bytes(); }

// The largest |a - b| over two results of one shape; a NaN or an infinity in only one of them
// counts as infinite, the same one in both as no difference (rows with no key: lse -inf in both;
// poisoned rows past the plan's tokens: NaN in both).
inline double max_abs_diff(const HostTensor& a, const HostTensor& b) {
  if (a.numel() != b.numel()) return INFINITY;
  double worst = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.get(i), y = b.get(i);
    if (!std::isfinite(x) || !std::isfinite(y)) {
      if (!(x == y || (std::isnan(x) && std::isnan(y)))) return INFINITY;
      continue;
    }
    worst = std::max(worst, std::fabs(x - y));
  }
  return worst;
}

// The largest finite |value| of a result.
inline double max_abs(const HostTensor& t) {
  double m = 0.0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double x = t.get(i);
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  }
  return m;
}

// Rows [t0, t0 + n) of a [T', H, ...] tensor's bytes.
inline std::vector<uint8_t> token_rows(const HostTensor& t, int64_t t0, int64_t n) {
  const size_t row = t.nbytes() / static_cast<size_t>(t.shape()[0]);
  return std::vector<uint8_t>(t.bytes().begin() + static_cast<std::ptrdiff_t>(t0 * row),
                              t.bytes().begin() + static_cast<std::ptrdiff_t>((t0 + n) * row));
}

}  // namespace test
}  // namespace mlakit
