// Global -> shared tile copies with cp.async (16 bytes per thread per step, coalesced along rows).
#pragma once

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/sm80/smem_layout.cuh"

namespace mlakit {
namespace cuda {
namespace sm80 {

// Starts an async copy of rows [0, ROWS) of a K tile whose columns come from two tensors (split
// K, see PrefillArgs) into a swizzled shared tile; rows >= valid_rows are zero-filled and not
// read. Logical chunk c < split_chunks is chunk c of the row in `kbase` (row stride k_stride),
// the others are chunk c - split_chunks of the row in `krbase` (row stride kr_stride).
// split_chunks == D / 8 reads every column from `kbase`.
template <int ROWS, int D, int THREADS, typename T>
__device__ __forceinline__ void load_k_tile_async(T* smem, const T* kbase, int64_t k_stride,
                                                  const T* krbase, int64_t kr_stride,
                                                  int split_chunks, int valid_rows, int tid) {
  constexpr int kChunks = D / 8;
  constexpr int kTotal = ROWS * kChunks;
  static_assert(kTotal % THREADS == 0, "tile chunks must divide evenly among threads");
#pragma unroll
  for (int it = 0; it < kTotal / THREADS; ++it) {
    const int idx = it * THREADS + tid;
    const int r = idx / kChunks;
    const int c = idx % kChunks;
    const bool ok = r < valid_rows;
    const int64_t row = ok ? r : 0;
    const T* src = c < split_chunks ? kbase + row * k_stride + c * 8
                                    : krbase + row * kr_stride + (c - split_chunks) * 8;
    cp_async_16(smem_addr(smem + SwizzledRows<D>::offset(r, c)), src, ok);
  }
}

// Starts an async copy of rows [0, ROWS) of a [rows, D] slice whose row stride is `stride`
// elements into a swizzled shared tile. Rows >= valid_rows are zero-filled and not read. (The
// K loader with every chunk from one tensor.)
template <int ROWS, int D, int THREADS, typename T>
__device__ __forceinline__ void load_tile_async(T* smem, const T* gbase, int64_t stride,
                                                int valid_rows, int tid) {
  load_k_tile_async<ROWS, D, THREADS>(smem, gbase, stride, gbase, stride, D / 8, valid_rows, tid);
}

}  // namespace sm80
}  // namespace cuda
}  // namespace mlakit
