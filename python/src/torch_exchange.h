// torch tensors read through PyTorch's DLPack C exchange table (DLPack 1.3,
// torch.Tensor.__dlpack_c_exchange_api__, PyTorch 2.10 and later): a tensor's data pointer, shape,
// strides, dtype and device in one C call, and the current CUDA stream in another, instead of six
// Python attribute reads per tensor and a Python call for the stream. On the H200 host those reads
// were most of a small launch's host cost. Used for exact
// torch.Tensor objects only (subclasses keep the attribute reads, which honour their overrides);
// anything the table cannot read falls back to the attribute reads, so behaviour and error
// messages are the same either way. MLAKIT_TORCH_EXCHANGE=0 turns it off (read at registration).
#pragma once

#include <Python.h>

#include <cstdint>

#include "mlakit/tensor.h"

namespace mlakit_py {

// Looks the table up on `tensor_type` (torch.Tensor) and keeps it when its major version is 1 and
// it has the two functions used; returns whether it is in use. Called by _register_torch.
bool register_torch_exchange(PyObject* tensor_type);

// Whether registration found a usable table (and the environment did not turn it off).
bool torch_exchange_in_use();

// `obj` (a torch tensor) as a TensorView: false when the table is not in use, or cannot read it,
// or its dtype or device is not one mlakit takes (the caller then takes the attribute path, whose
// errors name the problem). No Python error is left set on false.
bool exchange_view(PyObject* obj, mlakit::TensorView* v);

// `obj` (a torch tensor) as a host integer array: its data, element width (32 or 64) and
// signedness, 1 or 2 dimensions with their strides in elements; false when the table is not in
// use or cannot read it, or it is not an int32/int64 tensor of 1 or 2 dimensions in host (CPU or
// pinned) memory (the caller then takes the DLPack import, whose errors name the problem). No
// Python error is left set on false. plan()'s lengths and block tables are read through it.
struct HostInts {
  const void* data = nullptr;
  int bits = 0;
  bool is_signed = true;
  int ndim = 0;
  int64_t shape[2] = {0, 0};
  int64_t strides[2] = {0, 0};
};
bool exchange_host_ints(PyObject* obj, HostInts* v);

// PyTorch's current stream on CUDA device `index` (what torch.cuda.current_stream(index) is);
// false when the table is not in use or the query failed (no Python error left set).
bool exchange_current_stream(int index, mlakit::Stream* stream);

}  // namespace mlakit_py
