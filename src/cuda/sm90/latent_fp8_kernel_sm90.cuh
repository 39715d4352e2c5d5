// The Hopper kernel of latent attention over FP8 caches (mlakit/latent.h,
// docs/latent-attention.md): persistent CTAs pull the plan's work items (contract/latent_layout.h)
// and run each as a 64-row block of (token, head) rows against 64-key tiles of the shared latent
// rows, decoded to bf16 in shared memory (16-bit caches: latent_kernel_sm90.cuh).
//
// Shape of the work, two consumer warpgroups and no producer:
//  - Rows: an item's <= 64 rows, q in shared memory (9 swizzled 64-column atoms), read by both
//    warpgroups' wgmma.
//  - Keys: each thread loads its share of the next tile's codes into registers at the top of a
//    tile and decodes them into the other stage while this tile's P V runs (Fp8Keys). Keys that
//    name nothing are zeros and masked.
//  - S = Q K^T: warpgroup w takes keys 32w..32w+31 of the tile over all 576 columns (m64n32k16,
//    36 k-steps). The row maxima of both halves meet in shared memory, so both warpgroups take
//    the same running max; each keeps the sum of its own half.
//  - O += P V: warpgroup w owns value columns 256w..256w+255 (two m64n128 accumulators, 128
//    registers a thread) and needs P of all 64 keys: both halves of P pass through shared
//    memory in the accumulator's register order, which is the A fragment's order, so a thread
//    reads the registers its twin in the other warpgroup wrote.
#pragma once

#include <atomic>

#include "contract/kv_cache_format.h"
#include "cuda/sm90/latent_common_sm90.cuh"
#include "cuda/sm90/ptx_sm90.cuh"
#include "cuda/sm90/smem_desc.h"
#include "cuda/sm90/wgmma_small_n_sm90.cuh"

namespace mlakit {
namespace cuda {
namespace sm90 {
namespace latent_fp8_sm90 {

using namespace latent_sm90;  // the shared shape, plan, key sources, q load and row ends

constexpr int kStages = 2;

// Shared memory, from a 1024-byte aligned base (the swizzle's atoms).
constexpr int kOffQ = 0;
constexpr int kOffK = kOffQ + kTileBytes;
constexpr int kOffRowX = kOffK + kStages * kTileBytes;  // float [2 warpgroups][2][64 rows]: maxima, then store_rows'
constexpr int kOffPX = kOffRowX + 4 * kRows * 4;        // uint32 [2 halves][2 k-steps][4][128 threads]
constexpr int kOffKeyOk = kOffPX + 2 * 2 * 4 * 128 * 4; // int [stages][64]
constexpr int kSmemUsed = kOffKeyOk + kStages * kKeys * 4;
constexpr int kSmemBytes = kSmemUsed + 1024;  // room to align the base
static_assert(kSmemBytes <= 232448, "one CTA per SM");

// A thread's two keys of a tile: j = tid / 8 and j + 32 (8 threads a row: a 128-byte line per
// atom and warp instruction). Their rows are looked up a tile ahead of the copies (the page
// and index reads are dependent global loads), so the lookups' latency hides behind a tile.
struct TileRows {
  const unsigned char* src[2];
};

__device__ __forceinline__ TileRows tile_rows(const KeySource& ks, int64_t k0, int tid) {
  TileRows r;
#pragma unroll
  for (int half = 0; half < 2; ++half) r.src[half] = ks.row(k0 + (tid >> 3) + 32 * half);
  return r;
}

// FP8 rows become the same bf16 stage as 16-bit rows, in two steps around a tile's products:
//  - at the top of the tile before, each thread loads its share of the next tile's codes (and
//    fp8_ds_mla's scales) into registers (Fp8Keys); fp8_ds_mla's rope part, bf16 already, goes by
//    cp.async;
//  - while that tile's P V runs on the tensor cores, the codes are decoded (code x scale in
//    float32, rounded to bf16: what the MLA step's gather and the CPU paths give) and stored.
// Formats (LatentArgs::cache_format): 1, fp8_ds_mla (contract/kv_cache_format.h: 512 codes, four
// float32 scales, 64 bf16 rope values); 2, vLLM's fp8 (576 codes, the layer's one scale).
// A thread's share of key j: code chunks c = part + 8i (i = 0..3, 16 codes each; fp8_ds_mla's
// scale i), and with fp8 the rope's chunk 32 + part for part < 4; chunk c becomes bf16 chunks 2c
// and 2c + 1 of the swizzled row.
template <int kCache>
struct Fp8Keys;
template <>
struct Fp8Keys<1> {
  uint4 codes[2][4];
  float4 scales[2];
};
template <>
struct Fp8Keys<2> {
  uint4 codes[2][5];
};

// Marks the tile's keys in key_ok; fp8_ds_mla: its rope parts by cp.async (zeros for no row).
template <int kCache>
__device__ __forceinline__ void mark_keys_fp8(const KeySource& ks, const TileRows& rows, uint32_t stage, int* key_ok,
                                              int tid) {
  const int part = tid & 7;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int j = (tid >> 3) + 32 * half;
    const bool ok = rows.src[half] != nullptr;
    if constexpr (kCache == 1) {
      const unsigned char* src = ok ? rows.src[half] : static_cast<const unsigned char*>(ks.a->cache);
      cp_async_16(stage + swz(j, (kAtoms - 1) * 8 + part), src + mla::kDsMlaRopeOffset + part * 16, ok);
    }
    if (part == 0) key_ok[j] = ok ? 1 : 0;
  }
}

template <int kCache>
__device__ __forceinline__ Fp8Keys<kCache> fetch_codes(const TileRows& rows, int tid) {
  const int part = tid & 7;
  Fp8Keys<kCache> f;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const unsigned char* src = rows.src[half];
    if (src != nullptr) {
#pragma unroll
      for (int i = 0; i < 4; ++i) f.codes[half][i] = __ldg(reinterpret_cast<const uint4*>(src + (part + 8 * i) * 16));
      if constexpr (kCache == 1) {
        f.scales[half] = __ldg(reinterpret_cast<const float4*>(src + mla::kDsMlaScalesOffset));
      } else {
        f.codes[half][4] = part < 4 ? __ldg(reinterpret_cast<const uint4*>(src + (32 + part) * 16)) : make_uint4(0, 0, 0, 0);
      }
    } else {  // a key that names no row: zeros (key_ok masks it too)
#pragma unroll
      for (int i = 0; i < (kCache == 1 ? 4 : 5); ++i) f.codes[half][i] = make_uint4(0, 0, 0, 0);
      if constexpr (kCache == 1) f.scales[half] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  return f;
}

// Two e4m3 codes (low byte first) -> two bf16 values x scale, as one register.
__device__ __forceinline__ uint32_t decode2(uint32_t two, float scale) {
  uint32_t h2;
  asm("{\n .reg .b16 c;\n cvt.u16.u32 c, %1;\n cvt.rn.f16x2.e4m3x2 %0, c;\n}\n" : "=r"(h2) : "r"(two));
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h2));
  return pack2<__nv_bfloat16>(f.x * scale, f.y * scale);
}

// 16 codes -> 16 bf16 values (two 16-byte chunks).
__device__ __forceinline__ void decode16(const uint4& c, float scale, uint4& lo, uint4& hi) {
  lo = make_uint4(decode2(c.x, scale), decode2(c.x >> 16, scale), decode2(c.y, scale), decode2(c.y >> 16, scale));
  hi = make_uint4(decode2(c.z, scale), decode2(c.z >> 16, scale), decode2(c.w, scale), decode2(c.w >> 16, scale));
}

// `layer_scale`: fp8's (format 2) scale of every code.
template <int kCache>
__device__ __forceinline__ void store_codes(const Fp8Keys<kCache>& f, uint32_t stage, int tid, float layer_scale) {
  const int part = tid & 7;
  // The 8 threads of a quarter warp write one row: bf16 chunk 2c lands at in-atom place 2 x part
  // mod 8, the same for part and part + 4. Those with part >= 4 store their odd chunk first, so
  // each store instruction's 8 chunks fall in 8 different bank groups.
  const bool swap = (part & 4) != 0;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int j = (tid >> 3) + 32 * half;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float scale = layer_scale;
      if constexpr (kCache == 1) {
        const float4 sc = f.scales[half];
        scale = i == 0 ? sc.x : i == 1 ? sc.y : i == 2 ? sc.z : sc.w;
      }
      uint4 lo, hi;
      decode16(f.codes[half][i], scale, lo, hi);
      const int chunk = 2 * (part + 8 * i);
      st_shared_v4(stage + swz(j, chunk + (swap ? 1 : 0)), swap ? hi : lo);
      st_shared_v4(stage + swz(j, chunk + (swap ? 0 : 1)), swap ? lo : hi);
    }
    if constexpr (kCache == 2) {
      if (part < 4) {  // the rope's 64 codes: chunks 32 .. 35
        uint4 lo, hi;
        decode16(f.codes[half][4], layer_scale, lo, hi);
        const int chunk = 2 * (32 + part);
        st_shared_v4(stage + swz(j, chunk), lo);
        st_shared_v4(stage + swz(j, chunk + 1), hi);
      }
    }
  }
}

__device__ __forceinline__ void sync_both() { named_barrier_sync<1, kThreads>(); }

// kCache: the cache's rows, LatentArgs::cache_format (1: fp8_ds_mla, 2: fp8), decoded to T = bf16
// in the stages (Fp8Keys).
template <typename T, int kCache>
__global__ void __launch_bounds__(kThreads, 1) latent_kernel(const LatentArgs args) {
  static_assert(kCache == 1 || kCache == 2, "16-bit caches: latent_kernel_sm90.cuh");
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  const uint32_t sbase = smem_addr(smem);
  const uint32_t sq = sbase + kOffQ;
  float* row_x = reinterpret_cast<float*>(smem + kOffRowX);
  uint32_t* p_x = reinterpret_cast<uint32_t*>(smem + kOffPX);
  int* key_ok = reinterpret_cast<int*>(smem + kOffKeyOk);

  const LatentArgs& a = args;
  const Plan plan = read_plan(a.plan);
  const LatentHeader& h = *plan.h;
  const int H = h.num_heads;
  int block_shift = 0;
  while ((1 << block_shift) < h.block_size) ++block_shift;
  const float scale_log2 = h.sm_scale_log2;
  const float layer_scale = kCache == 2 ? *a.k_scale : 0.f;  // fp8: read when the kernel runs

  const int tid = threadIdx.x;
  const int wg = tid >> 7;          // warpgroup: keys 32wg.. of S, value columns 256wg.. of O
  const int wtid = tid & 127;
  const int lane = tid & 31;
  const int quad = lane & 3;
  const int r0 = 16 * (wtid >> 5) + (lane >> 2);  // this thread's rows r0 and r0 + 8
  // 0 when this launch does not serve the plan (an FP8 cache decoded once: latent_dispatch.cu).
  const int num_items = latent::latent_launch_runs(a.run_when, h.decoded) ? h.num_items : 0;

  for (int round = 0, item = blockIdx.x; item < num_items;
       item = static_cast<int>(latent::worker_item(++round, blockIdx.x, gridDim.x))) {
    const LatentItem it = plan.items[item];
    KeySource ks{&plan, &a, &it, latent::request_pages(h, plan.page_ptr, plan.pages, it.request), block_shift, it.key_end,
                 h.sparse != 0, 1};
    int64_t row_hi[2];  // this thread's rows' ends of visible keys (dense)
    const int tiles = item_key_bounds(plan, a, it, r0, ks, row_hi);

    load_q(a, it, H, sq, tid);
    Fp8Keys<kCache> fk;  // the next tile's codes, decoded while this tile's P V runs
    if (tiles > 0) {
      const TileRows first = tile_rows(ks, it.key_begin, tid);
      mark_keys_fp8<kCache>(ks, first, sbase + kOffK, key_ok, tid);
      store_codes<kCache>(fetch_codes<kCache>(first, tid), sbase + kOffK, tid, layer_scale);
    }
    cp_async_commit();
    TileRows next = tile_rows(ks, it.key_begin + kKeys, tid);  // null past the keys

    float o[2][64];
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 64; ++e) o[j][e] = 0.f;
    float m_raw[2] = {-INFINITY, -INFINITY};  // running max of the raw scores q.k
    float l[2] = {0.f, 0.f};                  // this thread's share of its half's sum

    for (int tile = 0; tile < tiles; ++tile) {
      const int stage = tile & 1;
      const int64_t k0 = it.key_begin + static_cast<int64_t>(tile) * kKeys;
      cp_async_wait<0>();        // q and this tile have landed (the only copies in flight)
      fence_proxy_async_smem();  // cp.async wrote through the generic proxy; wgmma reads async
      // One barrier a tile for the stages: past it, this tile is visible to every thread, and
      // every thread is done with the last tile (its P V waited, its exchanges read), so the
      // other stage, its key_ok and the exchange buffers are free.
      __syncthreads();
      const uint32_t other = sbase + kOffK + (stage ^ 1) * kTileBytes;
      if (tile + 1 < tiles) {
        mark_keys_fp8<kCache>(ks, next, other, key_ok + (stage ^ 1) * kKeys, tid);
        fk = fetch_codes<kCache>(next, tid);
        next = tile_rows(ks, k0 + 2 * kKeys, tid);
      }
      cp_async_commit();

      // S: this warpgroup's 32 keys over the 576 columns.
      const uint32_t sk = sbase + kOffK + stage * kTileBytes;
      float s[16] = {};
      {
        const uint64_t da0 = smem_desc_sw128(sq, 16, 1024);
        const uint64_t db0 = smem_desc_sw128(sk + wg * 32 * 128, 16, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk) {
          const uint32_t off = (kk >> 2) * kAtomBytes + (kk & 3) * 32;
          wgmma_m64n32k16_ss<T>(s, smem_desc_advance(da0, off), smem_desc_advance(db0, off), kk > 0 ? 1 : 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(s);
      }

      // Mask, and the row maxima of this half.
      const int* ok = key_ok + stage * kKeys;
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int n = 0; n < 4; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int j = 32 * wg + 8 * n + 2 * quad + (e & 1);
          const bool vis = ok[j] != 0 && k0 + j < row_hi[e >> 1];
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
      if (quad == 0) {
        row_x[wg * kRows + r0] = mx[0];
        row_x[wg * kRows + r0 + 8] = mx[1];
      }
      sync_both();
      float neg[2], alpha[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = r0 + 8 * r;
        // Both warpgroups read both halves in the same order: the same max, bit for bit.
        const float m_new = fmaxf(m_raw[r], fmaxf(row_x[row], row_x[kRows + row]));
        const float use = m_new == -INFINITY ? 0.f : m_new * scale_log2;
        alpha[r] = fast_exp2(m_raw[r] * scale_log2 - use);  // 0 while nothing was seen
        m_raw[r] = m_new;
        neg[r] = -use;
      }
      float sum[2] = {0.f, 0.f};
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        const float pr = fast_exp2(fmaf(s[e], scale_log2, neg[(e >> 1) & 1]));
        s[e] = pr;
        sum[(e >> 1) & 1] += pr;
      }
      l[0] = l[0] * alpha[0] + sum[0];
      l[1] = l[1] * alpha[1] + sum[1];
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int n = 0; n < 16; ++n) {
          o[j][4 * n + 0] *= alpha[0];
          o[j][4 * n + 1] *= alpha[0];
          o[j][4 * n + 2] *= alpha[1];
          o[j][4 * n + 3] *= alpha[1];
        }

      // P of this half, as the A fragments of its two 16-key steps, to shared memory.
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
        uint32_t* dst = p_x + ((wg * 2 + kk) * 4) * 128 + wtid;
        dst[0 * 128] = pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
        dst[1 * 128] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
        dst[2 * 128] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
        dst[3 * 128] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
      }
      sync_both();
      uint32_t pf[4][4];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) pf[kk][r] = p_x[(kk * 4 + r) * 128 + wtid];

      // O (this warpgroup's 256 columns) += P V over the tile's 64 keys.
      {
        const uint64_t dv0 = smem_desc_sw128(sk + wg * 4 * kAtomBytes, kAtomBytes, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            wgmma_m64n128k16_rs_mnb<T>(o[j], pf[kk], smem_desc_advance(dv0, j * 2 * kAtomBytes + kk * 16 * 128), 1);
          }
        }
        wgmma_commit();
        if (tile + 1 < tiles) store_codes<kCache>(fk, other, tid, layer_scale);  // the next stage, while P V runs
        wgmma_wait<0>();
        fence_regs(o[0]);
        fence_regs(o[1]);
      }
    }
    cp_async_wait<0>();

    store_rows<T>(a, h, it, o, m_raw, m_raw, l, row_x, wg, r0, quad);  // m_raw is the largest score
    __syncthreads();  // q, row_x: the next item's
  }
}

// Launches the kernel over `grid` persistent CTAs (one per SM) on the current device, whose
// shared-memory limit for it is raised once (the attribute is per device).
template <typename T, int kCache>
cudaError_t launch(const LatentArgs& args, int device, int grid, cudaStream_t stream) {
  static std::atomic<uint64_t> configured{0};  // bit d: device d
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit == 0 || (configured.load(std::memory_order_relaxed) & bit) == 0) {
    const cudaError_t e =
        cudaFuncSetAttribute(latent_kernel<T, kCache>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (e != cudaSuccess) return e;
    configured.fetch_or(bit, std::memory_order_relaxed);
  }
  latent_kernel<T, kCache><<<grid, kThreads, kSmemBytes, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace latent_fp8_sm90
}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
