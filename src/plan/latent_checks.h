// Validation of latent attention (mlakit/latent.h): the config, a plan's batch and options, and
// run()'s tensors against both. Every check throws mlakit::Error naming one argument before
// anything is written.
#pragma once

#include <cstdint>

#include "mlakit/latent.h"

namespace mlakit {
namespace plan {

// The config (except the device, which the backend choice checks).
void check_latent_config(const LatentConfig& config);

// What a validated plan holds.
struct LatentTotals {
  int64_t total_q = 0;
  int64_t total_kv = 0;     // 0 when kv_lens are not read (kSlots sparse plans)
  bool reads_table = false; // dense and kPositions plans read kv_lens and the block table
  bool device_table = false; // ... the one on the device (LatentBatch::device_block_table)
};

// batch and options against the config (lengths, capacities, every block table entry a
// request reaches, sm_scale, topk, the index kind).
LatentTotals check_latent_plan(const LatentConfig& config, const LatentBatch& batch, const LatentPlanOptions& options);

// run()'s tensors for a plan with these totals and options. `reference`: out, lse and
// max_logits fp32 or fp64, q and q_pe of any float dtype (the backends: the config's dtype, lse
// and max_logits fp32). `cuda`: 16-byte aligned pointers and rows.
struct LatentTensorRules {
  bool reference = false;
  bool cuda = false;
};
void check_latent_tensors(const LatentConfig& config, const LatentPlanOptions& options, const LatentTotals& totals,
                          const LatentLayer& layer, const TensorView& out, const TensorView* lse,
                          const LatentTensorRules& rules);

}  // namespace plan
}  // namespace mlakit
