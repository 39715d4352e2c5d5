// The latent-attention kernel for fp16 (latent_kernel_sm90.cuh); one instantiation per file.
#include "cuda/sm90/latent_launch_sm90.h"
#include "cuda/sm90/latent_kernel_sm90.cuh"

namespace mlakit {
namespace cuda {
namespace sm90 {

cudaError_t launch_latent_fp16(const latent::LatentArgs& args, int device, int grid, cudaStream_t stream) {
  return latent_sm90::launch<__half, 0>(args, device, grid, stream);
}

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
