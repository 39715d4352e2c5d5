// The Hopper kernel of latent attention (mlakit/latent.h, docs/latent-attention.md): persistent
// CTAs pull the plan's work items (contract/latent_layout.h) and run each as a 64-row block of
// (token, head) rows against 64-key tiles of the shared latent rows (576 wide: K = the whole row,
// V = its first 512 columns). Over 16-bit caches, and over FP8 ones whose rows it decodes to bf16
// in its key stages (load_part, decode_part).
//
// Two warpgroups share one output: O (64 x 512 fp32, half the register file) is split by
// columns, warpgroup 0 holding O_L (columns 0-255) and warpgroup 1 O_R (256-511). The tiles go in
// pairs, and each warpgroup computes S for one tile of a pair (m64n64k16 over the 576 columns):
// warpgroup 0 tile 2i (stage 0), warpgroup 1 tile 2i + 1 (stage 1). So the softmax of one
// warpgroup runs while the other's products keep the tensor cores busy ("seesaw", FlashMLA's
// schedule for one output matrix):
//   WG0: S0 = Q K0; m0 = max(m, rowmax S0); P0 = exp(S0 - m0); publish m0, P0 -> O_L = O_L e^(m-m0)
//        + P0 V0_L; wait for m1, P1 -> O_L = O_L e^(m0-m1) + P1 V1_L.
//   WG1: S1 = Q K1; wait for m0, P0; m1 = max(m0, rowmax S1); P1 = exp(S1 - m1); publish m1, P1
//        -> O_R = O_R e^(m-m0) + P0 V0_R -> O_R = O_R e^(m0-m1) + P1 V1_R.
// Warpgroup 1's softmax comes before its P0 V0_R so that P1, which warpgroup 0 waits for after
// its P0 V0_L, is published as early as it can be.
// Each warpgroup's P crosses to the other through its stage's rope atom, which S has finished
// reading by then, as a swizzled 64 x 64 tile that the other's wgmma reads as its A operand from
// shared memory (no registers held for it). Each warpgroup keeps the sum of its own tiles' P at
// the pair's max; the two meet at the end of the item.
//
// Keys come by cp.async, 16 bytes a thread, from the paged cache through the block table (any
// page size) or through a sparse item's index row; keys that name nothing are zero-filled
// (src-size 0, never stale data: P is 0 there, but 0 x NaN is not) and masked. Whole tiles of
// dense items over caches in blocks of 64 rows or more come as TMA boxes instead (KeyTma). A stage is
// refilled in two parts, each by the warpgroup that reads it last, as soon as it has: warpgroup
// 0 loads value columns 0-255 (atoms 0-3) of both stages and the rope atom of stage 1, warpgroup
// 1 atoms 4-7 of both and the rope atom of stage 0 (where P0 was). Each part's copies complete an
// mbarrier (cp.async.mbarrier.arrive.noinc: no thread waits for its own copies); a warpgroup
// waits for a part before its first product that reads it, and computes S over its own part
// first, the part that was refilled earliest. A sparse item's next lookups start (KeyReads: the
// index entries) once the first half of S is on the tensor cores; a dense item's (the pages,
// which stay cached) a little before each refill.
// FP8 rows: a part's copies bring codes, and the warpgroup that copied them decodes them in place
// while one of its own products runs, then completes the part's barrier: warpgroup 0 decodes its
// stage 0 part under P1 V1_L and its stage 1 part under the next pair's first half of S0;
// warpgroup 1 its stage 0 part under P1 V1_R and its stage 1 part under the first half of S1,
// which over FP8 rows starts on warpgroup 0's part (decoded by then) instead of its own.
#pragma once

#include <algorithm>
#include <atomic>
#include <type_traits>

#include "contract/kv_cache_format.h"
#include "cuda/common/fp8_rows.cuh"
#include "cuda/common/online_softmax.cuh"
#include "cuda/sm90/latent_common_sm90.cuh"
#include "cuda/sm90/latent_trace_sm90.cuh"
#include "cuda/sm90/ptx_sm90.cuh"
#include "cuda/sm90/smem_desc.h"
#include "cuda/sm90/tma_map.h"
#include "cuda/sm90/wgmma_small_n_sm90.cuh"

namespace mlakit {
namespace cuda {
namespace sm90 {
namespace latent_sm90 {

// Shared memory, from a 1024-byte aligned base (the swizzle's atoms).
constexpr int kOffQ = 0;
constexpr int kOffK = kOffQ + kTileBytes;          // stage s at kOffK + s * kTileBytes
constexpr int kOffRowX = kOffK + 2 * kTileBytes;   // float [2 warpgroups][2][64 rows]: store_rows'
constexpr int kOffMax = kOffRowX + 4 * kRows * 4;  // float [2][64]: m0 (warpgroup 0), m1 (warpgroup 1)
constexpr int kOffKeyOk = kOffMax + 2 * kRows * 4; // int [2 stages][64]
constexpr int kOffBar = kOffKeyOk + 2 * kKeys * 4; // uint64 [12]: mbarriers (kBar*)
constexpr int kSmemUsed = kOffBar + 12 * 8;
constexpr int kSmemBytes = kSmemUsed + 1024;  // room to align the base
static_assert(kSmemBytes <= 232448, "one CTA per SM");
constexpr int kOffP = (kAtoms - 1) * kAtomBytes;  // in a stage: the rope atom, where its P goes after S

// The mbarriers, each completed by the 128 threads of one warpgroup (an arrive releases, the wait
// acquires): stage s's part p has landed (2 s + p; by the copies, cp.async noinc); P0 with m0 and
// P1 with m1 are published; warpgroup 1 / 0 has read its stage's key_ok
// (before it writes the next tile's). Every handoff, within a warpgroup too, is one of these
// rather than a named barrier: compute-sanitizer's racecheck follows mbarriers, not bar.arrive ->
// bar.sync pairs nor barriers of part of the block.
constexpr int kBarP0 = 4, kBarP1 = 5, kBarKeysRead1 = 6, kBarKeysRead0 = 7;
// Paired CTAs (below): kBarFree + 2 s + p, the other CTA's warpgroup p has finished reading its
// stage s part p (one arrival a warp), so this CTA may write its rows there.
constexpr int kBarFree = 8;

// Paired CTAs (kPair: a cluster of two running the two head blocks of one token's keys,
// latent::paired_items; FP8 rows only): each CTA copies and decodes half of every part's key
// rows, its value rows i = 2 rank, 2 rank + 1 of its four (rows 32 rank .. 32 rank + 31), and
// writes the bf16 pieces into both CTAs' stages (st.async into the other's, completing bytes on
// its part barrier), so each tile is decoded once for 128 heads instead of twice, as FlashMLA's
// FP8 sparse decode shares its dequantization. The rope atom (where P goes) stays each CTA's
// own. Before it writes into the other CTA's part, a warpgroup waits until that CTA's warpgroup
// p, the part's last reader there, has passed the same refill (its kBarFree arrival); an item's
// first tiles wait for a cluster barrier instead. Launched on fp8_ds_mla rows (latent_dispatch):
// vLLM's fp8 rows, cheaper to decode, ran slower paired.
struct PairSide {
  uint32_t rank;   // in the cluster: which half of the key rows this CTA decodes
  uint32_t delta;  // added to a shared address of this CTA: the same byte's in the other CTA
};

// A warpgroup thread's four keys of a tile: j = wtid / 8 + 16 i (8 threads a row: a 128-byte
// line per atom and warp instruction). Their lookups start with a global read (an index entry
// or a page) that is issued most of a pair before its row is needed (KeyReads), so that its
// latency passes under the products instead of stalling the warpgroup.
struct KeyReads {
  int32_t v[4];
};
struct KeyRows {
  const unsigned char* src[4];
};

__device__ __forceinline__ KeyReads key_reads(const KeySource& ks, int64_t k0, int wtid) {
  KeyReads r;
#pragma unroll
  for (int i = 0; i < 4; ++i) r.v[i] = ks.first_read(k0 + (wtid >> 3) + 16 * i);
  return r;
}
__device__ __forceinline__ KeyRows key_rows(const KeySource& ks, const KeyReads& reads, int64_t k0, int wtid) {
  KeyRows r;
#pragma unroll
  for (int i = 0; i < 4; ++i) r.src[i] = ks.row_from(k0 + (wtid >> 3) + 16 * i, reads.v[i]);
  return r;
}

// Whole tiles of a dense item, when the launch has the cache's tensor map (16-bit rows in blocks
// of 64 or more, laid end to end; a tile starts at a multiple of 64, as splits do, so its rows lie
// in one block): a stage part is then four or five TMA boxes, one a warp, instead of 16-20
// cp.async a thread and their addresses. Partial tiles keep cp.async: their missing keys must be
// zeros, not the block's other rows (P is 0 there, but 0 x NaN is not).
struct KeyTma {
  const CUtensorMap* map;  // the kernel's parameters (read in place: no registers held)
  const int& on;           // 0: every tile by cp.async
  __device__ __forceinline__ bool covers(const KeySource& ks, int64_t k0) const {
    return on != 0 && !ks.sparse && k0 + kKeys <= ks.key_end;
  }
};

// Piece `chunk` of key row j of a stage: 16 bytes of a 16-bit row, or the 8 codes that become it.
template <int kCache>
__device__ __forceinline__ void copy_piece(uint32_t stage, int j, int chunk, const unsigned char* src, bool ok) {
  if constexpr (kCache == 0)
    cp_async_16(stage + swz(j, chunk), src + chunk * 16, ok);
  else
    cp_async_8(stage + swz(j, chunk), src + chunk * 8, ok);
}

// FP8 rows (kCache 1: fp8_ds_mla, 512 codes, four float32 scales, 64 bf16 rope values; 2: vLLM's
// fp8, 576 codes and the layer's one scale; contract/kv_cache_format.h) become the same bf16
// stage as 16-bit rows, in place: each thread copies the 8 codes of each of its 16-byte bf16
// pieces into the first half of that piece (and fp8_ds_mla's two scales of its columns into the
// second half of its first piece), then, once its own copies have landed, reads them back,
// decodes (code x scale in float32, rounded to bf16: fp8_rows.cuh, as the MLA step's gather and
// the CPU paths) and writes the piece. No thread reads what another wrote, so a thread's own
// cp.async.wait_group orders it; the part's mbarrier then publishes the decoded part. A
// warpgroup decodes a part while one of the tensor cores' products runs (the schedule below).
//
// The decode of a part that load_part brought (`rope` as there), then its arrival on `bar`.
// `layer_scale`: fp8's scale of every code. Keys that name nothing were zero-filled: codes and
// scales 0, decoded to 0.
//
// Paired CTAs (kPair): this CTA's rows (PairSide), each piece also written into the other CTA's
// stage once `free_bar` (phase `free_parity`; `wait_free` false for an item's first tiles, after
// a cluster barrier) says that its part is free; the arrival on `bar` then also expects the 128
// bytes that the other CTA's thread of the same place writes here.
template <int kCache, bool kPair = false>
__device__ __forceinline__ void decode_part(uint32_t stage, int wg, bool rope, uint32_t bar, float layer_scale,
                                            int wtid, const PairSide& pair = {}, uint32_t free_bar = 0,
                                            uint32_t free_parity = 0, bool wait_free = false) {
  const int part = wtid & 7;
  cp_async_wait<0>();
  if (kPair && wait_free) mbar_wait(free_bar, free_parity);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int j = (wtid >> 3) + 16 * i;
    if (kPair && (i >> 1) != static_cast<int>(pair.rank)) {
      if (kCache == 2 && rope) {
        const uint32_t ra = stage + swz(j, (kAtoms - 1) * 8 + part);
        const uint2 rc = ld_shared_v2(ra);
        st_shared_v4(ra, fp8::decode8<__nv_bfloat16>(rc.x, rc.y, layer_scale));
      }
      continue;
    }
    uint32_t at[4];
    uint2 c[4];
    float sc[2] = {layer_scale, layer_scale};
#pragma unroll
    for (int atom = 0; atom < 4; ++atom) at[atom] = stage + swz(j, (4 * wg + atom) * 8 + part);
    if constexpr (kCache == 1) {
      const uint4 first = ld_shared_v4(at[0]);
      c[0] = make_uint2(first.x, first.y);
      sc[0] = __uint_as_float(first.z);
      sc[1] = __uint_as_float(first.w);
    } else {
      c[0] = ld_shared_v2(at[0]);
    }
#pragma unroll
    for (int atom = 1; atom < 4; ++atom) c[atom] = ld_shared_v2(at[atom]);
#pragma unroll
    for (int atom = 0; atom < 4; ++atom) {
      const uint4 v = fp8::decode8<__nv_bfloat16>(c[atom].x, c[atom].y, sc[atom >> 1]);
      st_shared_v4(at[atom], v);
      if constexpr (kPair) st_async_v4(at[atom] + pair.delta, v, bar + pair.delta);
    }
    if (kCache == 2 && rope) {
      const uint32_t ra = stage + swz(j, (kAtoms - 1) * 8 + part);
      const uint2 rc = ld_shared_v2(ra);
      st_shared_v4(ra, fp8::decode8<__nv_bfloat16>(rc.x, rc.y, layer_scale));
    }
  }
  fence_proxy_async_smem();  // generic-proxy writes, read by wgmma (async proxy)
  if constexpr (kPair)
    mbar_arrive_expect_tx(bar, 2 * 4 * 16);  // the other CTA's two rows of four pieces
  else
    mbar_arrive(bar);
}

// Paired CTAs: this warpgroup has finished reading its stage's part (a refill's point), which
// the other CTA's warpgroup of the same index may now write (kBarFree of that CTA).
__device__ __forceinline__ void part_free(uint32_t free_bar, const PairSide& pair, int lane) {
  if (lane == 0) mbar_arrive_remote(free_bar + pair.delta);
}

// Warpgroup `wg`'s part of the stage of the tile at key `k0`: atoms 4 wg .. 4 wg + 3 and, when
// `rope`, atom 8. `reads` are this thread's lookups of the tile (key_reads); `key_ok` (the
// stage's, or null) marks which keys name a row. 16-bit rows (kCache 0): `bar` completes when the
// copies have landed (128 arrivals: the copies' or the threads', plus the boxes' bytes). FP8 rows:
// the copies bring codes (above) as one commit group, and decode_part completes `bar` later.
// Paired CTAs (kPair): value pieces of this CTA's rows only (PairSide), the rope atom and key_ok
// of all of them.
template <int kCache, bool kPair = false>
__device__ __forceinline__ void load_part(const KeySource& ks, const KeyReads& reads, int64_t k0, const KeyTma& tma,
                                          uint32_t stage, int wg, bool rope, int* key_ok, uint32_t bar, int wtid,
                                          const PairSide& pair = {}) {
  const int part = wtid & 7;
  if (kCache == 0 && tma.covers(ks, k0)) {
    // Every key names a row. Written before this thread's arrival, which publishes it.
    if (key_ok != nullptr && part == 0)
#pragma unroll
      for (int i = 0; i < 4; ++i) key_ok[(wtid >> 3) + 16 * i] = 1;
    if ((wtid & 31) == 0) {
      // Lane 0 of warp w sends atom 4 wg + w (warp 0 also the rope atom 8) and arrives expecting
      // its own boxes' bytes: the four warps issue at once, where one thread sending every box
      // in turn held the refill up (the trace: 850 cycles from a pair's last P V to the next top).
      // Lane 0's first key, k0 + 4 w, lies in the tile's block: reads.v[0] is that block. In int:
      // the host maps the cache only when its slot numbers fit. Evict-first in L2, as FlashMLA
      // loads its pages: 1-2% faster at decode (docs/performance.md).
      const int w = wtid >> 5;
      const int row = (reads.v[0] << ks.block_shift) | (static_cast<int>(k0) & ((1 << ks.block_shift) - 1));
      const bool with_rope = rope && w == 0;
      mbar_arrive_expect_tx(bar, (with_rope ? 2 : 1) * kAtomBytes);
      const uint64_t policy = l2_evict_first_policy();
      tma_load_2d_policy(stage + (4 * wg + w) * kAtomBytes, tma.map, bar, (4 * wg + w) * 64, row, policy);
      if (with_rope)
        tma_load_2d_policy(stage + (kAtoms - 1) * kAtomBytes, tma.map, bar, (kAtoms - 1) * 64, row, policy);
    } else {
      mbar_arrive(bar);
    }
    return;
  }
  const KeyRows rows = key_rows(ks, reads, k0, wtid);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int j = (wtid >> 3) + 16 * i;
    const bool ok = rows.src[i] != nullptr;
    const unsigned char* src = ok ? rows.src[i] : static_cast<const unsigned char*>(ks.a->cache);
    if (!kPair || (i >> 1) == static_cast<int>(pair.rank)) {
#pragma unroll
      for (int atom = 0; atom < 4; ++atom) copy_piece<kCache>(stage, j, (4 * wg + atom) * 8 + part, src, ok);
      if constexpr (kCache == 1) cp_async_8(stage + swz(j, 4 * wg * 8 + part) + 8, src + mla::kDsMlaScalesOffset + 8 * wg, ok);
    }
    if constexpr (kCache == 1) {
      if (rope) cp_async_16(stage + swz(j, (kAtoms - 1) * 8 + part), src + mla::kDsMlaRopeOffset + part * 16, ok);
    } else if (rope) {
      copy_piece<kCache>(stage, j, (kAtoms - 1) * 8 + part, src, ok);
    }
    if (key_ok != nullptr && part == 0) key_ok[j] = ok ? 1 : 0;
  }
  if constexpr (kCache == 0)
    cp_async_mbar_arrive_noinc(bar);
  else
    cp_async_commit();
}

// Waits for a stage part (mbarrier phase `parity`) and makes it visible to wgmma reads: a part
// that came by TMA (`by_tma`: KeyTma::covers of its tile) was written through the async proxy,
// which wgmma reads too, so the barrier is enough; cp.async writes through the generic proxy.
__device__ __forceinline__ void part_landed(uint32_t bar, uint32_t parity, bool by_tma) {
  mbar_wait(bar, parity);
  if (!by_tma) fence_proxy_async_smem();
}

// S (+)= Q K^T over atoms [a0, a1) of a stage (k-steps 4 a0 .. 4 a1 - 1); the first k-step of
// the tile overwrites.
template <typename T>
__device__ __forceinline__ void qk_atoms(float (&s)[32], uint32_t sq, uint32_t sk, int a0, int a1, bool first) {
  const uint64_t da0 = smem_desc_sw128(sq, 16, 1024);
  const uint64_t db0 = smem_desc_sw128(sk, 16, 1024);
#pragma unroll
  for (int kk = 4 * a0; kk < 4 * a1; ++kk) {
    const uint32_t off = (kk >> 2) * kAtomBytes + (kk & 3) * 32;
    wgmma_m64n64k16_ss<T>(s, smem_desc_advance(da0, off), smem_desc_advance(db0, off), first && kk == 4 * a0 ? 0 : 1);
  }
}

// O (this warpgroup's 256 columns) += P V over a stage's 64 keys; P as A fragments.
// One m64n256 product a k-step: the 256 columns are four atoms kAtomBytes apart (the
// descriptor's leading offset).
template <typename T>
__device__ __forceinline__ void pv(float (&o)[2][64], const uint32_t (&pf)[4][4], uint32_t sk, int wg) {
  const uint64_t dv0 = smem_desc_sw128(sk + wg * 4 * kAtomBytes, kAtomBytes, 1024);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma_m64n256k16_rs_mnb<T>(o[0], o[1], pf[kk], smem_desc_advance(dv0, kk * 16 * 128), 1);
}

// The same with P from shared memory (a swizzled 64 x 64 tile at `sp`: put_p).
template <typename T>
__device__ __forceinline__ void pv_ss(float (&o)[2][64], uint32_t sp, uint32_t sk, int wg) {
  const uint64_t dp0 = smem_desc_sw128(sp, 16, 1024);
  const uint64_t dv0 = smem_desc_sw128(sk + wg * 4 * kAtomBytes, kAtomBytes, 1024);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    wgmma_m64n256k16_ss_mnb<T>(o[0], o[1], smem_desc_advance(dp0, kk * 32), smem_desc_advance(dv0, kk * 16 * 128), 1);
}

// Masks a tile's scores (keys that name no row, keys past a row's visible end) and returns the
// maxima of this thread's two rows over the tile. A dense tile that ends inside both rows'
// visible keys needs no mask: a dense key below a row's end names a row (key_ok is 1 up to the
// item's key_end, the largest row end), so only the maxima are taken.
__device__ __forceinline__ void mask_rows(float (&s)[32], const int* key_ok, int k0, const int (&row_hi)[2],
                                          int quad, float (&mx)[2], bool dense) {
  mx[0] = mx[1] = -INFINITY;
  if (dense && k0 + kKeys <= min(row_hi[0], row_hi[1])) {
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) mx[e >> 1] = fmaxf(mx[e >> 1], s[4 * n + e]);
  } else {
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = 8 * n + 2 * quad + (e & 1);
        const bool vis = key_ok[j] != 0 && k0 + j < row_hi[e >> 1];
        const float x = vis ? s[4 * n + e] : -INFINITY;
        s[4 * n + e] = x;
        mx[e >> 1] = fmaxf(mx[e >> 1], x);
      }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
  }
}

// The slack softmax (the prefill kernel's: slack_max, online_softmax.cuh): a row's reference max
// m (raw score units) moves to a tile's max only when that passes it by more than kSlackLog2
// after scaling (`slack` = kSlackLog2 / scale in raw units), so P stays below 2^8 (16-bit P holds
// that as exactly as values below 1), and on most tiles after a row's first every factor is 1 and
// the rescales are skipped (scale_o_if_needed). O, the row sums and m stay one consistent triple.
constexpr float kSlackLog2 = 8.f;

// The exponent offset of max m (raw score units): m x scale_log2, or 0 while no key was seen.
__device__ __forceinline__ float max_offset(float m, float scale_log2) { return m == -INFINITY ? 0.f : m * scale_log2; }

// P = exp2(S x scale_log2 - off) per row as A fragments; adds this thread's share of the row sums.
template <typename T>
__device__ __forceinline__ void exp_rows(const float (&s)[32], float scale_log2, const float (&off)[2],
                                         uint32_t (&pf)[4][4], float (&sum)[2]) {
  sum[0] = sum[1] = 0.f;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int e = 8 * kk + 2 * r;  // fragment r of k-step kk: row r & 1, keys 16 kk + 8 (r >> 1) ..
      const float p0 = fast_exp2(fmaf(s[e], scale_log2, -off[r & 1]));
      const float p1 = fast_exp2(fmaf(s[e + 1], scale_log2, -off[r & 1]));
      sum[r & 1] += p0 + p1;
      pf[kk][r] = pack2<T>(p0, p1);
    }
}

// O's accumulators stay where a wgmma left them or where the next one takes them (the compiler
// must not move their reads or writes across an asynchronous product).
__device__ __forceinline__ void fence_o(float (&o)[2][64]) {
  fence_regs(o[0]);
  fence_regs(o[1]);
}

// O's rows x f; the products stay ahead of the next wgmma (fence_o): moved between its
// instructions they would make ptxas serialize every wgmma of the kernel.
__device__ __forceinline__ void scale_o(float (&o)[2][64], const float (&f)[2]) {
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      o[j][4 * n + 0] *= f[0];
      o[j][4 * n + 1] *= f[0];
      o[j][4 * n + 2] *= f[1];
      o[j][4 * n + 3] *= f[1];
    }
  fence_o(o);
}

// scale_o unless every factor of the warp's rows is 1 (a warp-uniform branch; the slack softmax
// makes that the usual tile).
__device__ __forceinline__ void scale_o_if_needed(float (&o)[2][64], const float (&f)[2]) {
  if (warp_factor_moved(f)) {
    scale_o(o, f);
  } else {
    fence_o(o);
  }
}

// Where fragment r of k-step kk of this thread's P lies in a swizzled 64 x 64 tile: row r0 (+8
// for odd r), keys 16 kk + 8 (r >> 1) + 2 quad and the next, in 16-byte chunk 2 kk + (r >> 1) of
// the row. A warp's 32 stores fall in 32 different banks.
__device__ __forceinline__ uint32_t p_offset(int kk, int r, int r0, int quad) {
  const int row = r0 + 8 * (r & 1);
  return row * 128 + (((2 * kk + (r >> 1)) ^ (r0 & 7)) << 4) + 4 * quad;
}

// This thread's P to the tile at `sp`, made visible to wgmma (async proxy) reads.
__device__ __forceinline__ void put_p(uint32_t sp, const uint32_t (&pf)[4][4], int r0, int quad) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) st_shared_u32(sp + p_offset(kk, r, r0, quad), pf[kk][r]);
  fence_proxy_async_smem();
}

// After a P V has completed: its accumulators and A fragments stay where the wgmma left them
// (the compiler must not move their reads or reuse their registers across the asynchronous product).
__device__ __forceinline__ void fence_frags(float (&o)[2][64], uint32_t (&pf)[4][4]) {
  fence_o(o);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) fence_regs(pf[kk]);
}

// O = O f + P V over stage `sk` (P as this thread's A fragments), issued (rescaled_pv_issue) and
// then waited for (rescaled_pv_done): warpgroup 1 decodes FP8 rows between the two.
template <typename T>
__device__ __forceinline__ void rescaled_pv_issue(float (&o)[2][64], const float (&f)[2], uint32_t (&pf)[4][4],
                                                  uint32_t sk, int wg) {
  scale_o_if_needed(o, f);
  wgmma_fence();
  pv<T>(o, pf, sk, wg);
  wgmma_commit();
}
__device__ __forceinline__ void rescaled_pv_done(float (&o)[2][64], uint32_t (&pf)[4][4]) {
  wgmma_wait<0>();
  fence_frags(o, pf);
}

// kCache: LatentArgs::cache_format (0: rows of T; 1: fp8_ds_mla and 2: fp8, decoded to T = bf16).
// kPair: launched in clusters of two over a paired plan (PairSide).
template <typename T, int kCache, bool kPair = false>
__global__ void __launch_bounds__(kThreads, 1)
    latent_kernel(const LatentArgs args, const __grid_constant__ CUtensorMap cache_map, const int cache_tma) {
  static_assert(kCache == 0 || std::is_same<T, __nv_bfloat16>::value, "FP8 rows decode to bf16");
  static_assert(!kPair || kCache != 0, "paired CTAs share the decode of FP8 rows");
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // The 1024-byte aligned base, reached by an offset from the shared array so the compiler keeps
  // its accesses in the shared space.
  unsigned char* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  const uint32_t sbase = smem_addr(smem);
  const uint32_t sq = sbase + kOffQ;
  const uint32_t st0 = sbase + kOffK, st1 = st0 + kTileBytes;  // the stages
  const uint32_t sp0 = st0 + kOffP, sp1 = st1 + kOffP;        // P0, P1: in their stages' rope atoms
  float* row_x = reinterpret_cast<float*>(smem + kOffRowX);
  float* max_x = reinterpret_cast<float*>(smem + kOffMax);
  int* key_ok = reinterpret_cast<int*>(smem + kOffKeyOk);
  auto mbar = [&](int i) { return sbase + kOffBar + i * 8; };
  auto bar = [&](int stage, int part) { return mbar(2 * stage + part); };  // stage s, part p has landed

  const int tid = threadIdx.x;
  // 0: S of even tiles, O_L; 1: S of odd tiles, O_R. Broadcast from lane 0 so ptxas knows it is
  // the same in a warp: wgmma under a branch it thinks divergent gets serialized.
  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
  const int wtid = tid & 127;
  const int lane = tid & 31;
  const int quad = lane & 3;
  const int r0 = 16 * (wtid >> 5) + (lane >> 2);  // this thread's rows r0 and r0 + 8

  if (tid == 0) {
    for (int i = 0; i < 8; ++i) mbar_init(mbar(i), 128);
    if constexpr (kPair)
      for (int i = kBarFree; i < kBarFree + 4; ++i) mbar_init(mbar(i), 4);
    fence_barrier_init();
  }
  // Paired: the other CTA's barriers are initialized before anything arrives on them.
  PairSide pair{};
  if constexpr (kPair) {
    pair.rank = cluster_ctarank();
    pair.delta = map_to_rank(sbase, pair.rank ^ 1u) - sbase;
    cluster_sync_all();
  } else {
    __syncthreads();
  }
  auto free_bar = [&](int stage, int part) { return mbar(kBarFree + 2 * stage + part); };

  const LatentArgs& a = args;
  const KeyTma tma{&cache_map, cache_tma};
  const Plan plan = read_plan(a.plan);
  const LatentHeader& h = *plan.h;
  const int H = h.num_heads;
  int block_shift = 0;
  while ((1 << block_shift) < h.block_size) ++block_shift;
  const float sl = h.sm_scale_log2;
  const float slack = kSlackLog2 / sl;  // raw score units (+inf with a zero scale: m never moves)
  const float layer_scale = kCache == 2 ? *a.k_scale : 0.f;  // fp8: read when the kernel runs (graphs)
  // 0 when this launch does not serve the plan (an FP8 cache decoded once: latent_dispatch.cu).
  const bool runs = latent::latent_launch_runs(a.run_when, h.decoded);
  // The plan's item count, read again at each item (a volatile load: the FP8 kernels have no
  // register to hold it through the loop, and ptxas would spill it instead).
  auto num_items = [&]() { return runs ? *static_cast<const volatile int32_t*>(&h.num_items) : 0; };
  // Parities (both warpgroups alike): bit s, of the tile stage s holds now and of P_s's barrier;
  // bits 2 and 3, of stage 0's and stage 1's key_ok reads (a phase a refill of the stage's
  // key_ok: each warpgroup arrives on its key_ok barrier only before a refill that waits for it,
  // as compute-sanitizer's synccheck wants every arrival of a thread followed by its wait).
  uint32_t phase = 0;
#if MLAKIT_SM90_TRACE
  int trace_pair = -1;  // the block's pairs so far
#endif

  // A worker is a CTA, or a cluster of two taking the items 2 w and 2 w + 1 of its pairs.
  const int worker = kPair ? static_cast<int>(blockIdx.x >> 1) : static_cast<int>(blockIdx.x);
  const int workers = kPair ? static_cast<int>(gridDim.x >> 1) : static_cast<int>(gridDim.x);
  for (int round = 0, w = worker; (kPair ? 2 * w : w) < num_items();
       w = static_cast<int>(latent::worker_item(++round, worker, workers))) {
    const int item = kPair ? 2 * w + static_cast<int>(pair.rank) : w;
    const LatentItem it = plan.items[item];
    KeySource ks{&plan, &a, &it, latent::request_pages(h, plan.page_ptr, plan.pages, it.request), block_shift, it.key_end,
                 h.sparse != 0, kCache == 0 ? 2 : 1};
    int64_t hi[2];
    const int tiles = item_key_bounds(plan, a, it, r0, ks, hi);
    // This thread's rows' ends of visible keys (dense) in int: keys are positions or index
    // entries, below 2^31 (the plan's lengths are int32); sparse rows have none.
    const int row_hi[2] = {static_cast<int>(min(hi[0], int64_t{INT32_MAX})), static_cast<int>(min(hi[1], int64_t{INT32_MAX}))};

    // q, and the first two tiles: each warpgroup its parts of both stages.
    load_q(a, it, H, sq, tid);
    cp_async_commit();
    for (int s = 0; s < 2 && s < tiles; ++s) {
      const int64_t kb = it.key_begin + s * kKeys;
      load_part<kCache, kPair>(ks, key_reads(ks, kb, wtid), kb, tma, st0 + s * kTileBytes, wg, s != wg, s == wg ? key_ok + s * kKeys : nullptr, bar(s, wg), wtid, pair);
    }
    MLAKIT_LATENT_STAMP(kLsNextIssued);
    // Paired: the other CTA has finished its last item (its stages are free) before this one
    // writes into them.
    if constexpr (kPair) cluster_sync_all();
    if constexpr (kCache != 0)
      for (int s = 0; s < 2 && s < tiles; ++s) decode_part<kCache, kPair>(st0 + s * kTileBytes, wg, s != wg, bar(s, wg), layer_scale, wtid, pair);
    cp_async_wait<0>();        // q (16-bit tiles' copies complete their barriers)
    fence_proxy_async_smem();  // cp.async wrote through the generic proxy; wgmma reads async
    __syncthreads();           // q and key_ok of every thread
    MLAKIT_LATENT_STAMP(kLsNextReady);

    float o[2][64];
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 64; ++e) o[j][e] = 0.f;
    float m_raw[2] = {-INFINITY, -INFINITY};  // the reference max of the raw scores q.k (both warpgroups alike)
    float top[2] = {-INFINITY, -INFINITY};    // the largest raw score of this warpgroup's tiles (max logits)
    float l[2] = {0.f, 0.f};                  // this thread's share of the sums of its warpgroup's tiles

    for (int t0 = 0; t0 < tiles; t0 += 2) {
      const int t1 = t0 + 1;
      const bool has1 = t1 < tiles;
      const int k0 = it.key_begin + t0 * kKeys, k1 = k0 + kKeys;
      const uint32_t ph0 = phase & 1, ph1 = (phase >> 1) & 1, ph2 = (phase >> 2) & 1, ph3 = (phase >> 3) & 1;
      float s[32];
      float m0[2], off0[2], m1[2], off1[2], mx[2], sum[2];
      uint32_t pf[4][4];
#if MLAKIT_SM90_TRACE
      ++trace_pair;
      if (tid == 0) latent_trace_pair(trace_pair, item, t0, tiles);
#endif
      MLAKIT_LATENT_STAMP(kLsTop);

      if (wg == 0) {
        // S0 over stage 0: this warpgroup's part first (refilled earliest), then warpgroup 1's.
        part_landed(bar(0, 0), ph0, tma.covers(ks, k0));
        MLAKIT_LATENT_STAMP(kLsOwnPart);
        wgmma_fence();
        qk_atoms<T>(s, sq, st0, 0, 4, true);
        // FP8: stage 1's part (and rope), refilled at the end of the last pair, decoded under S0.
        if (kCache != 0 && t0 > 0 && has1)
          decode_part<kCache, kPair>(st1, 0, true, bar(1, 0), layer_scale, wtid, pair, free_bar(1, 0), ph3 ^ 1u, true);
        KeyReads next0 = {}, next1 = {};  // tiles t0 + 2 and t1 + 2, this warpgroup's parts
        if (t0 + 2 < tiles) next0 = key_reads(ks, k0 + 2 * kKeys, wtid);
        if (ks.sparse && t1 + 2 < tiles) next1 = key_reads(ks, k1 + 2 * kKeys, wtid);
        part_landed(bar(0, 1), ph0, tma.covers(ks, k0));
        MLAKIT_LATENT_STAMP(kLsOtherPart);
        wgmma_fence();
        qk_atoms<T>(s, sq, st0, 4, kAtoms, false);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(s);
        MLAKIT_LATENT_STAMP(kLs3);

        mask_rows(s, key_ok, k0, row_hi, quad, mx, !ks.sparse);
        float f0[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          top[r] = fmaxf(top[r], mx[r]);
          m0[r] = slack_max(m_raw[r], mx[r], slack);
          off0[r] = max_offset(m0[r], sl);
          f0[r] = fast_exp2(m_raw[r] * sl - off0[r]);  // 0 while nothing was seen
        }
        exp_rows<T>(s, sl, off0, pf, sum);
        l[0] = l[0] * f0[0] + sum[0];
        l[1] = l[1] * f0[1] + sum[1];
        if (quad == 0) {
          max_x[r0] = m0[0];
          max_x[r0 + 8] = m0[1];
        }
        put_p(sp0, pf, r0, quad);
        mbar_arrive(mbar(kBarP0));
        MLAKIT_LATENT_STAMP(kLs4);

        rescaled_pv_issue<T>(o, f0, pf, st0, 0);
        rescaled_pv_done(o, pf);
        MLAKIT_LATENT_STAMP(kLs5);
        if (t0 + 2 < tiles) {
          mbar_arrive(mbar(kBarKeysRead0));  // every mask of this tile has read key_ok
          mbar_wait(mbar(kBarKeysRead0), ph2);
          load_part<kCache, kPair>(ks, next0, k0 + 2 * kKeys, tma, st0, 0, false, key_ok, bar(0, 0), wtid, pair);
          if constexpr (kPair) part_free(free_bar(0, 0), pair, lane);
          MLAKIT_LATENT_STAMP(kLsRefill0);
        }

        if (has1) {
          if (!ks.sparse && t1 + 2 < tiles) next1 = key_reads(ks, k1 + 2 * kKeys, wtid);  // a page: cached
          mbar_wait(mbar(kBarP1), ph1);
          MLAKIT_LATENT_STAMP(kLs6);
          float f1[2];
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            m1[r] = max_x[kRows + r0 + 8 * r];
            off1[r] = max_offset(m1[r], sl);
            f1[r] = fast_exp2(m0[r] * sl - off1[r]);
          }
          scale_o_if_needed(o, f1);
          l[0] *= f1[0];
          l[1] *= f1[1];
          part_landed(bar(1, 0), ph1, tma.covers(ks, k1));  // V1_L: this warpgroup's copies
          wgmma_fence();
          pv_ss<T>(o, sp1, st1, 0);
          wgmma_commit();
          // FP8: stage 0's part for tile t0 + 2, decoded under P1 V1_L.
          if (kCache != 0 && t0 + 2 < tiles)
            decode_part<kCache, kPair>(st0, 0, false, bar(0, 0), layer_scale, wtid, pair, free_bar(0, 0), ph2, true);
          wgmma_wait<0>();
          fence_o(o);
          MLAKIT_LATENT_STAMP(kLs7);
          if (t1 + 2 < tiles) {
            load_part<kCache, kPair>(ks, next1, k1 + 2 * kKeys, tma, st1, 0, true, nullptr, bar(1, 0), wtid, pair);
            if constexpr (kPair) part_free(free_bar(1, 0), pair, lane);
            MLAKIT_LATENT_STAMP(kLsRefill1);
          }
          m_raw[0] = m1[0];
          m_raw[1] = m1[1];
        } else {
          m_raw[0] = m0[0];
          m_raw[1] = m0[1];
        }
      } else {
        KeyReads next0 = {}, next1 = {};  // tiles t0 + 2 and t1 + 2, this warpgroup's parts
        if (has1) {
          if constexpr (kCache == 0) {
            // S1 over stage 1: this warpgroup's part first, then warpgroup 0's (with the rope).
            part_landed(bar(1, 1), ph1, tma.covers(ks, k1));
            MLAKIT_LATENT_STAMP(kLsOwnPart);
            wgmma_fence();
            qk_atoms<T>(s, sq, st1, 4, 8, true);
            if (t1 + 2 < tiles) next1 = key_reads(ks, k1 + 2 * kKeys, wtid);
            if (ks.sparse && t0 + 2 < tiles) next0 = key_reads(ks, k0 + 2 * kKeys, wtid);
            part_landed(bar(1, 0), ph1, tma.covers(ks, k1));
            MLAKIT_LATENT_STAMP(kLsOtherPart);
            wgmma_fence();
            qk_atoms<T>(s, sq, st1, 0, 4, false);
            qk_atoms<T>(s, sq, st1, 8, kAtoms, false);
          } else {
            // FP8: warpgroup 0's part first (it decoded it under S0), then this warpgroup's,
            // refilled at the end of the last pair and decoded under the first half.
            part_landed(bar(1, 0), ph1, false);
            MLAKIT_LATENT_STAMP(kLsOtherPart);
            wgmma_fence();
            qk_atoms<T>(s, sq, st1, 0, 4, true);
            qk_atoms<T>(s, sq, st1, 8, kAtoms, false);
            if (t1 + 2 < tiles) next1 = key_reads(ks, k1 + 2 * kKeys, wtid);
            if (ks.sparse && t0 + 2 < tiles) next0 = key_reads(ks, k0 + 2 * kKeys, wtid);
            if (t0 > 0)
              decode_part<kCache, kPair>(st1, 1, false, bar(1, 1), layer_scale, wtid, pair, free_bar(1, 1), ph3 ^ 1u, true);
            part_landed(bar(1, 1), ph1, false);
            MLAKIT_LATENT_STAMP(kLsOwnPart);
            wgmma_fence();
            qk_atoms<T>(s, sq, st1, 4, 8, false);
          }
          wgmma_commit();
        } else if (ks.sparse && t0 + 2 < tiles) {
          next0 = key_reads(ks, k0 + 2 * kKeys, wtid);
        }
        // m0 and P0 from warpgroup 0, then this warpgroup's softmax (P1 published), then O_R to
        // m0 and O_R += P0 V0_R with P0 as warpgroup 0 wrote it: stage 0's second part (atoms 4-7
        // and P0's rope atom) is free once this product is, so its refill starts a P V earlier
        // than at the end of the pair. Softmax first: P1 reaches warpgroup 0 about 600 cycles
        // sooner, and that wait was its longest (docs/latent-attention.md). S1 has finished by
        // the time P0 is published (warpgroup 0's softmax came after S0); waiting for it first
        // keeps the branches that may rescale O_R clear of products in flight, which would make
        // ptxas serialize every wgmma.
        mbar_wait(mbar(kBarP0), ph0);
        MLAKIT_LATENT_STAMP(kLs3);
        wgmma_wait<0>();  // unconditional: ptxas does not pair it with the branch that issued S1
        fence_regs(s);
        MLAKIT_LATENT_STAMP(kLs4);
        float f0[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          m0[r] = max_x[r0 + 8 * r];
          off0[r] = max_offset(m0[r], sl);
          f0[r] = fast_exp2(m_raw[r] * sl - off0[r]);  // 0 while nothing was seen
        }
        if (has1) {
          mask_rows(s, key_ok + kKeys, k1, row_hi, quad, mx, !ks.sparse);
          if (t1 + 2 < tiles) mbar_arrive(mbar(kBarKeysRead1));  // before this warpgroup writes the next tile's
        }
        float f1[2];  // O_R from m0 to m1
        if (has1) {
          float f01[2];
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            top[r] = fmaxf(top[r], mx[r]);
            m1[r] = slack_max(m0[r], mx[r], slack);
            off1[r] = max_offset(m1[r], sl);
            f1[r] = fast_exp2(m0[r] * sl - off1[r]);
            f01[r] = fast_exp2(m_raw[r] * sl - off1[r]);
          }
          exp_rows<T>(s, sl, off1, pf, sum);
          l[0] = l[0] * f01[0] + sum[0];
          l[1] = l[1] * f01[1] + sum[1];
          if (quad == 0) {
            max_x[kRows + r0] = m1[0];
            max_x[kRows + r0 + 8] = m1[1];
          }
          put_p(sp1, pf, r0, quad);
          mbar_arrive(mbar(kBarP1));
          MLAKIT_LATENT_STAMP(kLs5);
          m_raw[0] = m1[0];
          m_raw[1] = m1[1];
        } else {
          l[0] *= f0[0];
          l[1] *= f0[1];
          m_raw[0] = m0[0];
          m_raw[1] = m0[1];
        }
        scale_o_if_needed(o, f0);
        part_landed(bar(0, 1), ph0, tma.covers(ks, k0));  // V0_R: this warpgroup's copies
        wgmma_fence();
        pv_ss<T>(o, sp0, st0, 1);
        wgmma_commit();
        if (!ks.sparse && t0 + 2 < tiles) next0 = key_reads(ks, k0 + 2 * kKeys, wtid);
        wgmma_wait<0>();  // P0 V0_R: stage 0's atoms 4-8 are free
        fence_o(o);
        MLAKIT_LATENT_STAMP(kLs6);
        if (t0 + 2 < tiles) {
          load_part<kCache, kPair>(ks, next0, k0 + 2 * kKeys, tma, st0, 1, true, nullptr, bar(0, 1), wtid, pair);
          if constexpr (kPair) part_free(free_bar(0, 1), pair, lane);
          MLAKIT_LATENT_STAMP(kLsRefill0);
        }
        if (has1) {
          rescaled_pv_issue<T>(o, f1, pf, st1, 1);
          // FP8: stage 0's part for tile t0 + 2 (and the rope), decoded under P1 V1_R.
          if (kCache != 0 && t0 + 2 < tiles)
            decode_part<kCache, kPair>(st0, 1, true, bar(0, 1), layer_scale, wtid, pair, free_bar(0, 1), ph2, true);
          rescaled_pv_done(o, pf);
          MLAKIT_LATENT_STAMP(kLs7);
          if (t1 + 2 < tiles) {
            mbar_wait(mbar(kBarKeysRead1), ph3);
            load_part<kCache, kPair>(ks, next1, k1 + 2 * kKeys, tma, st1, 1, false, key_ok + kKeys, bar(1, 1), wtid, pair);
            if constexpr (kPair) part_free(free_bar(1, 1), pair, lane);
            MLAKIT_LATENT_STAMP(kLsRefill1);
          }
        }
      }
      phase ^= (has1 ? 3u : 1u) | (t0 + 2 < tiles ? 4u : 0u) | (t1 + 2 < tiles ? 8u : 0u);
    }

    MLAKIT_LATENT_STAMP(kLsLoopExit);
    store_rows<T>(a, h, it, o, m_raw, top, l, row_x, wg, r0, quad, sq);
    MLAKIT_LATENT_STAMP(kLsStored);
    __syncthreads();  // q, the stages, row_x: the next item's
  }
  // Paired: no CTA leaves while the other may still write into it or arrive on its barriers.
  if constexpr (kPair) cluster_sync_all();
}

// The cache's tensor map for whole tiles (KeyTma), when latent::cache_tiles_by_tma allows: the
// cache seen as one [num_slots, 576] matrix read in 64 x 64 boxes; false as well when the driver
// refuses the map. The last cache's map is kept per host thread: a run re-encodes it only when
// the cache changes.
inline bool cache_tma_map(const LatentArgs& a, CUtensorMap* map) {
  if (!latent::cache_tiles_by_tma(a)) return false;
  struct Last {
    const void* cache = nullptr;
    int64_t stride = 0, slots = 0;
    DType dtype = DType::kBF16;
    bool ok = false;
    CUtensorMap map;
  };
  static thread_local Last last;
  if (last.cache != a.cache || last.stride != a.cache_stride_row || last.slots != a.num_slots || last.dtype != a.dtype) {
    last.cache = a.cache;
    last.stride = a.cache_stride_row;
    last.slots = a.num_slots;
    last.dtype = a.dtype;
    last.ok = try_encode_tma_map(&last.map, TmaTensor{a.cache, a.dtype, kD, 0, a.num_slots, 0, a.cache_stride_row}, kKeys);
  }
  if (last.ok) *map = last.map;
  return last.ok;
}

// A launch of `ctas` CTAs in clusters of two, the kernel's block and shared memory, on `stream`:
// what paired_grid asks the occupancy of and launch runs. `attr` (the cluster's shape) is the
// caller's, which the config points to.
inline cudaLaunchConfig_t paired_config(int ctas, cudaStream_t stream, cudaLaunchAttribute& attr) {
  attr = cudaLaunchAttribute{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = 2;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(ctas));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmemBytes;
  cfg.stream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cfg;
}

// The CTAs of a paired launch (kPair) on `device`: two for each cluster of two that fits at once
// (one CTA an SM, both SMs of a cluster in one GPC), at most `grid`; 0 when the device takes
// none. Asked once per device.
template <typename T, int kCache>
int paired_grid(int device, int grid) {
  static std::atomic<int> clusters[64];  // + 1: 0 not asked yet
  int n = device >= 0 && device < 64 ? clusters[device].load(std::memory_order_relaxed) : 0;
  if (n == 0) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = paired_config(grid & ~1, nullptr, attr);
    int active = 0;
    if (cudaOccupancyMaxActiveClusters(&active, latent_kernel<T, kCache, true>, &cfg) != cudaSuccess) {
      (void)cudaGetLastError();
      active = 0;
    }
    n = active + 1;
    if (device >= 0 && device < 64) clusters[device].store(n, std::memory_order_relaxed);
  }
  return std::min(2 * (n - 1), grid & ~1);
}

// Launches the kernel over `grid` persistent CTAs (one per SM) on the current device, whose
// shared-memory limit for it is raised once (the attribute is per device). FP8 rows come by
// cp.async only (no tensor map: they are decoded in place). kPair: in clusters of two, over as
// many as fit at once (paired_grid).
template <typename T, int kCache, bool kPair = false>
cudaError_t launch(const LatentArgs& args, int device, int grid, cudaStream_t stream) {
  static std::atomic<uint64_t> configured{0};  // bit d: device d
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit == 0 || (configured.load(std::memory_order_relaxed) & bit) == 0) {
    const cudaError_t e =
        cudaFuncSetAttribute(latent_kernel<T, kCache, kPair>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (e != cudaSuccess) return e;
    configured.fetch_or(bit, std::memory_order_relaxed);
  }
#if MLAKIT_SM90_TRACE
  trace_register<latent_trace_dump>(std::is_same<T, __nv_bfloat16>::value ? "bf16" : "fp16");
#endif
  CUtensorMap map{};
  const int tma = kCache == 0 && cache_tma_map(args, &map) ? 1 : 0;
  if constexpr (kPair) {
    const int ctas = paired_grid<T, kCache>(device, grid);
    if (ctas < 2) return cudaErrorNotSupported;  // the caller runs the unpaired kernel
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = paired_config(ctas, stream, attr);
    return cudaLaunchKernelEx(&cfg, latent_kernel<T, kCache, true>, args, map, tma);
  } else {
    latent_kernel<T, kCache><<<grid, kThreads, kSmemBytes, stream>>>(args, map, tma);
    return cudaGetLastError();
  }
}

}  // namespace latent_sm90
}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
