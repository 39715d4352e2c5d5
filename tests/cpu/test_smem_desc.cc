// The sm90 kernel's wgmma descriptors (src/cuda/sm90/smem_desc.h): advancing a descriptor by a
// byte offset must give exactly the descriptor built for the advanced address, for every tile
// address and k-step offset the kernel uses, so the kernel may build each product's descriptors
// once and add per k-step.
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/sm90/smem_desc.h"

namespace {

using mlakit::cuda::sm90::smem_desc_advance;
using mlakit::cuda::sm90::smem_desc_sw128;
using mlakit::cuda::sm90::smem_desc_sw64;

TEST(SmemDesc, FieldsLandWhereWgmmaReadsThem) {
  const uint64_t d = smem_desc_sw128(0x12340, 16384, 1024);
  EXPECT_EQ(d & 0x3FFF, 0x12340u >> 4);
  EXPECT_EQ((d >> 16) & 0x3FFF, 16384u >> 4);
  EXPECT_EQ((d >> 32) & 0x3FFF, 1024u >> 4);
  EXPECT_EQ(d >> 62, 1u);
  // Addresses are taken modulo the 256 KB shared window (the field is 14 bits of addr >> 4).
  EXPECT_EQ(smem_desc_sw128(0x40000 + 0x400, 16, 1024), smem_desc_sw128(0x400, 16, 1024));
  // The e4m3 kernel's Q and K: 64-byte swizzle is layout 2, the other fields as above.
  const uint64_t e = smem_desc_sw64(0x12340, 16, 512);
  EXPECT_EQ(e & 0x3FFF, 0x12340u >> 4);
  EXPECT_EQ((e >> 16) & 0x3FFF, 1u);
  EXPECT_EQ((e >> 32) & 0x3FFF, 512u >> 4);
  EXPECT_EQ(e >> 62, 2u);
  EXPECT_EQ(e & ~(3ull << 62), smem_desc_sw128(0x12340, 16, 512) & ~(3ull << 62));
}

TEST(SmemDesc, AdvanceEqualsRebuildFor64ByteSwizzle) {
  // e4m3 Q/K tiles: 512-byte-aligned bases, 32-byte k-steps inside a 64-byte row plus 8 KB boxes.
  int checked = 0;
  for (uint32_t base = 0; base < (1u << 18); base += 512) {
    const uint64_t d0 = smem_desc_sw64(base, 16, 512);
    for (uint32_t off = 0; base + off < (1u << 18) && off < 3 * 8192; off += 32) {
      ASSERT_EQ(smem_desc_advance(d0, off), smem_desc_sw64(base + off, 16, 512)) << base << " + " << off;
      ++checked;
    }
  }
  EXPECT_GT(checked, 100000);
}

TEST(SmemDesc, AdvanceEqualsRebuildEverywhereBelow256KB) {
  // Every 1024-byte-aligned tile base, the offsets the kernel adds (Q/K: 32-byte steps inside a
  // 128-byte row plus whole 16 KB boxes; V: 2048-byte steps of 16 keys), and the LBO/SBO pairs
  // of both operand kinds; the advanced address always stays below 256 KB.
  const uint32_t lbos[] = {16, 16384};
  int checked = 0;
  for (uint32_t base = 0; base < (1u << 18); base += 1024) {
    for (uint32_t lbo : lbos) {
      const uint64_t d0 = smem_desc_sw128(base, lbo, 1024);
      for (uint32_t off = 0; base + off < (1u << 18) && off < 3 * 16384 + 2048; off += 16) {
        ASSERT_EQ(smem_desc_advance(d0, off), smem_desc_sw128(base + off, lbo, 1024))
            << "base " << base << " offset " << off << " lbo " << lbo;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 1000000);
}

}  // namespace
