// The latent-attention kernel for fp16 rows in clusters of two CTAs that share each key tile
// (latent_kernel_sm90.cuh, PairSide: plans whose items come in pairs, latent::paired_items);
// one instantiation per file.
#include "cuda/sm90/latent_launch_sm90.h"
#include "cuda/sm90/latent_kernel_sm90.cuh"

namespace mlakit {
namespace cuda {
namespace sm90 {

cudaError_t launch_latent_fp16_pair(const latent::LatentArgs& args, int device, int grid, cudaStream_t stream) {
  return latent_sm90::launch<__half, 0, true>(args, device, grid, stream);
}

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
