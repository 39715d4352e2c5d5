// When mlakit's launches use PDL (cuda/common/pdl_launch.h): the build switch, the environment
// switch, and the per-device and per-kernel checks, each made once and cached.
#include "cuda/common/pdl_launch.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "cuda/common/cuda_check.h"

namespace mlakit {
namespace cuda {

bool pdl_switched_on() {
#if defined(MLAKIT_PDL) && !MLAKIT_PDL
  return false;  // built with -DMLAKIT_PDL=OFF: launches as before, kernels hold no wait
#else
  // MLAKIT_DISABLE_PDL=1 measures PDL off with the same binary.
  static const bool on = [] {
    const char* v = std::getenv("MLAKIT_DISABLE_PDL");
    return v == nullptr || v[0] == '\0' || std::strcmp(v, "0") == 0;
  }();
  return on;
#endif
}

bool pdl_enabled(const void* kernel) {
  if (!pdl_switched_on()) return false;
  int device = 0;
  MLAKIT_CUDA_CHECK(cudaGetDevice(&device));
  // Launches come from engine threads too; one lock around two small maps costs far less than
  // the launch itself.
  static std::mutex mu;
  static std::map<int, bool> hopper_or_newer;                     // per device
  static std::map<std::pair<int, const void*>, bool> kernel_ok;  // per (device, kernel)
  std::lock_guard<std::mutex> lock(mu);
  auto dev = hopper_or_newer.find(device);
  if (dev == hopper_or_newer.end()) {
    int major = 0;
    MLAKIT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    dev = hopper_or_newer.emplace(device, major >= 9).first;
  }
  if (!dev->second) return false;  // sm80: launch as before (no attribute, no query)
  auto k = kernel_ok.find({device, kernel});
  if (k == kernel_ok.end()) {
    // ptxVersion is the virtual architecture the loaded code was compiled from: 90 for the
    // sm_90a cubins; 80 when an sm_80-only build is JIT-compiled for a newer GPU, whose code was
    // compiled without griddepcontrol.wait and so must not start early.
    cudaFuncAttributes attrs{};
    MLAKIT_CUDA_CHECK(cudaFuncGetAttributes(&attrs, kernel));
    k = kernel_ok.emplace(std::make_pair(device, kernel), attrs.ptxVersion >= 90).first;
  }
  return k->second;
}

}  // namespace cuda
}  // namespace mlakit
