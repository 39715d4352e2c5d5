// FP8 cache rows decoded for the CPU paths of latent attention (latent_item.h): the same bf16
// values as the MLA step's gather gives (mla::decode_row: code x scale in float32, rounded to
// nearest even). On AVX-512, 32 codes at a time: their exact bf16 values from a 128-entry table
// of magnitudes; with a power-of-two scale (FlashMLA's are) the product is exact, an exponent
// add; other scales widened, multiplied and rounded with float_to_bf16's integer rule, so
// denormals and NaN come out as the scalar path's. The scalar codec elsewhere. fp8_ds_mla: a scale per 128 latent codes, the rope part bf16 already; fp8: the
// layer's one scale for every code of the row.
#include <climits>
#include <cstring>

#include "cpu/cpu_isa.h"
#include "cpu/e4m3_avx512.h"
#include "cpu/e4m3_convert.h"
#include "cpu/half_convert.h"
#include "cpu/latent_item.h"
#include "cpu/kv_cache_codec.h"
#include "contract/kv_cache_format.h"

namespace mlakit {
namespace cpu {
namespace latent_cpu {

namespace {

#ifdef MLAKIT_CPU_HAVE_E4M3_AVX512
// The bf16 of every e4m3 magnitude (7 bits; 127 is NaN), as 4 vectors of 32 words.
struct MagnitudeTable {
  alignas(64) uint16_t w[128];
  MagnitudeTable() {
    for (int m = 0; m < 128; ++m) w[m] = float_to_bf16(e4m3_to_float(static_cast<uint8_t>(m)));
  }
};

// 32 codes -> their 32 bf16 values, exactly, from the table of magnitudes (every nonzero e4m3
// value is a normal bf16); `low7` gets the codes' magnitudes.
MLAKIT_E4M3_TARGET __m512i bf16_of_codes(const uint8_t* codes, const uint16_t* table, __m512i* low7) {
  const __m512i t0 = _mm512_load_si512(table), t1 = _mm512_load_si512(table + 32);
  const __m512i t2 = _mm512_load_si512(table + 64), t3 = _mm512_load_si512(table + 96);
  const __m512i x = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes)));
  const __m512i lo = _mm512_permutex2var_epi16(t0, x, t1);  // magnitudes 0..63 (the index's low 6 bits)
  const __m512i hi = _mm512_permutex2var_epi16(t2, x, t3);  // 64..127
  const __m512i mag = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(x, _mm512_set1_epi16(0x40)), lo, hi);
  *low7 = _mm512_and_si512(x, _mm512_set1_epi16(0x7f));
  return _mm512_or_si512(mag, _mm512_slli_epi16(_mm512_and_si512(x, _mm512_set1_epi16(0x80)), 8));
}

// 32 codes x 2^k -> 32 bf16 values, exactly: k added to the exponent of every value but zeros
// and NaN. The caller keeps k in [-100, 100], far from bf16's subnormal and infinite ends.
MLAKIT_E4M3_TARGET void decode32_pow2(const uint8_t* codes, const uint16_t* table, int k, uint16_t* dst) {
  __m512i low7;
  const __m512i b = bf16_of_codes(codes, table, &low7);
  const __mmask32 scaled = _mm512_cmpneq_epi16_mask(low7, _mm512_setzero_si512()) &
                           _mm512_cmpneq_epi16_mask(low7, _mm512_set1_epi16(0x7f));
  _mm512_storeu_si512(dst, _mm512_mask_add_epi16(b, scaled, b, _mm512_set1_epi16(static_cast<int16_t>(k * 128))));
}

// 16 bf16 values x scale in float32, rounded to bf16 as float_to_bf16 does (nearest even, NaN
// made quiet).
MLAKIT_E4M3_TARGET __m256i scale16(__m256i b, __m512 scale) {
  const __m512 x = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)), scale);
  const __m512i u = _mm512_castps_si512(x);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd), 16);
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}

// 32 codes x any scale: the float32 product, rounded to bf16.
MLAKIT_E4M3_TARGET void decode32_scaled(const uint8_t* codes, const uint16_t* table, __m512 scale, uint16_t* dst) {
  __m512i low7;
  const __m512i b = bf16_of_codes(codes, table, &low7);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), scale16(_mm512_castsi512_si256(b), scale));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 16), scale16(_mm512_extracti64x4_epi64(b, 1), scale));
}

// A power-of-two scale 2^k with k in [-100, 100]: k, else INT32_MIN.
int pow2_exponent(float s) {
  uint32_t u;
  std::memcpy(&u, &s, sizeof(u));
  const int e = static_cast<int>((u >> 23) & 0xff) - 127;
  return (u & 0x807fffffu) == 0 && e >= -100 && e <= 100 ? e : INT32_MIN;
}

// `n` codes (a multiple of 32) x `s`: the exact table path for powers of two (FlashMLA's scales),
// the float32 product rounded to bf16 for any other scale.
MLAKIT_E4M3_TARGET void decode_run(const uint8_t* codes, int n, float s, uint16_t* dst) {
  static const MagnitudeTable table;
  const int k = pow2_exponent(s);
  if (k != INT32_MIN) {
    for (int i = 0; i < n; i += 32) decode32_pow2(codes + i, table.w, k, dst + i);
    return;
  }
  const __m512 scale = _mm512_set1_ps(s);
  for (int i = 0; i < n; i += 32) decode32_scaled(codes + i, table.w, scale, dst + i);
}

MLAKIT_E4M3_TARGET void decode_avx512(const Run& run, const uint8_t* row, uint16_t* dst) {
  if (run.cache_format == 2) {  // fp8: D codes (a multiple of 32), one scale
    decode_run(row, run.D, run.k_scale, dst);
    return;
  }
  for (int t = 0; t < mla::kDsMlaTiles; ++t) {
    float s;
    std::memcpy(&s, row + mla::kDsMlaScalesOffset + 4 * t, sizeof(s));
    decode_run(row + t * mla::kDsMlaTile, mla::kDsMlaTile, s, dst + t * mla::kDsMlaTile);
  }
  std::memcpy(dst + mla::kDsMlaLatent, row + mla::kDsMlaRopeOffset, 2 * mla::kDsMlaRope);
}
#endif

}  // namespace

void decode_fp8_row(const Run& run, const void* raw, uint16_t* dst) {
  const auto* row = static_cast<const uint8_t*>(raw);
#ifdef MLAKIT_CPU_HAVE_E4M3_AVX512
  static const bool avx512 = cpu_isa_available(CpuIsa::kAvx512Bf16);
  if (avx512) {
    decode_avx512(run, row, dst);
    return;
  }
#endif
  mla::CacheCodec c;
  c.format = run.cache_format == 2 ? KvCacheDtype::kFp8 : KvCacheDtype::kFp8DsMla;
  c.latent = run.L;
  c.rope = run.R;
  c.dtype = DType::kBF16;
  mla::decode_row(c, row, run.k_scale, dst);
}

}  // namespace latent_cpu
}  // namespace cpu
}  // namespace mlakit
