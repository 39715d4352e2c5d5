// The CPU side of the MLA ops: plain row copies, reading the per-step counts and slots from the
// plan in the (host) workspace exactly as the CUDA kernels do.
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

class CpuOps final : public MlaOps {
 public:
  void write_cache(const CacheWriteArgs& a, Stream) const override {
    const size_t es = dtype_size(a.dtype);
    const int64_t n = std::min<int64_t>(*a.count, a.rows);
    for (int64_t r = 0; r < n; ++r) {
      char* dst = cache_row(a.cache, a.slots[r], es);
      std::memcpy(dst, static_cast<const char*>(a.kv_c) + r * a.kv_c_stride * static_cast<int64_t>(es),
                  a.latent_dim * es);
      std::memcpy(dst + a.latent_dim * es,
                  static_cast<const char*>(a.k_pe) + r * a.k_pe_stride * static_cast<int64_t>(es), a.rope_dim * es);
    }
  }

  void gather(const GatherArgs& a, Stream) const override {
    const size_t es = dtype_size(a.dtype);
    const size_t row_bytes = static_cast<size_t>(a.cache.width) * es;
    const int64_t n = std::min<int64_t>(*a.count, a.rows);
    for (int64_t r = 0; r < a.rows; ++r) {
      char* dst = static_cast<char*>(a.out) + r * a.out_stride * static_cast<int64_t>(es);
      if (r < n) {
        std::memcpy(dst, cache_row(a.cache, a.map[r], es), row_bytes);
      } else {
        std::memset(dst, 0, row_bytes);
      }
    }
  }
};

}  // namespace

std::unique_ptr<MlaOps> make_cuda_ops();

std::unique_ptr<MlaOps> make_ops(Device device) {
  if (device.is_cpu()) return std::make_unique<CpuOps>();
  return make_cuda_ops();
}

}  // namespace mla
}  // namespace mlakit
