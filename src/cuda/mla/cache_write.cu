// Cache write: the new tokens' [kv_c, k_pe] rows into the paged latent cache at their slots.
// The row count comes from the plan in the workspace, so a captured launch follows re-plans.
#include "cuda/common/cuda_check.h"
#include "cuda/mla/mla_launch.h"
#include "cuda/mla/row_copy.cuh"

namespace mlakit {
namespace cuda {
namespace mla {
namespace {

__global__ void cache_write_kernel(const mlakit::mla::CacheWriteArgs a) {
  const int latent_pieces = a.latent_dim / 8;
  const int pieces = latent_pieces + a.rope_dim / 8;
  const int64_t count = min(static_cast<int64_t>(*a.count), a.rows);
  const int64_t total = count * pieces;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / pieces;
    const int p = static_cast<int>(i % pieces);
    const uint16_t* src = p < latent_pieces
                              ? static_cast<const uint16_t*>(a.kv_c) + r * a.kv_c_stride + p * 8
                              : static_cast<const uint16_t*>(a.k_pe) + r * a.k_pe_stride + (p - latent_pieces) * 8;
    copy16(cache_row(a.cache, a.slots[r]) + p * 8, src);
  }
}

}  // namespace

void launch_cache_write(const mlakit::mla::CacheWriteArgs& a, Stream stream) {
  if (a.rows <= 0) return;
  const int64_t pieces = a.rows * ((a.latent_dim + a.rope_dim) / 8);
  cache_write_kernel<<<row_copy_blocks(pieces), kRowCopyThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
  MLAKIT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mla
}  // namespace cuda
}  // namespace mlakit
