// Build option MLAKIT_SM90_TRACE (measurement only, off in every shipped build), for the latent
// kernel: thread 0 of each warpgroup stamps its steps through each pair of tiles (SM clock, the
// first kLatentTracePairs pairs a block runs), so one launch's pair timeline can be read back:
// where each warpgroup waits, and how long a pair takes. At process exit the last launch's stamps
// go to $MLAKIT_SM90_TRACE_FILE.latent_<tag>.txt; bench/diagnostics/latent_trace.py reads them.
#pragma once

#include "cuda/sm90/trace_sm90.cuh"

namespace mlakit {
namespace cuda {
namespace sm90 {

constexpr int kLatentTracePairs = 64;
constexpr int kLatentTraceEvents = 14;

// The steps each warpgroup stamps, in its order through a pair (latent_kernel_sm90.cuh).
// Warpgroup 0: pair top, its stage-0 part landed, the other part landed, S0 done, P0 published,
// P0 V0_L done, P1 received, P1 V1_L done, stage 0's refill issued, stage 1's refill issued.
// Warpgroup 1: pair top, its stage-1 part landed, the other part landed, P0 received, S1 done, P1
// published, P0 V0_R done, P1 V1_R done, stage 0's refill issued, stage 1's refill issued.
// Both, in the slot of an item's last pair: the pair loop left, the item's rows stored, the next
// item's q and first tiles issued, its q landed (the steps of an item change).
enum LatentStamp {
  kLsTop = 0,
  kLsOwnPart = 1,
  kLsOtherPart = 2,
  kLs3 = 3,
  kLs4 = 4,
  kLs5 = 5,
  kLs6 = 6,
  kLs7 = 7,
  kLsRefill0 = 8,
  kLsRefill1 = 9,
  kLsLoopExit = 10,
  kLsStored = 11,
  kLsNextIssued = 12,
  kLsNextReady = 13,
};

#if MLAKIT_SM90_TRACE
static __device__ unsigned long long g_latent_trace_t[kTraceBlocks * kLatentTracePairs * 2 * kLatentTraceEvents];
static __device__ int g_latent_trace_pair[kTraceBlocks * kLatentTracePairs * 3];  // item, first tile, tiles

__device__ __forceinline__ void latent_trace_stamp(int pair, int wg, int ev) {
  if (blockIdx.x < kTraceBlocks && pair >= 0 && pair < kLatentTracePairs)
    g_latent_trace_t[((blockIdx.x * kLatentTracePairs + pair) * 2 + wg) * kLatentTraceEvents + ev] = clock64();
}
__device__ __forceinline__ void latent_trace_pair(int pair, int item, int t0, int tiles) {
  if (blockIdx.x < kTraceBlocks && pair < kLatentTracePairs) {
    int* p = g_latent_trace_pair + (blockIdx.x * kLatentTracePairs + pair) * 3;
    p[0] = item;
    p[1] = t0;
    p[2] = tiles;
  }
}

static void latent_trace_dump(const char* tag) {
  static unsigned long long t[kTraceBlocks * kLatentTracePairs * 2 * kLatentTraceEvents];
  static int pr[kTraceBlocks * kLatentTracePairs * 3];
  if (cudaDeviceSynchronize() != cudaSuccess) return;
  if (cudaMemcpyFromSymbol(t, g_latent_trace_t, sizeof(t)) != cudaSuccess) return;
  if (cudaMemcpyFromSymbol(pr, g_latent_trace_pair, sizeof(pr)) != cudaSuccess) return;
  char name[64];
  std::snprintf(name, sizeof(name), "latent_%s", tag);
  FILE* f = trace_open(name);
  if (!f) return;
  std::fprintf(f,
               "# P block pair item first_tile tiles wg: SM cycles of the warpgroup's %d steps from the block's "
               "first stamp (-1: none)\n",
               kLatentTraceEvents);
  for (int b = 0; b < kTraceBlocks; ++b) {
    const unsigned long long* tb = t + b * kLatentTracePairs * 2 * kLatentTraceEvents;
    if (tb[0] == 0) continue;
    const unsigned long long base = tb[0];
    for (int p = 0; p < kLatentTracePairs; ++p)
      for (int wg = 0; wg < 2; ++wg) {
        const unsigned long long* e = tb + (p * 2 + wg) * kLatentTraceEvents;
        if (e[kLsTop] == 0) continue;
        const int* q = pr + (b * kLatentTracePairs + p) * 3;
        std::fprintf(f, "P %d %d %d %d %d %d", b, p, q[0], q[1], q[2], wg);
        for (int i = 0; i < kLatentTraceEvents; ++i) std::fprintf(f, " %lld", e[i] ? (long long)(e[i] - base) : -1ll);
        std::fprintf(f, "\n");
      }
  }
  std::fclose(f);
}

// Thread 0 of the warpgroup stamps step `ev` of the current pair.
#define MLAKIT_LATENT_STAMP(ev) \
  if (wtid == 0) latent_trace_stamp(trace_pair, wg, ev)
#else
#define MLAKIT_LATENT_STAMP(ev) \
  do {                          \
  } while (0)
#endif

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
