// Validation that belongs to RaggedPrefill (the tensor rules shared with the reference live in
// src/plan/validate.h): the config and a batch against the capacity (run()'s tensors meet the config in
// plan/validate.cc, TensorRules::config). Each check throws mlakit::Error naming one argument, before anything is written.
#pragma once

#include "core/backend.h"
#include "contract/prefill_launch.h"
#include "mlakit/prefill.h"
#include "plan/validate.h"

namespace mlakit {
namespace backend {

// Everything about a config that needs neither the device nor memory.
void check_config(const PrefillConfig& config);

// A validated batch against the capacity given at construction.
void check_capacity(const PrefillConfig& config, int batch_size, const plan::IndptrTotals& totals);


}  // namespace backend
}  // namespace mlakit
