// The MLA gather op of the CPU backend (src/mla/mla_ops_cpu.cc) on its own, byte for byte: the
// first launch's gather that also writes the new tokens into the cache (context rows copied from
// the cache, new tokens straight from strided kv_c / k_pe, each into its slot, padding rows
// zeroed, stale map and slot entries past the count ignored) and a context-chunk launch (cache
// only read), in every cache format: FP8 rows decoded, new tokens encoded into their slots as the
// formats define them (util/kv_cache_spec.h, written independently of the library's codec) and
// gathered as the cache holds them. tests/gpu/test_mla_gather_cuda.cc runs the same cases on the
// CUDA kernels.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "mla/mla_ops.h"
#include "util/gather_case.h"

namespace mlakit {
namespace test {
namespace {

using GatherParam = std::tuple<int, GatherFormat>;  // block size, cache format

class CpuMlaGatherOp : public ::testing::TestWithParam<GatherParam> {};

TEST_P(CpuMlaGatherOp, FusedCacheWriteAndContextChunk) {
  const int bs = std::get<0>(GetParam());
  const GatherFormat fmt = std::get<1>(GetParam());
  for (bool fresh : {true, false}) {
    SCOPED_TRACE(fresh ? "first launch (new tokens)" : "context chunk");
    GatherCase g = make_gather_case(bs, fresh, 11 + bs, fmt);
    const auto ops = mla::make_ops(Device::cpu());
    ops->gather(g.args(g.cache.data(), g.kv_c.data(), g.k_pe.data(), g.map.data(), g.slots.data(),
                       g.count_arr.data(), g.out.data(), static_cast<const float*>(g.k_scale_t.data())),
                nullptr);
    if (g.fp8()) EXPECT_TRUE(same_rows(g.out, g.want_out)) << "latent rows";
    else EXPECT_EQ(g.out.bytes(), g.want_out.bytes()) << "latent rows";
    EXPECT_EQ(g.cache.bytes(), g.want_cache.bytes()) << "cache after the launch";
  }
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, CpuMlaGatherOp,
                         ::testing::Combine(::testing::Values(1, 16, 64), ::testing::ValuesIn(all_gather_formats())),
                         [](const ::testing::TestParamInfo<GatherParam>& i) {
                           return std::to_string(std::get<0>(i.param)) + "_" + gather_format_name(std::get<1>(i.param));
                         });

}  // namespace
}  // namespace test
}  // namespace mlakit
