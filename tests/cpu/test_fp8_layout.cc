// The e4m3 kernel's P V operands, replayed on the CPU with the kernel's own address arithmetic
// (src/cuda/sm90/vtranspose_layout.h) and models of the instructions it uses: ldmatrix .x4 .trans
// and stmatrix .x4 (b16, PTX ISA), prmt, TMA's 64-byte swizzle of the V stage, wgmma's 128-byte
// swizzled K-major B operand and its e4m3 A-register fragment (row g / g + 8, k 4c + byte, k + 16
// for registers 2, 3; FlashAttention-3's convert_layout_acc_Aregs). Checks that the transposed V
// holds every key where P's packing puts it (so P V is exact), that keys past a sequence's end are
// zero, that every byte is written, and that no ldmatrix / stmatrix phase has a bank conflict.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "cuda/sm90/vtranspose_layout.h"

namespace mlakit {
namespace cuda {
namespace sm90 {
namespace {

uint16_t ld16(const std::vector<uint8_t>& m, uint32_t a) { return static_cast<uint16_t>(m[a] | (m[a + 1] << 8)); }

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: lane l gives the address of row l % 8 of matrix
// l / 8; thread t receives in register m the elements (2c, q) and (2c + 1, q) of matrix m
// (q = t / 4, c = t % 4; rows as addressed, 16-byte rows of 8 b16 columns), low half first.
void ldmatrix_x4_trans(const std::vector<uint8_t>& smem, const uint32_t (&addr)[32], uint32_t (&out)[32][4]) {
  for (int m = 0; m < 4; ++m)
    for (int t = 0; t < 32; ++t) {
      const int q = t / 4, c = t % 4;
      const uint32_t lo = ld16(smem, addr[m * 8 + 2 * c] + 2 * q), hi = ld16(smem, addr[m * 8 + 2 * c + 1] + 2 * q);
      out[t][m] = lo | (hi << 16);
    }
}

// stmatrix.sync.aligned.m8n8.x4.shared.b16: lane l gives the address of row l % 8 of matrix l / 8;
// thread t's register m holds row t / 4, b16 columns 2 (t % 4) and + 1 of matrix m.
void stmatrix_x4(std::vector<uint8_t>& smem, const uint32_t (&addr)[32], const uint32_t (&in)[32][4]) {
  for (int m = 0; m < 4; ++m)
    for (int t = 0; t < 32; ++t) {
      const uint32_t a = addr[m * 8 + t / 4] + 4 * (t % 4);
      for (int b = 0; b < 4; ++b) smem[a + b] = static_cast<uint8_t>(in[t][m] >> (8 * b));
    }
}

// prmt.b32 d, a, b, sel (default mode): byte i of d is byte (sel >> 4i) & 7 of {b, a}.
uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  const uint64_t src = (static_cast<uint64_t>(b) << 32) | a;
  uint32_t d = 0;
  for (int i = 0; i < 4; ++i) d |= static_cast<uint32_t>((src >> (8 * ((sel >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return d;
}

// Where TMA's 64-byte swizzle puts V[key][value] in the raw stage (two boxes of 64 values).
uint32_t raw_offset(int key, int value) {
  const int col = value % 64;
  return (value / 64) * kVtRawBoxBytes + key * 64 + ((((col / 16) ^ ((key >> 1) & 3)) * 16)) + col % 16;
}
// Where wgmma's K-major, 128-byte swizzled B operand reads (row n, k) of the transposed stage.
uint32_t vt_offset(int n, int k) { return (n >> 3) * 1024 + (n & 7) * 128 + (((k >> 4) ^ (n & 7)) * 16) + (k & 15); }

// The transposing warps' work on one stage: warps 0 and 1, key groups [4w, 4w + 4), values in
// blocks of 32 (transpose_v_stage). Also checks each instruction's phases for bank conflicts: a
// matrix's 8 rows must fall in 8 distinct 16-byte bank groups.
void transpose(const std::vector<uint8_t>& raw, std::vector<uint8_t>& vt, int keys) {
  for (int w = 0; w < 2; ++w)
    for (int jj = 0; jj < 4; ++jj)
      for (int u = 0; u < 4; ++u) {
        const int j = 4 * w + jj;
        uint32_t src[32], dst[32], regs[32][4], outs[32][4];
        for (int lane = 0; lane < 32; ++lane) {
          const VtLane l = vt_lane(lane);
          src[lane] = vt_src_offset(l, j, u);
          dst[lane] = vt_dst_offset(l, j, u);
        }
        for (int m = 0; m < 4; ++m) {
          std::set<uint32_t> ld_groups, st_groups;
          for (int i = 0; i < 8; ++i) {
            ld_groups.insert((src[m * 8 + i] / 16) % 8);
            st_groups.insert((dst[m * 8 + i] / 16) % 8);
          }
          EXPECT_EQ(ld_groups.size(), 8u) << "ldmatrix bank conflict, matrix " << m;
          EXPECT_EQ(st_groups.size(), 8u) << "stmatrix bank conflict, matrix " << m;
        }
        ldmatrix_x4_trans(raw, src, regs);
        for (int lane = 0; lane < 32; ++lane) {
          const VtLane l = vt_lane(lane);
          uint32_t lo = 0xffffffffu, hi = 0xffffffffu;
          if (keys < 128) vt_keep_masks(l, j, keys, &lo, &hi);
          const uint32_t r0 = regs[lane][0] & lo, r1 = regs[lane][1] & hi, r2 = regs[lane][2] & lo,
                         r3 = regs[lane][3] & hi;
          outs[lane][0] = prmt(r0, r1, l.sel_a);
          outs[lane][1] = prmt(r0, r1, l.sel_b);
          outs[lane][2] = prmt(r2, r3, l.sel_a);
          outs[lane][3] = prmt(r2, r3, l.sel_b);
        }
        stmatrix_x4(vt, dst, outs);
      }
}

TEST(Fp8Layout, KeyOrderIsAPermutationOfEachGroupOf16) {
  std::set<int> keys;
  for (int p = 0; p < 16; ++p) keys.insert(vt_key_of_position(p));
  EXPECT_EQ(keys.size(), 16u);
  EXPECT_EQ(*keys.begin(), 0);
  EXPECT_EQ(*keys.rbegin(), 15);
  // FlashAttention-3's / FlashInfer's order: (2, 2, 4) : (1, 8, 2).
  for (int p = 0; p < 16; ++p) EXPECT_EQ(vt_key_of_position(p), (p & 1) + 8 * ((p >> 1) & 1) + 2 * (p >> 2));
}

TEST(Fp8Layout, TransposeWritesEveryKeyWhereTheWgmmaReadsItAndZeroesKeysPastTheEnd) {
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int keys : {128, 127, 100, 64, 17, 1}) {
    std::vector<uint8_t> v(128 * 128), raw(2 * kVtRawBoxBytes), vt(128 * 128, 0xA5);
    for (auto& x : v) x = static_cast<uint8_t>(byte(rng));
    for (int key = 0; key < 128; ++key)
      for (int val = 0; val < 128; ++val) raw[raw_offset(key, val)] = v[key * 128 + val];
    transpose(raw, vt, keys);
    int wrong = 0;
    for (int n = 0; n < 128; ++n)
      for (int k = 0; k < 128; ++k) {
        const int key = 16 * (k / 16) + vt_key_of_position(k % 16);
        const uint8_t want = key < keys ? v[key * 128 + n] : 0;
        wrong += vt[vt_offset(n, k)] != want;
      }
    EXPECT_EQ(wrong, 0) << "keys " << keys;
  }
}

// O = P V through the operands as the wgmmas read them: P packed from the S accumulator layout
// into e4m3 A registers (pack_p's order, p_acc_block / p_acc_elem), V transposed, summed over the
// wgmma's k; small integers, so every sum is exact whatever the order.
TEST(Fp8Layout, PackedPTimesTransposedVIsPV) {
  std::mt19937_64 rng(2);
  std::uniform_int_distribution<int> small(-3, 3);
  const int keys = 113;  // a last tile: the keys past it are zero in V, whatever P holds there
  std::vector<int> p(64 * 128), v(128 * 128);
  for (auto& x : p) x = small(rng);
  for (auto& x : v) x = small(rng);
  std::vector<uint8_t> raw(2 * kVtRawBoxBytes), vt(128 * 128);
  for (int key = 0; key < 128; ++key)
    for (int val = 0; val < 128; ++val) raw[raw_offset(key, val)] = static_cast<uint8_t>(v[key * 128 + val]);
  transpose(raw, vt, keys);
  // A[row][k] for the 64 rows of a warpgroup: warp w4 holds rows 16 w4 .. + 15; lane (g, c) holds
  // in its S accumulator s[n][e] row 16 w4 + g + 8 (e >> 1), key 8n + 2c + (e & 1); pack_p puts
  // s[4kk + p_acc_block(r, b)][p_acc_elem(r, b)] in byte b of register r of k-step kk; the e4m3
  // A fragment reads that byte as row 16 w4 + g + 8 (r & 1), k = 32 kk + 16 (r >> 1) + 4c + b.
  std::vector<int> a(64 * 128, 1000);
  for (int w4 = 0; w4 < 4; ++w4)
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4, c = lane % 4;
      for (int kk = 0; kk < 4; ++kk)
        for (int r = 0; r < 4; ++r)
          for (int b = 0; b < 4; ++b) {
            const int n = 4 * kk + p_acc_block(r, b), e = p_acc_elem(r, b);
            const int acc_row = 16 * w4 + g + 8 * (e >> 1), acc_key = 8 * n + 2 * c + (e & 1);
            const int a_row = 16 * w4 + g + 8 * (r & 1), a_k = 32 * kk + 16 * (r >> 1) + 4 * c + b;
            EXPECT_EQ(acc_row, a_row) << "a register mixes rows";
            a[a_row * 128 + a_k] = p[acc_row * 128 + acc_key];
          }
    }
  for (int x : a) ASSERT_NE(x, 1000) << "an A element no register fills";
  int wrong = 0;
  for (int row = 0; row < 64; ++row)
    for (int n = 0; n < 128; ++n) {
      long got = 0, want = 0;
      for (int k = 0; k < 128; ++k) got += static_cast<long>(a[row * 128 + k]) * static_cast<int8_t>(vt[vt_offset(n, k)]);
      for (int key = 0; key < keys; ++key) want += static_cast<long>(p[row * 128 + key]) * v[key * 128 + n];
      wrong += got != want;
    }
  EXPECT_EQ(wrong, 0);
}

}  // namespace
}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
