// The Hopper latent-attention kernel's parts around its schedule (latent_kernel_sm90.cuh): the
// shape of the work (64-row items, 64-key tiles of 576-column rows in 128-byte-swizzled atoms),
// the plan's arrays, where an item's keys live, the q load and the end of an item (final rows or
// split partials).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "contract/latent_launch.h"
#include "contract/latent_layout.h"
#include "cuda/common/ptx.cuh"

namespace mlakit {
namespace cuda {
namespace sm90 {
namespace latent_sm90 {

using latent::LatentArgs;
using latent::LatentHeader;
using latent::LatentItem;

constexpr int kL = 512, kR = 64, kD = kL + kR;  // latent, RoPE, row width
constexpr int kRows = latent::kCudaBlockRows;   // (token, head) rows per item: the plan's block_rows
constexpr int kKeys = 64;                        // keys per tile
constexpr int kAtoms = kD / 64;                  // 64-column (128-byte) swizzled atoms per row
constexpr int kAtomBytes = 64 * 128;             // one atom of 64 rows (q) or 64 keys
constexpr int kTileBytes = kAtoms * kAtomBytes;  // 73728: q, or one stage of keys
constexpr int kThreads = 256;                    // two warpgroups
constexpr int kSplitSize = 512;  // keys per split of a short request (LatentChoice::split_size)

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr uint32_t kNoStaging = ~0u;  // store_rows: no shared memory to stage final rows in

// The plan block's arrays, read in place.
struct Plan {
  const LatentHeader* h;
  const int32_t* qo;
  const int32_t* kv;
  const int32_t* page_ptr;
  const int32_t* pages;
  const LatentItem* items;
};

__device__ __forceinline__ Plan read_plan(const void* block) {
  const auto* b = static_cast<const uint8_t*>(block);
  Plan p;
  p.h = reinterpret_cast<const LatentHeader*>(b);
  p.qo = reinterpret_cast<const int32_t*>(b + p.h->qo_indptr_offset);
  p.kv = reinterpret_cast<const int32_t*>(b + p.h->kv_lens_offset);
  p.page_ptr = reinterpret_cast<const int32_t*>(b + p.h->page_indptr_offset);
  p.pages = reinterpret_cast<const int32_t*>(b + p.h->pages_offset);
  p.items = reinterpret_cast<const LatentItem*>(b + p.h->items_offset);
  return p;
}

// Byte offset of 16-byte chunk `chunk` (0..71) of row `row` in a swizzled tile: atom chunk / 8,
// the chunk's place in its 128-byte row XOR-ed with row % 8 (TMA's 128-byte swizzle, which the
// wgmma descriptors describe).
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return (chunk >> 3) * kAtomBytes + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
}

// What an item's keys are: where its request's pages are and, per key, where its row is.
struct KeySource {
  const Plan* p;
  const LatentArgs* a;
  const LatentItem* it;
  const int32_t* req_pages;  // the request's cache blocks in position order
  int block_shift;
  int64_t key_end;  // dense: the last row's visible end (cut at the item's); sparse: entries used
  bool sparse;

  int elem_bytes;  // of the cache tensor: 2, or 1 for fp8_ds_mla rows

  __device__ __forceinline__ const unsigned char* slot_row(int64_t blk, int64_t off) const {
    return static_cast<const unsigned char*>(a->cache) + (blk * a->cache_stride_block + off * a->cache_stride_row) * elem_bytes;
  }
  // Cache row of position `pos` of the item's request (dense and kPositions).
  __device__ __forceinline__ const unsigned char* position_row(int64_t pos) const {
    return slot_row(req_pages[pos >> block_shift], pos & ((int64_t{1} << block_shift) - 1));
  }
  // Key `k` (absolute: position or entry) -> its row, or null when it names none.
  __device__ __forceinline__ const unsigned char* row(int64_t k) const { return row_from(k, first_read(k)); }
  // The same in two steps, so a kernel can issue the first read early and use it a while later:
  // the read (sparse: key k's index entry; dense: the page of position k; -1 past the keys), then
  // the row from it (dense and slots by arithmetic; positions through the page, a second read).
  __device__ __forceinline__ int32_t first_read(int64_t k) const {
    if (k >= key_end) return -1;
    if (!sparse) return req_pages[k >> block_shift];
    return a->indices[static_cast<int64_t>(it->token) * a->indices_stride_tok + k];
  }
  __device__ __forceinline__ const unsigned char* row_from(int64_t k, int32_t v) const {
    if (k >= key_end) return nullptr;
    if (!sparse) return slot_row(v, k & ((int64_t{1} << block_shift) - 1));
    if (p->h->index_kind == 0) return v >= 0 && v < p->kv[it->request] ? position_row(v) : nullptr;
    if (v < 0 || v >= a->num_slots) return nullptr;
    return slot_row(v >> block_shift, v & ((int64_t{1} << block_shift) - 1));
  }
};

// An item's keys: sets ks.key_end to the keys it reads (dense: up to its last row's visible end,
// causal bottom-right; sparse: cut at the token's topk_length) and row_hi to the visible ends of
// this thread's rows r0 and r0 + 8 (dense; sparse: INT64_MAX, no bound); returns its 64-key tiles.
__device__ __forceinline__ int item_key_bounds(const Plan& plan, const LatentArgs& a, const LatentItem& it, int r0,
                                               KeySource& ks, int64_t (&row_hi)[2]) {
  const LatentHeader& h = *plan.h;
  if (!ks.sparse) {
    const int H = h.num_heads;
    const int64_t kv_len = plan.kv[it.request];
    const int64_t q_begin = plan.qo[it.request];
    const int64_t q_len = plan.qo[it.request + 1] - q_begin;
    auto visible_end = [&](int i) -> int64_t {
      if (i >= it.rows) return it.key_begin;
      const int64_t t = (it.row_begin + i) / H - q_begin;
      const int64_t vis = h.causal ? min(max(kv_len - q_len + t + 1, int64_t{0}), kv_len) : kv_len;
      return max(int64_t{it.key_begin}, min(vis, int64_t{it.key_end}));
    };
    row_hi[0] = visible_end(r0);
    row_hi[1] = visible_end(r0 + 8);
    ks.key_end = visible_end(it.rows - 1);
  } else {
    row_hi[0] = row_hi[1] = INT64_MAX;
    if (a.topk_length != nullptr) {
      const int64_t n = a.topk_length[static_cast<int64_t>(it.token) * a.topk_length_stride];
      ks.key_end = min(max(n, int64_t{it.key_begin}), int64_t{it.key_end});
    }
  }
  return ks.key_end > it.key_begin ? static_cast<int>((ks.key_end - it.key_begin + kKeys - 1) / kKeys) : 0;
}

// Loads the item's q rows (row i = packed row row_begin + i); rows past the item's are zeros.
__device__ __forceinline__ void load_q(const LatentArgs& a, const LatentItem& it, int H, uint32_t sq, int tid) {
  const int part = tid & 7;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int i = (tid >> 3) + 32 * half;
    const bool ok = i < it.rows;
    const int64_t g = it.row_begin + (ok ? i : 0);
    const int64_t t = g / H, hd = g % H;
    const auto* qn = static_cast<const uint16_t*>(a.q) + t * a.q_stride_tok + hd * a.q_stride_head;
    const uint16_t* qp = a.q_pe ? static_cast<const uint16_t*>(a.q_pe) + t * a.qpe_stride_tok + hd * a.qpe_stride_head
                                : qn + kL;
#pragma unroll
    for (int atom = 0; atom < kAtoms - 1; ++atom) {
      const int chunk = atom * 8 + part;
      cp_async_16(sq + swz(i, chunk), qn + chunk * 8, ok);
    }
    cp_async_16(sq + swz(i, (kAtoms - 1) * 8 + part), qp + part * 8, ok);
  }
}

// The end of an item: the two warpgroups' row sums and largest scores meet in `row_x` (float
// [2 warpgroups][2][64]), then each writes its 256 value columns of the rows it holds: final rows
// (out x 1/l x the sink's factor, lse, max logit), or split rows as partial results that
// latent_merge.cu combines. `o` holds this warpgroup's columns 256 wg.. as two m64n128
// accumulators; m_raw the reference maxima of raw scores that o and l are relative to (with the
// slack softmax, up to its slack below the largest score), top the largest raw scores of the
// tiles this warpgroup took, l this thread's share of the sums.
//
// `staging` (a free 64 KB of shared memory, or kNoStaging): final rows whose out rows are 16-byte
// aligned are first gathered there, each row's 1024 bytes with its 16-byte chunks swizzled by row
// (no bank conflicts either way), then written 16 bytes a thread as whole 512-byte runs. From the
// accumulators directly each thread would write 4 bytes into 16-byte pieces of eight rows.
template <typename T>
__device__ __forceinline__ void store_rows(const LatentArgs& a, const LatentHeader& h, const LatentItem& it,
                                           const float (&o)[2][64], const float (&m_raw)[2], const float (&top)[2],
                                           float (&l)[2], float* row_x, int wg, int r0, int quad,
                                           uint32_t staging = kNoStaging) {
  const int H = h.num_heads;
  // The same for every thread of the block (it reaches a barrier below).
  const bool staged = staging != kNoStaging && it.partial < 0 && (reinterpret_cast<uintptr_t>(a.out) & 15) == 0 &&
                      (a.out_stride_tok & 7) == 0 && (a.out_stride_head & 7) == 0;
  const float scale_log2 = h.sm_scale_log2;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  if (quad == 0) {
    row_x[2 * wg * kRows + r0] = l[0];
    row_x[2 * wg * kRows + r0 + 8] = l[1];
    row_x[(2 * wg + 1) * kRows + r0] = top[0];
    row_x[(2 * wg + 1) * kRows + r0 + 8] = top[1];
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = r0 + 8 * r;
    const float sum = row_x[i] + row_x[2 * kRows + i];
    if (i >= it.rows) continue;
    const int64_t g = it.row_begin + i;
    const int64_t t = g / H, hd = g % H;
    const float lse = sum > 0.f ? (m_raw[r] * scale_log2 + log2f(sum)) * kLn2 : -INFINITY;
    const float max_logit = sum > 0.f ? fmaxf(row_x[kRows + i], row_x[3 * kRows + i]) * h.sm_scale : -INFINITY;
    const int col0 = 256 * wg + 2 * quad;
    if (it.partial >= 0) {
      const int64_t prow = it.partial + i;
      float* dst = a.partial_out + prow * kL + col0;
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int n = 0; n < 16; ++n) {
          *reinterpret_cast<float2*>(dst + 128 * j + 8 * n) =
              make_float2(o[j][4 * n + 2 * r] * inv, o[j][4 * n + 2 * r + 1] * inv);
        }
      if (wg == 0 && quad == 0) {
        a.partial_lse[prow] = lse;
        a.partial_max[prow] = max_logit;
      }
    } else {
      float mul = sum > 0.f ? 1.f / sum : 0.f;
      if (a.attn_sink != nullptr && sum > 0.f) mul /= 1.f + expf(a.attn_sink[hd * a.sink_stride] - lse);
      if (staged) {
        // Columns 256 wg + 128 j + 8 n + 2 quad, + 1: chunk 32 wg + 16 j + n of row i.
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int n = 0; n < 16; ++n)
            st_shared_u32(staging + i * 1024 + (((32 * wg + 16 * j + n) ^ (i & 7)) << 4) + 4 * quad,
                          pack2<T>(o[j][4 * n + 2 * r] * mul, o[j][4 * n + 2 * r + 1] * mul));
      } else {
        T* dst = static_cast<T*>(a.out) + t * a.out_stride_tok + hd * a.out_stride_head + col0;
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int n = 0; n < 16; ++n) {
            *reinterpret_cast<uint32_t*>(dst + 128 * j + 8 * n) =
                pack2<T>(o[j][4 * n + 2 * r] * mul, o[j][4 * n + 2 * r + 1] * mul);
          }
      }
      if (wg == 0 && quad == 0) {
        if (a.lse) a.lse[t * a.lse_stride_tok + hd * a.lse_stride_head] = lse;
        if (a.max_logits) a.max_logits[t * a.max_stride_tok + hd * a.max_stride_head] = max_logit;
      }
    }
  }
  if (staged) {
    __syncthreads();  // every row staged
    // Thread tid writes chunk tid % 64 of rows tid / 64, + 4, ...: a warp 512 bytes of one row.
    const int tid = threadIdx.x;
    const int c = tid & 63;
    for (int i = tid >> 6; i < it.rows; i += 4) {
      const uint4 v = ld_shared_v4(staging + i * 1024 + ((c ^ (i & 7)) << 4));
      const int g = it.row_begin + i;  // int32 in the plan
      const int t = g / H, hd = g - t * H;
      *reinterpret_cast<uint4*>(static_cast<T*>(a.out) + t * a.out_stride_tok + hd * a.out_stride_head + 8 * c) = v;
    }
  }
}

}  // namespace latent_sm90
}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
