// Gather: latent rows out of the paged cache by the plan's map, into the workspace rows the
// up-projection reads; rows past the plan's count (up to the launch size) become zeros, so a
// launch padded for a CUDA graph multiplies zeros, never stale data.
#include "cuda/common/cuda_check.h"
#include "cuda/mla/mla_launch.h"
#include "cuda/mla/row_copy.cuh"

namespace mlakit {
namespace cuda {
namespace mla {
namespace {

__global__ void gather_kernel(const mlakit::mla::GatherArgs a) {
  const int pieces = a.cache.width / 8;
  const int64_t count = min(static_cast<int64_t>(*a.count), a.rows);
  const int64_t total = a.rows * pieces;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / pieces;
    const int p = static_cast<int>(i % pieces);
    uint16_t* dst = static_cast<uint16_t*>(a.out) + r * a.out_stride + p * 8;
    if (r < count) {
      copy16(dst, cache_row(a.cache, a.map[r]) + p * 8);
    } else {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    }
  }
}

}  // namespace

void launch_gather(const mlakit::mla::GatherArgs& a, Stream stream) {
  if (a.rows <= 0) return;
  const int64_t pieces = a.rows * (a.cache.width / 8);
  gather_kernel<<<row_copy_blocks(pieces), kRowCopyThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
  MLAKIT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mla
}  // namespace cuda
}  // namespace mlakit
