// The AMX tile operations of the CPU backend's amx path (attention_amx.cc, gemm_bf16_amx.cc), in
// one configuration for every use: the eight tiles tmm0..tmm7 all 16 rows x 64 bytes, so a tile
// is 16 x 32 bf16 (an A operand: 16 rows of 32 values), 16 x 16 bf16 pairs (a B operand in the
// pair-interleaved layout: row x holds pair x of 16 columns) or 16 x 16 fp32 (a C accumulator).
//
//   tile_config()       LDTILECFG with that configuration; once per work item, before any tile op
//   tile_release()      TILERELEASE: the tiles back to their init state (an item's end)
//   tile_zero<T>()      TILEZERO
//   tile_load<T>(p, s)  TILELOADD: 16 rows of 64 bytes from p, p + s, ...
//   tile_store<T>(p, s) TILESTORED
//   tile_dp<C, A, B>()  TDPBF16PS: C[m][n] += sum over pairs x of A[m][2x] B[x][2n] + A[m][2x + 1] B[x][2n + 1]
//
// Real build: the instructions as inline assembly (the assembler knows them; no -m flag and no
// amx target attribute is needed, so one binary runs everywhere, cpu_isa.h decides at run time,
// and the tile operations inline into the AVX-512 functions of the softmax, which interleaves
// them with its own work). They are written here rather than taken from GCC's <immintrin.h>
// because its tileloadd and ldtilecfg declare no memory read (its ldtilecfg declares 8 of the 64
// bytes), so the compiler could move the stores that fill a tile's source (the softmax's P, the
// packed Q) past them. Here every load and store clobbers memory.
//
// MLAKIT_CPU_AMX_EMULATE (CMake option of the same name, tests only): the same operations in
// plain C++ on a per-thread array of eight tiles, with TDPBF16PS's arithmetic (bf16 products,
// exact in fp32, added to the fp32 accumulator in the instruction's order: pairs in order, the
// low then the high product, each addition rounded to nearest even; denormal inputs and outputs
// are not flushed as the hardware does, which no test depends on). It lets the amx path run and
// be checked against the float64 reference on a CPU without AMX.
#pragma once

#include <cstdint>
#include <cstring>

#define MLAKIT_TILE_OP __attribute__((always_inline)) inline

namespace mlakit {
namespace cpu {
namespace amx {

constexpr int kTileRows = 16;   // rows of every tile
constexpr int kTileBytes = 64;  // bytes per tile row: 32 bf16, 16 pairs or 16 fp32

#if !defined(MLAKIT_CPU_AMX_EMULATE)

// Palette 1, tiles 0..7 of 16 rows x 64 bytes (bytes 16..47: each tile's bytes per row as a
// 16-bit value; bytes 48..63: each tile's rows).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {kTileBytes, kTileBytes, kTileBytes, kTileBytes, kTileBytes, kTileBytes, kTileBytes, kTileBytes};
  uint8_t rows[16] = {kTileRows, kTileRows, kTileRows, kTileRows, kTileRows, kTileRows, kTileRows, kTileRows};
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

MLAKIT_TILE_OP void tile_config() {
  static const TileConfig cfg;
  __asm__ volatile("ldtilecfg %0" ::"m"(cfg) : "memory");
}

MLAKIT_TILE_OP void tile_release() { __asm__ volatile("tilerelease" ::: "memory"); }

template <int T>
MLAKIT_TILE_OP void tile_zero() {
  __asm__ volatile("tilezero %%tmm%c0" ::"i"(T));
}

template <int T>
MLAKIT_TILE_OP void tile_load(const void* base, int64_t stride) {
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(base), "r"(stride), "i"(T) : "memory");
}

template <int T>
MLAKIT_TILE_OP void tile_store(void* base, int64_t stride) {
  __asm__ volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(base), "r"(stride), "i"(T) : "memory");
}

template <int C, int A, int B>
MLAKIT_TILE_OP void tile_dp() {
  static_assert(C != A && C != B && A != B, "TDPBF16PS takes three different tiles");
  __asm__ volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
}

#else  // MLAKIT_CPU_AMX_EMULATE

struct EmulatedTiles {
  alignas(64) unsigned char t[8][kTileRows][kTileBytes];
  bool configured = false;
};

inline EmulatedTiles& emulated_tiles() {
  thread_local EmulatedTiles tiles;
  return tiles;
}

// The hardware faults on a tile instruction before LDTILECFG; the emulation stops the same way.
inline unsigned char (*emulated_tile(int t))[kTileBytes] {
  EmulatedTiles& e = emulated_tiles();
  if (!e.configured) __builtin_trap();
  return e.t[t];
}

inline void tile_config() {
  EmulatedTiles& e = emulated_tiles();
  std::memset(e.t, 0, sizeof(e.t));  // LDTILECFG zeroes the tiles
  e.configured = true;
}

inline void tile_release() { emulated_tiles().configured = false; }

template <int T>
inline void tile_zero() {
  std::memset(emulated_tile(T), 0, kTileRows * kTileBytes);
}

template <int T>
inline void tile_load(const void* base, int64_t stride) {
  unsigned char(*t)[kTileBytes] = emulated_tile(T);
  for (int r = 0; r < kTileRows; ++r) std::memcpy(t[r], static_cast<const char*>(base) + r * stride, kTileBytes);
}

template <int T>
inline void tile_store(void* base, int64_t stride) {
  unsigned char(*t)[kTileBytes] = emulated_tile(T);
  for (int r = 0; r < kTileRows; ++r) std::memcpy(static_cast<char*>(base) + r * stride, t[r], kTileBytes);
}

inline float emulated_bf16(const unsigned char* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

template <int C, int A, int B>
inline void tile_dp() {
  static_assert(C != A && C != B && A != B, "TDPBF16PS takes three different tiles");
  unsigned char(*c)[kTileBytes] = emulated_tile(C);
  unsigned char(*a)[kTileBytes] = emulated_tile(A);
  unsigned char(*b)[kTileBytes] = emulated_tile(B);
  for (int m = 0; m < kTileRows; ++m) {
    float acc[16];
    std::memcpy(acc, c[m], sizeof(acc));
    for (int x = 0; x < 16; ++x) {
      const float a0 = emulated_bf16(a[m] + 4 * x), a1 = emulated_bf16(a[m] + 4 * x + 2);
      for (int n = 0; n < 16; ++n) {
        // Each product of two bf16 is exact in fp32: one rounding per addition, as the hardware.
        acc[n] += a0 * emulated_bf16(b[x] + 4 * n);
        acc[n] += a1 * emulated_bf16(b[x] + 4 * n + 2);
      }
    }
    std::memcpy(c[m], acc, sizeof(acc));
  }
}

#endif

}  // namespace amx
}  // namespace cpu
}  // namespace mlakit
