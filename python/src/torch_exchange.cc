// PyTorch's DLPack C exchange table (see torch_exchange.h). The table's layout below is the
// DLPack 1.x C ABI as the DLPack specification defines it (dlpack.h, "DLPackExchangeAPI"), spelled
// out here so the extension needs no DLPack header of a particular version; the tensor it fills is
// DLPack's DLTensor, which nanobind declares (nb::dlpack::dltensor).
#include "torch_exchange.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "tensor_arg.h"

namespace mlakit_py {
namespace {

struct DlVersion {
  uint32_t major;
  uint32_t minor;
};
struct DlExchangeHeader {
  DlVersion version;
  DlExchangeHeader* prev_api;  // an older table, for consumers of an older major version
};
// Functions return 0 on success, -1 with a Python error set.
struct DlExchangeApi {
  DlExchangeHeader header;
  void* managed_tensor_allocator;
  void* managed_tensor_from_py_object_no_sync;
  void* managed_tensor_to_py_object_no_sync;
  int (*dltensor_from_py_object_no_sync)(void* py_object, nb::dlpack::dltensor* out);  // non-owning view
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void** out_stream);
};

const DlExchangeApi* g_api = nullptr;

// The table of the attribute `name` of `type`: a PyCapsule named "dlpack_exchange_api" (PyTorch),
// or an int holding its address (the table's first published form); nullptr otherwise, with no
// Python error left set.
const DlExchangeApi* table_of(PyObject* type, const char* name) {
  PyObject* attr = PyObject_GetAttrString(type, name);
  if (attr == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  void* p = nullptr;
  if (PyCapsule_CheckExact(attr)) {
    p = PyCapsule_GetPointer(attr, "dlpack_exchange_api");
  } else if (PyLong_Check(attr)) {
    p = PyLong_AsVoidPtr(attr);
  }
  if (PyErr_Occurred()) PyErr_Clear();
  Py_DECREF(attr);  // the table itself lives as long as the process (the specification's rule)
  return static_cast<const DlExchangeApi*>(p);
}

}  // namespace

bool register_torch_exchange(PyObject* tensor_type) {
  g_api = nullptr;
  const char* env = std::getenv("MLAKIT_TORCH_EXCHANGE");
  if (env != nullptr && std::strcmp(env, "0") == 0) return false;
  const DlExchangeApi* api = table_of(tensor_type, "__dlpack_c_exchange_api__");
  if (api == nullptr) api = table_of(tensor_type, "__c_dlpack_exchange_api__");
  // A newer major version links the tables of older ones; take the one this code speaks.
  const DlExchangeHeader* h = api != nullptr ? &api->header : nullptr;
  while (h != nullptr && h->version.major != 1) h = h->prev_api;
  api = reinterpret_cast<const DlExchangeApi*>(h);
  if (api == nullptr || api->dltensor_from_py_object_no_sync == nullptr || api->current_work_stream == nullptr)
    return false;
  g_api = api;
  return true;
}

bool torch_exchange_in_use() { return g_api != nullptr; }

namespace {

// `obj`'s DLTensor as the table fills it (a non-owning view); false, with no Python error left
// set, when the table is not in use or cannot read it (e.g. a layout DLPack cannot describe:
// the callers' fallbacks report it).
bool table_dltensor(PyObject* obj, nb::dlpack::dltensor* t) {
  if (g_api == nullptr) return false;
  if (g_api->dltensor_from_py_object_no_sync(obj, t) != 0) {
    PyErr_Clear();
    return false;
  }
  return true;
}

// t's shape and strides in elements (row-major where DLPack leaves the strides out).
void copy_dims(const nb::dlpack::dltensor& t, int64_t* shape, int64_t* strides) {
  int64_t row_major = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    shape[d] = t.shape[d];
    strides[d] = t.strides != nullptr ? t.strides[d] : row_major;
    row_major *= t.shape[d];
  }
}

}  // namespace

bool exchange_view(PyObject* obj, mlakit::TensorView* v) {
  nb::dlpack::dltensor t;
  mlakit::DType dtype;
  mlakit::Device device;
  if (!table_dltensor(obj, &t) || !to_mlakit_dtype(t.dtype, &dtype) ||
      !to_mlakit_device(t.device.device_type, t.device.device_id, &device) || t.ndim < 0 ||
      t.ndim > mlakit::TensorView::kMaxDims)
    return false;
  v->data = static_cast<char*>(t.data) + t.byte_offset;
  v->dtype = dtype;
  v->ndim = t.ndim;
  copy_dims(t, v->shape, v->strides);
  v->device = device;
  return true;
}

bool exchange_host_ints(PyObject* obj, HostInts* v) {
  nb::dlpack::dltensor t;
  mlakit::Device device;
  if (!table_dltensor(obj, &t) || !is_host_int_dtype(t.dtype) ||
      !to_mlakit_device(t.device.device_type, t.device.device_id, &device) || !device.is_cpu() || t.ndim < 1 ||
      t.ndim > 2)
    return false;
  v->data = static_cast<const char*>(t.data) + t.byte_offset;
  v->bits = t.dtype.bits;
  v->is_signed = static_cast<nb::dlpack::dtype_code>(t.dtype.code) == nb::dlpack::dtype_code::Int;
  v->ndim = t.ndim;
  copy_dims(t, v->shape, v->strides);
  return true;
}

bool exchange_current_stream(int index, mlakit::Stream* stream) {
  if (g_api == nullptr) return false;
  void* s = nullptr;
  if (g_api->current_work_stream(nb::device::cuda::value, index, &s) != 0) {
    PyErr_Clear();
    return false;
  }
  *stream = s;
  return true;
}

}  // namespace mlakit_py
