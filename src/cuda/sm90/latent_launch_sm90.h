// Entry points of the Hopper latent-attention kernel (latent_sm90_<dtype>.cu), for the dispatch
// (src/cuda/latent_dispatch.cu) that the rest of the build compiles for every architecture.
#pragma once

#include <cuda_runtime.h>

#include "contract/latent_launch.h"

namespace mlakit {
namespace cuda {
namespace sm90 {

// Work items over `grid` persistent CTAs on the current device (`device`, its index).
cudaError_t launch_latent_bf16(const latent::LatentArgs& args, int device, int grid, cudaStream_t stream);
cudaError_t launch_latent_fp16(const latent::LatentArgs& args, int device, int grid, cudaStream_t stream);
// bf16 over fp8_ds_mla cache rows (args.cache_format 1) and over vLLM fp8 rows (2).
cudaError_t launch_latent_bf16_fp8ds(const latent::LatentArgs& args, int device, int grid, cudaStream_t stream);
cudaError_t launch_latent_bf16_fp8(const latent::LatentArgs& args, int device, int grid, cudaStream_t stream);
// The fp8_ds_mla one in clusters of two CTAs sharing each key tile's decode, for plans whose items
// come in pairs (latent::paired_items); cudaErrorNotSupported when the device fits no cluster of two.
cudaError_t launch_latent_bf16_fp8ds_pair(const latent::LatentArgs& args, int device, int grid, cudaStream_t stream);

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
