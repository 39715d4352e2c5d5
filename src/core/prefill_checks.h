// Validation that belongs to RaggedPrefill (the tensor rules shared with the reference live in
// src/plan/validate.h): the config, a batch against the capacity, run()'s tensors against the
// config. Each check throws mlakit::Error naming one argument, before anything is written.
#pragma once

#include "core/backend.h"
#include "cuda/prefill_launch.h"
#include "mlakit/prefill.h"
#include "plan/validate.h"

namespace mlakit {
namespace backend {

// Everything about a config that needs neither the device nor memory.
void check_config(const PrefillConfig& config);

// A validated batch against the capacity given at construction.
void check_capacity(const PrefillConfig& config, int batch_size, const plan::IndptrTotals& totals);

// run()'s tensors, already consistent with each other and the plan, against the config.
void check_matches_config(const PrefillConfig& config, const TensorView& q, const TensorView& k,
                          const TensorView& v);

}  // namespace backend
}  // namespace mlakit
