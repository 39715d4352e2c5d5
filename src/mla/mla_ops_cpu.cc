// The CPU side of the MLA ops: plain row copies, reading the per-step count, map and slots from
// the plan in the (host) workspace exactly as the CUDA kernel does, so the CPU backend and its
// tests cover the same fused gather + cache write; and the FP8 attention's rounding to e4m3, the
// definition of its scales (mlakit/mla.h) in code.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/e4m3_convert.h"
#include "cpu/half_convert.h"
#include "cpu/thread_pool.h"
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

void quantize_fp8_cpu(const Fp8Args& a);

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
  void quantize_fp8(const Fp8Args& a, Stream) const override { quantize_fp8_cpu(a); }
};

// Element i of a bf16 / fp16 row as float.
float load(const void* row, int64_t i, DType t) {
  const uint16_t h = static_cast<const uint16_t*>(row)[i];
  return t == DType::kBF16 ? cpu::bf16_to_float(h) : cpu::fp16_to_float(h);
}

// The largest L2 norm of n rows of `width` (stride in elements). NaN rows raise nothing (a NaN
// compares false), so they poison only their own results, as in 16-bit attention.
float max_row_norm(const void* base, int64_t stride, int64_t n, int width, DType t) {
  float best = 0.0f;
  for (int64_t r = 0; r < n; ++r) {
    const void* row = static_cast<const uint16_t*>(base) + r * stride;
    double ss = 0.0;
    for (int j = 0; j < width; ++j) {
      const double x = load(row, j, t);
      ss += x * x;
    }
    const float norm = static_cast<float>(std::sqrt(ss));
    if (norm > best) best = norm;
  }
  return best;
}

// amax / 448, or 1 where amax is 0 or not finite (all-zero rows then stay zero).
float scale_for(float amax) {
  const float s = amax / cpu::kE4M3Max;
  return s > 0.0f && std::isfinite(s) ? s : 1.0f;
}

void quantize_row(const void* src, int n, DType t, float inv_scale, uint8_t* dst) {
  for (int j = 0; j < n; ++j) dst[j] = cpu::float_to_e4m3(load(src, j, t) * inv_scale);
}

void quantize_fp8_cpu(const Fp8Args& a) {
  const int64_t n = a.rows;  // rows past the launch's are zero: they raise no maximum
  const int hd = a.dn + a.dv;
  const auto* lat = static_cast<const uint16_t*>(a.latent);
  const auto* w = static_cast<const uint16_t*>(a.weight);
  // C and P over the launch's latent rows; per head the largest K and V row norms of the weight.
  const float c = max_row_norm(lat, a.latent_stride, n, a.latent_dim, a.dtype);
  float p = 0.0f;
  for (int64_t r = 0; r < n; ++r) {
    for (int j = 0; j < a.rope_dim; ++j) {
      const float x = std::fabs(load(lat + r * a.latent_stride + a.latent_dim, j, a.dtype));
      if (x > p) p = x;
    }
  }
  float wk_max = 0.0f;
  float* k_desc = a.descales + static_cast<size_t>(a.max_batch) * a.heads;
  float* v_desc = k_desc + static_cast<size_t>(a.max_batch) * a.heads;
  for (int h = 0; h < a.heads; ++h) {
    const uint16_t* wh = w + static_cast<int64_t>(h) * hd * a.weight_stride;
    wk_max = std::max(wk_max, max_row_norm(wh, a.weight_stride, a.dn, a.latent_dim, a.dtype));
    const float sv = scale_for(c * max_row_norm(wh + a.dn * a.weight_stride, a.weight_stride, a.dv, a.latent_dim, a.dtype));
    for (int b = 0; b < a.max_batch; ++b) v_desc[b * a.heads + h] = sv;
  }
  const float sk = scale_for(std::max(c * wk_max, p));
  for (int b = 0; b < a.max_batch; ++b)
    for (int h = 0; h < a.heads; ++h) k_desc[b * a.heads + h] = sk;

  const float inv_k = 1.0f / sk;
  cpu::parallel_for(n, cpu::run_threads(), [&](int64_t r) {
    const auto* kv = static_cast<const uint16_t*>(a.kv) + r * a.heads * hd;
    uint8_t* kv8 = a.kv8 + r * a.heads * hd;
    for (int h = 0; h < a.heads; ++h) {
      quantize_row(kv + h * hd, a.dn, a.dtype, inv_k, kv8 + h * hd);
      quantize_row(kv + h * hd + a.dn, a.dv, a.dtype, 1.0f / v_desc[h], kv8 + h * hd + a.dn);
    }
    quantize_row(lat + r * a.latent_stride + a.latent_dim, a.rope_dim, a.dtype, inv_k, a.rope8 + r * a.rope_dim);
  });

  if (a.q == nullptr) return;
  // q: per head, its largest |q| over the step's new tokens.
  const TensorView& q = *a.q;
  const int dq = a.dn + a.rope_dim;
  float* q_desc = a.descales;
  for (int h = 0; h < a.heads; ++h) {
    float amax = 0.0f;
    for (int64_t t = 0; t < a.q_rows; ++t) {
      const void* row = q.ptr_at(t, h);
      for (int j = 0; j < dq; ++j) {
        const float x = std::fabs(load(row, j, a.dtype));
        if (x > amax) amax = x;
      }
    }
    const float sq = scale_for(amax);
    for (int b = 0; b < a.max_batch; ++b) q_desc[b * a.heads + h] = sq;
  }
  cpu::parallel_for(a.q_rows, cpu::run_threads(), [&](int64_t t) {
    for (int h = 0; h < a.heads; ++h)
      quantize_row(q.ptr_at(t, h), dq, a.dtype, 1.0f / q_desc[h], a.q8 + (t * a.heads + h) * dq);
  });
}

}  // namespace

std::unique_ptr<MlaOps> make_cpu_ops() { return std::make_unique<CpuOps>(); }

}  // namespace mla
}  // namespace mlakit
