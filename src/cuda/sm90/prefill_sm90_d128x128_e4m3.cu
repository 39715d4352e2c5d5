// One explicit instantiation per translation unit keeps builds parallel and short.
#include "cuda/sm90/prefill_launch_sm90.cuh"

namespace mlakit {
namespace cuda {
MLAKIT_DEFINE_SM90_KERNEL(e4m3, 128, 128)
}  // namespace cuda
}  // namespace mlakit
