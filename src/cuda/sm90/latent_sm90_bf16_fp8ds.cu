// The latent-attention kernel for bf16 over fp8_ds_mla cache rows (latent_kernel_sm90.cuh, rows
// decoded in its stages); one instantiation per file.
#include "cuda/sm90/latent_launch_sm90.h"
#include "cuda/sm90/latent_kernel_sm90.cuh"

namespace mlakit {
namespace cuda {
namespace sm90 {

cudaError_t launch_latent_bf16_fp8ds(const latent::LatentArgs& args, int device, int grid, cudaStream_t stream) {
  return latent_sm90::launch<__nv_bfloat16, 1>(args, device, grid, stream);
}

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
