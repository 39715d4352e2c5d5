// The e4m3 V transpose's addressing (vtranspose_sm90.cuh explains the transpose): per lane, where
// its ldmatrix row and stmatrix row lie, which prmt selectors build its registers, and which keys
// it zeroes past a sequence's end. Plain host/device arithmetic, so the CPU tests replay the
// transpose and P V's operand layouts with it (tests/cpu/test_fp8_layout.cc).
#pragma once

#include <cstdint>

#include "contract/host_device.h"

namespace mlakit {
namespace cuda {
namespace sm90 {

// The raw V stage: 128 keys x 128 values in two 64-value boxes of 64-byte rows (TMA's 64-byte
// swizzle: row r's 16-byte chunk c at chunk c ^ ((r >> 1) & 3)). The transposed stage: 128 value
// rows x 128 keys, 128-byte rows (128-byte swizzle: row d's chunk j at chunk j ^ (d & 7)).
constexpr uint32_t kVtRawBoxBytes = 128 * 64;

struct VtLane {
  uint32_t src_row;  // byte offset of this lane's ldmatrix row (key) inside a 16-key group
  uint32_t src_xor;  // its 64-byte swizzle term
  uint32_t src_hi;   // 1: the upper 16 values of a 32-value block
  uint32_t dst_row;  // byte offset of this lane's stmatrix row (value column) inside a 32-value block
  uint32_t dst_xor;  // its 128-byte swizzle term
  uint32_t sel_a, sel_b;  // prmt selectors of the even and odd matrices
  int c;             // this lane's key pairs 2c, 2c + 1 and 8 + 2c, 9 + 2c
};

MLAKIT_HD VtLane vt_lane(int lane) {
  VtLane l;
  // ldmatrix: lane gives row lane % 8 of matrix lane / 8: keys + 0 / + 8 (bit 3), values + 0 /
  // + 16 (bit 4).
  const int key = (lane & 7) + ((lane >> 3) & 1) * 8;
  l.src_row = static_cast<uint32_t>(key) * 64;
  l.src_xor = static_cast<uint32_t>((key >> 1) & 3);  // (16 j + key) >> 1 & 3: 16 j drops out
  l.src_hi = static_cast<uint32_t>(lane >> 4);
  // stmatrix: lane gives row i = lane % 8 of matrix m = lane / 8, value column
  // 16 (m >> 1) + (i < 4 ? 2i + (m & 1) : 2i + 1 - (m & 1)): 8 distinct columns mod 8, so 8
  // distinct 16-byte bank groups under the swizzle.
  const int m = lane >> 3, i = lane & 7;
  const int col = 16 * (m >> 1) + (i < 4 ? 2 * i + (m & 1) : 2 * i + 1 - (m & 1));
  l.dst_row = static_cast<uint32_t>(col) * 128;
  l.dst_xor = static_cast<uint32_t>(col & 7);
  // This lane's registers go to rows lane / 4 of the four matrices: value 2q for rows q < 4 of
  // the even matrices and rows q >= 4 of the odd ones, value 2q + 1 otherwise.
  const bool low_rows = (lane >> 2) < 4;
  l.sel_a = low_rows ? 0x6420u : 0x7531u;
  l.sel_b = low_rows ? 0x7531u : 0x6420u;
  l.c = lane & 3;
  return l;
}

// Byte offsets inside the raw and the transposed stage of the block of keys 16j..16j+15 and values
// 32u..32u+31.
MLAKIT_HD uint32_t vt_src_offset(const VtLane& l, int j, int u) {
  const uint32_t chunk = static_cast<uint32_t>(2 * u) + l.src_hi;  // 16-value chunk of the key's row
  return (chunk >> 2) * kVtRawBoxBytes + static_cast<uint32_t>(j) * 16 * 64 + l.src_row +
         (((chunk & 3) ^ l.src_xor) << 4);
}
MLAKIT_HD uint32_t vt_dst_offset(const VtLane& l, int j, int u) {
  return static_cast<uint32_t>(u) * 32 * 128 + l.dst_row + ((static_cast<uint32_t>(j) ^ l.dst_xor) << 4);
}

// Byte masks of this lane's registers for key group j when `keys` of the tile's keys belong to the
// sequence: *lo for keys 2c, 2c + 1 (registers 0, 2), *hi for 8 + 2c, 9 + 2c (1, 3).
MLAKIT_HD void vt_keep_masks(const VtLane& l, int j, int keys, uint32_t* lo, uint32_t* hi) {
  const int k0 = 16 * j + 2 * l.c;
  *lo = (k0 < keys ? 0x0000ffffu : 0u) | (k0 + 1 < keys ? 0xffff0000u : 0u);
  *hi = (k0 + 8 < keys ? 0x0000ffffu : 0u) | (k0 + 9 < keys ? 0xffff0000u : 0u);
}

// P for the e4m3 P V (pack_p, mainloop_sm90.cuh): byte b of register r of k-step kk is the S
// accumulator s[4 kk + p_acc_block(r, b)][p_acc_elem(r, b)]: lane (g, c) holds columns 2c, 2c + 1
// of each 8-key block (elements 0, 1 of row g, 2, 3 of row g + 8), and the FP8 A operand reads
// register r as row g (r even) or g + 8 (r odd), k = 16 (r >> 1) + 4c + b. So k position
// 16 h + 4c + b holds key 16 h + 2c + (b & 1) + 8 (b >> 1): vt_key_of_position below.
MLAKIT_HD int p_acc_block(int r, int b) { return 2 * (r >> 1) + (b >> 1); }
MLAKIT_HD int p_acc_elem(int r, int b) { return 2 * (r & 1) + (b & 1); }

// The key that byte position p (0..15) of a 16-key group holds after the transpose, and that P's
// packed byte p refers to: 2 (p / 4) + (p & 1) + 8 ((p >> 1) & 1).
MLAKIT_HD int vt_key_of_position(int p) { return 2 * (p >> 2) + (p & 1) + 8 * ((p >> 1) & 1); }

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
