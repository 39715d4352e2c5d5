// The MLA gather op of the CPU backend (src/mla/mla_ops_cpu.cc) on its own, byte for byte: the
// first launch's gather that also writes the new tokens into the cache (context rows copied from
// the cache, new tokens straight from strided kv_c / k_pe, each into its slot, padding rows
// zeroed, stale map and slot entries past the count ignored) and a context-chunk launch (cache
// only read). tests/gpu/test_mla_gather_cuda.cc runs the same cases on the CUDA kernel.
#include <gtest/gtest.h>

#include "mla/mla_ops.h"
#include "util/gather_case.h"

namespace mlakit {
namespace test {
namespace {

class CpuMlaGatherOp : public ::testing::TestWithParam<int> {};  // block size

TEST_P(CpuMlaGatherOp, FusedCacheWriteAndContextChunk) {
  for (bool fresh : {true, false}) {
    SCOPED_TRACE(fresh ? "first launch (new tokens)" : "context chunk");
    GatherCase g = make_gather_case(GetParam(), fresh, 11 + GetParam());
    const auto ops = mla::make_ops(Device::cpu());
    ops->gather(g.args(g.cache.data(), g.kv_c.data(), g.k_pe.data(), g.map.data(), g.slots.data(),
                       g.count_arr.data(), g.out.data()),
                nullptr);
    EXPECT_EQ(g.out.bytes(), g.want_out.bytes()) << "latent rows";
    EXPECT_EQ(g.cache.bytes(), g.want_cache.bytes()) << "cache after the launch";
  }
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, CpuMlaGatherOp, ::testing::Values(1, 16, 64));

}  // namespace
}  // namespace test
}  // namespace mlakit
