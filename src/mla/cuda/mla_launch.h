// The seam between the MLA host code (src/mla) and its CUDA kernels: plain C++, no CUDA headers.
// Implemented in src/mla/cuda/*.cu, stubbed in src/mla/cuda/no_cuda.cc.
#pragma once

#include "mla/mla_ops.h"

namespace mlakit {
namespace cuda {
namespace mla {

// The gather (with the fused cache write of the new tokens; mla_ops.h). Throws
// mlakit::Error(kRuntime) on a launch failure. rows == 0 launches nothing.
void launch_gather(const mlakit::mla::GatherArgs& args, Stream stream);
// The same on an FP8 cache (args.cache.format kFp8 or kFp8DsMla; gather_fp8.cu).
void launch_gather_fp8(const mlakit::mla::GatherArgs& args, Stream stream);
// Rows copied by index (mla_ops.h, RowCopyArgs; row_copy_by_index.cu). rows == 0 launches nothing.
void launch_copy_rows(const mlakit::mla::RowCopyArgs& args, Stream stream);

}  // namespace mla
}  // namespace cuda
}  // namespace mlakit
