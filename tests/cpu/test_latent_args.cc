// A run's launch arguments (backend::make_latent_args) as the CUDA kernel reads them: the cache's
// block size, and which caches it copies in whole 64-key tiles by TMA (latent::cache_tiles_by_tma:
// 16-bit rows in blocks of 64 or more laid end to end, slot numbers in int32).
#include <gtest/gtest.h>

#include <cstdint>

#include "contract/latent_launch.h"
#include "core/latent_args.h"
#include "mlakit/latent.h"

namespace mlakit {
namespace test {
namespace {

constexpr int64_t kRow = 576;

// The arguments of a run over a [blocks, block_size, 576] cache whose blocks are `block_stride`
// elements apart (0: laid end to end).
latent::LatentArgs args_for(int block_size, int64_t blocks, int64_t block_stride = 0,
                            KvCacheDtype cache = KvCacheDtype::kAuto) {
  LatentConfig c;
  c.num_heads = 16;
  c.block_size = block_size;
  c.num_blocks = blocks;
  c.kv_cache_dtype = cache;
  static uint16_t dummy[8];
  const int64_t stride = block_stride > 0 ? block_stride : block_size * kRow;
  LatentLayer y;
  y.q = TensorView(dummy, DType::kBF16, {1, 16, kRow});
  y.kv_cache = TensorView(dummy, DType::kBF16, {blocks, block_size, kRow}, {stride, kRow, 1});
  TensorView out(dummy, DType::kBF16, {1, 16, 512});
  return backend::make_latent_args(c, y, out, nullptr, nullptr, nullptr, 0);
}

TEST(LatentArgs, CarriesTheCacheShape) {
  const latent::LatentArgs a = args_for(128, 10);
  EXPECT_EQ(a.block_size, 128);
  EXPECT_EQ(a.num_slots, 1280);
  EXPECT_EQ(a.cache_stride_block, 128 * kRow);
  EXPECT_EQ(a.cache_stride_row, kRow);
}

TEST(LatentArgs, WholeTilesByTmaOnlyFromBlocksOf64RowsOrMoreLaidEndToEnd) {
  for (int bs : {64, 128, 256}) EXPECT_TRUE(latent::cache_tiles_by_tma(args_for(bs, 100))) << "page " << bs;
  // A 64-key tile spans several smaller blocks: row by row.
  for (int bs : {1, 8, 16, 32}) EXPECT_FALSE(latent::cache_tiles_by_tma(args_for(bs, 100))) << "page " << bs;
  // Padded blocks are not one matrix of rows.
  EXPECT_FALSE(latent::cache_tiles_by_tma(args_for(64, 100, 65 * kRow)));
  // FP8 rows are decoded as they are copied.
  EXPECT_FALSE(latent::cache_tiles_by_tma(args_for(64, 100, 0, KvCacheDtype::kFp8DsMla)));
  EXPECT_FALSE(latent::cache_tiles_by_tma(args_for(64, 100, 0, KvCacheDtype::kFp8)));
  // Slot numbers past int32 are past TMA's coordinates.
  latent::LatentArgs big = args_for(64, 100);
  big.num_slots = int64_t{INT32_MAX} + 1;
  EXPECT_FALSE(latent::cache_tiles_by_tma(big));
}

}  // namespace
}  // namespace test
}  // namespace mlakit
