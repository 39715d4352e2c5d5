// mlakit::StreamGraph's refusals that need no GPU: a CPU device, and (in builds or on machines
// without CUDA) any CUDA device, named by argument. Capture and replay are tested on the GPU
// (tests/gpu/test_mla_step_cuda.cc, CudaMlaGraph.StreamGraphPlansAndReplays).
#include <gtest/gtest.h>

#include "mlakit/mlakit.h"
#include "util/test_util.h"

namespace mlakit {
namespace test {
namespace {

TEST(StreamGraph, RefusesTheCpu) {
  EXPECT_TRUE(throws_error([] { StreamGraph g(Device::cpu()); }, ErrorKind::kUnsupported, "device"));
}

TEST(StreamGraph, RefusesCudaWhereThereIsNone) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is usable here";
  EXPECT_TRUE(throws_error([] { StreamGraph g(Device::cuda(0)); }, ErrorKind::kUnsupported, "device"));
}

}  // namespace
}  // namespace test
}  // namespace mlakit
