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
  // memory alive until the call returns. A torch tensor read directly (see below) sets neither:
  // the caller's reference keeps it alive for the call.
  nb::ndarray<> writable_array;
  nb::ndarray<nb::ro> readonly_array;
  nb::object detached;  // a requires-grad torch tensor's detach(), exported through DLPack
  mlakit::TensorView view;
  bool torch = false;   // read from a torch.Tensor's attributes (no DLPack)
};

// Accepted: a torch.Tensor (or subclass) once the Python layer registered torch
// (_register_torch): its metadata is read through its Python attributes, like
// mlakit._torch_descriptor does, without DLPack (which costs several microseconds per tensor);
// dtypes or devices mlakit does not take fall back to DLPack, which names them in its error. A
// descriptor tuple (data_ptr, dtype code, shape, strides, device type, device index). A
// Reinterpreted wrapper. Anything speaking DLPack or the buffer protocol.
//
// Converts `obj` for the argument called `name`. Throws mlakit::Error (TypeError in Python) for
// objects that are not arrays, unsupported dtypes or devices; ValueError for more than 4 dims.
// `writable` = the call writes into it (read-only arrays are then refused).
TensorArg tensor_arg(nb::handle obj, const char* name, bool writable);

// Same, for an optional argument: None -> std::nullopt.
std::optional<TensorArg> optional_tensor_arg(nb::handle obj, const char* name, bool writable);

// A 2-D view read as its transpose (an [H, rows] lse as the [rows, H] the library takes), without
// the caller making a transposed view; ValueError naming `name` for another rank.
void transpose_2d(mlakit::TensorView* v, const char* name);

// Host int32/int64 1-D array (or any sequence of ints) -> int32 values, range-checked.
// With `cols`, a 2-D array is accepted too (read row-major; *cols = its column count).
std::vector<int32_t> host_indptr(nb::handle obj, const char* name, int64_t* cols = nullptr);

// "bf16"/"fp16"/"fp32"/"fp64"/"int32"/"e4m3" (also "float8_e4m3fn") -> DType; "cpu", "cuda", "cuda:N" -> Device.
mlakit::DType parse_dtype(const std::string& s, const char* name);
mlakit::Device parse_device(const std::string& s, const char* name);

// Whether `obj` is a torch.Tensor (or subclass) once torch is registered.
bool is_torch_tensor(nb::handle obj);

// DLPack's dtype and device (type, id) as mlakit's; false for those mlakit does not take. The
// DLPack imports and PyTorch's exchange table (torch_exchange.h) both read them through these.
bool to_mlakit_dtype(const nb::dlpack::dtype& t, mlakit::DType* out);
bool to_mlakit_device(int type, int id, mlakit::Device* out);
// Whether a DLPack dtype is one plan()'s host arrays take: 32- or 64-bit integers, signed or not.
bool is_host_int_dtype(const nb::dlpack::dtype& t);

// like.new_empty(d0, d1, d2) for a torch tensor `like` (its dtype and device, contiguous), called
// from C++ so a launch that allocates its output makes no Python-level call of its own. With
// `dtype` (a torch dtype registered by _register_torch): new_empty(d0, d1, d2, dtype=that).
nb::object torch_new_empty(nb::handle like, int64_t d0, int64_t d1, int64_t d2,
                           mlakit::DType dtype = static_cast<mlakit::DType>(-1));

// A cudaStream_t passed from Python as an integer (0 = default stream).
inline mlakit::Stream as_stream(uintptr_t s) { return reinterpret_cast<mlakit::Stream>(s); }

// The stream argument of the launching bindings: an int (a cudaStream_t; 0 = default stream), or
// None: PyTorch's current stream on the device of `like` (the argument that decides the stream,
// e.g. q) when it is a CUDA torch tensor; the default stream (0) otherwise.
mlakit::Stream stream_arg(nb::handle stream, const TensorArg& like);

}  // namespace mlakit_py
