// The MLA step's absorbed requests (mlakit/mla.h): which config runs them, their latent
// attention plan, and per layer their q rows absorbed through W_UK, the latent attention (dense,
// or DeepSeek-V3.2's sparse over the indexer's top-k), the W_UV projection and the rows copied
// back into out / lse. The step's own plan block holds the absorbed token list and its count
// (mla_layout.h), its buffers the compacted rows; this object owns the LatentAttention.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mla/absorb_choice.h"
#include "mla/mla_layout.h"
#include "mla/mla_ops.h"
#include "mlakit/latent.h"
#include "mlakit/mla.h"

namespace mlakit {
namespace mla {

// MlaConfig::absorb_max_query_len and max_topk resolved for a checked config.
struct AbsorbSetup {
  AbsorbRule rule;        // max_query_len 0: no request absorbed by the new-token rule
  bool enabled = false;   // a latent attention exists (the rule, or sparse steps: max_topk > 0)
  LatentConfig latent;    // when enabled
};
AbsorbSetup resolve_absorb(const MlaConfig& config);

class AbsorbedPath {
 public:
  // `ops` and `layout` outlive the object.
  AbsorbedPath(const MlaConfig& config, const LatentConfig& latent, const MlaOps& ops, const MlaLayout& layout);

  // The latent attention's plan for the parts of `batch` with absorbed[i] set: their new tokens
  // over their context and themselves (kv_len = context + new), causal among the new ones, or
  // with topk > 0 over their rows of the indices (request-local positions). Planned every step,
  // empty when nothing is absorbed, so a captured run replays whatever comes.
  void plan(const MlaBatch& batch, const uint8_t* absorbed, float sm_scale, int topk, Stream stream);

  // One layer over `rows` compacted rows (the absorbed tokens, or a graph's size). `plan_block`:
  // the step's published plan block; `buffers`: its buffers.
  void run(const MlaLayer& layer, const TensorView& out, const TensorView* lse, int64_t rows,
           const uint8_t* plan_block, uint8_t* buffers, Stream stream) const;

  int64_t visible_pairs() const { return latent_->info().visible_pairs; }

 private:
  const MlaConfig& config_;
  const MlaOps& ops_;
  const MlaLayout& layout_;
  std::unique_ptr<LatentAttention> latent_;
  int topk_ = 0;  // of the current plan
  std::vector<int32_t> q_, kv_, table_;
};

}  // namespace mla
}  // namespace mlakit
