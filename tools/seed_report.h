// Results of `mlakit-bench seed` cases and how they are reported: the seed's "Serving Benchmark
// Result" block layout (mean, median, P99) and JSON.
#pragma once

#include <string>
#include <vector>

#include "seed_schedule.h"

namespace mlakit_bench {

struct Stats {
  double mean = 0, median = 0, p99 = 0;
};
Stats stats_of(std::vector<double> v);

struct StepTiming {
  double wall_ms = 0, device_ms = 0, host_ms = 0, plan_us = 0;
};

struct CaseResult {
  int requests = 0, budget = 0, layers = 0;
  std::string mode;
  bool upload_in_run = false;  // MlaConfig::upload_in_run
  std::vector<SeedStep> steps;
  std::vector<StepTiming> timing;  // per step, median over reps
  std::vector<double> ttft_ms;     // per request: wall time of the steps until its prompt is done
  // Graph mode: per step the bucket it was planned with (graph_rows; 0 in eager mode), the
  // buckets captured (one graph each, before the timed passes), the device memory the captures
  // took (drop of free memory) and the time they took.
  std::vector<int64_t> graph_rows;
  std::vector<int64_t> graph_buckets;
  int64_t bucket_step = 0;  // graph_bucket's rows per bucket above 1024 (0 in eager mode)
  MlaDims dims;             // the step's MlaConfig widths, which its useful work is counted with
  double graph_mem_mb = 0, capture_ms = 0;
  double create_ms = 0;  // MlaStep's constructor (allocation; GEMM tuning on CUDA)
};

// Prints the case's block (and, with per_step, every step's timings).
void print_case(const CaseResult& c, int prompt, int heads, bool per_step, const std::string& device_desc);
std::string case_json(const CaseResult& c, int prompt, int heads);

}  // namespace mlakit_bench
