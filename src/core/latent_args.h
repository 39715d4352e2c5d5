// Launch arguments of latent attention (latent::LatentArgs) from validated tensors, the device
// copy of the plan and the split partials. Plain host arithmetic.
#pragma once

#include "contract/latent_launch.h"
#include "mlakit/latent.h"

namespace mlakit {
namespace backend {

// `partials`: the split partials of `partial_rows` rows (null when the capacity needs none):
// O fp32 [partial_rows, L], then lse and max logits fp32 [partial_rows].
// `decoded`: the bf16 workspace of `decoded_rows` rows for FP8 caches decoded once (null: none).
latent::LatentArgs make_latent_args(const LatentConfig& config, const LatentLayer& layer, const TensorView& out,
                                    const TensorView* lse, const void* plan, void* partials, int64_t partial_rows,
                                    void* decoded = nullptr, int64_t decoded_rows = 0);

// Bytes of the partials for `rows` rows of width `kv_lora_rank`.
size_t latent_partial_bytes(int64_t rows, int kv_lora_rank);

}  // namespace backend
}  // namespace mlakit
