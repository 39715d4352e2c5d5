// The decode once of latent attention on FP8 caches (latent_decode_rows.h): a CTA a workspace
// block of 64 rows, each value decoded as the MLA step's gather decodes it
// (cuda/common/fp8_rows.cuh).
#include "cuda/latent_decode_rows.h"

#include <cuda_bf16.h>

#include "contract/latent_layout.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/fp8_rows.cuh"

namespace mlakit {
namespace cuda {

namespace {

using latent::LatentArgs;
using latent::LatentHeader;

constexpr int kDecodeWarps = 8;

// Workspace block g holds positions [64 j, 64 j + 64) of the request r whose blocks
// page_ptr[r] .. page_ptr[r + 1] contain g (j = g - page_ptr[r]); rows past its kv_len are not
// written (no item reads them). The cache's rows come through the request's source pages. A
// warp takes 8 rows: all their loads first, then the decodes and stores, so that each warp has
// 8 rows' loads in flight instead of one.
template <int kFormat>
__global__ void __launch_bounds__(kDecodeWarps * 32) latent_decode_rows_kernel(const LatentArgs a) {
  constexpr int kRowsPerWarp = latent::kDecodedBlockRows / kDecodeWarps;
  // A lane's share of a row: fp8_rows.cuh's lane parts (fp8: pieces lane and lane + 32 of the
  // row's 36 16-byte pieces).
  constexpr int kRowWidth = 576;
  const auto* block = static_cast<const uint8_t*>(a.plan);
  const LatentHeader& h = *reinterpret_cast<const LatentHeader*>(block);
  if (h.decoded == 0) return;
  const auto* page_ptr = reinterpret_cast<const int32_t*>(block + h.page_indptr_offset);
  const auto* kv = reinterpret_cast<const int32_t*>(block + h.kv_lens_offset);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const float k_scale = kFormat == 2 ? *a.k_scale : 1.0f;
  int shift = 0;
  while ((1 << shift) < h.src_block_size) ++shift;
  const int64_t in_block = (int64_t{1} << shift) - 1;
  for (int g = blockIdx.x; g < h.decoded_pages; g += gridDim.x) {
    // The request holding block g: the last r with page_ptr[r] <= g (binary search over the batch).
    int lo = 0, hi = h.batch_size;  // page_ptr[lo] <= g < page_ptr[hi]
    while (hi - lo > 1) {
      const int mid = (lo + hi) >> 1;
      if (page_ptr[mid] <= g) lo = mid;
      else hi = mid;
    }
    const int64_t pos0 = int64_t{g - page_ptr[lo]} * latent::kDecodedBlockRows;
    const int rows = static_cast<int>(min(int64_t{latent::kDecodedBlockRows}, int64_t{kv[lo]} - pos0));
    const int32_t* src_pages = latent::request_src_pages(h, block, lo);
    fp8::DsMlaLanePart part[kRowsPerWarp];            // fp8_ds_mla
    fp8::Fp8LanePart<kRowWidth> piece[kRowsPerWarp];  // fp8
#pragma unroll
    for (int k = 0; k < kRowsPerWarp; ++k) {
      const int i = warp + kDecodeWarps * k;
      if (i >= rows) break;
      const int64_t pos = pos0 + i;
      // The FP8 formats' strides are in bytes.
      const auto* row = static_cast<const uint8_t*>(a.cache) + src_pages[pos >> shift] * a.cache_stride_block +
                        (pos & in_block) * a.cache_stride_row;
      if constexpr (kFormat == 1) {
        part[k] = fp8::load_ds_mla(row, lane);
      } else {
        piece[k] = fp8::load_fp8<kRowWidth>(row, lane);
      }
    }
#pragma unroll
    for (int k = 0; k < kRowsPerWarp; ++k) {
      const int i = warp + kDecodeWarps * k;
      if (i >= rows) break;
      auto* out = static_cast<uint16_t*>(a.decoded) + (int64_t{g} * latent::kDecodedBlockRows + i) * kRowWidth;
      if constexpr (kFormat == 1) {
        fp8::store_ds_mla(part[k], out, lane);
      } else {
        fp8::store_fp8<__nv_bfloat16>(piece[k], k_scale, out, lane);
      }
    }
  }
}

}  // namespace

void launch_latent_decode_rows(const LatentArgs& a, int sms, cudaStream_t stream) {
  // Four CTAs an SM (a plan's block count is on the device only): a 32k-row context is 512
  // blocks, about one wave.
  if (a.cache_format == 1) latent_decode_rows_kernel<1><<<4 * sms, kDecodeWarps * 32, 0, stream>>>(a);
  else latent_decode_rows_kernel<2><<<4 * sms, kDecodeWarps * 32, 0, stream>>>(a);
  MLAKIT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cuda
}  // namespace mlakit
