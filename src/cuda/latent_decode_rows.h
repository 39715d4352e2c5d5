// Latent attention on FP8 caches, decoded once (contract/latent_layout.h): a decoded plan's
// requests' rows, from the cache into the bf16 workspace the 16-bit kernel then reads.
#pragma once

#include <cuda_runtime.h>

#include "contract/latent_launch.h"

namespace mlakit {
namespace cuda {

// Launches the decode over `grid` blocks; it returns at once for a plan that is not decoded (the
// plan block says), so a captured run replays either kind. args.cache_format 1 or 2.
void launch_latent_decode_rows(const latent::LatentArgs& args, int sms, cudaStream_t stream);

}  // namespace cuda
}  // namespace mlakit
