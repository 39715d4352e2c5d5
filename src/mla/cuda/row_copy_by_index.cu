// Rows copied by index for the MLA step's absorbed requests (mla_ops.h, RowCopyArgs): their q rows
// into a compact buffer before the absorption GEMM, their out and lse rows back after the W_UV
// projection. 16-byte pieces where every row, head and width allows them (q and out); 4-byte
// elements otherwise (an lse of any strides). The count comes from the plan in the workspace, so
// a launch sized for a CUDA graph follows each new plan.
#include "cuda/common/grid_dependency.cuh"
#include "cuda/common/pdl_launch.h"
#include "mla/cuda/mla_launch.h"
#include "mla/cuda/row_copy.cuh"

namespace mlakit {
namespace cuda {
namespace mla {
namespace {

template <class Piece>
__global__ void copy_rows_kernel(const mlakit::mla::RowCopyArgs a) {
  pdl_wait();  // the rows may come from the previous kernel, and it may still read dst
  pdl_launch_dependents();
  const int per_head = a.width * a.elem_bytes / static_cast<int>(sizeof(Piece));
  const int64_t per_row = static_cast<int64_t>(per_head) * a.heads;
  const int64_t count = min(static_cast<int64_t>(*a.count), a.rows);
  const int64_t total = count * per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row;
    const int h = static_cast<int>((i % per_row) / per_head);
    const int p = static_cast<int>(i % per_head);
    const int64_t sr = a.src_map ? a.src_map[r] : r, dr = a.dst_map ? a.dst_map[r] : r;
    const auto* src = reinterpret_cast<const Piece*>(static_cast<const char*>(a.src) +
                                                     (sr * a.src_row + h * a.src_head) * a.elem_bytes);
    auto* dst = reinterpret_cast<Piece*>(static_cast<char*>(a.dst) + (dr * a.dst_row + h * a.dst_head) * a.elem_bytes);
    dst[p] = src[p];
  }
}

bool pieces_of_16(const mlakit::mla::RowCopyArgs& a) {
  const auto aligned = [](int64_t bytes) { return bytes % 16 == 0; };
  return aligned(static_cast<int64_t>(a.width) * a.elem_bytes) && aligned(a.src_row * a.elem_bytes) &&
         aligned(a.src_head * a.elem_bytes) && aligned(a.dst_row * a.elem_bytes) &&
         aligned(a.dst_head * a.elem_bytes) && reinterpret_cast<uintptr_t>(a.src) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(a.dst) % 16 == 0;
}

}  // namespace

void launch_copy_rows(const mlakit::mla::RowCopyArgs& a, Stream stream) {
  if (a.rows <= 0) return;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (pieces_of_16(a)) {
    const int64_t pieces = a.rows * a.heads * (a.width * a.elem_bytes / 16);
    launch_kernel(copy_rows_kernel<uint4>, row_copy_blocks(pieces), kRowCopyThreads, 0, s, a);
  } else {
    const int64_t pieces = a.rows * a.heads * (a.width * a.elem_bytes / 4);
    launch_kernel(copy_rows_kernel<uint32_t>, row_copy_blocks(pieces), kRowCopyThreads, 0, s, a);
  }
}

}  // namespace mla
}  // namespace cuda
}  // namespace mlakit
