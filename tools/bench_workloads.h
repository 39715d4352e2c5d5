// Workload definitions for mlakit-bench. The named ones come from bench/workloads.txt, which
// bench/workloads.py reads too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mlakit/prefill.h"
#include "mlakit/tensor.h"

namespace mlakit_bench {

struct Workload {
  std::string name;
  std::vector<int32_t> q_lens;
  std::vector<int32_t> kv_lens;  // same size as q_lens
  int heads = 16;
  int kv_heads = 16;
  int dqk = 192;
  int dvo = 128;
  mlakit::DType dtype = mlakit::DType::kBF16;
  mlakit::PrefillOptions options;
  int scale_divisor = 1;  // >1: every length was divided by this (CPU runs)

  int batch() const { return static_cast<int>(q_lens.size()); }
  int64_t total_q() const;
  int64_t total_kv() const;
  // Prefix sums, batch + 1 values starting at 0.
  std::vector<int32_t> qo_indptr() const;
  std::vector<int32_t> kv_indptr() const;
  // Bytes of q, k, v and out for one input set.
  size_t bytes_per_set() const;
};

// The named workloads, in the order --all runs them.
std::vector<Workload> named_workloads();
// Workloads in bench/workloads.txt's format; throws std::invalid_argument naming a bad line.
std::vector<Workload> parse_workloads(const std::string& text);
// Looks up one by name; false if unknown.
bool find_named(const std::string& name, Workload* out);
// Every length divided by `divisor` (rounded down, at least 1).
Workload scaled(const Workload& w, int divisor);
// "999,500,8x999" -> {999, 500, 999 x 8}. Throws std::invalid_argument on bad input.
std::vector<int32_t> parse_lens(const std::string& spec);

}  // namespace mlakit_bench
