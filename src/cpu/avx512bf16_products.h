// The two products of the AVX-512 BF16 paths (attention_avx512bf16.cc, latent_avx512bf16.cc)
// on VDPBF16PS, register-blocked: S^T for a block of keys against packed Q ([dim pair][row]
// words), and O += P V over packed P^T ([key pair][row]) and V ([key pair][dim] words).
#pragma once

#include "cpu/avx512bf16_parts.h"

#ifdef MLAKIT_CPU_HAVE_AVX512BF16_PATH

namespace mlakit {
namespace cpu {
namespace bf16_parts {

constexpr int kKeyBlock = 4; // keys per S^T micro-kernel call (x up to 4 row vectors)
constexpr int kRowBlock = 4; // rows per O micro-kernel call (x up to 4 dim vectors)

MLAKIT_BF16_INLINE __m512 bcast_pair(const uint32_t* p) {
  return _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(*p)));
}

MLAKIT_BF16_INLINE __m512 dp(__m512 acc, __m512 a, __m512 b) {
  return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

// st[j][16v + lane] = sum over dim pairs of K[j] . Q[row], for NK keys (kKeyBlock by default)
// and NV row vectors. Key j's pairs come from ka[j] (pa pairs) then kb[j] (pb pairs); Q's pairs
// in qpack, q_stride words apart. Each sum runs over the pairs in order whatever NK and NV are,
// so they change no bit; NV * NK accumulators hide VDPBF16PS's latency from 8 up (a single row
// vector takes NK = 8).
template <int NV, int NK = kKeyBlock>
MLAKIT_BF16_TARGET void qk_block(const uint32_t* qpack, const uint32_t* const* ka, int pa,
                                 const uint32_t* const* kb, int pb, float* st, int q_stride = kRows) {
  __m512 acc[NK][NV];
#pragma GCC unroll 8
  for (int j = 0; j < NK; ++j)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[j][v] = _mm512_setzero_ps();
  const uint32_t* k[NK];
#pragma GCC unroll 8
  for (int j = 0; j < NK; ++j) k[j] = ka[j];
  const uint32_t* q = qpack;
  for (int seg = 0; seg < 2; ++seg) {
    const int np = seg == 0 ? pa : pb;
    for (int x = 0; x < np; ++x, q += q_stride) {
      __m512 qv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) qv[v] = _mm512_load_ps(reinterpret_cast<const float*>(q + 16 * v));
#pragma GCC unroll 8
      for (int j = 0; j < NK; ++j) {
        const __m512 b = bcast_pair(k[j] + x);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[j][v] = dp(acc[j][v], qv[v], b);
      }
    }
#pragma GCC unroll 8
    for (int j = 0; j < NK; ++j) k[j] = kb[j];
  }
#pragma GCC unroll 8
  for (int j = 0; j < NK; ++j)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_store_ps(st + j * kRows + 16 * v, acc[j][v]);
}

// O[r0 .. r0+kRowBlock)[16 * d-vectors] (*alpha) += P V over key pairs [x0, x1), ND dim vectors.
template <int ND>
MLAKIT_BF16_TARGET void pv_block(const uint32_t* ppair, const uint32_t* vpack, int dvp, int x0, int x1,
                                 float* o, const float* alpha, bool rescale) {
  __m512 acc[kRowBlock][ND];
#pragma GCC unroll 4
  for (int i = 0; i < kRowBlock; ++i) {
#pragma GCC unroll 4
    for (int c = 0; c < ND; ++c) acc[i][c] = _mm512_loadu_ps(o + i * dvp + 16 * c);
    if (rescale) {
      const __m512 a = _mm512_set1_ps(alpha[i]);
#pragma GCC unroll 4
      for (int c = 0; c < ND; ++c) acc[i][c] = _mm512_mul_ps(acc[i][c], a);
    }
  }
  for (int x = x0; x < x1; ++x) {
    __m512 vv[ND];
#pragma GCC unroll 4
    for (int c = 0; c < ND; ++c)
      vv[c] = _mm512_loadu_ps(reinterpret_cast<const float*>(vpack + static_cast<size_t>(x) * dvp + 16 * c));
    const uint32_t* pr = ppair + x * kRows;
#pragma GCC unroll 4
    for (int i = 0; i < kRowBlock; ++i) {
      const __m512 pb = bcast_pair(pr + i);
#pragma GCC unroll 4
      for (int c = 0; c < ND; ++c) acc[i][c] = dp(acc[i][c], pb, vv[c]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < kRowBlock; ++i)
#pragma GCC unroll 4
    for (int c = 0; c < ND; ++c) _mm512_storeu_ps(o + i * dvp + 16 * c, acc[i][c]);
}

}  // namespace bf16_parts
}  // namespace cpu
}  // namespace mlakit

#endif  // MLAKIT_CPU_HAVE_AVX512BF16_PATH
