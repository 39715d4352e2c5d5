// Chooses and launches the CUDA prefill kernel for a problem. The sm80 kernel runs on sm80 and
// newer (including Hopper); a Hopper-specific kernel slots in here behind the same seam.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <mutex>
#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/prefill_launch.h"
#include "cuda/sm80/prefill_kernel.cuh"
#include "mlakit/error.h"

namespace mlakit {
namespace cuda {

namespace {

template <typename T>
int blocks_per_sm_typed(int dqk) {
  if (dqk == 192) return sm80::blocks_per_sm_sm80<T, 192, 128>();
  if (dqk == 128) return sm80::blocks_per_sm_sm80<T, 128, 128>();
  return sm80::blocks_per_sm_sm80<T, 64, 64>();
}

template <typename T>
void launch_typed(int dqk, int dvo, const PrefillArgs& args, int grid, cudaStream_t s) {
  if (dqk == 192 && dvo == 128) return sm80::launch_prefill_sm80<T, 192, 128>(args, grid, s);
  if (dqk == 128 && dvo == 128) return sm80::launch_prefill_sm80<T, 128, 128>(args, grid, s);
  if (dqk == 64 && dvo == 64) return sm80::launch_prefill_sm80<T, 64, 64>(args, grid, s);
  throw Error(ErrorKind::kUnsupported, "head_dim",
              "no CUDA kernel for (Dqk, Dvo) = (" + std::to_string(dqk) + ", " +
                  std::to_string(dvo) + ")");
}

}  // namespace

// The explicit instantiations live in src/cuda/sm80/prefill_sm80_*.cu, one per file.
namespace sm80 {
extern template void launch_prefill_sm80<__nv_bfloat16, 192, 128>(const PrefillArgs&, int, cudaStream_t);
extern template void launch_prefill_sm80<__half, 192, 128>(const PrefillArgs&, int, cudaStream_t);
extern template void launch_prefill_sm80<__nv_bfloat16, 128, 128>(const PrefillArgs&, int, cudaStream_t);
extern template void launch_prefill_sm80<__half, 128, 128>(const PrefillArgs&, int, cudaStream_t);
extern template void launch_prefill_sm80<__nv_bfloat16, 64, 64>(const PrefillArgs&, int, cudaStream_t);
extern template void launch_prefill_sm80<__half, 64, 64>(const PrefillArgs&, int, cudaStream_t);
extern template int blocks_per_sm_sm80<__nv_bfloat16, 192, 128>();
extern template int blocks_per_sm_sm80<__nv_bfloat16, 128, 128>();
extern template int blocks_per_sm_sm80<__nv_bfloat16, 64, 64>();
extern template int blocks_per_sm_sm80<__half, 192, 128>();
extern template int blocks_per_sm_sm80<__half, 128, 128>();
extern template int blocks_per_sm_sm80<__half, 64, 64>();
}  // namespace sm80

bool prefill_supported(int dqk, int dvo, DType dtype) {
  if (dtype != DType::kBF16 && dtype != DType::kFP16) return false;
  return (dqk == 192 && dvo == 128) || (dqk == 128 && dvo == 128) || (dqk == 64 && dvo == 64);
}

KernelChoice choose_prefill_kernel(int dqk, int dvo, DType dtype, int /*num_qo_heads*/,
                                   Device device) {
  if (!prefill_supported(dqk, dvo, dtype)) {
    throw Error(ErrorKind::kUnsupported, "head_dim",
                "no CUDA kernel for (Dqk, Dvo) = (" + std::to_string(dqk) + ", " +
                    std::to_string(dvo) + ") in " + dtype_name(dtype));
  }
  int prev = 0;
  MLAKIT_CUDA_CHECK(cudaGetDevice(&prev));
  if (prev != device.index) MLAKIT_CUDA_CHECK(cudaSetDevice(device.index));
  cudaDeviceProp prop{};
  MLAKIT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device.index));
  if (prop.major < 8) {
    throw Error(ErrorKind::kUnsupported, "config.device",
                std::string("the CUDA kernels need compute capability 8.0 or newer; ") + prop.name +
                    " is " + std::to_string(prop.major) + "." + std::to_string(prop.minor));
  }
  int per_sm = dtype == DType::kBF16 ? blocks_per_sm_typed<__nv_bfloat16>(dqk)
                                     : blocks_per_sm_typed<__half>(dqk);
  if (per_sm < 1) per_sm = 1;
  if (prev != device.index) MLAKIT_CUDA_CHECK(cudaSetDevice(prev));
  KernelChoice c{};
  c.block_m = sm80::KernelShape<192, 128>::BM;
  c.block_n = sm80::KernelShape<192, 128>::BN;
  c.grid_blocks = prop.multiProcessorCount * per_sm;
  c.arch = 80;
  return c;
}

void launch_prefill(const KernelChoice& choice, int dqk, int dvo, DType dtype,
                    const PrefillArgs& args, Stream stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (dtype == DType::kBF16) {
    launch_typed<__nv_bfloat16>(dqk, dvo, args, choice.grid_blocks, s);
  } else if (dtype == DType::kFP16) {
    launch_typed<__half>(dqk, dvo, args, choice.grid_blocks, s);
  } else {
    throw Error(ErrorKind::kTypeMismatch, "q", std::string("CUDA prefill needs bf16 or fp16, got ") +
                                                   dtype_name(dtype));
  }
}

}  // namespace cuda
}  // namespace mlakit
