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

#include "cpu/avx512bf16_parts.h"
#include "cpu/avx512bf16_products.h"
#include "cpu/half_convert.h"
#include "cpu/latent_bf16_item.h"
#include "cpu/latent_item.h"

namespace mlakit {
namespace cpu {
namespace latent_cpu {

#ifdef MLAKIT_CPU_HAVE_AVX512BF16_PATH
namespace {

using namespace bf16_parts;

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
  pack_v_pairs(L, n, px0, px1, w);
  const uint32_t* vpack = w.vpack.data;

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

}  // namespace

void item_avx512bf16(const Run& run, const LatentItem& it) {
  thread_local Scratch scratch;
  item_loop(run, it, scratch, chunk);
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
