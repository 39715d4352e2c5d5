// The amx path of latent attention on the CPU: both products on AMX tiles (TDPBF16PS: a 16 x 16
// fp32 tile += 16 x 32 bf16 times 32 x 16 bf16), the online softmax on AVX-512
// (avx512bf16_parts.h), the item's loop and scratch shared with the AVX-512 BF16 path
// (latent_bf16_item.h: q packing, chunks of keys through the pages or the sparse entries, fp8
// rows decoded).
//
// Per chunk of up to 64 keys, for each row vector of the item (16 rows of (token, head)):
//   S^T = K Q^T   C tiles [16 keys][16 rows], stored into S^T [key][row], the softmax's layout.
//                 A = 16 key rows, 32 dims a k-step, read in place when the group's 16 rows lie
//                 at one stride (pages of 16 keys or more, fp8 rows decoded into the scratch),
//                 else copied into a group buffer (pages under 16 keys, sparse entries, the
//                 chunk's last partial group, with zero rows past its end); B = q as packed for
//                 the AVX path, [dim pair][row] words: a B tile as it stands.
//   softmax       the shared one: P^T as bf16 key pairs [key pair][row].
//   O += P V      C tiles [16 rows][16 dims] of O (fp32 [row][L], loaded and stored around the
//                 chunk's one or two k-steps); A = P row-major: the vector's 16 x 16 pair words
//                 of P^T transposed once a chunk (1 KB a k-step); B = V interleaved into key pairs
//                 [pair][dim], the AVX path's packing, over whole k-steps (zero past the chunk's
//                 keys). Rows whose running max moved are rescaled in O first (vector code).
// Why O = P V rather than the prefill's O^T = V^T P^T: here a chunk's V (64 keys x 512 dims) is
// read by one item only, so transposing V per chunk would cost far more than transposing P.
// Blocks of four C tiles (tmm0..3: four key groups, or four column blocks of O), A in tmm4 and
// tmm5, B in tmm6 and tmm7. LDTILECFG once per item, TILERELEASE at its end. Everything depends
// only on the item, so results are bitwise repeatable and do not depend on the batch.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu/amx_tiles.h"
#include "cpu/avx512bf16_parts.h"
#include "cpu/latent_bf16_item.h"
#include "cpu/latent_item.h"

namespace mlakit {
namespace cpu {
namespace latent_cpu {

#ifdef MLAKIT_CPU_HAVE_AVX512BF16_PATH
namespace {

using namespace bf16_parts;
using amx::tile_dp;
using amx::tile_load;
using amx::tile_store;
using amx::tile_zero;

constexpr int kGroups = kChunk / 16;  // key groups of 16 a chunk

// Where a key group's 16 rows are: base and byte stride for TILELOADD.
struct KeyGroup {
  const char* base;
  int64_t stride;
};

// The chunk's key groups (n keys in w.keys): in place where all 16 rows are there at one positive
// stride, else copied into w.kgroup (rows past n zero).
KeyGroup key_group(const Run& run, int g, int n, Scratch& w) {
  const int j0 = 16 * g;
  const auto* first = reinterpret_cast<const char*>(w.keys[j0]);
  if (j0 + 15 < n) {
    const int64_t stride = reinterpret_cast<const char*>(w.keys[j0 + 1]) - first;
    bool uniform = stride > 0;
    for (int i = 2; uniform && i < 16; ++i) uniform = reinterpret_cast<const char*>(w.keys[j0 + i]) == first + i * stride;
    if (uniform) return {first, stride};
  }
  const int D = run.D;
  uint16_t* dst = w.kgroup.data + static_cast<size_t>(g) * 16 * D;
  for (int i = 0; i < 16; ++i) {
    if (j0 + i < n) std::memcpy(dst + i * D, w.keys[j0 + i], sizeof(uint16_t) * D);
    else std::memset(dst + i * D, 0, sizeof(uint16_t) * D);
  }
  return {reinterpret_cast<const char*>(dst), static_cast<int64_t>(sizeof(uint16_t)) * D};
}

// The S^T tile of group G's keys for the row vector whose q pairs start at qv (B tile in tmm6)
// at k-step x; A alternates between tmm4 and tmm5 so a group's load overlaps the last product.
template <int G>
MLAKIT_TILE_OP void qk_step(const KeyGroup* kg, int x) {
  constexpr int A = 4 + (G & 1);
  tile_load<A>(kg[G].base + 64 * x, kg[G].stride);
  tile_dp<G, A, 6>();
}

// S^T for row vector v over groups [0, NG): C tiles tmm0..NG-1, stored at st's keys 16g.
template <int NG>
void qk_tiles(const KeyGroup* kg, const uint32_t* qv, int q_stride_bytes, int ksteps, float* st) {
  if constexpr (NG > 0) tile_zero<0>();
  if constexpr (NG > 1) tile_zero<1>();
  if constexpr (NG > 2) tile_zero<2>();
  if constexpr (NG > 3) tile_zero<3>();
  for (int x = 0; x < ksteps; ++x) {
    // 16 dim pairs x 16 rows of q: pair rows q_stride_bytes apart.
    tile_load<6>(reinterpret_cast<const char*>(qv) + static_cast<int64_t>(16) * x * q_stride_bytes, q_stride_bytes);
    if constexpr (NG > 0) qk_step<0>(kg, x);
    if constexpr (NG > 1) qk_step<1>(kg, x);
    if constexpr (NG > 2) qk_step<2>(kg, x);
    if constexpr (NG > 3) qk_step<3>(kg, x);
  }
  constexpr int64_t kStRow = sizeof(float) * kRows;
  if constexpr (NG > 0) tile_store<0>(st + 0 * 16 * kRows, kStRow);
  if constexpr (NG > 1) tile_store<1>(st + 1 * 16 * kRows, kStRow);
  if constexpr (NG > 2) tile_store<2>(st + 2 * 16 * kRows, kStRow);
  if constexpr (NG > 3) tile_store<3>(st + 3 * 16 * kRows, kStRow);
}

// nb (<= 4) column blocks of O at o (row stride o_bytes) into C tiles tmm0.. (load) or back.
MLAKIT_TILE_OP void pv_load_or_store(bool load, float* o, int64_t o_bytes, int nb) {
  if (load) {
    if (nb > 0) tile_load<0>(o, o_bytes);
    if (nb > 1) tile_load<1>(o + 16, o_bytes);
    if (nb > 2) tile_load<2>(o + 32, o_bytes);
    if (nb > 3) tile_load<3>(o + 48, o_bytes);
  } else {
    if (nb > 0) tile_store<0>(o, o_bytes);
    if (nb > 1) tile_store<1>(o + 16, o_bytes);
    if (nb > 2) tile_store<2>(o + 32, o_bytes);
    if (nb > 3) tile_store<3>(o + 48, o_bytes);
  }
}

template <int C, int B>
MLAKIT_TILE_OP void pv_step(const uint32_t* v, int64_t v_bytes, int A_is_5) {
  tile_load<B>(v, v_bytes);
  if (A_is_5) tile_dp<C, 5, B>();
  else tile_dp<C, 4, B>();
}

// O (16 rows x L at o) += P (A tiles: k-step s at prow + 256 s words) times V's pairs (B tiles:
// vpack rows of L words), four column blocks of 16 at a time.
void pv_tiles(const uint32_t* prow, const uint32_t* vpack, int L, int ksteps, float* o) {
  const int64_t o_bytes = static_cast<int64_t>(sizeof(float)) * L, v_bytes = static_cast<int64_t>(sizeof(uint32_t)) * L;
  tile_load<4>(prow, 64);
  if (ksteps > 1) tile_load<5>(prow + 256, 64);
  for (int c = 0; c < L / 16; c += 4) {
    const int nb = std::min(4, L / 16 - c);
    pv_load_or_store(true, o + 16 * c, o_bytes, nb);
    for (int s = 0; s < ksteps; ++s) {
      const uint32_t* v = vpack + static_cast<size_t>(16 * s) * L + 16 * c;
      if (nb > 0) pv_step<0, 6>(v, v_bytes, s);
      if (nb > 1) pv_step<1, 7>(v + 16, v_bytes, s);
      if (nb > 2) pv_step<2, 6>(v + 32, v_bytes, s);
      if (nb > 3) pv_step<3, 7>(v + 48, v_bytes, s);
    }
    pv_load_or_store(false, o + 16 * c, o_bytes, nb);
  }
}

// P^T's words of row vector v ([pair][kRows], pairs [0, nq) written) as P row-major A tiles:
// prow[s][r][i] = pair 16 s + i of row 16 v + r, zero past nq.
MLAKIT_BF16_TARGET void transpose_p(const uint32_t* ppair, int v, int nq, int ksteps, uint32_t* prow) {
  for (int s = 0; s < ksteps; ++s) {
    __m512i b[16];
    for (int i = 0; i < 16; ++i) {
      const int x = 16 * s + i;
      b[i] = x < nq ? _mm512_load_si512(ppair + x * kRows + 16 * v) : _mm512_setzero_si512();
    }
    transpose16(b);
    for (int r = 0; r < 16; ++r) _mm512_store_si512(prow + 256 * s + 16 * r, b[r]);
  }
}

// O's rows of vector v times their alpha (the rows whose max moved; the others' alpha is 1).
MLAKIT_BF16_TARGET void rescale_rows(float* o, int L, const float* alpha) {
  for (int r = 0; r < 16; ++r) {
    const __m512 a = _mm512_set1_ps(alpha[r]);
    float* row = o + static_cast<size_t>(r) * L;
    for (int d = 0; d < L; d += 16) _mm512_store_ps(row + d, _mm512_mul_ps(_mm512_load_ps(row + d), a));
  }
}

// One chunk of n keys (w.keys; rs.enter_chunk done): S^T, softmax, V's pairs, O += P V.
MLAKIT_BF16_TARGET void chunk_amx(const Run& run, const Problem& sp, const LatentItem& /*it*/, int nvr, int n,
                                  Scratch& w) {
  RowState& rs = w.rs;
  const int L = run.L, D = run.D, nq = (n + 1) / 2;
  prefetch_rows(w.next, 0, w.n_next, run.row_bytes);
  const int groups = (n + 15) / 16;
  KeyGroup kg[kGroups];
  for (int g = 0; g < groups; ++g) kg[g] = key_group(run, g, n, w);
  float* st = w.st.data;
  const int q_stride_bytes = static_cast<int>(sizeof(uint32_t)) * 16 * nvr;
  for (int v = 0; v < nvr; ++v) {
    if (rs.vhi[v] <= rs.vlo[v]) continue;  // no row of these 16 sees a key here: S^T unread
    const uint32_t* qv = w.qpack.data + 16 * v;
    float* sv = st + 16 * v;
    switch (groups) {
      case 1: qk_tiles<1>(kg, qv, q_stride_bytes, D / 32, sv); break;
      case 2: qk_tiles<2>(kg, qv, q_stride_bytes, D / 32, sv); break;
      case 3: qk_tiles<3>(kg, qv, q_stride_bytes, D / 32, sv); break;
      default: qk_tiles<4>(kg, qv, q_stride_bytes, D / 32, sv); break;
    }
  }
  if (wants_max(run)) track_max(st, n, nvr, rs, w.rmax);
  softmax_chunk(sp, 1.0f, n, nvr, st, w.ppair.data, rs);

  // V over whole k-steps of 16 pairs: keys past n are zero rows (P is zero there too, but a
  // stale V could hold a NaN, and 0 x NaN is NaN).
  const int ksteps = (nq + 15) / 16;
  pack_v_pairs(L, n, 0, 16 * ksteps, w);
  const uint32_t* vpack = w.vpack.data;
  for (int v = 0; v < nvr; ++v) {
    if (rs.vhi[v] <= rs.vlo[v]) continue;  // P = 0 and alpha = 1: O unchanged
    float* ov = w.o.data + static_cast<size_t>(16 * v) * L;
    if (rs.rescale[v]) rescale_rows(ov, L, rs.alpha + 16 * v);
    uint32_t* prow = w.prow.data;
    transpose_p(w.ppair.data, v, nq, ksteps, prow);
    pv_tiles(prow, vpack, L, ksteps, ov);
  }
}

}  // namespace

void item_amx(const Run& run, const LatentItem& it) {
  thread_local Scratch scratch;
  scratch.kgroup.ensure(static_cast<size_t>(kGroups) * 16 * run.D);
  scratch.prow.ensure(static_cast<size_t>(2) * 256);
  amx::tile_config();
  item_loop(run, it, scratch, chunk_amx);
  amx::tile_release();
}

#else  // no x86-64 GCC/Clang: the path is never available (cpu_isa.h); this only links.

void item_amx(const Run& run, const LatentItem& it) { item_fp32<DType::kBF16>(run, it); }

#endif

}  // namespace latent_cpu
}  // namespace cpu
}  // namespace mlakit
