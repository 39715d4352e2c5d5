// Launch arguments of the CUDA attention kernels (cuda::PrefillArgs) from validated tensors and
// a schedule in the device workspace. Plain host arithmetic, tested on the CPU.
#pragma once

#include "core/backend.h"
#include "contract/prefill_launch.h"

namespace mlakit {
namespace backend {

cuda::PrefillArgs make_prefill_args(const AttentionCall& call);

}  // namespace backend
}  // namespace mlakit
