// The MLA gather kernels (src/mla/cuda/gather.cu, gather_fp8.cu) on their own, byte for byte
// against the expected result of tests/util/gather_case.h (the CPU op passes the same cases): the
// first launch's gather with the fused cache write (context rows from the cache, new tokens from
// strided kv_c / k_pe into the latent rows and their slots, padding rows zeroed, stale entries
// past the count ignored, the gap of a wide output row untouched) and a context-chunk launch, in
// every cache format (FP8 rows decoded, new tokens encoded as the formats define them: an all-zero
// tile, one below the scale floor, outliers, NaN, +-inf, saturation; the layer scale read from
// device memory).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "mla/mla_ops.h"
#include "mlakit/mlakit.h"
#include "util/gather_case.h"
#include "util/test_util.h"

namespace mlakit {
namespace test {
namespace {

HostTensor int32_tensor(const std::vector<int32_t>& v) {
  HostTensor t(DType::kInt32, {static_cast<int64_t>(v.size())});
  std::memcpy(t.data(), v.data(), v.size() * sizeof(int32_t));
  return t;
}

using GatherParam = std::tuple<int, GatherFormat>;  // block size, cache format

class CudaMlaGatherOp : public ::testing::TestWithParam<GatherParam> {};

TEST_P(CudaMlaGatherOp, FusedCacheWriteAndContextChunk) {
  MLAKIT_SKIP_IF_NO_GPU();
  const Device d = Device::cuda(0);
  const int bs = std::get<0>(GetParam());
  const GatherFormat fmt = std::get<1>(GetParam());
  for (bool fresh : {true, false}) {
    SCOPED_TRACE(fresh ? "first launch (new tokens)" : "context chunk");
    GatherCase g = make_gather_case(bs, fresh, 11 + bs, fmt);
    DeviceTensor cache(g.cache, d), kv_c(g.kv_c, d), k_pe(g.k_pe, d), out(g.out, d), k_scale(g.k_scale_t, d);
    DeviceTensor map(int32_tensor(g.map), d), slots(int32_tensor(g.slots), d), count(int32_tensor(g.count_arr), d);
    const auto i32 = [](const DeviceTensor& t) { return static_cast<const int32_t*>(t.view().data); };
    const auto ops = mla::make_ops(d);
    ops->gather(g.args(cache.view().data, kv_c.view().data, k_pe.view().data, i32(map), i32(slots), i32(count),
                       out.view().data, static_cast<const float*>(k_scale.view().data)),
                nullptr);
    synchronize(d);
    HostTensor got_out = g.out, got_cache = g.cache;
    out.copy_to(got_out);
    cache.copy_to(got_cache);
    if (g.fp8()) EXPECT_TRUE(same_rows(got_out, g.want_out)) << "latent rows";
    else EXPECT_EQ(got_out.bytes(), g.want_out.bytes()) << "latent rows";
    EXPECT_EQ(got_cache.bytes(), g.want_cache.bytes()) << "cache after the launch";
  }
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, CudaMlaGatherOp,
                         ::testing::Combine(::testing::Values(1, 16, 64), ::testing::ValuesIn(all_gather_formats())),
                         [](const ::testing::TestParamInfo<GatherParam>& i) {
                           return std::to_string(std::get<0>(i.param)) + "_" + gather_format_name(std::get<1>(i.param));
                         });

}  // namespace
}  // namespace test
}  // namespace mlakit
