// The consumers' epilogues: the TMA-store epilogue of a warpgroup's rows and the merge of the two
// halves of a split tile (register stores of rows a sequence ends inside: cuda/common/tile_store.cuh).
#pragma once

#include <cmath>

#include "cuda/common/ptx.cuh"
#include "cuda/common/tile_store.cuh"
#include "cuda/sm90/kernel_layout_sm90.cuh"
#include "cuda/sm90/ptx_sm90.cuh"

namespace mlakit {
namespace cuda {
namespace sm90 {

// Spins until *flag != 0 (acquire, GPU scope). One PTX loop of three instructions: as a C++ loop,
// ptxas kept the consumer's long-lived values across it and spilled (68-84 bytes).
__device__ __forceinline__ void wait_flag_set(const int* flag) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      ".reg .b32 v;\n"
      "WAIT_%=:\n"
      "ld.acquire.gpu.global.b32 v, [%0];\n"
      "setp.eq.s32 p, v, 0;\n"
      "@p bra WAIT_%=;\n"
      "}\n" ::"l"(flag)
      : "memory");
}

// The epilogue of one half of a split tile (plan/kv_split.h), for this warpgroup's 64 rows. The
// half that arrives first (an atomic counter per warpgroup) publishes its unnormalized state (O,
// m, l: exact fp32) in the slot and raises the published flag; the half that arrives second waits
// for the flag (its partner has claimed and is only writing: no other dependency, so no deadlock),
// reads that state and merges it with its own, still in registers, with half 0 always the first
// operand (explicit roundings, no contraction), so the bits do not depend on which half finished
// first. It writes the output and LSE and resets counter and flag for the next launch (or graph
// replay). One part per warpgroup: the slot is half the size of one holding both halves.
template <typename Shape, typename T>
__device__ __forceinline__ void split_epilogue(float (&o)[Shape::DVO / 8][4], const float (&m)[2],
                                               const float (&l)[2], const ItemPlan& ip, const PrefillArgs& a,
                                               unsigned char* smem, int cw, int tid, T* out_tile, float* lse_tile,
                                               int64_t o_stride, int64_t lse_stride, int warp_row0, int lane) {
  constexpr int NT = Shape::DVO / 8;
  unsigned char* slot = static_cast<unsigned char*>(a.scratch) +
                        split_region_offset(Shape::kScratchFixed, Shape::kScratchPerBlock, gridDim.x) +
                        static_cast<size_t>(ip.slot) * Shape::kSplitSlotBytes;
  int* counter = reinterpret_cast<int*>(slot) + cw;  // the published flag: counter + 2
  volatile int* flag = reinterpret_cast<volatile int*>(smem + Shape::kOffFlags) + cw;
  if (tid == 0) *flag = atomicAdd(counter, 1);
  warpgroup_bar_sync<kBarSplit0, 128>(cw);
  float4* part = reinterpret_cast<float4*>(slot + 128 + cw * Shape::kSplitPartBytes);
  if (*flag == 0) {  // first: publish, then leave the merge to the other half
#pragma unroll
    for (int n = 0; n < NT; ++n) __stcg(part + n * 128 + tid, make_float4(o[n][0], o[n][1], o[n][2], o[n][3]));
    __stcg(part + NT * 128 + tid, make_float4(m[0], m[1], l[0], l[1]));
    __threadfence();  // the state is visible before the flag is
    warpgroup_bar_sync<kBarSplit0, 128>(cw);
    if (tid == 0) atomicExch(counter + 2, 1);
    return;
  }
  // Second: wait until the first has published (it has claimed and is only writing). Every
  // thread polls (a single poller inside `tid == 0` made ptxas spill), and all are past the wait
  // before thread 0 resets the flag below.
  wait_flag_set(counter + 2);
  warpgroup_bar_sync<kBarSplit0, 128>(cw);
  const float4 oml = __ldcg(part + NT * 128 + tid);
  const bool first = ip.chunk == 0;  // this thread holds half 0
  const float m0[2] = {first ? m[0] : oml.x, first ? m[1] : oml.y};
  const float m1[2] = {first ? oml.x : m[0], first ? oml.y : m[1]};
  const float l0[2] = {first ? l[0] : oml.z, first ? l[1] : oml.w};
  const float l1[2] = {first ? oml.z : l[0], first ? oml.w : l[1]};
  float mm[2], ll[2], w0[2], w1[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mm[r] = fmaxf(m0[r], m1[r]);
    const bool none = mm[r] == -INFINITY;  // neither half saw a key of this row
    w0[r] = none ? 0.f : fast_exp2(m0[r] - mm[r]);
    w1[r] = none ? 0.f : fast_exp2(m1[r] - mm[r]);
    ll[r] = __fadd_rn(__fmul_rn(l0[r], w0[r]), __fmul_rn(l1[r], w1[r]));
  }
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const float4 v = __ldcg(part + n * 128 + tid);
    const float x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float a0 = first ? o[n][e] : x[e];
      const float a1 = first ? x[e] : o[n][e];
      o[n][e] = __fadd_rn(__fmul_rn(a0, w0[e >> 1]), __fmul_rn(a1, w1[e >> 1]));
    }
  }
  store_rows<Shape::DVO>(o, mm, ll, out_tile, o_stride, lse_tile, lse_stride, warp_row0, ip.rows, lane);
  if (tid == 0) {
    atomicExch(counter, 0);
    atomicExch(counter + 2, 0);
  }
}

// The TMA-store epilogue of this warpgroup's 64 rows (all inside the sequence). pack_o normalizes
// O into bf16/fp16 pairs; stage_and_store_o writes them, one 64-column box at a time, into this
// warpgroup's own 8 KB region (`region`, 1024-byte aligned), 128-byte swizzled as the output
// tensor map describes (stmatrix writes the accumulator fragments conflict-free), and thread 0
// stores each box with TMA. No other warpgroup reads or writes the region, so the two
// warpgroups need not meet at an item's end. Thread 0 waits for the region's previous store to
// have read it before the warpgroup overwrites it (for the first box, the previous item's second
// box: long done).
template <typename Shape, typename T>
__device__ __forceinline__ void pack_o(const float (&o)[Shape::DVO / 8][4], const float (&l)[2],
                                       uint32_t (&po)[Shape::DVO / 4]) {
  const float inv[2] = {row_inv_sum(l[0]), row_inv_sum(l[1])};
#pragma unroll
  for (int n = 0; n < Shape::DVO / 8; ++n) {
    po[2 * n] = pack2<T>(o[n][0] * inv[0], o[n][1] * inv[0]);
    po[2 * n + 1] = pack2<T>(o[n][2] * inv[1], o[n][3] * inv[1]);
  }
}
template <typename Shape, typename T>
__device__ __forceinline__ void stage_and_store_o(const float (&o)[Shape::DVO / 8][4], const float (&l)[2],
                                                  uint32_t region, const CUtensorMap* tm_o, int cw, int warp,
                                                  int lane, int tid, int head, int row_global) {
  uint32_t po[Shape::DVO / 4];
  pack_o<Shape, T>(o, l, po);
  const int j = lane >> 3;                                 // the 8x8 matrix this lane addresses
  const int r = warp * 16 + (lane & 7) + 8 * (j & 1);      // its row among the warpgroup's 64
#pragma unroll
  for (int c = 0; c < Shape::kVBoxes; ++c) {
    if (tid == 0) tma_store_wait_read();
    warpgroup_bar_sync<kBarOWritten0, 128>(cw);
#pragma unroll
    for (int n = c * 8; n < c * 8 + 8; n += 2) {
      const int chunk = (n + (j >> 1)) & 7;  // 16-byte column chunk inside the box
      stmatrix_x4(region + r * 128 + ((chunk ^ (r & 7)) << 4), po[2 * n], po[2 * n + 1], po[2 * n + 2],
                  po[2 * n + 3]);
    }
    fence_proxy_async_smem();
    warpgroup_bar_sync<kBarOWritten0, 128>(cw);
    if (tid == 0) {
      tma_store_3d(tm_o, region, c * 64, head, row_global);
      tma_store_commit();
    }
  }
}

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
