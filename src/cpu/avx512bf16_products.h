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

// st[j][16v + lane] = sum over dim pairs of K[j] . Q[row], for kKeyBlock keys and NV row
// vectors. Key j's pairs come from ka[j] (pa pairs) then kb[j] (pb pairs); Q's pairs in qpack.
template <int NV>
MLAKIT_BF16_TARGET void qk_block(const uint32_t* qpack, const uint32_t* const* ka, int pa,
                                 const uint32_t* const* kb, int pb, float* st) {
  __m512 acc[kKeyBlock][NV];
#pragma GCC unroll 8
  for (int j = 0; j < kKeyBlock; ++j)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[j][v] = _mm512_setzero_ps();
  const uint32_t* k0 = ka[0];
  const uint32_t* k1 = ka[1];
  const uint32_t* k2 = ka[2];
  const uint32_t* k3 = ka[3];
  const uint32_t* q = qpack;
  for (int seg = 0; seg < 2; ++seg) {
    const int np = seg == 0 ? pa : pb;
    for (int x = 0; x < np; ++x, q += kRows) {
      __m512 qv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) qv[v] = _mm512_load_ps(reinterpret_cast<const float*>(q + 16 * v));
      const __m512 b0 = bcast_pair(k0 + x), b1 = bcast_pair(k1 + x), b2 = bcast_pair(k2 + x),
                   b3 = bcast_pair(k3 + x);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        acc[0][v] = dp(acc[0][v], qv[v], b0);
        acc[1][v] = dp(acc[1][v], qv[v], b1);
        acc[2][v] = dp(acc[2][v], qv[v], b2);
        acc[3][v] = dp(acc[3][v], qv[v], b3);
      }
    }
    k0 = kb[0];
    k1 = kb[1];
    k2 = kb[2];
    k3 = kb[3];
  }
#pragma GCC unroll 8
  for (int j = 0; j < kKeyBlock; ++j)
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
