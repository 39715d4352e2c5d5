// The AVX-512 BF16 path of the CPU backend: both products on VDPBF16PS (16 fp32 lanes, each a
// dot product of two bf16 pairs), fp32 accumulation, the online softmax over 16 lanes.
//
// Per item (<= 64 q rows of one head), per chunk of 64 keys:
//   S^T = K Q^T   S is computed transposed, [key][row]: a vector holds 16 rows of one key, so
//                 the softmax's per-row max and sum are lane-wise (no horizontal reductions) and
//                 K is read in place, one 32-bit (pair of dims) broadcast per key and step, from
//                 the input rows (bf16) or from rows converted once per chunk (other dtypes).
//                 Q is packed once per item as [dim pair][row] ("VNNI" pairs).
//   softmax       scale (or soft cap), mask, running max, exp2 over 16 lanes; P^T is rounded to
//                 bf16 and packed as [key pair][row]. Masking is lane-wise (compare the key index
//                 with each row's visible range); chunks every row sees whole skip it.
//   O += P V      V is packed once per run (prepare_avx512bf16) as [kv head][key pair][dim], key
//                 pairs counted from each sequence's first key, so every q tile and head that
//                 reads a chunk shares its packing (packing per item cost 8% of a long run). O's
//                 rows are rescaled as they are loaded into the accumulators, and only where some
//                 row's max moved. Chunks start at even keys (the union's first key rounded down;
//                 the key before it is masked) so that they are whole pairs.
// Everything depends only on the item and the chunk position, so repeated runs are bitwise equal
// and a sequence's result does not depend on its batch.
//
// The functions carry target attributes (no file-wide -m flags), so the library stays one binary
// for every x86-64 CPU; cpu_isa.h decides at run time whether this path may run.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "cpu/aligned_scratch.h"
#include "cpu/attention_item.h"
#include "cpu/half_convert.h"
#include "cpu/thread_pool.h"

#if defined(__GNUC__) && defined(__x86_64__)
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_* values.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define MLAKIT_CPU_HAVE_AVX512BF16_PATH 1
#endif

namespace mlakit {
namespace cpu {

#ifdef MLAKIT_CPU_HAVE_AVX512BF16_PATH
namespace {

#define MLAKIT_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma")))
#define MLAKIT_BF16_INLINE MLAKIT_BF16_TARGET __attribute__((always_inline)) inline

constexpr int kRows = 64;    // q rows per item at most (the CPU schedule's block_m)
constexpr int kChunk = 64;   // keys per step
constexpr int kKeyBlock = 4; // keys per S^T micro-kernel call (x up to 4 row vectors)
constexpr int kRowBlock = 4; // rows per O micro-kernel call (x up to 4 dim vectors)

int round_up(int x, int a) { return (x + a - 1) / a * a; }


struct Scratch {
  AlignedScratch<uint32_t> qpack;  // [dim pair][kRows]
  AlignedScratch<uint16_t> kconv;  // [kChunk][2 * dim pairs]: converted key rows (when not read in place)
  AlignedScratch<uint16_t> zero;   // a zero key row for the keys past a chunk's end
  AlignedScratch<float> st;        // [kChunk + kKeyBlock][kRows]: S^T, then the scaled logits
  AlignedScratch<uint32_t> ppair;  // [kChunk / 2][kRows]: P^T as bf16 pairs of keys
  AlignedScratch<float> o;         // [kRows][dvp]
  alignas(64) float m[kRows], l[kRows], alpha[kRows];
  alignas(64) int32_t lo[kRows], hi[kRows];  // visible keys, relative to the chunk
  int64_t row_lo[kRows], row_hi[kRows];      // visible keys, relative to the sequence
};

// V of the whole run as key pairs: words [kv head][pair][dvp]; pair_base[s] is sequence s's first.
struct PackedV {
  AlignedScratch<uint32_t> words;
  AlignedScratch<int64_t> pair_base;  // [batch + 1]
  int64_t total_pairs = 0;
  int dvp = 0;
};

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

// cap * log2(e) * tanh(s * scale / cap), tanh(y) = 1 - 2 / (e^{2y} + 1).
MLAKIT_BF16_INLINE __m512 soft_cap_log2(__m512 s, __m512 scale_over_cap, __m512 cap_log2) {
  const __m512 y = _mm512_mul_ps(s, scale_over_cap);
  const __m512 e = exp2v(_mm512_mul_ps(y, _mm512_set1_ps(2.0f * kLog2e)));
  const __m512 th = _mm512_sub_ps(_mm512_set1_ps(1.0f),
                                  _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
  return _mm512_mul_ps(th, cap_log2);
}

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

// O[r0 .. r0+kRowBlock)[16 * d-vectors] (*alpha) += P V over nq key pairs, ND dim vectors.
template <int ND>
MLAKIT_BF16_TARGET void pv_block(const uint32_t* ppair, const uint32_t* vpack, int dvp, int nq,
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
  for (int x = 0; x < nq; ++x) {
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

// Rounds two vectors of P (keys 2x and 2x + 1, 16 rows) to bf16 and interleaves them per row.
MLAKIT_BF16_INLINE __m512i pack_p_pair(__m512 e0, __m512 e1) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                       23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(e1, e0);  // [0, 16): e0, [16, 32): e1
  return _mm512_permutexvar_epi16(idx, both);
}

MLAKIT_BF16_INLINE int reduce_max_i32(__m512i v) { return _mm512_reduce_max_epi32(v); }
MLAKIT_BF16_INLINE int reduce_min_i32(__m512i v) { return _mm512_reduce_min_epi32(v); }

constexpr int64_t kPairsPerJob = 32;

// One job of pack_all_v: kPairsPerJob key pairs of one kv head.
MLAKIT_BF16_TARGET void pack_v_job(const Problem& p, const PackedV& pv, int64_t blocks, int64_t job) {
  const int batch = p.header->batch_size;
  const int64_t* base = pv.pair_base.data;
  const int h = static_cast<int>(job / blocks);
  const int64_t y0 = (job % blocks) * kPairsPerJob, y1 = std::min(pv.total_pairs, y0 + kPairsPerJob);
  int s = static_cast<int>(std::upper_bound(base, base + batch + 1, y0) - base) - 1;
  for (int64_t y = y0; y < y1; ++y) {
    while (y >= base[s + 1]) ++s;
    const int64_t key = 2 * (y - base[s]);
    const int64_t lk = p.kv_indptr[s + 1] - p.kv_indptr[s];
    const int64_t tok = p.kv_indptr[s] + key;
    const auto* a = static_cast<const uint16_t*>(p.v->ptr_at(tok, h));
    const auto* b = key + 1 < lk ? static_cast<const uint16_t*>(p.v->ptr_at(tok + 1, h)) : nullptr;
    pack_v_pair(a, b, p.dvo, pv.dvp, pv.words.data + (static_cast<size_t>(h) * pv.total_pairs + y) * pv.dvp);
  }
}

// Every run's V, packed as key pairs by (kv head, block of pairs) on the pool.
void pack_all_v(const Problem& p, PackedV& pv) {
  const int batch = p.header->batch_size;
  pv.dvp = round_up(p.dvo, 16);
  int64_t* base = pv.pair_base.ensure(static_cast<size_t>(batch) + 1);
  base[0] = 0;
  for (int b = 0; b < batch; ++b) base[b + 1] = base[b] + (p.kv_indptr[b + 1] - p.kv_indptr[b] + 1) / 2;
  pv.total_pairs = base[batch];
  pv.words.ensure(static_cast<size_t>(p.num_kv_heads) * pv.total_pairs * pv.dvp + 1);
  const int64_t blocks = (pv.total_pairs + kPairsPerJob - 1) / kPairsPerJob;
  parallel_for(blocks * p.num_kv_heads, run_threads(), [&](int64_t job) { pack_v_job(p, pv, blocks, job); });
}

// Q rows as [dim pair][row] words, 16 rows per gather; zero past the rows. Rows whose offsets
// from the first do not fit 32 bits (never for tensors under 2 GiB) are copied one by one.
MLAKIT_BF16_TARGET void pack_q(const Problem& p, const ItemRows& it, int rows, int nvr, int dq2, bool odd,
                               uint32_t* qpack) {
  const auto* first = static_cast<const char*>(p.q->ptr_at(it.q_begin + it.row0, it.head));
  const int64_t row_bytes = p.q->strides[0] * 2;
  const bool gather = !odd && std::abs(row_bytes) * kRows < (int64_t{1} << 31);
  for (int v = 0; v < nvr; ++v) {
    const int live = std::min(16, rows - 16 * v);
    const __mmask16 m = live >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << std::max(live, 0)) - 1u);
    if (gather) {
      const __m512i offs = _mm512_mullo_epi32(_mm512_add_epi32(_mm512_set1_epi32(16 * v),
                                                               _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)),
                                              _mm512_set1_epi32(static_cast<int>(row_bytes)));
      for (int x = 0; x < dq2; ++x)
        _mm512_store_si512(qpack + x * kRows + 16 * v,
                           _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, offs, first + 4 * x, 1));
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

MLAKIT_BF16_TARGET void run_item_impl(const Problem& p, const ItemRows& it, Scratch& w) {
  const PackedV& pv = *static_cast<const PackedV*>(p.prepared);
  const int rows = it.rows;
  const int nvr = (rows + 15) / 16;  // row vectors
  const int dqk = p.dqk, dvo = p.dvo;
  const int dq2 = (dqk + 1) / 2;     // dim pairs
  const int dvp = pv.dvp;
  const bool capped = p.soft_cap > 0.0f;
  const float ninf = -std::numeric_limits<float>::infinity();

  uint32_t* qpack = w.qpack.ensure(static_cast<size_t>(dq2) * kRows);
  uint16_t* zero = w.zero.ensure(static_cast<size_t>(2 * dq2));
  std::memset(zero, 0, sizeof(uint16_t) * 2 * dq2);
  float* st = w.st.ensure(static_cast<size_t>(kChunk + kKeyBlock) * kRows);
  uint32_t* ppair = w.ppair.ensure(static_cast<size_t>(kChunk / 2) * kRows);
  float* o = w.o.ensure(static_cast<size_t>(kRows) * dvp);
  std::memset(o, 0, sizeof(float) * static_cast<size_t>(nvr * 16) * dvp);

  // Visible keys per row and the union the tile walks.
  int64_t tile_lo = it.lk, tile_hi = 0;
  for (int r = 0; r < nvr * 16; ++r) {
    w.m[r] = ninf;
    w.l[r] = 0.0f;
    if (r >= rows) {
      w.row_lo[r] = w.row_hi[r] = 0;
      continue;
    }
    const plan::KvRange kr = it.range(p, r);
    w.row_lo[r] = kr.lo;
    w.row_hi[r] = kr.hi;
    if (kr.hi > kr.lo) {
      tile_lo = std::min<int64_t>(tile_lo, kr.lo);
      tile_hi = std::max<int64_t>(tile_hi, kr.hi);
    }
  }
  tile_lo -= tile_lo % 2;  // whole key pairs

  pack_q(p, it, rows, nvr, dq2, dqk % 2 != 0, qpack);

  // Keys are read in place when they are whole pairs on both sides of the split.
  const bool keys_in_place = dqk % 2 == 0 && p.dk_split % 2 == 0;
  uint16_t* kconv = keys_in_place ? nullptr : w.kconv.ensure(static_cast<size_t>(kChunk) * 2 * dq2);
  const int pa = keys_in_place ? p.dk_split / 2 : dq2;
  const int pb = keys_in_place ? (dqk - p.dk_split) / 2 : 0;
  const uint32_t* zero32 = reinterpret_cast<const uint32_t*>(zero);
  const uint32_t* ka[kChunk + kKeyBlock];
  const uint32_t* kb[kChunk + kKeyBlock];
  const uint32_t* v_seq = pv.words.data + (static_cast<size_t>(it.kv_head) * pv.total_pairs + pv.pair_base.data[it.seq]) * dvp;

  const __m512 scale_v = _mm512_set1_ps(p.sm_scale * kLog2e);  // logits in base 2
  const __m512 scale_over_cap = _mm512_set1_ps(capped ? p.sm_scale / p.soft_cap : 0.0f);
  const __m512 cap_log2 = _mm512_set1_ps(p.soft_cap * kLog2e);
  const __m512 ninf_v = _mm512_set1_ps(ninf);
  const __m512 one_v = _mm512_set1_ps(1.0f);

  for (int64_t c0 = tile_lo; c0 < tile_hi; c0 += kChunk) {
    const int n = static_cast<int>(std::min<int64_t>(kChunk, tile_hi - c0));
    const int nq = (n + 1) / 2;
    const int64_t tok0 = it.kv_begin + c0;
    const uint32_t* vpack = v_seq + static_cast<size_t>(c0 / 2) * dvp;

    // Key rows of the chunk.
    for (int j = 0; j < n; ++j) {
      if (keys_in_place) {
        ka[j] = static_cast<const uint32_t*>(p.k->ptr_at(tok0 + j, it.kv_head));
        kb[j] = pb > 0 ? static_cast<const uint32_t*>(p.k_rope->ptr_at(tok0 + j, it.rope_head)) : zero32;
      } else {
        uint16_t* dst = kconv + static_cast<size_t>(j) * 2 * dq2;
        const auto* ks = static_cast<const uint16_t*>(p.k->ptr_at(tok0 + j, it.kv_head));
        std::memcpy(dst, ks, sizeof(uint16_t) * p.dk_split);
        if (p.dk_split < dqk)
          std::memcpy(dst + p.dk_split, p.k_rope->ptr_at(tok0 + j, it.rope_head), sizeof(uint16_t) * (dqk - p.dk_split));
        if (dqk % 2 != 0) dst[dqk] = 0;
        ka[j] = reinterpret_cast<const uint32_t*>(dst);
        kb[j] = zero32;
      }
    }
    for (int j = n; j < round_up(n, kKeyBlock); ++j) ka[j] = kb[j] = zero32;

    // S^T for the chunk.
    for (int j = 0; j < n; j += kKeyBlock) {
      float* sj = st + j * kRows;
      switch (nvr) {
        case 1: qk_block<1>(qpack, ka + j, pa, kb + j, pb, sj); break;
        case 2: qk_block<2>(qpack, ka + j, pa, kb + j, pb, sj); break;
        case 3: qk_block<3>(qpack, ka + j, pa, kb + j, pb, sj); break;
        default: qk_block<4>(qpack, ka + j, pa, kb + j, pb, sj); break;
      }
    }

    // Online softmax, 16 rows at a time; P^T as bf16 pairs into ppair.
    bool rescale[kRows / 16];
    for (int v = 0; v < nvr; ++v) {
      for (int r = 16 * v; r < 16 * v + 16; ++r) {
        w.lo[r] = static_cast<int32_t>(std::clamp<int64_t>(w.row_lo[r] - c0, 0, n));
        w.hi[r] = static_cast<int32_t>(std::clamp<int64_t>(w.row_hi[r] - c0, 0, n));
      }
      const __m512i lo_v = _mm512_load_si512(w.lo + 16 * v);
      const __m512i hi_v = _mm512_load_si512(w.hi + 16 * v);
      rescale[v] = false;
      if (reduce_max_i32(_mm512_sub_epi32(hi_v, lo_v)) <= 0) {
        // No row of these 16 sees a key here: P = 0, nothing else moves.
        for (int x = 0; x < nq; ++x) _mm512_store_si512(ppair + x * kRows + 16 * v, _mm512_setzero_si512());
        continue;
      }
      const bool whole = reduce_max_i32(lo_v) <= 0 && reduce_min_i32(hi_v) >= n;
      float* sv = st + 16 * v;
      __m512 mx = ninf_v;
      for (int j = 0; j < n; ++j) {
        __m512 t = _mm512_load_ps(sv + j * kRows);
        t = capped ? soft_cap_log2(t, scale_over_cap, cap_log2) : _mm512_mul_ps(t, scale_v);
        if (!whole) {
          const __m512i jv = _mm512_set1_epi32(j);
          const __mmask16 vis = _mm512_cmple_epi32_mask(lo_v, jv) & _mm512_cmpgt_epi32_mask(hi_v, jv);
          t = _mm512_mask_blend_ps(vis, ninf_v, t);
        }
        _mm512_store_ps(sv + j * kRows, t);
        mx = _mm512_max_ps(mx, t);
      }
      const __m512 m_old = _mm512_load_ps(w.m + 16 * v);
      const __m512 m_new = _mm512_max_ps(m_old, mx);
      // Rows that have seen no key yet keep m = -inf; their exponentials use 0 so that
      // -inf - m stays -inf (exp2 -> 0) instead of NaN.
      const __m512 m_use = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(m_new, ninf_v, _CMP_EQ_OQ), m_new,
                                                _mm512_setzero_ps());
      const __m512 alpha = exp2v(_mm512_sub_ps(m_old, m_use));
      __m512 sum = _mm512_setzero_ps();
      for (int x = 0; x < n / 2; ++x) {
        const __m512 e0 = exp2v(_mm512_sub_ps(_mm512_load_ps(sv + (2 * x) * kRows), m_use));
        const __m512 e1 = exp2v(_mm512_sub_ps(_mm512_load_ps(sv + (2 * x + 1) * kRows), m_use));
        sum = _mm512_add_ps(sum, _mm512_add_ps(e0, e1));
        _mm512_store_si512(ppair + x * kRows + 16 * v, pack_p_pair(e0, e1));
      }
      if (n % 2 != 0) {
        const __m512 e0 = exp2v(_mm512_sub_ps(_mm512_load_ps(sv + (n - 1) * kRows), m_use));
        sum = _mm512_add_ps(sum, e0);
        _mm512_store_si512(ppair + (n / 2) * kRows + 16 * v, pack_p_pair(e0, _mm512_setzero_ps()));
      }
      const __m512 l_old = _mm512_load_ps(w.l + 16 * v);
      _mm512_store_ps(w.l + 16 * v, _mm512_fmadd_ps(l_old, alpha, sum));
      _mm512_store_ps(w.m + 16 * v, m_new);
      _mm512_store_ps(w.alpha + 16 * v, alpha);
      rescale[v] = _mm512_cmp_ps_mask(alpha, one_v, _CMP_NEQ_UQ) != 0;
    }

    // O += P V, kRowBlock rows x up to 4 dim vectors per call.
    const int nvd = dvp / 16;
    for (int r0 = 0; r0 < rows; r0 += kRowBlock) {
      const bool rs = rescale[r0 / 16];
      int c = 0;
      for (; c + 4 <= nvd; c += 4)
        pv_block<4>(ppair + r0, vpack + 16 * c, dvp, nq, o + r0 * dvp + 16 * c, w.alpha + r0, rs);
      switch (nvd - c) {
        case 1: pv_block<1>(ppair + r0, vpack + 16 * c, dvp, nq, o + r0 * dvp + 16 * c, w.alpha + r0, rs); break;
        case 2: pv_block<2>(ppair + r0, vpack + 16 * c, dvp, nq, o + r0 * dvp + 16 * c, w.alpha + r0, rs); break;
        case 3: pv_block<3>(ppair + r0, vpack + 16 * c, dvp, nq, o + r0 * dvp + 16 * c, w.alpha + r0, rs); break;
        default: break;
      }
    }
  }

  // Normalize and store (bf16, round to nearest even): rows that saw no key get exactly 0 and
  // lse = -inf.
  for (int r = 0; r < rows; ++r) {
    const int64_t tok = it.q_begin + it.row0 + r;
    auto* dst = static_cast<uint16_t*>(p.out->ptr_at(tok, it.head));
    const float l = w.l[r];
    const __m512 inv_l = _mm512_set1_ps(l > 0.0f ? 1.0f / l : 0.0f);
    const float* orow = o + static_cast<size_t>(r) * dvp;
    for (int d = 0; d < dvo; d += 16) {
      const int left = dvo - d;
      const __mmask16 m = left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
      _mm256_mask_storeu_epi16(dst + d, m, (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(orow + d), inv_l)));
    }
    if (p.lse != nullptr) {
      float* lp = static_cast<float*>(p.lse->ptr_at(tok, it.head));
      *lp = l > 0.0f ? (w.m[r] + std::log2(l)) * kLn2 : -std::numeric_limits<float>::infinity();
    }
  }
}

}  // namespace

void prepare_avx512bf16(Problem& p) {
  thread_local PackedV packed;  // the calling thread's: it waits for every item of its run
  pack_all_v(p, packed);
  p.prepared = &packed;
}

void run_item_avx512bf16(const Problem& p, int64_t item) {
  if (p.block_m > kRows) {
    run_item_fp32<DType::kBF16>(p, item);
    return;
  }
  const ItemRows it(p, item);
  if (it.rows <= 0) return;
  thread_local Scratch scratch;
  run_item_impl(p, it, scratch);
}

#else  // no x86-64 GCC/Clang: the path is never available (cpu_isa.h), this only links.

void prepare_avx512bf16(Problem&) {}
void run_item_avx512bf16(const Problem& p, int64_t item) { run_item_fp32<DType::kBF16>(p, item); }

#endif

}  // namespace cpu
}  // namespace mlakit
