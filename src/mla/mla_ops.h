// The MLA step's own device work besides attention (which goes through core/backend.h) and the
// up-projection (blas.h): the gather of each launch's latent rows, which in the first launch of a
// step also writes the new tokens into the paged cache (no separate cache-write kernel), and for
// FP8 attention the rounding of q, K and V to e4m3. One
// implementation per device (mla_ops_cpu.cc; mla_ops_cuda.cc over src/cuda/mla), both with the
// same semantics. Everything that varies per step (the row count, the map, the new tokens'
// slots) is read from the plan in the device workspace, so launches captured in a CUDA graph
// follow a new plan; `rows` (the launch size) is fixed by the caller.
#pragma once

#include <cstdint>
#include <memory>

#include "mla/gather_entry.h"
#include "mlakit/mla.h"
#include "mlakit/tensor.h"

namespace mlakit {
namespace mla {

// The paged latent cache [num_blocks, block_size, row]: slot s is row s % block_size of block
// s / block_size. kAuto rows are `width` 16-bit values; FP8 rows are bytes (mlakit/mla.h,
// KvCacheDtype: width e4m3 codes for kFp8, 656 bytes for kFp8DsMla), decoded into `width`
// 16-bit latents by the gather, which also encodes the new tokens into them.
struct CacheView {
  void* data;
  int64_t block_stride, row_stride;  // elements of the cache tensor (bytes for FP8 formats)
  int block_size;
  int width;  // latent + rope: the values of a row
  KvCacheDtype format = KvCacheDtype::kAuto;
  const float* k_scale = nullptr;  // kFp8: the layer's scale (device memory), read when the gather runs
};

// The step's new tokens as run() receives them: new token t is [kv_c[t], k_pe[t]] and belongs
// in cache slot slots[t]. kv_c == nullptr: the launch has no new-token rows (context chunks).
struct NewTokens {
  const void* kv_c = nullptr;
  int64_t kv_c_stride = 0;
  const void* k_pe = nullptr;
  int64_t k_pe_stride = 0;
  int latent_dim = 0;              // kv_c's width; k_pe's is cache.width - latent_dim
  const int32_t* slots = nullptr;  // workspace
};

// For r < *count, by the map entry e = map[r] (gather_entry.h):
//   e >= 0: out[r] = cache[e];
//   e <  0: t = ~e, out[r] = [kv_c[t], k_pe[t]] and cache[slots[t]] = the same row.
// FP8 caches: out[r] = decode(cache[e]), and for a new token cache[slots[t]] = encode([kv_c[t],
// k_pe[t]]) and out[r] = decode of that row (the step attends what the cache holds).
// Zeros for *count <= r < rows (a launch padded for a CUDA graph multiplies zeros, never stale
// data). The plan puts every new token in the first launch's map exactly once, and never a slot
// that one of them writes (see mla_plan_build.h), so rows read and rows written never overlap.
struct GatherArgs {
  CacheView cache;
  const int32_t* map;    // workspace
  const int32_t* count;  // workspace
  int64_t rows;          // launch size, >= any *count it will see
  void* out;
  int64_t out_stride;
  NewTokens fresh;  // needed when the map has new-token entries
  DType dtype;
};

// FP8 attention (MlaConfig::fp8_attention): one launch's up-projected K/V and k_pe, and with q
// set the step's q, rounded to e4m3 with the scales mlakit/mla.h defines, and the descale
// factors [3][max_batch][heads] (q's, k's, v's; every batch row the same) written.
//   latent [rows, latent_dim + rope_dim] (row stride latent_stride): the launch's gathered rows
//     (zero past *count, so they raise no maximum); kv [rows, heads, dn + dv] contiguous, the
//     up-projection's output; weight [heads * (dn + dv), latent_dim] (row stride weight_stride).
//   kv8 [rows, heads, dn + dv], rope8 [rows, rope_dim], q8 [q_rows, heads, dn + rope_dim]: e4m3.
// Only launch 0 passes q (its scale holds for the whole step); later launches keep q8 and q's
// descales.
struct Fp8Args {
  const void* latent = nullptr;
  int64_t latent_stride = 0;
  int latent_dim = 0, rope_dim = 0;
  int64_t rows = 0;
  const void* kv = nullptr;
  int heads = 0, dn = 0, dv = 0;
  const void* weight = nullptr;
  int64_t weight_stride = 0;
  const TensorView* q = nullptr;  // [>= q_rows, heads, dn + rope_dim], or null
  int64_t q_rows = 0;
  DType dtype = DType::kBF16;     // of latent, kv, weight and q
  uint8_t* kv8 = nullptr;
  uint8_t* rope8 = nullptr;
  uint8_t* q8 = nullptr;
  float* descales = nullptr;
  int max_batch = 0;
};

// Absorbed requests: rows of a [rows, heads, width] tensor copied by index, all heads of a row:
// for r < min(*count, rows), dst[dst_map ? dst_map[r] : r] = src[src_map ? src_map[r] : r]. The
// absorbed tokens' q rows into a compact buffer (src_map), their out and lse rows back
// (dst_map). Strides in elements, the width contiguous; elem_bytes 2 (16-bit) or 4 (fp32).
// Rows past the count are left as they are (nothing reads them).
struct RowCopyArgs {
  const void* src = nullptr;
  int64_t src_row = 0, src_head = 0;
  void* dst = nullptr;
  int64_t dst_row = 0, dst_head = 0;
  const int32_t* src_map = nullptr;  // workspace
  const int32_t* dst_map = nullptr;  // workspace
  const int32_t* count = nullptr;    // workspace
  int64_t rows = 0;                  // launch size, >= any *count it will see
  int heads = 0, width = 0;
  int elem_bytes = 2;
};

class MlaOps {
 public:
  virtual ~MlaOps() = default;
  virtual void gather(const GatherArgs& a, Stream stream) const = 0;
  virtual void quantize_fp8(const Fp8Args& a, Stream stream) const = 0;
  virtual void copy_rows(const RowCopyArgs& a, Stream stream) const = 0;
};

std::unique_ptr<MlaOps> make_ops(Device device);

}  // namespace mla
}  // namespace mlakit
