// Validation of the MLA step: the config, a step's batch and options against it, and run()'s
// layer tensors against the config and the plan. Every check throws mlakit::Error naming one
// argument before anything is written.
#pragma once

#include <cstdint>

#include "mla/mla_layout.h"
#include "mlakit/mla.h"

namespace mlakit {
namespace mla {

void check_config(const MlaConfig& config);

// Totals of a validated batch.
struct BatchTotals {
  int64_t total_q = 0;
  int64_t total_context = 0;
  bool chunked = false;  // context + new tokens exceed the workspace rows
};

BatchTotals check_batch(const MlaConfig& config, const MlaLayout& layout, const MlaBatch& batch,
                        const MlaPlanOptions& options);

struct TensorRules {
  int64_t total_q = 0;
  bool cuda = false;  // 16-byte aligned pointers and row strides
};

void check_layer(const MlaConfig& config, const MlaLayer& layer, const TensorView& out,
                 const TensorView* lse, const TensorRules& rules);

}  // namespace mla
}  // namespace mlakit
