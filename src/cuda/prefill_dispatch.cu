// Chooses a prefill kernel from the build's table (plan/kernel_select.h holds the rules) and sizes
// its persistent grid on the device; launches through the entry.
#include <cuda_runtime.h>

#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_guard.h"
#include "contract/prefill_launch.h"
#include "mlakit/error.h"
#include "plan/kernel_select.h"

namespace mlakit {
namespace cuda {

bool prefill_supported(int dqk, int dvo, DType dtype, DType out_dtype) {
  int n = 0;
  const KernelEntry* const* table = kernel_table(&n);
  for (int i = 0; i < n; ++i) {
    if (plan::kernel_computes(*table[i], dtype, out_dtype, dqk, dvo)) return true;
  }
  return false;
}

KernelChoice choose_prefill_kernel(int dqk, int dvo, DType dtype, DType out_dtype, int /*num_qo_heads*/,
                                   Device device, KernelPreference preference) {
  DeviceGuard guard(device.index);
  cudaDeviceProp prop{};
  MLAKIT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device.index));
  if (prop.major < 8) {
    throw Error(ErrorKind::kUnsupported, "config.device",
                std::string("the CUDA kernels need compute capability 8.0 or newer; ") + prop.name +
                    " is " + std::to_string(prop.major) + "." + std::to_string(prop.minor));
  }
  int n = 0;
  const KernelEntry* const* table = kernel_table(&n);
  const plan::KernelSelection sel =
      plan::select_kernel(table, n, {prop.major * 10 + prop.minor, dtype, dqk, dvo, preference, out_dtype});
  if (sel.entry == nullptr) throw Error(ErrorKind::kUnsupported, sel.argument, sel.why);
  int per_sm = sel.entry->blocks_per_sm();
  if (per_sm < 1) per_sm = 1;
  KernelChoice c{};
  c.block_m = sel.entry->block_m;
  c.block_n = sel.entry->block_n;
  c.grid_blocks = prop.multiProcessorCount * per_sm;
  c.arch = sel.entry->arch;
  c.entry = sel.entry;
  c.scratch_bytes =
      sel.entry->scratch_bytes_fixed + sel.entry->scratch_bytes_per_block * static_cast<size_t>(c.grid_blocks);
  c.schedule_kind = sel.entry->schedule_kind;
  return c;
}

void launch_prefill(const KernelChoice& choice, int dqk, int dvo, DType dtype, DType out_dtype,
                    const PrefillArgs& args, Stream stream) {
  const KernelEntry* e = choice.entry;
  if (e == nullptr || !plan::kernel_computes(*e, dtype, out_dtype, dqk, dvo)) {
    throw Error(ErrorKind::kRuntime, "", "launch_prefill: the kernel choice does not match the problem");
  }
  if (choice.scratch_bytes > 0 && args.scratch == nullptr) {
    throw Error(ErrorKind::kRuntime, "", std::string("launch_prefill: ") + e->name + " needs device scratch");
  }
  e->launch(args, choice.grid_blocks, stream);
}

}  // namespace cuda
}  // namespace mlakit
