// The latent-attention kernel for bf16 over fp8_ds_mla cache rows in clusters of two CTAs that
// share each key tile's decode (latent_kernel_sm90.cuh, PairSide: plans whose items come in
// pairs, latent::paired_items); one instantiation per file.
#include "cuda/sm90/latent_launch_sm90.h"
#include "cuda/sm90/latent_kernel_sm90.cuh"

namespace mlakit {
namespace cuda {
namespace sm90 {

cudaError_t launch_latent_bf16_fp8ds_pair(const latent::LatentArgs& args, int device, int grid, cudaStream_t stream) {
  return latent_sm90::launch<__nv_bfloat16, 1, true>(args, device, grid, stream);
}

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
