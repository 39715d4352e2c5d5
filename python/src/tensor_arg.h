// Array arguments arrive as any Python object speaking DLPack (__dlpack__) or the buffer
// protocol; nanobind's nb::ndarray does the import without copying. TensorArg keeps the
// imported array alive for the duration of one call and carries the mlakit::TensorView.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/ndarray.h>

#include "bindings.h"
#include "mlakit/tensor.h"

namespace mlakit_py {

struct TensorArg {
  // The imported array backing `view` (one of the two is set); holding it keeps the producer's
  // memory alive until the call returns.
  nb::ndarray<> writable_array;
  nb::ndarray<nb::ro> readonly_array;
  mlakit::TensorView view;
};

// Converts `obj` for the argument called `name`. Throws mlakit::Error (TypeError in Python) for
// objects that are not arrays, unsupported dtypes or devices; ValueError for more than 4 dims.
// `writable` = the call writes into it (read-only arrays are then refused).
TensorArg tensor_arg(nb::handle obj, const char* name, bool writable);

// Same, for an optional argument: None -> std::nullopt.
std::optional<TensorArg> optional_tensor_arg(nb::handle obj, const char* name, bool writable);

// Host int32/int64 1-D array (or any sequence of ints) -> int32 values, range-checked.
std::vector<int32_t> host_indptr(nb::handle obj, const char* name);

// "bf16"/"fp16"/"fp32"/"fp64"/"int32" -> DType; "cpu", "cuda", "cuda:N" -> Device.
mlakit::DType parse_dtype(const std::string& s, const char* name);
mlakit::Device parse_device(const std::string& s, const char* name);

// A cudaStream_t passed from Python as an integer (0 = default stream).
inline mlakit::Stream as_stream(uintptr_t s) { return reinterpret_cast<mlakit::Stream>(s); }

}  // namespace mlakit_py
