// FP8 cache rows decoded for the CPU paths of latent attention (latent_item.h): the same bf16
// values as the MLA step's gather gives (mla::decode_row: code x scale in float32, rounded to
// nearest even), 16 codes at a time on AVX-512 (exact e4m3 -> bf16, widened, scaled, rounded with
// float_to_bf16's integer rule, so denormals and NaN come out as the scalar path's), the scalar
// codec elsewhere. fp8_ds_mla: a scale per 128 latent codes, the rope part bf16 already; fp8: the
// layer's one scale for every code of the row.
#include <cstring>

#include "cpu/cpu_isa.h"
#include "cpu/e4m3_avx512.h"
#include "cpu/latent_item.h"
#include "cpu/kv_cache_codec.h"
#include "contract/kv_cache_format.h"

namespace mlakit {
namespace cpu {
namespace latent_cpu {

namespace {

#ifdef MLAKIT_CPU_HAVE_E4M3_AVX512
// 16 codes x scale -> 16 bf16 values.
MLAKIT_E4M3_TARGET void decode16(const uint8_t* codes, __m512 scale, uint16_t* dst) {
  const __m256i b = e4m3_to_bf16_x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
  const __m512 x = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)), scale);
  // float_to_bf16: round to nearest even on the dropped half, NaN made quiet.
  const __m512i u = _mm512_castps_si512(x);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd), 16);
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtepi32_epi16(r));
}

MLAKIT_E4M3_TARGET void decode_avx512(const Run& run, const uint8_t* row, uint16_t* dst) {
  if (run.cache_format == 2) {  // fp8: D codes (a multiple of 32), one scale
    const __m512 scale = _mm512_set1_ps(run.k_scale);
    for (int i = 0; i < run.D; i += 16) decode16(row + i, scale, dst + i);
    return;
  }
  for (int t = 0; t < mla::kDsMlaTiles; ++t) {
    float s;
    std::memcpy(&s, row + mla::kDsMlaScalesOffset + 4 * t, sizeof(s));
    const __m512 scale = _mm512_set1_ps(s);
    for (int i = t * mla::kDsMlaTile; i < (t + 1) * mla::kDsMlaTile; i += 16) decode16(row + i, scale, dst + i);
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
