// What the AVX-512 BF16 and AMX paths of latent attention share (latent_avx512bf16.cc,
// latent_amx.cc): an item's scratch, q packed as [dim pair][row], the next chunk's rows
// prefetched, the largest raw score tracked for max_logits, and the item's loop over chunks of
// keys (dense through the pages, or a sparse item's valid index entries, fp8 rows decoded), which
// calls the path's chunk function. Only for x86-64 GCC/Clang (MLAKIT_CPU_HAVE_AVX512BF16_PATH).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu/aligned_scratch.h"
#include "cpu/attention_item.h"
#include "cpu/avx512bf16_parts.h"
#include "cpu/half_convert.h"
#include "cpu/latent_item.h"

#ifdef MLAKIT_CPU_HAVE_AVX512BF16_PATH

namespace mlakit {
namespace cpu {
namespace latent_cpu {
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
  AlignedScratch<uint16_t> kgroup; // amx: [kChunk / 16][16][D], key groups whose rows are not at one stride
  AlignedScratch<uint32_t> prow;   // amx: one row vector's P row-major, [k-step][16 rows][16 pairs]
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

// Cache rows of the next chunk into L2 while the products of this one run: at 16 heads a key
// row serves ~35 k FLOP, so the products outrun the hardware prefetchers on rows beyond the
// last-level cache (decode over many requests measured 120 against 180 GFLOP/s from L3).
inline void prefetch_rows(const uint32_t* const* rows, int from, int to, int bytes) {
  for (int j = from; j < to; ++j) {
    const char* p = reinterpret_cast<const char*>(rows[j]);
    for (int off = 0; off < bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T1);
  }
}

// V's key pairs [x0, x1) of the chunk's n keys (w.keys) into w.vpack as [pair][L] words: the
// rows' first L columns interleaved once for every row of the item. Keys past n are zero.
MLAKIT_BF16_TARGET void pack_v_pairs(int L, int n, int x0, int x1, Scratch& w) {
  for (int x = x0; x < x1; ++x) {
    const auto* a = 2 * x < n ? reinterpret_cast<const uint16_t*>(w.keys[2 * x]) : w.zero.data;
    const auto* b = 2 * x + 1 < n ? reinterpret_cast<const uint16_t*>(w.keys[2 * x + 1]) : nullptr;
    pack_v_pair(a, b, L, L, w.vpack.data + static_cast<size_t>(x) * L);
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

// An item, chunk after chunk of kChunk keys: chunk_fn(run, sp, it, nvr, n, w) runs one chunk of
// n keys (w.keys; rs.enter_chunk done) from its products to O. The paths differ only there.
template <class ChunkFn>
MLAKIT_BF16_TARGET void item_loop(const Run& run, const LatentItem& it, Scratch& w, ChunkFn chunk_fn) {
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
      chunk_fn(run, sp, it, nvr, n, w);
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
      chunk_fn(run, sp, it, nvr, n, w);
      advance(w.n_next);
    }
  }
  const float scale = run.h->sm_scale;
  for (int r = 0; r < rows; ++r)
    finish_row(run, it, r, o + static_cast<size_t>(r) * L, rs.m[r], rs.l[r], w.rmax[r] * scale);
}

}  // namespace
}  // namespace latent_cpu
}  // namespace cpu
}  // namespace mlakit

#endif  // MLAKIT_CPU_HAVE_AVX512BF16_PATH
