// The CPU side of the MLA ops: plain row copies, reading the per-step count, map and slots from
// the plan in the (host) workspace exactly as the CUDA kernel does, so the CPU backend and its
// tests cover the same fused gather + cache write.
#include <algorithm>
#include <cstring>

#include "mla/mla_ops.h"

namespace mlakit {
namespace mla {
namespace {

char* cache_row(const CacheView& c, int32_t slot, size_t es) {
  const int64_t blk = slot / c.block_size, off = slot % c.block_size;
  return static_cast<char*>(c.data) + (blk * c.block_stride + off * c.row_stride) * static_cast<int64_t>(es);
}

const char* row_of(const void* base, int64_t row, int64_t stride, size_t es) {
  return static_cast<const char*>(base) + row * stride * static_cast<int64_t>(es);
}

class CpuOps final : public MlaOps {
 public:
  void gather(const GatherArgs& a, Stream) const override {
    const size_t es = dtype_size(a.dtype);
    const size_t row_bytes = static_cast<size_t>(a.cache.width) * es;
    const size_t latent_bytes = static_cast<size_t>(a.fresh.latent_dim) * es;
    const int64_t n = std::min<int64_t>(*a.count, a.rows);
    for (int64_t r = 0; r < a.rows; ++r) {
      char* dst = static_cast<char*>(a.out) + r * a.out_stride * static_cast<int64_t>(es);
      if (r >= n) {
        std::memset(dst, 0, row_bytes);
        continue;
      }
      const int32_t e = a.map[r];
      if (!is_new_token_entry(e)) {
        std::memcpy(dst, cache_row(a.cache, e, es), row_bytes);
        continue;
      }
      // A new token: assemble its row from kv_c and k_pe, then the same bytes into its slot.
      const int32_t t = new_token_of(e);
      std::memcpy(dst, row_of(a.fresh.kv_c, t, a.fresh.kv_c_stride, es), latent_bytes);
      std::memcpy(dst + latent_bytes, row_of(a.fresh.k_pe, t, a.fresh.k_pe_stride, es), row_bytes - latent_bytes);
      std::memcpy(cache_row(a.cache, a.fresh.slots[t], es), dst, row_bytes);
    }
  }
};

}  // namespace

std::unique_ptr<MlaOps> make_cpu_ops() { return std::make_unique<CpuOps>(); }

}  // namespace mla
}  // namespace mlakit
