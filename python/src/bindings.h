// Shared declarations for the nanobind extension `mlakit._mlakit`. Each bind_* lives in its own
// file; module.cc calls them in order.
#pragma once

#include <nanobind/nanobind.h>

#include <string>

#include "mlakit/kv_cache.h"

namespace nb = nanobind;

namespace mlakit_py {

void bind_errors(nb::module_& m);     // errors.cc: mlakit::Error -> ValueError/TypeError/RuntimeError
void bind_tensor(nb::module_& m);     // tensor_arg.cc: dtype reinterpretation wrapper
void bind_runtime(nb::module_& m);    // runtime.cc: built_with_cuda, device_description, ...
void bind_options(nb::module_& m);    // options.cc: PrefillOptions (the one binding of the options)
void bind_prefill(nb::module_& m);    // prefill.cc: RaggedPrefill, ragged_prefill
void bind_merge(nb::module_& m);      // merge.cc: merge_states
void bind_reference(nb::module_& m);  // reference.cc: float64 reference functions
void bind_graph(nb::module_& m);      // graph.cc: StreamGraph (capture one stream, replay natively)
void bind_mla(nb::module_& m);        // mla.cc: MlaStep (the MLA prefill step)
void bind_latent(nb::module_& m);     // latent.cc: LatentAttention (absorbed MLA attention, dense and sparse)

// vLLM's kv_cache_dtype names ("auto", "fp8" / "fp8_e4m3", "fp8_ds_mla"; mlakit/kv_cache.h), the
// one parser of MlaStep's and LatentAttention's argument (mla.cc).
mlakit::KvCacheDtype parse_kv_cache_dtype(const std::string& s);

}  // namespace mlakit_py
