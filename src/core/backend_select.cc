// Picks the backend of a device: the CPU backend, or the CUDA backend of an existing GPU (its
// absence reported in the caller's argument's name).
#include <memory>
#include <string>

#include "core/backend.h"
#include "mlakit/error.h"
#include "mlakit/runtime.h"

namespace mlakit {
namespace backend {

void check_cuda_device(Device device, const char* argument) {
  const int n = cuda_device_count();
  if (n <= 0) throw Error(ErrorKind::kUnsupported, argument, cuda_unavailable_reason());
  if (device.index < 0 || device.index >= n) {
    throw Error(ErrorKind::kUnsupported, argument, to_string(device) + " does not exist");
  }
}

std::unique_ptr<Backend> make_backend(Device device, const char* argument) {
  if (device.is_cpu()) return make_cpu_backend();
  if (!device.is_cuda()) throw Error(ErrorKind::kUnsupported, argument, "unknown device type");
  check_cuda_device(device, argument);
  return make_cuda_backend(device.index);
}

}  // namespace backend
}  // namespace mlakit
