// Host rules of the up-projection GEMM's algorithm choice (src/mla/cuda/blas_cublas.cc), plain C++
// so the CPU tests cover them.
//
// Why a choice at all: for the MLA shapes (k = 512, n = heads x 256) cuBLAS's default and
// cuBLASLt's first heuristic candidate run 11-13% slower than the best of cuBLASLt's other candidates
// on the H200 at every row count measured (256x128 tiles where 128x128 or 176x128 fill the 132
// SMs better). The choice is made by timing the
// candidates once per class of row counts, outside any graph capture, among those of the first
// candidate's kernel family without split K, which compute the same bits (tested).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mlakit {
namespace blas {

// Row counts are tuned in half-octave classes from 256 up: 256, 384, 512, 768, 1024, 1536, ...
constexpr int64_t kGemmClassMin = 256;

// The class holding m: the smallest class value >= m (every m <= 256 is class 256).
inline int64_t gemm_m_class(int64_t m) {
  int64_t c = kGemmClassMin;
  while (c < m) {
    // c is 2^i or 1.5 x 2^i; the next class is 1.5 x 2^i or 2^(i+1).
    const bool pow2 = (c & (c - 1)) == 0;
    c = pow2 ? c + c / 2 : (c / 3) * 4;
  }
  return c;
}

// The classes a capacity of max_m rows reaches, each with the m it is timed at (its value, or
// max_m for the last class when max_m is below it): run-time m <= max_m always finds its class.
struct GemmClass {
  int64_t m_class;
  int64_t timed_m;
};
inline std::vector<GemmClass> gemm_classes_up_to(int64_t max_m) {
  std::vector<GemmClass> out;
  if (max_m <= 0) return out;
  const int64_t last = gemm_m_class(max_m);
  for (int64_t c = kGemmClassMin;; c = gemm_m_class(c + 1)) {
    out.push_back({c, c < max_m ? c : max_m});
    if (c == last) break;
  }
  return out;
}

// Which candidate to keep, from their timings (index 0: the library's own first choice): the
// fastest, but the first choice unless the fastest beats it by more than `margin` (timing noise
// must not flip the choice between near-equal candidates). Negative or missing times (a candidate
// that failed to run) never win. Returns 0 when nothing was timed.
inline size_t pick_gemm_candidate(const std::vector<double>& ms, double margin = 0.02) {
  size_t best = ms.size();  // none timed yet
  for (size_t i = 0; i < ms.size(); ++i) {
    if (ms[i] > 0 && (best == ms.size() || ms[i] < ms[best])) best = i;
  }
  if (best == ms.size()) return 0;
  const bool first_ran = ms[0] > 0;
  return (first_ran && !(ms[best] * (1.0 + margin) < ms[0])) ? 0 : best;
}

}  // namespace blas
}  // namespace mlakit
