// The Hopper (sm_90a) instructions the prefill kernel uses, as thin inline-PTX wrappers (see
// docs/sm90-kernel.md for why mlakit keeps its own small layer instead of CUTLASS/CuTe):
//   - mbarrier: init, arrive, arrive with an expected transaction count, parity wait;
//   - TMA (cp.async.bulk.tensor) loads completing on an mbarrier, stores in bulk groups, and the
//     device-side rewrite of a tensor map's outermost extent (tensormap.replace + cp_fenceproxy);
//   - stmatrix (accumulator fragments to shared memory for the TMA-store epilogue);
//   - wgmma: shared-memory matrix descriptors (128- and 64-byte swizzle), m64n128k16 with both
//     operands in shared memory (S = Q K^T) or A in registers and B MN-major (O += P V),
//     m64n128k32 e4m3 (both operands K-major: SS, and RS with B K-major), fence/commit/wait;
//   - cvt to e4m3x2 (P for the e4m3 wgmma);
//   - setmaxnreg, named barriers, proxy fences;
//   - clusters: rank, mapa, remote mbarrier arrivals, st.async, the cluster barrier;
//   - griddepcontrol (Programmatic Dependent Launch), shared with the sm80 kernels:
//     cuda/common/grid_dependency.cuh.
// PTX ISA 8.0+ semantics; every wrapper is one instruction (or one fixed short sequence).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/common/grid_dependency.cuh"
#include "cuda/sm90/smem_desc.h"

namespace mlakit {
namespace cuda {
namespace sm90 {

// ---- mbarrier -------------------------------------------------------------------------------

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
// Makes the initialized barriers visible to the async proxy (TMA) and the other threads.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
// Arrives and tells the barrier to also wait for `bytes` of TMA transactions.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}
// Arrives on `bar` once every cp.async this thread has issued so far has landed, without raising
// the barrier's expected count: a barrier initialized with the number of issuing threads
// completes its phase when all of their copies have landed, and no issuing thread waits.
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the phase with parity `parity` has completed. A fresh barrier is in phase 0, so
// waiting on parity 1 returns at once (how producers wait on "empty" barriers the first time).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// ---- clusters (two CTAs sharing key tiles: the latent kernel on FP8 caches) --------------------

__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// The shared::cluster address of `addr` (a shared::cta address of this CTA) in CTA `rank`.
__device__ __forceinline__ uint32_t map_to_rank(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
// Arrives on an mbarrier of another CTA of the cluster (address from map_to_rank) with the
// default CTA-scope release: enough to say that this thread's reads of that CTA's data are done
// (wgmma reads, complete at its wait). The .release.cluster form costs a GPU-scope fence at each
// arrival (25-40% slower in the prefill kernel's cluster experiment, docs/performance.md).
__device__ __forceinline__ void mbar_arrive_remote(uint32_t remote_bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote_bar) : "memory");
}
// 16 bytes into another CTA's shared memory (`remote`, from map_to_rank), completing 16 bytes of
// transactions on that CTA's mbarrier `remote_bar` once written.
__device__ __forceinline__ void st_async_v4(uint32_t remote, uint4 v, uint32_t remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(
                   remote),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(remote_bar)
               : "memory");
}
// Every thread of every CTA of the cluster (not .aligned: callers may be diverged warps).
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

// ---- TMA ------------------------------------------------------------------------------------

__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* tmap, uint32_t bar, int c0, int c1,
                                            int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
      "[%2];\n" ::"r"(dst),
      "l"(tmap), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* tmap, uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], "
      "[%2];\n" ::"r"(dst),
      "l"(tmap), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// An L2 policy that makes the lines a load brings the first to be evicted (rows read once).
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
// tma_load_2d under an L2 policy (l2_evict_first_policy).
__device__ __forceinline__ void tma_load_2d_policy(uint32_t dst, const void* tmap, uint32_t bar, int c0, int c1,
                                                   uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%3, "
      "%4}], [%2], %5;\n" ::"r"(dst),
      "l"(tmap), "r"(bar), "r"(c0), "r"(c1), "l"(policy)
      : "memory");
}

// Stores a box from shared memory (written by ordinary stores, then fence_proxy_async_smem and a
// barrier) to global memory through the tensor map, in the issuing thread's current bulk group.
__device__ __forceinline__ void tma_store_3d(const void* tmap, uint32_t src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(tmap),
               "r"(src), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until this thread's committed stores have read their shared memory (it may be rewritten).
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// Until this thread's committed stores are complete (their writes performed).
__device__ __forceinline__ void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// Four 8x8 matrices of 16-bit elements from the mma accumulator layout to shared memory: lane i
// gives the address of row i % 8 of matrix i / 8; register j holds this thread's two elements of
// matrix j (row lane / 4, columns 2 (lane % 4) and + 1).
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// Rewrites extent `ORD` (0 = innermost) of a tensor map held in shared memory.
template <int ORD>
__device__ __forceinline__ void tensormap_set_extent_smem(uint32_t smem_map, uint32_t extent) {
  uint64_t addr64;
  asm volatile("cvt.u64.u32 %0, %1;\n" : "=l"(addr64) : "r"(smem_map));
  asm volatile("tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], %1, %2;\n" ::"l"(addr64), "n"(ORD),
               "r"(extent)
               : "memory");
}
// Warp-wide (.sync.aligned): copies a 128-byte tensor map from shared to global memory and
// releases it to the tensor-map proxy.
__device__ __forceinline__ void tensormap_publish(void* gmem_map, uint32_t smem_map) {
  asm volatile(
      "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%0], [%1], 128;\n" ::"l"(
          gmem_map),
      "r"(smem_map)
      : "memory");
}
// Before the first TMA that uses a map published above (by the issuing thread).
__device__ __forceinline__ void tensormap_acquire(const void* gmem_map) {
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(gmem_map) : "memory");
}

// ---- fences, barriers, registers -------------------------------------------------------------

// Orders this thread's ordinary shared-memory writes before later async-proxy reads (wgmma, TMA).
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Barrier ids are immediates so ptxas knows which of the 16 hardware barriers are used.
template <int ID, int THREADS>
__device__ __forceinline__ void named_barrier_sync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "n"(THREADS) : "memory");
}
template <int ID, int THREADS>
__device__ __forceinline__ void named_barrier_arrive() {
  asm volatile("bar.arrive %0, %1;\n" ::"n"(ID), "n"(THREADS) : "memory");
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

// ---- wgmma ----------------------------------------------------------------------------------

// Descriptors: smem_desc_sw128 / smem_desc_advance (smem_desc.h).

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator registers across async wgmma issue/wait points.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// D[64x128] (+)= A[64x16] * B[16x128]: A K-major in shared memory, B K-major in shared memory
// (B given as its [128 x 16] transpose, rows = keys). accumulate = 0 overwrites D.
template <typename T>
__device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                    int accumulate);
// D[64x128] (+)= A[64x16] * B[16x128]: A from registers (the m16n8k16 A-fragment layout per
// warp), B MN-major in shared memory (rows = k, 128 contiguous columns per row).
template <typename T>
__device__ __forceinline__ void wgmma_m64n128k16_rs_mnb(float (&d)[64], const uint32_t (&a)[4],
                                                        uint64_t desc_b, int accumulate);

// D[64x128] (+)= A[64x16] * B[16x128]: A K-major in shared memory, B MN-major in shared memory
// (rows = k, 128 contiguous columns per row).
template <typename T>
__device__ __forceinline__ void wgmma_m64n128k16_ss_mnb(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                        int accumulate);

// e4m3 (k = 32, both operands K-major; FP8 wgmma has no transposed layouts):
// D[64x128] (+)= A[64x32] * B[32x128], A and B (as its [128 x 32] transpose, rows = n) in shared
// memory.
__device__ __forceinline__ void wgmma_m64n128k32_ss_e4m3(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                         int accumulate);
// A from registers: per warp 16 rows, lane (g, c) = (lane / 4, lane % 4) holds in a[0] row g,
// k 4c..4c+3, a[1] row g + 8 (same k), a[2] row g, k 16+4c..16+4c+3, a[3] row g + 8 (same k), byte
// i of a register being k + i. B K-major in shared memory.
__device__ __forceinline__ void wgmma_m64n128k32_rs_e4m3(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b,
                                                         int accumulate);

// Four floats -> one register of four e4m3 bytes (byte 0 = x0), rounded to nearest even and
// saturated to +-448 (cvt.rn.satfinite: the first source goes to the upper byte of each pair).
__device__ __forceinline__ uint32_t pack4_e4m3(float x0, float x1, float x2, float x3) {
  uint32_t r;
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(r)
      : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
  return r;
}

// The products below share their 64 fp32 accumulator operands (%0..%63, read and written)
// and differ in the element type's PTX name and the A operand.
#define MLAKIT_WGMMA_D64_REGS                                                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define MLAKIT_WGMMA_D64_OPERANDS(d)                                                                 \
      "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
      "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
      "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
      "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
      "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define MLAKIT_WGMMA_SS(ptx_type)                                                                    \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                          \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." ptx_type "." ptx_type " "              \
               MLAKIT_WGMMA_D64_REGS ", %64, %65, p, 1, 1, 0, 0;\n}\n"                               \
               : MLAKIT_WGMMA_D64_OPERANDS(d)                                                        \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate))
#define MLAKIT_WGMMA_RS_MNB(ptx_type)                                                                \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                          \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." ptx_type "." ptx_type " "              \
               MLAKIT_WGMMA_D64_REGS ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                 \
               : MLAKIT_WGMMA_D64_OPERANDS(d)                                                        \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate))

#define MLAKIT_WGMMA_SS_MNB(ptx_type)                                                                \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                          \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." ptx_type "." ptx_type " "              \
               MLAKIT_WGMMA_D64_REGS ", %64, %65, p, 1, 1, 0, 1;\n}\n"                               \
               : MLAKIT_WGMMA_D64_OPERANDS(d)                                                        \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate))

template <>
__device__ __forceinline__ void wgmma_m64n128k16_ss<__nv_bfloat16>(float (&d)[64], uint64_t desc_a,
                                                                   uint64_t desc_b, int accumulate) {
  MLAKIT_WGMMA_SS("bf16");
}
template <>
__device__ __forceinline__ void wgmma_m64n128k16_ss<__half>(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                            int accumulate) {
  MLAKIT_WGMMA_SS("f16");
}
template <>
__device__ __forceinline__ void wgmma_m64n128k16_ss_mnb<__nv_bfloat16>(float (&d)[64], uint64_t desc_a,
                                                                       uint64_t desc_b, int accumulate) {
  MLAKIT_WGMMA_SS_MNB("bf16");
}
template <>
__device__ __forceinline__ void wgmma_m64n128k16_ss_mnb<__half>(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                                int accumulate) {
  MLAKIT_WGMMA_SS_MNB("f16");
}
template <>
__device__ __forceinline__ void wgmma_m64n128k16_rs_mnb<__nv_bfloat16>(float (&d)[64], const uint32_t (&a)[4],
                                                                       uint64_t desc_b, int accumulate) {
  MLAKIT_WGMMA_RS_MNB("bf16");
}
template <>
__device__ __forceinline__ void wgmma_m64n128k16_rs_mnb<__half>(float (&d)[64], const uint32_t (&a)[4],
                                                                uint64_t desc_b, int accumulate) {
  MLAKIT_WGMMA_RS_MNB("f16");
}

__device__ __forceinline__ void wgmma_m64n128k32_ss_e4m3(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                         int accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
               MLAKIT_WGMMA_D64_REGS ", %64, %65, p, 1, 1;\n}\n"
               : MLAKIT_WGMMA_D64_OPERANDS(d)
               : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
__device__ __forceinline__ void wgmma_m64n128k32_rs_e4m3(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b,
                                                         int accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
               MLAKIT_WGMMA_D64_REGS ", {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
               : MLAKIT_WGMMA_D64_OPERANDS(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}

// D[64x256] (+)= A[64x16] * B[16x256], D as two m64n128 accumulators (d0: columns 0-127, d1:
// 128-255; the wgmma fragment of N = 256 is theirs one after the other). B MN-major in shared
// memory. One instruction instead of two m64n128: A (from shared memory in the ss form) is read
// once for the 256 columns.
template <typename T>
__device__ __forceinline__ void wgmma_m64n256k16_rs_mnb(float (&d0)[64], float (&d1)[64], const uint32_t (&a)[4],
                                                        uint64_t desc_b, int accumulate);
template <typename T>
__device__ __forceinline__ void wgmma_m64n256k16_ss_mnb(float (&d0)[64], float (&d1)[64], uint64_t desc_a,
                                                        uint64_t desc_b, int accumulate);

#define MLAKIT_WGMMA_D128_REGS \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "  \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, "  \
  "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, "  \
  "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, "  \
  "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, "  \
  "%123, %124, %125, %126, %127}"
#define MLAKIT_WGMMA_D128_OPERANDS \
      "+f"(d0[0]), "+f"(d0[1]), "+f"(d0[2]), "+f"(d0[3]), "+f"(d0[4]), "+f"(d0[5]), "+f"(d0[6]), \
      "+f"(d0[7]), "+f"(d0[8]), "+f"(d0[9]), "+f"(d0[10]), "+f"(d0[11]), "+f"(d0[12]), \
      "+f"(d0[13]), "+f"(d0[14]), "+f"(d0[15]), "+f"(d0[16]), "+f"(d0[17]), "+f"(d0[18]), \
      "+f"(d0[19]), "+f"(d0[20]), "+f"(d0[21]), "+f"(d0[22]), "+f"(d0[23]), "+f"(d0[24]), \
      "+f"(d0[25]), "+f"(d0[26]), "+f"(d0[27]), "+f"(d0[28]), "+f"(d0[29]), "+f"(d0[30]), \
      "+f"(d0[31]), "+f"(d0[32]), "+f"(d0[33]), "+f"(d0[34]), "+f"(d0[35]), "+f"(d0[36]), \
      "+f"(d0[37]), "+f"(d0[38]), "+f"(d0[39]), "+f"(d0[40]), "+f"(d0[41]), "+f"(d0[42]), \
      "+f"(d0[43]), "+f"(d0[44]), "+f"(d0[45]), "+f"(d0[46]), "+f"(d0[47]), "+f"(d0[48]), \
      "+f"(d0[49]), "+f"(d0[50]), "+f"(d0[51]), "+f"(d0[52]), "+f"(d0[53]), "+f"(d0[54]), \
      "+f"(d0[55]), "+f"(d0[56]), "+f"(d0[57]), "+f"(d0[58]), "+f"(d0[59]), "+f"(d0[60]), \
      "+f"(d0[61]), "+f"(d0[62]), "+f"(d0[63]), "+f"(d1[0]), "+f"(d1[1]), "+f"(d1[2]), "+f"(d1[3]), \
      "+f"(d1[4]), "+f"(d1[5]), "+f"(d1[6]), "+f"(d1[7]), "+f"(d1[8]), "+f"(d1[9]), "+f"(d1[10]), \
      "+f"(d1[11]), "+f"(d1[12]), "+f"(d1[13]), "+f"(d1[14]), "+f"(d1[15]), "+f"(d1[16]), \
      "+f"(d1[17]), "+f"(d1[18]), "+f"(d1[19]), "+f"(d1[20]), "+f"(d1[21]), "+f"(d1[22]), \
      "+f"(d1[23]), "+f"(d1[24]), "+f"(d1[25]), "+f"(d1[26]), "+f"(d1[27]), "+f"(d1[28]), \
      "+f"(d1[29]), "+f"(d1[30]), "+f"(d1[31]), "+f"(d1[32]), "+f"(d1[33]), "+f"(d1[34]), \
      "+f"(d1[35]), "+f"(d1[36]), "+f"(d1[37]), "+f"(d1[38]), "+f"(d1[39]), "+f"(d1[40]), \
      "+f"(d1[41]), "+f"(d1[42]), "+f"(d1[43]), "+f"(d1[44]), "+f"(d1[45]), "+f"(d1[46]), \
      "+f"(d1[47]), "+f"(d1[48]), "+f"(d1[49]), "+f"(d1[50]), "+f"(d1[51]), "+f"(d1[52]), \
      "+f"(d1[53]), "+f"(d1[54]), "+f"(d1[55]), "+f"(d1[56]), "+f"(d1[57]), "+f"(d1[58]), \
      "+f"(d1[59]), "+f"(d1[60]), "+f"(d1[61]), "+f"(d1[62]), "+f"(d1[63])
#define MLAKIT_WGMMA_N256_RS_MNB(ptx_type)                                                           \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"                                        \
               "wgmma.mma_async.sync.aligned.m64n256k16.f32." ptx_type "." ptx_type " "              \
               MLAKIT_WGMMA_D128_REGS ", {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"          \
               : MLAKIT_WGMMA_D128_OPERANDS                                                          \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate))
#define MLAKIT_WGMMA_N256_SS_MNB(ptx_type)                                                           \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                        \
               "wgmma.mma_async.sync.aligned.m64n256k16.f32." ptx_type "." ptx_type " "              \
               MLAKIT_WGMMA_D128_REGS ", %128, %129, p, 1, 1, 0, 1;\n}\n"                           \
               : MLAKIT_WGMMA_D128_OPERANDS                                                          \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate))
template <>
__device__ __forceinline__ void wgmma_m64n256k16_rs_mnb<__nv_bfloat16>(float (&d0)[64], float (&d1)[64],
                                                                       const uint32_t (&a)[4], uint64_t desc_b,
                                                                       int accumulate) {
  MLAKIT_WGMMA_N256_RS_MNB("bf16");
}
template <>
__device__ __forceinline__ void wgmma_m64n256k16_rs_mnb<__half>(float (&d0)[64], float (&d1)[64],
                                                                const uint32_t (&a)[4], uint64_t desc_b,
                                                                int accumulate) {
  MLAKIT_WGMMA_N256_RS_MNB("f16");
}
template <>
__device__ __forceinline__ void wgmma_m64n256k16_ss_mnb<__nv_bfloat16>(float (&d0)[64], float (&d1)[64],
                                                                       uint64_t desc_a, uint64_t desc_b,
                                                                       int accumulate) {
  MLAKIT_WGMMA_N256_SS_MNB("bf16");
}
template <>
__device__ __forceinline__ void wgmma_m64n256k16_ss_mnb<__half>(float (&d0)[64], float (&d1)[64], uint64_t desc_a,
                                                                uint64_t desc_b, int accumulate) {
  MLAKIT_WGMMA_N256_SS_MNB("f16");
}
#undef MLAKIT_WGMMA_N256_SS_MNB
#undef MLAKIT_WGMMA_N256_RS_MNB
#undef MLAKIT_WGMMA_D128_OPERANDS
#undef MLAKIT_WGMMA_D128_REGS

#undef MLAKIT_WGMMA_SS_MNB
#undef MLAKIT_WGMMA_RS_MNB
#undef MLAKIT_WGMMA_SS
#undef MLAKIT_WGMMA_D64_OPERANDS
#undef MLAKIT_WGMMA_D64_REGS

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
