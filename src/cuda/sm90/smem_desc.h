// wgmma shared-memory matrix descriptors: plain integer arithmetic, host and device, so the CPU
// tests check it (tests/cpu/test_smem_desc.cc) without a GPU.
#pragma once

#include <cstdint>

#include "contract/host_device.h"

namespace mlakit {
namespace cuda {
namespace sm90 {

// Shared-memory matrix descriptor for a tile stored in 128-byte-swizzled rows (what TMA writes
// with CU_TENSOR_MAP_SWIZZLE_128B; 8-row atoms of 1024 bytes, 1024-byte aligned):
//   bits  0-13 start address >> 4, 16-29 leading-dimension byte offset >> 4,
//   bits 32-45 stride-dimension byte offset >> 4, 62-63 layout (1 = 128-byte swizzle).
// K-major operands (Q, K): SBO = 1024 (next 8 rows), LBO unused. MN-major B (V): LBO = bytes
// between 64-column blocks, SBO = 1024 (next 8 rows of k).
MLAKIT_HD uint64_t smem_desc_sw128(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

// The same for a tile in 64-byte-swizzled rows (TMA's CU_TENSOR_MAP_SWIZZLE_64B: 8-row atoms of
// 512 bytes, 512-byte aligned; the e4m3 kernel's Q and K, 64 one-byte columns per row): layout 2.
// K-major: SBO = 512 (next 8 rows), LBO unused.
MLAKIT_HD uint64_t smem_desc_sw64(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32) | (2ull << 62);
}

// The descriptor of the tile `bytes` (a multiple of 16) past the one `d` describes, with one
// 32-bit add: the start address field is addr >> 4 in the low 14 bits, and every shared-memory
// tile lies below 256 KB, so the field never carries into the bits above it. Each k-step of a
// wgmma sequence then costs one uniform add instead of rebuilding its descriptors (mask, shift,
// or): 44 fewer uniform instructions per consumer warp and kv tile at Dqk = 192, +1-3% at
// (128, 128) and on the ragged batches (docs/performance.md).
MLAKIT_HD uint64_t smem_desc_advance(uint64_t d, uint32_t bytes) {
  const uint32_t lo = static_cast<uint32_t>(d) + (bytes >> 4);
  return (d & 0xFFFFFFFF00000000ull) | lo;
}

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
