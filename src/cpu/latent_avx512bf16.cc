// The AVX-512 BF16 path of latent attention on the CPU: both products on VDPBF16PS, fp32
// accumulation, the online softmax over 16 lanes (cpu/avx512bf16_parts.h, _products.h, shared
// with the prefill kernel).
//
// An item is up to 64 rows of (new token, head) that read the same keys: for a decode token
// the heads are the rows, so each cache row is read once for all of them (and for MTP and
// extends, once for a block of tokens x heads). Per chunk of 64 keys:
//   S^T = K Q^T   [key][row]: a vector holds 16 rows of one key, so the softmax's row max and
//                 sum are lane-wise; K is read in place from the cache rows (L + R bf16 = pairs
//                 broadcast one at a time); Q is packed once per item as [dim pair][row].
//   softmax       scale into base 2, mask each row's visible keys lane-wise, running max, exp2;
//                 P^T rounded to bf16 as [key pair][row].
//   O += P V      V = the chunk's rows' first L columns, interleaved once per chunk into key
//                 pairs [pair][dim] and shared by every row of the item.
// Sparse items gather their valid index entries 64 at a time into the chunk's key list (every
// row sees all of them: no masking). Everything depends only on the item, so results are
// bitwise repeatable and do not depend on the batch.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu/aligned_scratch.h"
#include "cpu/attention_item.h"
#include "cpu/avx512bf16_parts.h"
#include "cpu/avx512bf16_products.h"
#include "cpu/half_convert.h"
#include "cpu/latent_item.h"

namespace mlakit {
namespace cpu {
namespace latent_cpu {

#ifdef MLAKIT_CPU_HAVE_AVX512BF16_PATH
namespace {

using namespace bf16_parts;

constexpr int kWideKeys = 8;  // keys per S^T call for a single row vector

struct Scratch {
  AlignedScratch<uint32_t> qpack;  // [D / 2][kRows]
  AlignedScratch<float> st;        // [kChunk + kWideKeys][kRows]: S^T, then the logits
  AlignedScratch<uint32_t> ppair;  // [kChunk / 2][kRows]: P^T as bf16 pairs of keys
  AlignedScratch<uint32_t> vpack;  // [kChunk / 2][L]: V as bf16 pairs of keys
  AlignedScratch<float> o;         // [kRows][L]
  AlignedScratch<uint16_t> zero;   // a zero cache row: the keys past a chunk's end
  AlignedScratch<uint16_t> dec;    // fp8_ds_mla: [kChunk][D], the chunk's rows decoded
  RowState rs;
  const uint32_t* keys[kChunk + kWideKeys];
  const uint32_t* next[kChunk];  // the next chunk's keys, prefetched while this one runs
  int n_next = 0;
  // Each row's largest raw score (q.k before the scale), when max_logits are asked for: the
  // shared softmax's running max is only the exponentials' reference and may trail the true max.
  alignas(64) float rmax[kRows];
};

// rmax = max(rmax, the largest raw score each row sees in this chunk): S^T masked by each row's
// visible keys, as the softmax masks it (keys a row vector was not computed for are masked).
MLAKIT_BF16_TARGET void track_max(const float* st, int n, int nvr, const RowState& rs, float* rmax) {
  const __m512 ninf_v = _mm512_set1_ps(kNegInf);
  for (int v = 0; v < nvr; ++v) {
    const __m512i lo_v = _mm512_load_si512(rs.lo + 16 * v);
    const __m512i hi_v = _mm512_load_si512(rs.hi + 16 * v);
    if (reduce_max_i32(_mm512_sub_epi32(hi_v, lo_v)) <= 0) continue;
    const bool whole = reduce_max_i32(lo_v) <= 0 && reduce_min_i32(hi_v) >= n;
    __m512 mx = ninf_v;
    for (int j = 0; j < n; ++j) {
      __m512 t = _mm512_load_ps(st + j * kRows + 16 * v);
      if (!whole) {
        const __m512i jv = _mm512_set1_epi32(j);
        t = _mm512_mask_blend_ps(_mm512_cmple_epi32_mask(lo_v, jv) & _mm512_cmpgt_epi32_mask(hi_v, jv), ninf_v, t);
      }
      mx = _mm512_max_ps(mx, t);
    }
    _mm512_store_ps(rmax + 16 * v, _mm512_max_ps(_mm512_load_ps(rmax + 16 * v), mx));
  }
}

// acc += q . (the pair at p, broadcast): VDPBF16PS with an embedded broadcast of its memory
// operand, which the load unit does; GCC 12 issues a separate VPBROADCASTD instead, one per
// product with a single row vector, and those bounded S^T at half the products' rate.
MLAKIT_BF16_INLINE __m512 dp_bcast(__m512 acc, __m512 q, const uint32_t* p) {
  __asm__("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(q), "m"(*p));
  return acc;
}

// S^T of NK keys for NV row vectors (q pairs q_stride words apart): the prefill kernel's qk_block
// (avx512bf16_products.h) with the keys' pairs broadcast inside the products, and NK keys a
// call, so that a single row vector keeps 8 accumulators against the products' latency. Each
// sum runs over the pairs in order, whatever NV and NK are.
template <int NV, int NK>
MLAKIT_BF16_TARGET void qk_bcast(const uint32_t* qpack, int q_stride, const uint32_t* const* keys, int pairs,
                                 float* st) {
  __m512 acc[NK][NV];
  const uint32_t* k[NK];
#pragma GCC unroll 8
  for (int j = 0; j < NK; ++j) {
    k[j] = keys[j];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[j][v] = _mm512_setzero_ps();
  }
  for (int x = 0; x < pairs; ++x, qpack += q_stride) {
    __m512 q[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) q[v] = _mm512_load_ps(reinterpret_cast<const float*>(qpack + 16 * v));
#pragma GCC unroll 8
    for (int j = 0; j < NK; ++j)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[j][v] = dp_bcast(acc[j][v], q[v], k[j] + x);
  }
#pragma GCC unroll 8
  for (int j = 0; j < NK; ++j)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_store_ps(st + j * kRows + 16 * v, acc[j][v]);
}

// Cache rows of the next chunk into L2 while the products of this one run: at 16 heads a key
// row serves ~35 k FLOP, so the products outrun the hardware prefetchers on rows beyond the
// last-level cache (decode over many requests measured 120 against 180 GFLOP/s from L3).
inline void prefetch_rows(const uint32_t* const* rows, int from, int to, int bytes) {
  for (int j = from; j < to; ++j) {
    const char* p = reinterpret_cast<const char*>(rows[j]);
    for (int off = 0; off < bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T1);
  }
}

// q's rows of the item as [dim pair][row] words, 16 * nvr rows per pair (packed tight: at a
// fixed stride of 64 rows a single row vector's pairs fell 256 bytes apart, a quarter of L1's
// sets, and thrashed it); 16 rows x 16 pairs loaded row by row and transposed in registers (L
// and R are multiples of 32, so no block straddles q_nope and q_pe).
MLAKIT_BF16_TARGET void pack_q(const Run& run, const LatentItem& it, int nvr, uint32_t* qpack) {
  const int stride = 16 * nvr;
  const int lp = run.L / 2, dp = run.D / 2;
  for (int v = 0; v < nvr; ++v) {
    const uint32_t* src[16];
    const uint32_t* pe[16];
    for (int i = 0; i < 16; ++i) {
      const int r = 16 * v + i;
      src[i] = r < it.rows ? reinterpret_cast<const uint32_t*>(run.q_nope(it.row_begin + r)) : nullptr;
      pe[i] = r < it.rows ? reinterpret_cast<const uint32_t*>(run.q_rope(it.row_begin + r)) : nullptr;
    }
    for (int x0 = 0; x0 < dp; x0 += 16) {
      __m512i b[16];
      for (int i = 0; i < 16; ++i) {
        if (src[i] == nullptr) {  // rows past the item: zero
          b[i] = _mm512_setzero_si512();
          continue;
        }
        b[i] = _mm512_loadu_si512(x0 < lp ? src[i] + x0 : pe[i] + (x0 - lp));
      }
      transpose16(b);
      for (int i = 0; i < 16; ++i) _mm512_store_si512(qpack + (x0 + i) * stride + 16 * v, b[i]);
    }
  }
}

// One chunk of n keys (w.keys; rs.enter_chunk done): S^T, softmax, V's pairs, O += P V.
MLAKIT_BF16_TARGET void chunk(const Run& run, const Problem& sp, const LatentItem& it, int nvr, int n, Scratch& w) {
  RowState& rs = w.rs;
  const int L = run.L, dp = run.D / 2, nq = (n + 1) / 2;
  const uint32_t* zero = reinterpret_cast<const uint32_t*>(w.zero.data);
  for (int j = n; j < round_up(n, kWideKeys); ++j) w.keys[j] = zero;
  float* st = w.st.data;
  const int row_bytes = run.row_bytes;
  // Spread the next chunk's prefetches over this chunk's key blocks.
  auto prefetch_next = [&](int j, int step) {
    prefetch_rows(w.next, std::min(j, w.n_next), std::min(j + step, w.n_next), row_bytes);
  };
  if (nvr == 1) {
    // One row vector (a decode token's 16 heads or fewer): 8 keys a call, so that 8
    // accumulators hide the products' latency (the bits are the same as 4 at a time).
    for (int j = 0; j < n; j += kWideKeys) {
      prefetch_next(j, kWideKeys);
      if (rs.vlo[0] < j + kWideKeys && rs.vhi[0] > j)
        qk_bcast<1, kWideKeys>(w.qpack.data, 16, w.keys + j, dp, st + j * kRows);
    }
    prefetch_next(round_up(n, kWideKeys), kChunk);
  } else {
    for (int j = 0; j < n; j += kKeyBlock) {
      prefetch_next(j, kKeyBlock);
      // Only the row vectors that see one of these keys (a causal block's last chunk).
      int v0 = nvr, v1 = -1;
      for (int v = 0; v < nvr; ++v) {
        if (rs.vlo[v] < j + kKeyBlock && rs.vhi[v] > j) {
          v0 = std::min(v0, v);
          v1 = v;
        }
      }
      if (v1 < v0) continue;
      float* sj = st + j * kRows + 16 * v0;
      const uint32_t* qv = w.qpack.data + 16 * v0;
      const int qs = 16 * nvr;
      switch (v1 - v0 + 1) {
        case 1: qk_bcast<1, kKeyBlock>(qv, qs, w.keys + j, dp, sj); break;
        case 2: qk_bcast<2, kKeyBlock>(qv, qs, w.keys + j, dp, sj); break;
        case 3: qk_bcast<3, kKeyBlock>(qv, qs, w.keys + j, dp, sj); break;
        default: qk_bcast<4, kKeyBlock>(qv, qs, w.keys + j, dp, sj); break;
      }
    }
    prefetch_next(round_up(n, kKeyBlock), kChunk);
  }
  if (wants_max(run)) track_max(st, n, nvr, rs, w.rmax);
  softmax_chunk(sp, 1.0f, n, nvr, st, w.ppair.data, rs);

  // V: the pairs some row sees, interleaved once for every row of the item.
  int px0 = nq, px1 = 0;
  for (int r = 0; r < it.rows; ++r) {
    if (rs.hi[r] <= rs.lo[r]) continue;
    px0 = std::min(px0, rs.lo[r] / 2);
    px1 = std::max(px1, (rs.hi[r] + 1) / 2);
  }
  uint32_t* vpack = w.vpack.data;
  for (int x = px0; x < px1; ++x) {
    const auto* a = reinterpret_cast<const uint16_t*>(w.keys[2 * x]);
    const auto* b = 2 * x + 1 < n ? reinterpret_cast<const uint16_t*>(w.keys[2 * x + 1]) : nullptr;
    pack_v_pair(a, b, L, L, vpack + static_cast<size_t>(x) * L);
  }

  const int nvd = L / 16;
  float* o = w.o.data;
  for (int r0 = 0; r0 < it.rows; r0 += kRowBlock) {
    const bool rsc = rs.rescale[r0 / 16];
    int x0 = nq, x1 = 0;
    for (int r = r0; r < r0 + kRowBlock; ++r) {
      if (rs.hi[r] <= rs.lo[r]) continue;
      x0 = std::min(x0, rs.lo[r] / 2);
      x1 = std::max(x1, (rs.hi[r] + 1) / 2);
    }
    x1 = std::max(x0, x1);
    for (int c = 0; c < nvd; c += 4)  // L is a multiple of 32: nvd a multiple of 2
      if (c + 4 <= nvd)
        pv_block<4>(w.ppair.data + r0, vpack + 16 * c, L, x0, x1, o + r0 * L + 16 * c, rs.alpha + r0, rsc);
      else
        pv_block<2>(w.ppair.data + r0, vpack + 16 * c, L, x0, x1, o + r0 * L + 16 * c, rs.alpha + r0, rsc);
  }
}

MLAKIT_BF16_TARGET void item_impl(const Run& run, const LatentItem& it, Scratch& w) {
  const int rows = it.rows, nvr = (rows + 15) / 16, L = run.L, D = run.D;
  RowState& rs = w.rs;
  uint32_t* qpack = w.qpack.ensure(static_cast<size_t>(D / 2) * kRows);
  w.st.ensure(static_cast<size_t>(kChunk + kWideKeys) * kRows);
  w.ppair.ensure(static_cast<size_t>(kChunk / 2) * kRows);
  w.vpack.ensure(static_cast<size_t>(kChunk / 2) * L);
  float* o = w.o.ensure(static_cast<size_t>(kRows) * L);
  std::memset(o, 0, sizeof(float) * static_cast<size_t>(nvr * 16) * L);
  if (w.zero.size < static_cast<size_t>(D)) std::memset(w.zero.ensure(static_cast<size_t>(D)), 0, sizeof(uint16_t) * D);
  pack_q(run, it, nvr, qpack);

  Problem sp{};  // what the shared softmax reads: the scale, no soft cap
  sp.sm_scale = run.h->sm_scale;
  sp.soft_cap = 0.0f;

  for (int r = 0; r < nvr * 16; ++r) {
    rs.m[r] = kNegInf;
    rs.l[r] = 0.0f;
    rs.row_lo[r] = rs.row_hi[r] = 0;  // rows past the item see nothing
    w.rmax[r] = kNegInf;
  }
  // Chunk after chunk, each one's keys gathered while the previous one runs (w.next).
  int n = 0;
  auto advance = [&](int n_next) {
    std::copy(w.next, w.next + n_next, w.keys);
    n = n_next;
    if (run.fp8_rows && n > 0) {
      uint16_t* dec = w.dec.ensure(static_cast<size_t>(kChunk) * D);
      for (int j = 0; j < n; ++j) {
        decode_fp8_row(run, w.keys[j], dec + j * D);
        w.keys[j] = reinterpret_cast<const uint32_t*>(dec + j * D);
      }
    }
  };
  if (run.h->sparse) {
    for (int r = 0; r < rows; ++r) rs.row_hi[r] = kChunk;  // every row sees the whole chunk
    // The item's valid entries in order, kChunk at a time.
    const int64_t end = run.entry_end(it);
    int64_t e = it.key_begin;
    auto gather = [&] {
      int k = 0;
      for (; e < end && k < kChunk; ++e) {
        const void* row = run.entry_row(it.request, it.token, e);
        if (row != nullptr) w.next[k++] = reinterpret_cast<const uint32_t*>(row);
      }
      return k;
    };
    advance(gather());
    while (n > 0) {
      w.n_next = gather();
      rs.enter_chunk(0, n, nvr);
      chunk(run, sp, it, nvr, n, w);
      advance(w.n_next);
    }
  } else {
    int64_t tile_hi = it.key_begin;
    for (int r = 0; r < rows; ++r) {
      run.dense_range(it, it.row_begin + r, &rs.row_lo[r], &rs.row_hi[r]);
      tile_hi = std::max(tile_hi, rs.row_hi[r]);
    }
    auto gather = [&](int64_t c0) {
      const int k = static_cast<int>(std::clamp<int64_t>(tile_hi - c0, 0, kChunk));
      for (int j = 0; j < k; ++j) w.next[j] = reinterpret_cast<const uint32_t*>(run.key_row(it.request, c0 + j));
      return k;
    };
    advance(gather(it.key_begin));
    for (int64_t c0 = it.key_begin; n > 0; c0 += kChunk) {
      w.n_next = gather(c0 + kChunk);
      rs.enter_chunk(c0, n, nvr);
      chunk(run, sp, it, nvr, n, w);
      advance(w.n_next);
    }
  }
  const float scale = run.h->sm_scale;
  for (int r = 0; r < rows; ++r)
    finish_row(run, it, r, o + static_cast<size_t>(r) * L, rs.m[r], rs.l[r], w.rmax[r] * scale);
}

}  // namespace

void item_avx512bf16(const Run& run, const LatentItem& it) {
  thread_local Scratch scratch;
  item_impl(run, it, scratch);
}

MLAKIT_BF16_TARGET void store_bf16_avx512(void* dst, const float* src, int n, float mul) {
  auto* out = static_cast<uint16_t*>(dst);
  const __m512 m = _mm512_set1_ps(mul);
  for (int d = 0; d < n; d += 16) {
    const __mmask16 k = first_lanes16(n - d);
    _mm256_mask_storeu_epi16(out + d, k, (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, src + d), m)));
  }
}

#else  // no x86-64 GCC/Clang: the path is never available (cpu_isa.h); this only links.

void item_avx512bf16(const Run& run, const LatentItem& it) { item_fp32<DType::kBF16>(run, it); }
void store_bf16_avx512(void* dst, const float* src, int n, float mul) {
  auto* out = static_cast<uint16_t*>(dst);
  for (int d = 0; d < n; ++d) out[d] = float_to_bf16(src[d] * mul);
}

#endif

}  // namespace latent_cpu
}  // namespace cpu
}  // namespace mlakit
