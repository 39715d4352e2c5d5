// Validation of the MLA step: the config, a step's batch and options against it, and run()'s
// layer tensors against the config and the plan. Every check throws mlakit::Error naming one
// argument before anything is written.
#pragma once

#include <cstdint>

#include "mla/absorb_choice.h"
#include "mla/mla_layout.h"
#include "mlakit/mla.h"

namespace mlakit {
namespace mla {

void check_config(const MlaConfig& config);

// Totals of a validated batch.
struct BatchTotals {
  int64_t total_q = 0;
  int64_t total_context = 0;
  AbsorbChoice absorbed;  // the requests attended in latent space
  int64_t gathered_rows = 0;  // every new token and the up-projected requests' context
  int64_t absorbed_rows = 0;  // rows of the absorbed launches (the tokens, or the graph's size)
  bool chunked = false;  // gathered_rows exceed the workspace rows
};

// Checks the batch and options, and chooses the absorbed requests (the config's rule resolved,
// none by default; layout.max_absorbed the capacity), writing absorbed[r] for every request.
BatchTotals check_batch(const MlaConfig& config, const MlaLayout& layout, const MlaBatch& batch,
                        const MlaPlanOptions& options, const AbsorbRule& absorb = AbsorbRule(),
                        uint8_t* absorbed = nullptr, const uint8_t* forced = nullptr);

// A sparse plan's layer inputs (options.topk > 0): indices [>= total_q, topk] int32, topk_length
// [>= total_q] int32 when given.
void check_sparse_layer(const MlaConfig& config, const MlaLayer& layer, int64_t total_q, int topk, bool cuda);

struct TensorRules {
  int64_t total_q = 0;
  bool cuda = false;  // 16-byte aligned pointers and row strides
};

void check_layer(const MlaConfig& config, const MlaLayer& layer, const TensorView& out,
                 const TensorView* lse, const TensorRules& rules);

}  // namespace mla
}  // namespace mlakit
