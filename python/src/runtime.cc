// Device queries, so Python code can ask what this build can do without importing CUDA tooling.
#include <string>

#include <nanobind/stl/string.h>

#include "bindings.h"
#include "mlakit/runtime.h"
#include "mlakit/tensor.h"
#include "tensor_arg.h"

namespace mlakit_py {

void bind_runtime(nb::module_& m) {
  m.def("built_with_cuda", &mlakit::built_with_cuda, "True when the library was compiled with its CUDA backends.");
  m.def("cuda_device_count", &mlakit::cuda_device_count,
        "Usable CUDA devices; 0 without CUDA support, driver or GPU.");
  m.def("cuda_unavailable_reason", &mlakit::cuda_unavailable_reason,
        "Why CUDA is unusable here; empty when it is usable.");
  m.def(
      "device_description",
      [](const std::string& device) { return mlakit::device_description(parse_device(device, "device")); },
      nb::arg("device"), "E.g. 'NVIDIA H200 (sm_90, 132 SMs)' or 'cpu'.");
}

}  // namespace mlakit_py
