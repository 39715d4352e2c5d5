// Build option MLAKIT_SM90_TRACE (measurement only, off in every shipped build): consumer thread 0
// of each block stamps every item it runs with the global timer (when it takes the item, when its
// first S = Q K^T has landed, when its epilogue is done), and the block's start and end. At
// process exit the last launch's stamps are written to $MLAKIT_SM90_TRACE_FILE (one file per
// instantiation that ran), so a block-by-block timeline of one launch can be read back from a
// benchmark run of a single workload. The buffers are per translation unit (static).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#ifndef MLAKIT_SM90_TRACE
#define MLAKIT_SM90_TRACE 0
#endif

namespace mlakit {
namespace cuda {
namespace sm90 {

constexpr int kTraceBlocks = 264;
constexpr int kTracePerBlock = 160;
// Per item and consumer warpgroup, SM-clock (clock64) stamps of the first kTraceTiles kv tiles
// (TileStamp below): from when each warpgroup has P ready, whether the two run in lockstep (both
// finish together) or take turns (half a tile apart) inside an item, and where a tile's cycles go.
constexpr int kTraceTiles = 8;

struct TraceRec {
  unsigned long long t_begin, t_s0, t_end;
  // t_qk: Q and K_0 landed (S0 issue); t_vlast: the last tile's V landed; t_next: the next item
  // taken; t_pv: the last P V done.
  unsigned long long t_qk, t_vlast, t_next, t_pv;
  int n_tiles, head, row0, q_begin;
};

#if MLAKIT_SM90_TRACE
static __device__ TraceRec g_sm90_trace[kTraceBlocks * kTracePerBlock];
static __device__ unsigned long long g_sm90_block_t[kTraceBlocks * 2];
static __device__ int g_sm90_trace_n[kTraceBlocks];
constexpr uint32_t kTraceTileSink = kTraceBlocks * kTracePerBlock * 2 * kTraceTiles;  // stamps past the buffer
// Per tile slot, in SM cycles: when its S was issued, when S had landed, when the softmax was done
// and when P was ready, so a tile's P-to-P period splits into the S product's latency, the
// softmax, and the wait for the previous P V plus the pack.
enum TileStamp { kTileIssue = 0, kTileSDone = 1, kTileSmDone = 2, kTilePReady = 3, kTileStamps = 4 };
static __device__ unsigned long long g_sm90_tile_t[(kTraceTileSink + kTraceTiles) * kTileStamps];

// The first stamp slot of consumer warpgroup `cw`'s `k`-th item (the sink when not recorded).
__device__ __forceinline__ uint32_t trace_tile_slot(int k, int cw) {
  return (blockIdx.x < kTraceBlocks && k < kTracePerBlock)
             ? ((blockIdx.x * kTracePerBlock + k) * 2 + cw) * kTraceTiles
             : kTraceTileSink;
}
// Thread 0 of a consumer warpgroup: kv tile `t` reached `which`.
__device__ __forceinline__ void trace_tile_stamp(uint32_t slot, int t, TileStamp which) {
  if (t < kTraceTiles) g_sm90_tile_t[(slot + t) * kTileStamps + which] = clock64();
}

// $MLAKIT_SM90_TRACE_FILE.<name>.txt (default /tmp/sm90_trace.<name>.txt), opened for writing;
// null when it cannot be.
static FILE* trace_open(const char* name) {
  const char* env = std::getenv("MLAKIT_SM90_TRACE_FILE");
  char path[512];
  std::snprintf(path, sizeof(path), "%s.%s.txt", env ? env : "/tmp/sm90_trace", name);
  return std::fopen(path, "w");
}

// Registers Dump(tag) to run at process exit, once per dump (and translation unit: internal
// linkage, like the buffers the dumps read). The host launches call it.
template <void (*Dump)(const char*)>
static void trace_register(const char* tag) {
  static std::once_flag once;
  static const char* saved = nullptr;
  std::call_once(once, [&] {
    saved = tag;
    std::atexit([] { Dump(saved); });
  });
}

// The prefill kernel's stamps (unused in translation units of the latent kernel alone).
[[maybe_unused]] static void trace_dump(const char* tag) {
  static TraceRec rec[kTraceBlocks * kTracePerBlock];
  static unsigned long long bt[kTraceBlocks * 2];
  static int n[kTraceBlocks];
  if (cudaDeviceSynchronize() != cudaSuccess) return;
  if (cudaMemcpyFromSymbol(rec, g_sm90_trace, sizeof(rec)) != cudaSuccess) return;
  if (cudaMemcpyFromSymbol(bt, g_sm90_block_t, sizeof(bt)) != cudaSuccess) return;
  if (cudaMemcpyFromSymbol(n, g_sm90_trace_n, sizeof(n)) != cudaSuccess) return;
  static unsigned long long tiles[(kTraceTileSink + kTraceTiles) * kTileStamps];
  if (cudaMemcpyFromSymbol(tiles, g_sm90_tile_t, sizeof(tiles)) != cudaSuccess) return;
  FILE* f = trace_open(tag);
  if (!f) return;
  unsigned long long t0 = ~0ull;
  for (int b = 0; b < kTraceBlocks; ++b)
    if (bt[2 * b] && bt[2 * b] < t0) t0 = bt[2 * b];
  std::fprintf(f, "# times in ns from the first block's start\n# B block start end\n# I block k n_tiles head row0 q_begin begin s0 end qk vlast next pv\n"
                 "# T block k cw: SM cycles from warpgroup 0's tile-0 P ready to this warpgroup's tile-t P ready, t = 0..%d (-1: none)\n"
                 "# U block k cw: the same origin, per tile t: S issued, S landed, softmax done (three numbers per tile)\n",
               kTraceTiles - 1);
  for (int b = 0; b < kTraceBlocks; ++b) {
    if (!bt[2 * b]) continue;
    std::fprintf(f, "B %d %lld %lld\n", b, (long long)(bt[2 * b] - t0), (long long)(bt[2 * b + 1] - t0));
    for (int k = 0; k < n[b] && k < kTracePerBlock; ++k) {
      const TraceRec& r = rec[b * kTracePerBlock + k];
      auto rel = [&](unsigned long long t) { return t ? (long long)(t - t0) : -1ll; };
      std::fprintf(f, "I %d %d %d %d %d %d %lld %lld %lld %lld %lld %lld %lld\n", b, k, r.n_tiles, r.head,
                   r.row0, r.q_begin, rel(r.t_begin), rel(r.t_s0), rel(r.t_end), rel(r.t_qk), rel(r.t_vlast),
                   rel(r.t_next), rel(r.t_pv));
      // T lines: P ready per tile; U lines: S issued, S landed, softmax done per tile. Both count
      // SM cycles from warpgroup 0's tile-0 P ready.
      const unsigned long long* tt = tiles + (b * kTracePerBlock + k) * 2 * kTraceTiles * kTileStamps;
      auto stamp = [&](int cw, int t, int w) { return tt[(cw * kTraceTiles + t) * kTileStamps + w]; };
      const unsigned long long base = stamp(0, 0, kTilePReady);
      auto emit = [&](char tag, int first, int count) {
        for (int cw = 0; cw < 2 && base && r.n_tiles > 0; ++cw) {
          std::fprintf(f, "%c %d %d %d", tag, b, k, cw);
          for (int t = 0; t < kTraceTiles; ++t)
            for (int w = first; w < first + count; ++w) {
              const unsigned long long c = stamp(cw, t, w);
              std::fprintf(f, " %lld", (t < r.n_tiles && c) ? (long long)(c - base) : -1ll);
            }
          std::fprintf(f, "\n");
        }
      };
      emit('T', kTilePReady, 1);
      emit('U', kTileIssue, 3);
    }
  }
  std::fclose(f);
}

#endif

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
