// The CPU side of the MLA ops: plain row copies, reading the per-step count, map and slots from
// the plan in the (host) workspace exactly as the CUDA kernel does, so the CPU backend and its
// tests cover the same fused gather + cache write; and the FP8 attention's rounding to e4m3, the
// definition of its scales (mlakit/mla.h) in code.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/cpu_isa.h"
#include "cpu/e4m3_avx512.h"
#include "cpu/lane_mask.h"
#include "cpu/e4m3_convert.h"
#include "cpu/half_convert.h"
#include "cpu/thread_pool.h"
#include "cpu/kv_cache_codec.h"
#include "contract/kv_cache_format.h"
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

// The gather on an FP8 cache (mla_ops.h): rows decoded, new tokens encoded into their slots and
// handed on as the cache now holds them. Rows are independent (distinct slots), so they run on
// the pool: decoding is arithmetic, not a copy.
void gather_fp8_cache(const GatherArgs& a) {
  // kFp8 decodes every value alike: where kv_c ends matters only to the new tokens' encoding (a
  // context-chunk launch has none, and no latent_dim).
  CacheCodec c{a.cache.format, a.fresh.latent_dim > 0 ? a.fresh.latent_dim : a.cache.width, 0, a.dtype};
  if (a.cache.format == KvCacheDtype::kFp8DsMla) c.latent = kDsMlaLatent;
  c.rope = a.cache.width - c.latent;
  const float k_scale = a.cache.k_scale ? *a.cache.k_scale : 1.0f;
  const size_t row_bytes = static_cast<size_t>(a.cache.width) * dtype_size(a.dtype);
  const int64_t n = std::min<int64_t>(*a.count, a.rows);
  cpu::parallel_for(a.rows, cpu::run_threads(), [&](int64_t r) {
    auto* dst = static_cast<uint16_t*>(a.out) + r * a.out_stride;
    if (r >= n) {
      std::memset(dst, 0, row_bytes);
      return;
    }
    const int32_t e = a.map[r];
    if (!is_new_token_entry(e)) {
      decode_row(c, reinterpret_cast<const uint8_t*>(cache_row(a.cache, e, 1)), k_scale, dst);
      return;
    }
    const int32_t t = new_token_of(e);
    auto* row = reinterpret_cast<uint8_t*>(cache_row(a.cache, a.fresh.slots[t], 1));
    encode_row(c, reinterpret_cast<const uint16_t*>(row_of(a.fresh.kv_c, t, a.fresh.kv_c_stride, 2)),
               reinterpret_cast<const uint16_t*>(row_of(a.fresh.k_pe, t, a.fresh.k_pe_stride, 2)), k_scale, row);
    decode_row(c, row, k_scale, dst);
  });
}

class CpuOps final : public MlaOps {
 public:
  void copy_rows(const RowCopyArgs& a, Stream) const override {
    const int64_t n = std::min<int64_t>(*a.count, a.rows);
    const size_t bytes = static_cast<size_t>(a.width) * static_cast<size_t>(a.elem_bytes);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t sr = a.src_map ? a.src_map[r] : r, dr = a.dst_map ? a.dst_map[r] : r;
      for (int h = 0; h < a.heads; ++h) {
        std::memcpy(static_cast<char*>(a.dst) + (dr * a.dst_row + h * a.dst_head) * a.elem_bytes,
                    static_cast<const char*>(a.src) + (sr * a.src_row + h * a.src_head) * a.elem_bytes, bytes);
      }
    }
  }
  void gather(const GatherArgs& a, Stream) const override {
    if (a.cache.format != KvCacheDtype::kAuto) {
      gather_fp8_cache(a);
      return;
    }
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

#ifdef MLAKIT_CPU_HAVE_E4M3_AVX512
MLAKIT_E4M3_TARGET __m512 load16(const uint16_t* p, __mmask16 m, DType t) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return t == DType::kBF16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)) : _mm512_cvtph_ps(h);
}

// Sum of squares in double, 16 elements a step.
MLAKIT_E4M3_TARGET double sumsq_avx512(const uint16_t* row, int n, DType t) {
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  for (int j = 0; j < n; j += 16) {
    const int left = n - j;
    const __mmask16 m = cpu::first_lanes16(left);
    const __m512 f = load16(row + j, m, t);
    const __m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
    const __m512d b = _mm512_cvtps_pd(_mm512_castps512_ps256(_mm512_shuffle_f32x4(f, f, 0xEE)));  // the top 8
    lo = _mm512_fmadd_pd(a, a, lo);
    hi = _mm512_fmadd_pd(b, b, hi);
  }
  alignas(64) double part[8];
  _mm512_store_pd(part, _mm512_add_pd(lo, hi));
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

// Largest |x|; a NaN raises nothing (max_ps returns its second operand for a NaN).
MLAKIT_E4M3_TARGET float absmax_avx512(const uint16_t* row, int n, DType t) {
  __m512 best = _mm512_setzero_ps();
  for (int j = 0; j < n; j += 16) {
    const int left = n - j;
    const __mmask16 m = cpu::first_lanes16(left);
    best = _mm512_max_ps(_mm512_abs_ps(load16(row + j, m, t)), best);
  }
  alignas(64) float part[16];
  _mm512_store_ps(part, best);
  return *std::max_element(part, part + 16);
}
#endif

bool have_avx512() {
  static const bool yes = cpu::cpu_isa_available(cpu::CpuIsa::kAvx512Bf16);
  return yes;
}

double row_sumsq(const uint16_t* row, int n, DType t) {
#ifdef MLAKIT_CPU_HAVE_E4M3_AVX512
  if (have_avx512()) return sumsq_avx512(row, n, t);
#endif
  double ss = 0.0;
  for (int j = 0; j < n; ++j) {
    const double x = load(row, j, t);
    ss += x * x;
  }
  return ss;
}

float row_absmax(const uint16_t* row, int n, DType t) {
#ifdef MLAKIT_CPU_HAVE_E4M3_AVX512
  if (have_avx512()) return absmax_avx512(row, n, t);
#endif
  float best = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float x = std::fabs(load(row, j, t));
    if (x > best) best = x;
  }
  return best;
}

// The largest of f(i) over i < n (f >= 0), in blocks on the pool. A maximum does not depend on
// the order it is taken in, so the result is the same for any thread count.
template <class F>
float parallel_max(int64_t n, F f) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<float> part(static_cast<size_t>(std::max<int64_t>(blocks, 1)), 0.0f);
  cpu::parallel_for(blocks, cpu::run_threads(), [&](int64_t b) {
    float best = 0.0f;
    for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) {
      const float x = f(i);
      if (x > best) best = x;  // a NaN raises nothing
    }
    part[static_cast<size_t>(b)] = best;
  });
  return *std::max_element(part.begin(), part.end());
}

// The largest L2 norm of n rows of `width` (stride in elements). NaN rows raise nothing (a NaN
// compares false), so they poison only their own results, as in 16-bit attention.
float max_row_norm(const void* base, int64_t stride, int64_t n, int width, DType t) {
  const auto* b = static_cast<const uint16_t*>(base);
  return parallel_max(n, [&](int64_t r) { return static_cast<float>(std::sqrt(row_sumsq(b + r * stride, width, t))); });
}

// amax / 448, or 1 where amax is 0 or not finite (all-zero rows then stay zero).
float scale_for(float amax) {
  const float s = amax / cpu::kE4M3Max;
  return s > 0.0f && std::isfinite(s) ? s : 1.0f;
}

void quantize_row_scalar(const void* src, int n, DType t, float inv_scale, uint8_t* dst) {
  for (int j = 0; j < n; ++j) dst[j] = cpu::float_to_e4m3(load(src, j, t) * inv_scale);
}

#ifdef MLAKIT_CPU_HAVE_E4M3_AVX512
// The same 16 values at a time (cpu/e4m3_avx512.h: bit for bit the scalar rounding).
MLAKIT_E4M3_TARGET void quantize_row_avx512(const void* src, int n, DType t, float inv_scale, uint8_t* dst) {
  const auto* s = static_cast<const uint16_t*>(src);
  const __m512 inv = _mm512_set1_ps(inv_scale);
  for (int j = 0; j < n; j += 16) {
    const int left = n - j;
    const __mmask16 m = cpu::first_lanes16(left);
    _mm_mask_storeu_epi8(dst + j, m, cpu::float_to_e4m3_x16(_mm512_mul_ps(load16(s + j, m, t), inv)));
  }
}
#endif

void quantize_row(const void* src, int n, DType t, float inv_scale, uint8_t* dst) {
#ifdef MLAKIT_CPU_HAVE_E4M3_AVX512
  if (have_avx512()) {
    quantize_row_avx512(src, n, t, inv_scale, dst);
    return;
  }
#endif
  quantize_row_scalar(src, n, t, inv_scale, dst);
}

void quantize_fp8_cpu(const Fp8Args& a) {
  const int64_t n = a.rows;  // rows past the launch's are zero: they raise no maximum
  const int hd = a.dn + a.dv;
  const auto* lat = static_cast<const uint16_t*>(a.latent);
  const auto* w = static_cast<const uint16_t*>(a.weight);
  // C and P over the launch's latent rows; per head the largest K and V row norms of the weight.
  const float c = max_row_norm(lat, a.latent_stride, n, a.latent_dim, a.dtype);
  const float p = parallel_max(
      n, [&](int64_t r) { return row_absmax(lat + r * a.latent_stride + a.latent_dim, a.rope_dim, a.dtype); });
  // Descale tensors [max_batch][heads]: head h's factor in every batch row.
  float* q_desc = a.descales;
  float* k_desc = q_desc + static_cast<size_t>(a.max_batch) * a.heads;
  float* v_desc = k_desc + static_cast<size_t>(a.max_batch) * a.heads;
  const auto set_descale = [&](float* d, int h, float s) {
    for (int b = 0; b < a.max_batch; ++b) d[b * a.heads + h] = s;
  };
  float wk_max = 0.0f;
  for (int h = 0; h < a.heads; ++h) {
    const uint16_t* wh = w + static_cast<int64_t>(h) * hd * a.weight_stride;
    wk_max = std::max(wk_max, max_row_norm(wh, a.weight_stride, a.dn, a.latent_dim, a.dtype));
    set_descale(v_desc, h, scale_for(c * max_row_norm(wh + a.dn * a.weight_stride, a.weight_stride, a.dv, a.latent_dim, a.dtype)));
  }
  const float sk = scale_for(std::max(c * wk_max, p));
  for (int h = 0; h < a.heads; ++h) set_descale(k_desc, h, sk);

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
  for (int h = 0; h < a.heads; ++h) {
    const float amax = parallel_max(
        a.q_rows, [&](int64_t t) { return row_absmax(static_cast<const uint16_t*>(q.ptr_at(t, h)), dq, a.dtype); });
    set_descale(q_desc, h, scale_for(amax));
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
