// Gather: the latent rows of one launch into the workspace rows the up-projection reads, by the
// plan's map: context rows out of the paged cache, new tokens straight from kv_c / k_pe, which
// the same kernel also writes into the cache at their slots (the step's cache write, fused here
// so it costs no launch of its own and the new rows are not read back from the cache). Rows past
// the plan's count (up to the launch size) become zeros, so a launch padded for a CUDA graph
// multiplies zeros, never stale data.
#include "cuda/common/grid_dependency.cuh"
#include "cuda/common/pdl_launch.h"
#include "mla/cuda/mla_launch.h"
#include "mla/cuda/row_copy.cuh"

namespace mlakit {
namespace cuda {
namespace mla {
namespace {

using mlakit::mla::is_new_token_entry;
using mlakit::mla::new_token_of;

__global__ void gather_kernel(const mlakit::mla::GatherArgs a) {
  // PDL (docs/sm90-kernel.md): what it reads (count, map, cache, new rows) may come from the previous
  // kernel, and what it writes (`out`, the cache) may still be read by it: the last layer's
  // attention reads its K RoPE part straight from `out`.
  pdl_wait();
  // The next kernel's blocks may be scheduled as these retire (they wait for this grid).
  pdl_launch_dependents();
  const int pieces = a.cache.width / 8;
  const int latent_pieces = a.fresh.latent_dim / 8;
  const int64_t count = min(static_cast<int64_t>(*a.count), a.rows);
  const int64_t total = a.rows * pieces;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / pieces;
    const int p = static_cast<int>(i % pieces);
    uint16_t* dst = static_cast<uint16_t*>(a.out) + r * a.out_stride + p * 8;
    if (r >= count) {
      store16(dst, make_uint4(0, 0, 0, 0));
      continue;
    }
    const int32_t e = a.map[r];
    if (!is_new_token_entry(e)) {
      copy16(dst, cache_row(a.cache, e) + p * 8);
      continue;
    }
    const int64_t t = new_token_of(e);
    const uint16_t* src = p < latent_pieces
                              ? static_cast<const uint16_t*>(a.fresh.kv_c) + t * a.fresh.kv_c_stride + p * 8
                              : static_cast<const uint16_t*>(a.fresh.k_pe) + t * a.fresh.k_pe_stride +
                                    (p - latent_pieces) * 8;
    const uint4 v = load16(src);
    store16(dst, v);
    store16(cache_row(a.cache, a.fresh.slots[t]) + p * 8, v);
  }
}

}  // namespace

void launch_gather(const mlakit::mla::GatherArgs& a, Stream stream) {
  if (a.rows <= 0) return;
  const int64_t pieces = a.rows * (a.cache.width / 8);
  launch_kernel(gather_kernel, row_copy_blocks(pieces), kRowCopyThreads, 0, static_cast<cudaStream_t>(stream), a);
}

}  // namespace mla
}  // namespace cuda
}  // namespace mlakit
