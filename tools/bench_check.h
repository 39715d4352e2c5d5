// Inputs and correctness checks for mlakit-bench: random normal 16-bit or e4m3 inputs with a
// fixed seed, and a comparison of sampled (row, head) outputs against the float64 reference.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bench_workloads.h"
#include "mlakit/tensor.h"

namespace mlakit_bench {

// n values ~ N(0, 1) rounded to `dtype` (bf16 or fp16), as raw 16-bit patterns. Deterministic for
// a seed whatever the thread count (fixed-size chunks, each with its own derived seed).
std::vector<uint16_t> random_normal_16bit(size_t n, uint64_t seed, mlakit::DType dtype);
// The same values as raw bytes of `dtype` (bf16, fp16, or e4m3: the bf16 values rounded again).
std::vector<uint8_t> random_normal_bytes(size_t n, uint64_t seed, mlakit::DType dtype);

// (q_row, head) pairs to check: the first and last row of every non-empty sequence (each with
// one head, varied across sequences) plus `n_random` random pairs.
std::vector<std::pair<int64_t, int>> sample_pairs(const Workload& w, int n_random, uint64_t seed);

struct Reference {
  std::vector<std::pair<int64_t, int>> pairs;
  std::vector<double> out;  // pairs.size() * dvo
  std::vector<double> lse;  // pairs.size()
};

// Float64 reference rows (mlakit::reference::attention_row), on host views of q, k, v.
Reference compute_reference(const Workload& w, const mlakit::TensorView& q,
                            const mlakit::TensorView& k, const mlakit::TensorView& v,
                            std::vector<std::pair<int64_t, int>> pairs);

struct CheckResult {
  bool pass = false;
  double max_relerr = 0.0;  // max over pairs of max|o - r| / max|r| (row-normalized)
  double max_lse_err = 0.0; // max |lse - lse_ref| (0 when lse was not checked)
  int pairs = 0;
  int nan_pairs = 0;
  std::string detail;       // first failure, human readable
};

// out_bits: the whole output [total_q, H, Dvo] as 16-bit patterns of w.dtype (bf16 for e4m3
// inputs), contiguous.
// lse: [total_q, H] float32 or nullptr.
CheckResult compare_to_reference(const Workload& w, const Reference& ref, const uint16_t* out_bits,
                                 const float* lse, double tolerance, double lse_tolerance);

// The default tolerance for a dtype: 1e-2 for bf16, 2e-3 for fp16, 5e-2 for e4m3 (P rounded to
// e4m3 costs ~2.5% of a row's L2 norm on flat attention, docs/fp8.md; this check's measure is a
// row's largest element error over its largest element).
double default_tolerance(mlakit::DType dtype);

}  // namespace mlakit_bench
