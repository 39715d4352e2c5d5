// Device queries, so Python code can ask what this build can do without importing CUDA tooling.
#include <string>

#include <nanobind/stl/string.h>

#include "bindings.h"
#include "mlakit/runtime.h"
#include "mlakit/tensor.h"
#include "tensor_arg.h"

namespace mlakit_py {

namespace {

nb::dict library_info_dict() {
  const mlakit::LibraryInfo info = mlakit::library_info();
  nb::dict d;
  d["version"] = info.version;
  d["built_with_cuda"] = info.built_with_cuda;
  d["cpu_isa"] = info.cpu_isa;
  d["cpu_isa_best"] = info.cpu_isa_best;
  d["cpu_isa_requested"] = info.cpu_isa_requested;
  d["cpu_has_amx"] = info.cpu_has_amx;
  nb::dict products;
  for (const mlakit::LibraryInfo::Products& p : info.cpu_products) products[mlakit::dtype_name(p.dtype)] = p.isa;
  d["cpu_products"] = products;
  nb::list backends;
  for (const mlakit::BackendInfo& b : info.backends) {
    nb::dict e;
    e["name"] = b.name;
    nb::list dtypes;
    for (mlakit::DType t : b.dtypes) dtypes.append(mlakit::dtype_name(t));
    e["dtypes"] = dtypes;
    if (b.max_head_dim > 0) {
      e["max_head_dim"] = b.max_head_dim;
    } else {
      e["max_head_dim"] = nb::none();
    }
    nb::list shapes;
    for (const mlakit::KernelShape& k : b.shapes)
      shapes.append(nb::make_tuple(mlakit::dtype_name(k.dtype), k.head_dim_qk, k.head_dim_vo));
    e["shapes"] = shapes;
    backends.append(e);
  }
  d["backends"] = backends;
  nb::list latent;
  for (const mlakit::LibraryInfo::LatentBackend& b : info.latent_backends) {
    nb::dict e;
    e["name"] = b.name;
    nb::list dtypes;
    for (mlakit::DType t : b.dtypes) dtypes.append(mlakit::dtype_name(t));
    e["dtypes"] = dtypes;
    // None: any width the CPU takes (multiples of 32 up to 512 and 128).
    e["kv_lora_rank"] = b.kv_lora_rank > 0 ? nb::cast(b.kv_lora_rank) : nb::none();
    e["qk_rope_head_dim"] = b.qk_rope_head_dim > 0 ? nb::cast(b.qk_rope_head_dim) : nb::none();
    nb::list caches;
    for (mlakit::KvCacheDtype c : b.kv_cache_dtypes) caches.append(mlakit::kv_cache_dtype_name(c));
    e["kv_cache_dtypes"] = caches;
    latent.append(e);
  }
  d["latent_backends"] = latent;
  return d;
}

}  // namespace

void bind_runtime(nb::module_& m) {
  m.def("library_info", &library_info_dict,
        "What this build is and runs here: version, CUDA, the CPU backend's path (cpu_isa), the "
        "products per dtype, and each backend's dtypes and head dims.");
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
