// What the two bf16 paths of the CPU backend share (attention_avx512bf16.cc: both products on
// VDPBF16PS; attention_amx.cc: both on AMX tiles): Q packed as [dim pair][row] words, the
// visible key ranges of an item's rows, and the online softmax over 16 lanes on S^T ([key][row]
// fp32), which writes P^T as bf16 key pairs [key pair][row]. Those two layouts are what both
// paths' products read: VDPBF16PS broadcasts their words, and they are the "VNNI" layout an AMX
// tile takes as its B operand.
//
// Only for x86-64 GCC/Clang (MLAKIT_CPU_HAVE_AVX512BF16_PATH); every function carries its
// target attribute, so that no AVX-512 instruction leaks into code every CPU runs.
#pragma once

#if defined(__GNUC__) && defined(__x86_64__)
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_* values.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define MLAKIT_CPU_HAVE_AVX512BF16_PATH 1
#endif

#ifdef MLAKIT_CPU_HAVE_AVX512BF16_PATH

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "cpu/aligned_scratch.h"
#include "cpu/attention_item.h"
#include "cpu/lane_mask.h"
#include "cpu/thread_pool.h"

#define MLAKIT_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma")))
#define MLAKIT_BF16_INLINE MLAKIT_BF16_TARGET __attribute__((always_inline)) inline

namespace mlakit {
namespace cpu {
namespace bf16_parts {

constexpr int kRows = 64;   // q rows per item at most (the CPU schedule's block_m)
constexpr int kChunk = 64;  // keys per step
// How far (base 2) a chunk's max may pass a row's running max before the running max moves: P
// stays below 2^8 (far from fp32's and bf16's range), and rescales of O become rare.
constexpr float kMaxSlack = 8.0f;

inline int round_up(int x, int a) { return (x + a - 1) / a * a; }

// 2^x over 16 lanes: x = n + f, |f| <= 1/2, 2^f by its degree-6 Taylor polynomial, scaled by
// 2^n with VSCALEFPS (relative error at most 2.2e-7 on [-126, 0]). x is clamped to [-150, 128]:
// -inf (a masked logit) gives exactly 0, large x gives inf.
MLAKIT_BF16_INLINE __m512 exp2v(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-150.0f)), _mm512_set1_ps(128.0f));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.5403530393381606e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284772e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821580e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// 2^x over 16 lanes for the softmax's exponentials, whose x = logit - running max is at most a
// rounding above 0: clamped below only (-inf, a masked logit, gives exactly 0), and a degree-5
// polynomial fitted for relative error on |f| <= 1/2 (at most 1.9e-7 in fp32 evaluation, as exp2v):
// one instruction fewer each, in the loop that bounds the amx path.
MLAKIT_BF16_INLINE __m512 exp2v_nonpos(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-150.0f));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(0.001326472731307149f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.009671512991189957f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.05550733581185341f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24022242426872253f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931470036506653f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// cap * log2(e) * tanh(s * scale / cap), tanh(y) = 1 - 2 / (e^{2y} + 1).
MLAKIT_BF16_INLINE __m512 soft_cap_log2(__m512 s, __m512 scale_over_cap, __m512 cap_log2) {
  const __m512 y = _mm512_mul_ps(s, scale_over_cap);
  const __m512 e = exp2v(_mm512_mul_ps(y, _mm512_set1_ps(2.0f * kLog2e)));
  const __m512 th = _mm512_sub_ps(_mm512_set1_ps(1.0f),
                                  _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
  return _mm512_mul_ps(th, cap_log2);
}

// Rounds two vectors of P (keys 2x and 2x + 1, 16 rows) to bf16 and interleaves them per row.
MLAKIT_BF16_INLINE __m512i pack_p_pair(__m512 e0, __m512 e1) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                       23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(e1, e0);  // [0, 16): e0, [16, 32): e1
  return _mm512_permutexvar_epi16(idx, both);
}

MLAKIT_BF16_INLINE int reduce_max_i32(__m512i v) { return _mm512_reduce_max_epi32(v); }
MLAKIT_BF16_INLINE int reduce_min_i32(__m512i v) { return _mm512_reduce_min_epi32(v); }

// r[i] = column i of the 16 x 16 block of 32-bit words whose row j was r[j] (unpacks within
// 128-bit lanes, then lane shuffles).
MLAKIT_BF16_INLINE void transpose16(__m512i r[16]) {
  __m512i t[16];
  // Per 128-bit lane L: t[2i] = (r[2i][4L], r[2i+1][4L], r[2i][4L+1], r[2i+1][4L+1]), t[2i+1]
  // the same for 4L+2, 4L+3.
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + j], lane L: column 4L + j of rows 4g .. 4g + 3.
  __m512i u[16];
  for (int g = 0; g < 4; ++g) {
    u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  // Column 4L + j = (u[j], u[4 + j], u[8 + j], u[12 + j]) at lane L.
  for (int j = 0; j < 4; ++j) {
    const __m512i v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88);      // g0 L0, g0 L2, g1 L0, g1 L2
    const __m512i v2 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xDD);      // g0 L1, g0 L3, g1 L1, g1 L3
    const __m512i w1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88);  // g2, g3 likewise
    const __m512i w2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xDD);
    r[0 + j] = _mm512_shuffle_i32x4(v1, w1, 0x88);
    r[4 + j] = _mm512_shuffle_i32x4(v2, w2, 0x88);
    r[8 + j] = _mm512_shuffle_i32x4(v1, w1, 0xDD);
    r[12 + j] = _mm512_shuffle_i32x4(v2, w2, 0xDD);
  }
}

// Q rows as [dim pair][row] words (kRows words per pair); zero past the rows. Blocks of 16 rows x
// 16 pairs are loaded row by row and transposed in registers (gathers took 14% of a short causal
// run); odd dims are packed one by one.
MLAKIT_BF16_TARGET inline void pack_q(const Problem& p, const ItemRows& it, int rows, int nvr, int dq2, bool odd,
                                      uint32_t* qpack) {
  const auto* first = static_cast<const char*>(p.q->ptr_at(it.q_begin + it.row0, it.head));
  const int64_t row_bytes = p.q->strides[0] * 2;
  for (int v = 0; v < nvr; ++v) {
    if (!odd) {
      for (int x0 = 0; x0 < dq2; x0 += 16) {
        const int left = dq2 - x0;
        const __mmask16 m = first_lanes16(left);
        __m512i b[16];
        for (int i = 0; i < 16; ++i) {
          const int r = 16 * v + i;
          b[i] = r < rows ? _mm512_maskz_loadu_epi32(m, first + r * row_bytes + 4 * x0) : _mm512_setzero_si512();
        }
        transpose16(b);
        for (int i = 0; i < std::min(16, left); ++i) _mm512_store_si512(qpack + (x0 + i) * kRows + 16 * v, b[i]);
      }
      continue;
    }
    for (int r = 16 * v; r < 16 * v + 16; ++r) {
      const auto* src = reinterpret_cast<const uint16_t*>(first + (r < rows ? r : 0) * row_bytes);
      for (int x = 0; x < dq2; ++x) {
        const uint32_t lo16 = src[2 * x];
        const uint32_t hi16 = 2 * x + 1 < p.dqk ? src[2 * x + 1] : 0u;
        qpack[x * kRows + r] = r < rows ? (lo16 | (hi16 << 16)) : 0u;
      }
    }
  }
}

// The online softmax's state of an item's rows, and their visible keys.
struct RowState {
  alignas(64) float m[kRows], l[kRows], alpha[kRows];
  alignas(64) int32_t lo[kRows], hi[kRows];  // visible keys, relative to the chunk
  int vlo[kRows / 16], vhi[kRows / 16];      // their union per row vector (empty: vlo >= vhi)
  int64_t row_lo[kRows], row_hi[kRows];      // visible keys, relative to the sequence
  bool rescale[kRows / 16];                  // per row vector: some row's max moved this chunk
  int64_t tile_lo = 0, tile_hi = 0;          // the union of the rows' keys, tile_lo even

  // m = -inf, l = 0, each row's visible keys and their union (from an even key: whole pairs).
  void init(const Problem& p, const ItemRows& it, int nvr) {
    tile_lo = it.lk;
    tile_hi = 0;
    for (int r = 0; r < nvr * 16; ++r) {
      m[r] = -std::numeric_limits<float>::infinity();
      l[r] = 0.0f;
      if (r >= it.rows) {
        row_lo[r] = row_hi[r] = 0;
        continue;
      }
      const plan::KvRange kr = it.range(p, r);
      row_lo[r] = kr.lo;
      row_hi[r] = kr.hi;
      if (kr.hi > kr.lo) {
        tile_lo = std::min<int64_t>(tile_lo, kr.lo);
        tile_hi = std::max<int64_t>(tile_hi, kr.hi);
      }
    }
    tile_lo -= tile_lo % 2;
  }

  // The chunk [c0, c0 + n): each row's visible keys relative to it (lo, hi) and their union per
  // row vector (vlo, vhi), which the products use to skip keys no row of a vector sees.
  void enter_chunk(int64_t c0, int n, int nvr) {
    for (int v = 0; v < nvr; ++v) {
      vlo[v] = n;
      vhi[v] = 0;
      for (int r = 16 * v; r < 16 * v + 16; ++r) {
        lo[r] = static_cast<int32_t>(std::clamp<int64_t>(row_lo[r] - c0, 0, n));
        hi[r] = static_cast<int32_t>(std::clamp<int64_t>(row_hi[r] - c0, 0, n));
        if (hi[r] <= lo[r]) continue;
        vlo[v] = std::min<int>(vlo[v], lo[r]);
        vhi[v] = std::max<int>(vhi[v], hi[r]);
      }
    }
  }
};

// One chunk's online softmax, 16 rows at a time: st holds S^T of the chunk's n keys (key j's 16
// rows of vector v at st[j * kRows + 16 v]), to be scaled by sm_scale x qk_factor (the item's q
// and k descales, 1 for 16-bit inputs) and masked lane-wise by each row's visible range (chunks
// every row sees whole skip the mask). P^T goes to ppair as bf16 pairs of keys ([pair][kRows]
// words, (n + 1) / 2 pairs); w.m (the running max in base 2, which trails the true max by at most
// kMaxSlack), w.l, w.alpha (the factor O's rows take) and w.rescale are updated. w.enter_chunk
// has set the rows' ranges in the chunk.
// Two passes per row vector: the max of the raw scores (a positive scale keeps the order; masked
// scores are overwritten with -inf), then exp2(s * scale * log2(e) - m) by one FMA and
// exp2v_nonpos. With a soft cap (or a scale that is not positive) the first pass stores the logits
// in base 2 instead.
// pump() is called once per pair of keys of each row vector's exponentials: the amx path issues
// the next chunk's tile products from it, so that they run on the tile unit while these vector
// instructions run beside them (pump must not touch st's rows of this chunk, ppair or w).
template <class Pump>
MLAKIT_BF16_TARGET inline void softmax_chunk(const Problem& p, float qk_factor, int n, int nvr,
                                             float* st, uint32_t* ppair, RowState& w, Pump& pump) {
  const int nq = (n + 1) / 2;
  const bool capped = p.soft_cap > 0.0f;
  const float scale = p.sm_scale * qk_factor;
  // The first pass stores the logits in base 2 where the raw scores' order is not theirs (a soft
  // cap; a scale that is not positive, e.g. a zero descale).
  const bool prescale = capped || !(scale > 0.0f);
  // What the second pass multiplies st by: the scale into base 2, or 1 for stored logits.
  const __m512 c_v = _mm512_set1_ps(prescale ? 1.0f : scale * kLog2e);
  const __m512 scale_v = _mm512_set1_ps(scale * kLog2e);
  const __m512 scale_over_cap = _mm512_set1_ps(capped ? scale / p.soft_cap : 0.0f);
  const __m512 cap_log2 = _mm512_set1_ps(p.soft_cap * kLog2e);
  const __m512 ninf_v = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 one_v = _mm512_set1_ps(1.0f);
  for (int v = 0; v < nvr; ++v) {
    const __m512i lo_v = _mm512_load_si512(w.lo + 16 * v);
    const __m512i hi_v = _mm512_load_si512(w.hi + 16 * v);
    w.rescale[v] = false;
    if (reduce_max_i32(_mm512_sub_epi32(hi_v, lo_v)) <= 0) {
      // No row of these 16 sees a key here: P = 0, nothing else moves.
      for (int x = 0; x < nq; ++x) _mm512_store_si512(ppair + x * kRows + 16 * v, _mm512_setzero_si512());
      _mm512_store_ps(w.alpha + 16 * v, one_v);
      continue;
    }
    const bool whole = reduce_max_i32(lo_v) <= 0 && reduce_min_i32(hi_v) >= n;
    float* sv = st + 16 * v;
    __m512 mx = ninf_v;
    if (prescale) {
      for (int j = 0; j < n; ++j) {
        const __m512 s = _mm512_load_ps(sv + j * kRows);
        __m512 t = capped ? soft_cap_log2(s, scale_over_cap, cap_log2) : _mm512_mul_ps(s, scale_v);
        if (!whole) {
          const __m512i jv = _mm512_set1_epi32(j);
          t = _mm512_mask_blend_ps(_mm512_cmple_epi32_mask(lo_v, jv) & _mm512_cmpgt_epi32_mask(hi_v, jv), ninf_v, t);
        }
        _mm512_store_ps(sv + j * kRows, t);
        mx = _mm512_max_ps(mx, t);
      }
    } else if (!whole) {
      for (int j = 0; j < n; ++j) {
        const __m512i jv = _mm512_set1_epi32(j);
        const __mmask16 vis = _mm512_cmple_epi32_mask(lo_v, jv) & _mm512_cmpgt_epi32_mask(hi_v, jv);
        const __m512 t = _mm512_mask_blend_ps(vis, ninf_v, _mm512_load_ps(sv + j * kRows));
        _mm512_store_ps(sv + j * kRows, t);
        mx = _mm512_max_ps(mx, t);
      }
      mx = _mm512_mul_ps(mx, c_v);
    } else {
      __m512 mx1 = ninf_v;  // two chains: the max's latency, not its throughput, would bound one
      for (int j = 0; j + 1 < n; j += 2) {
        mx = _mm512_max_ps(mx, _mm512_load_ps(sv + j * kRows));
        mx1 = _mm512_max_ps(mx1, _mm512_load_ps(sv + (j + 1) * kRows));
      }
      if (n % 2 != 0) mx = _mm512_max_ps(mx, _mm512_load_ps(sv + (n - 1) * kRows));
      mx = _mm512_mul_ps(_mm512_max_ps(mx, mx1), c_v);
    }
    // A row's running max moves only where the chunk's passes it by more than kMaxSlack (from
    // -inf, always): exponentials then stay below 2^kMaxSlack, and O's rows are rescaled only
    // when a max jumps, not in nearly every chunk as the max of random scores creeps up.
    const __m512 m_old = _mm512_load_ps(w.m + 16 * v);
    const __mmask16 moves = _mm512_cmp_ps_mask(mx, _mm512_add_ps(m_old, _mm512_set1_ps(kMaxSlack)), _CMP_GT_OQ);
    const __m512 m_new = _mm512_mask_blend_ps(moves, m_old, mx);
    // Rows that have seen no key yet keep m = -inf; their exponentials use 0 so that
    // -inf - m stays -inf (exp2 -> 0) instead of NaN.
    const __m512 m_use = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(m_new, ninf_v, _CMP_EQ_OQ), m_new,
                                              _mm512_setzero_ps());
    const __m512 alpha = exp2v(_mm512_sub_ps(m_old, m_use));
    __m512 sum = _mm512_setzero_ps();
    for (int x = 0; x < n / 2; ++x) {
      const __m512 e0 = exp2v_nonpos(_mm512_fmsub_ps(_mm512_load_ps(sv + (2 * x) * kRows), c_v, m_use));
      const __m512 e1 = exp2v_nonpos(_mm512_fmsub_ps(_mm512_load_ps(sv + (2 * x + 1) * kRows), c_v, m_use));
      sum = _mm512_add_ps(sum, _mm512_add_ps(e0, e1));
      _mm512_store_si512(ppair + x * kRows + 16 * v, pack_p_pair(e0, e1));
      pump();
    }
    if (n % 2 != 0) {
      const __m512 e0 = exp2v_nonpos(_mm512_fmsub_ps(_mm512_load_ps(sv + (n - 1) * kRows), c_v, m_use));
      sum = _mm512_add_ps(sum, e0);
      _mm512_store_si512(ppair + (n / 2) * kRows + 16 * v, pack_p_pair(e0, _mm512_setzero_ps()));
    }
    const __m512 l_old = _mm512_load_ps(w.l + 16 * v);
    _mm512_store_ps(w.l + 16 * v, _mm512_fmadd_ps(l_old, alpha, sum));
    _mm512_store_ps(w.m + 16 * v, m_new);
    _mm512_store_ps(w.alpha + 16 * v, alpha);
    // Rows whose max was -inf have O = 0: they need no rescale.
    w.rescale[v] = (_mm512_cmp_ps_mask(alpha, one_v, _CMP_NEQ_UQ) & _mm512_cmp_ps_mask(m_old, ninf_v, _CMP_NEQ_UQ)) != 0;
  }
}

struct NoPump {
  void operator()() const {}
};

MLAKIT_BF16_TARGET inline void softmax_chunk(const Problem& p, float qk_factor, int n, int nvr,
                                             float* st, uint32_t* ppair, RowState& w) {
  NoPump none;
  softmax_chunk(p, qk_factor, n, nvr, st, ppair, w, none);
}

// A row's lse (natural log) from its base-2 max and sum: -inf for a row that saw no key.
inline float row_lse(float m, float l) {
  return l > 0.0f ? (m + std::log2(l)) * kLn2 : -std::numeric_limits<float>::infinity();
}

// V of the whole run as key pairs: words [kv head][pair][dvp]; pair_base[s] is sequence s's first
// pair. The words end with 16 pairs of zeros.
struct PackedV {
  AlignedScratch<uint32_t> words;
  AlignedScratch<int64_t> pair_base;  // [batch + 1]
  int64_t total_pairs = 0;
  int dvp = 0;
};

// Interleaves two rows of bf16 (keys 2x and 2x + 1) into pairs: out[d] = (a[d], b[d]), d < dvp.
MLAKIT_BF16_INLINE void pack_v_pair(const uint16_t* a, const uint16_t* b, int dvo, int dvp,
                                    uint32_t* out) {
  const __m512i idx_lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                          39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i idx_hi = _mm512_add_epi16(idx_lo, _mm512_set1_epi16(16));
  for (int d = 0; d < dvp; d += 32) {
    const int left = dvo - d;
    const __mmask32 m = left >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << std::max(left, 0)) - 1u);
    const __m512i va = _mm512_maskz_loadu_epi16(m, a + d);
    const __m512i vb = b != nullptr ? _mm512_maskz_loadu_epi16(m, b + d) : _mm512_setzero_si512();
    _mm512_storeu_si512(out + d, _mm512_permutex2var_epi16(va, idx_lo, vb));
    if (d + 16 < dvp) _mm512_storeu_si512(out + d + 16, _mm512_permutex2var_epi16(va, idx_hi, vb));
  }
}

constexpr int64_t kPairsPerJob = 32;

// One job of pack_all_v: kPairsPerJob key pairs of one kv head.
MLAKIT_BF16_TARGET inline void pack_v_job(const Problem& p, const PackedV& pv, int64_t blocks, int64_t job) {
  const int batch = p.header->batch_size;
  const int64_t* base = pv.pair_base.data;
  const int h = static_cast<int>(job / blocks);
  const int64_t y0 = (job % blocks) * kPairsPerJob, y1 = std::min(pv.total_pairs, y0 + kPairsPerJob);
  int s = static_cast<int>(std::upper_bound(base, base + batch + 1, y0) - base) - 1;
  for (int64_t y = y0; y < y1; ++y) {
    while (y >= base[s + 1]) ++s;
    const int64_t key = 2 * (y - base[s]);
    const int64_t lk = p.kv_indptr[s + 1] - p.kv_indptr[s];
    uint32_t* out = pv.words.data + (static_cast<size_t>(h) * pv.total_pairs + y) * pv.dvp;
    const int64_t tok = p.kv_indptr[s] + key;
    const auto* a = static_cast<const uint16_t*>(p.v->ptr_at(tok, h));
    const auto* b = key + 1 < lk ? static_cast<const uint16_t*>(p.v->ptr_at(tok + 1, h)) : nullptr;
    pack_v_pair(a, b, p.dvo, pv.dvp, out);
  }
}

// Every run's V, packed as key pairs by (kv head, block of pairs) on the pool.
inline void pack_all_v(const Problem& p, PackedV& pv) {
  const int batch = p.header->batch_size;
  pv.dvp = round_up(p.dvo, 16);
  int64_t* base = pv.pair_base.ensure(static_cast<size_t>(batch) + 1);
  base[0] = 0;
  for (int b = 0; b < batch; ++b) base[b + 1] = base[b] + (p.kv_indptr[b + 1] - p.kv_indptr[b] + 1) / 2;
  pv.total_pairs = base[batch];
  const size_t words = static_cast<size_t>(p.num_kv_heads) * pv.total_pairs * pv.dvp;
  std::memset(pv.words.ensure(words + 16 * static_cast<size_t>(pv.dvp)) + words, 0,
              sizeof(uint32_t) * 16 * pv.dvp);
  const int64_t blocks = (pv.total_pairs + kPairsPerJob - 1) / kPairsPerJob;
  parallel_for(blocks * p.num_kv_heads, run_threads(), [&](int64_t job) { pack_v_job(p, pv, blocks, job); });
}

// Normalizes O's rows ([kRows][dvp] fp32), times v_factor (the item's v descale, 1 for 16-bit
// inputs), and stores them (bf16, round to nearest even), with the lse: rows that saw no key get
// exactly 0 and lse = -inf.
MLAKIT_BF16_TARGET inline void store_rows(const Problem& p, const ItemRows& it, const RowState& rs,
                                          const float* o, int dvp, float v_factor) {
  for (int r = 0; r < it.rows; ++r) {
    const int64_t tok = it.q_begin + it.row0 + r;
    auto* dst = static_cast<uint16_t*>(p.out->ptr_at(tok, it.head));
    const float l = rs.l[r];
    const __m512 inv_l = _mm512_set1_ps(l > 0.0f ? v_factor / l : 0.0f);
    const float* orow = o + static_cast<size_t>(r) * dvp;
    for (int d = 0; d < p.dvo; d += 16) {
      const int left = p.dvo - d;
      const __mmask16 m = first_lanes16(left);
      _mm256_mask_storeu_epi16(dst + d, m, (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(orow + d), inv_l)));
    }
    if (p.lse != nullptr) *static_cast<float*>(p.lse->ptr_at(tok, it.head)) = row_lse(rs.m[r], l);
  }
}

}  // namespace bf16_parts
}  // namespace cpu
}  // namespace mlakit

#endif  // MLAKIT_CPU_HAVE_AVX512BF16_PATH
