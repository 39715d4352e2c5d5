// `mlakit-bench --plan-only`'s latent-attention part: LatentAttention::plan()'s host cost at batch
// 128 (decode over 4,096 keys and over ragged contexts, MTP, 16 and 128 heads, page 64, a
// shuffled block table, on the host or, `_dtable`, in the device's memory; `_upload_in_run`: the
// plan copied to the device by the next run() instead of by plan(), as a CUDA-graph step does), the
// shapes docs/latent-attention.md and bench/compare_latent.py use.
#pragma once

#include <string>
#include <vector>

#include "mlakit/tensor.h"

namespace mlakit_bench {

struct LatentPlanRow {
  std::string name;  // e.g. "decode_h16"
  int batch = 0, heads = 0, new_tokens = 0, items = 0, merges = 0;
  double median_us = 0.0;
  std::string error;
};

// Prints a table and returns its rows; `iters` plan() calls per row (median).
std::vector<LatentPlanRow> run_latent_plan_cost(mlakit::Device dev, int iters);

// The rows as JSON objects (indent: the objects' own).
std::vector<std::string> latent_plan_json(const std::vector<LatentPlanRow>& rows, int indent);

}  // namespace mlakit_bench
