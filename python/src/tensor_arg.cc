// DLPack import -> mlakit::TensorView. Strides stay in elements (DLPack and TensorView agree), so
// strided views (e.g. slices of a fused QKV buffer) pass through without copies.
#include "tensor_arg.h"

#include <limits>
#include <utility>

#include <nanobind/stl/string.h>

#include "mlakit/error.h"
#include "torch_exchange.h"

namespace mlakit_py {
namespace {

using mlakit::Error;
using mlakit::ErrorKind;

// NumPy has no native bfloat16 and ml_dtypes' bfloat16 cannot leave NumPy through DLPack, so the
// Python layer hands such arrays over as a uint16 view wrapped in Reinterpreted, naming the real
// dtype. Only same-size reinterpretation of 16-bit integer data is accepted.
struct Reinterpreted {
  nb::object array;
  mlakit::DType dtype;
};

// DLPack's device type codes, as nanobind declares them.
constexpr int kDLCPU = nb::device::cpu::value, kDLCUDA = nb::device::cuda::value,
              kDLCUDAHost = nb::device::cuda_host::value, kDLCUDAManaged = nb::device::cuda_managed::value;

std::string describe_dl_dtype(const nb::dlpack::dtype& t) {
  const char* code = "unknown";
  switch (static_cast<nb::dlpack::dtype_code>(t.code)) {
    case nb::dlpack::dtype_code::Int: code = "int"; break;
    case nb::dlpack::dtype_code::UInt: code = "uint"; break;
    case nb::dlpack::dtype_code::Float: code = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: code = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: code = "complex"; break;
    case nb::dlpack::dtype_code::Bool: code = "bool"; break;
    case nb::dlpack::dtype_code::Float8_E4M3FN: code = "float8_e4m3fn"; break;
    case nb::dlpack::dtype_code::Float8_E5M2: code = "float8_e5m2"; break;
    default: break;
  }
  std::string s = std::string(code) + std::to_string(t.bits);
  if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
  return s;
}

}  // namespace

bool to_mlakit_dtype(const nb::dlpack::dtype& t, mlakit::DType* out) {
  if (t.lanes != 1) return false;
  auto code = static_cast<nb::dlpack::dtype_code>(t.code);
  if (code == nb::dlpack::dtype_code::Float) {
    if (t.bits == 16) { *out = mlakit::DType::kFP16; return true; }
    if (t.bits == 32) { *out = mlakit::DType::kFP32; return true; }
    if (t.bits == 64) { *out = mlakit::DType::kFP64; return true; }
  } else if (code == nb::dlpack::dtype_code::Bfloat && t.bits == 16) {
    *out = mlakit::DType::kBF16; return true;
  } else if (code == nb::dlpack::dtype_code::Int && t.bits == 32) {
    *out = mlakit::DType::kInt32; return true;
  } else if (code == nb::dlpack::dtype_code::Float8_E4M3FN && t.bits == 8) {
    *out = mlakit::DType::kE4M3; return true;
  } else if (code == nb::dlpack::dtype_code::UInt && t.bits == 8) {
    *out = mlakit::DType::kUInt8; return true;  // raw bytes: the MLA step's FP8 caches
  }
  return false;
}

bool to_mlakit_device(int type, int id, mlakit::Device* out) {
  switch (type) {
    case kDLCPU:
    case kDLCUDAHost:  // pinned host memory is host memory
      *out = mlakit::Device::cpu();
      return true;
    case kDLCUDA:
    case kDLCUDAManaged:
      *out = mlakit::Device::cuda(id);
      return true;
    default:
      return false;
  }
}

namespace {

mlakit::Device to_mlakit_device(int type, int id, const char* name) {
  mlakit::Device d;
  if (!mlakit_py::to_mlakit_device(type, id, &d))
    throw Error(ErrorKind::kTypeMismatch, name,
                "unsupported DLPack device type " + std::to_string(type) + " (mlakit takes CPU and CUDA arrays)");
  return d;
}

template <typename Array>
bool import_array(nb::handle obj, Array* out) {
  // convert=false: never let nanobind copy to satisfy constraints; there are none anyway.
  return nb::try_cast<Array>(obj, *out, /*convert=*/false);
}

// Strides of an empty array, or of a dimension of size 1, say nothing about the layout, and
// producers report them inconsistently (NumPy gives 0 for empty arrays); use the row-major
// value so such arrays pass the "last dimension contiguous" rule like their peers.
void normalize_degenerate_strides(mlakit::TensorView& v) {
  bool empty = false;
  for (int d = 0; d < v.ndim; ++d) empty = empty || v.shape[d] == 0;
  int64_t contiguous = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    if (empty || v.shape[d] == 1) v.strides[d] = contiguous;
    contiguous *= v.shape[d] > 0 ? v.shape[d] : 1;
  }
}

template <typename Array>
mlakit::TensorView view_of(const Array& a, const char* name, const std::optional<mlakit::DType>& as) {
  if (a.ndim() > static_cast<size_t>(mlakit::TensorView::kMaxDims))
    throw Error(ErrorKind::kInvalidArgument, name,
                "has " + std::to_string(a.ndim()) + " dimensions; mlakit takes at most 4");
  mlakit::TensorView v;
  if (as)
    v.dtype = *as;  // Reinterpreted: checked to be integer data of the dtype's size at construction
  else if (!to_mlakit_dtype(a.dtype(), &v.dtype))
    throw Error(ErrorKind::kTypeMismatch, name,
                "unsupported dtype " + describe_dl_dtype(a.dtype()) +
                    " (mlakit takes bf16, fp16, fp32, fp64, int32, e4m3 (float8_e4m3fn) and uint8)");
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));
  v.ndim = static_cast<int>(a.ndim());
  for (int d = 0; d < v.ndim; ++d) {
    v.shape[d] = static_cast<int64_t>(a.shape(d));
    v.strides[d] = a.stride(d);
  }
  normalize_degenerate_strides(v);
  v.device = to_mlakit_device(a.device_type(), a.device_id(), name);
  return v;
}

// The torch fast path: (data_ptr, dtype code, shape, strides, device type, device index), built
// by the Python layer from a torch.Tensor without DLPack (whose export costs several
// microseconds per tensor). The caller keeps the tensor alive for the call.
bool is_descriptor(nb::handle obj) {
  return PyTuple_CheckExact(obj.ptr()) && PyTuple_GET_SIZE(obj.ptr()) == 6;
}

mlakit::TensorView view_of_descriptor(nb::handle obj, const char* name) {
  nb::tuple t = nb::borrow<nb::tuple>(obj);
  nb::sequence shape = nb::borrow<nb::sequence>(t[2]);
  nb::sequence strides = nb::borrow<nb::sequence>(t[3]);
  const size_t ndim = nb::len(shape);
  if (ndim > static_cast<size_t>(mlakit::TensorView::kMaxDims))
    throw Error(ErrorKind::kInvalidArgument, name,
                "has " + std::to_string(ndim) + " dimensions; mlakit takes at most 4");
  mlakit::TensorView v;
  v.data = reinterpret_cast<void*>(nb::cast<uintptr_t>(t[0]));
  v.dtype = static_cast<mlakit::DType>(nb::cast<int>(t[1]));
  v.ndim = static_cast<int>(ndim);
  for (size_t d = 0; d < ndim; ++d) {
    v.shape[d] = nb::cast<int64_t>(shape[d]);
    v.strides[d] = nb::cast<int64_t>(strides[d]);
  }
  normalize_degenerate_strides(v);
  v.device = nb::cast<int>(t[4]) == 1 ? mlakit::Device::cuda(nb::cast<int>(t[5])) : mlakit::Device::cpu();
  return v;
}

// An attribute of torch.Tensor the fast path reads. For a plain torch.Tensor (the exact type) it
// is read through the descriptor the type resolves it to, found once at registration: the getter
// of a data descriptor (shape, dtype, is_cuda: an instance dict cannot shadow those), the method
// called with the tensor as its first argument (data_ptr, stride, get_device). That skips the
// generic attribute lookup (and the bound method) per read; the getters themselves run as they
// would (torch function modes included). Subclasses take the generic lookup (their overrides).
struct TorchAttr {
  PyObject* name = nullptr;           // interned
  PyObject* descr = nullptr;          // torch.Tensor's attribute as the type resolves it
  descrgetfunc getter = nullptr;      // data descriptors: its tp_descr_get
};

// torch, registered by the Python layer (mlakit._register_torch) once torch is imported; the
// extension never imports it. References are kept for the life of the process (never released:
// the interpreter may be finalizing when static destructors run).
constexpr int kTorchDtypes = 7;  // mlakit::DType's values: bf16 .. e4m3, uint8

struct TorchRefs {
  PyTypeObject* tensor = nullptr;      // torch.Tensor
  PyObject* dtypes[kTorchDtypes] = {};  // torch dtype objects, indexed by mlakit::DType's value
  PyObject* int64 = nullptr;           // torch.int64 (host offsets)
  PyObject* raw_stream = nullptr;      // device index -> cudaStream_t as an int
  TorchAttr dtype, is_cuda, is_cpu, shape, base, version;  // data descriptors (base: _base)
  TorchAttr get_device, data_ptr, stride, new_empty;       // methods
  PyObject *s_requires_grad = nullptr, *s_detach = nullptr;  // fallback path only
};
TorchRefs g_torch;

}  // namespace

bool is_torch_tensor(nb::handle obj) {
  return g_torch.tensor != nullptr && PyType_IsSubtype(Py_TYPE(obj.ptr()), g_torch.tensor);
}

namespace {

nb::object attr(PyObject* obj, PyObject* name) {
  PyObject* r = PyObject_GetAttr(obj, name);
  if (!r) nb::raise_python_error();
  return nb::steal(r);
}

nb::object call0(PyObject* obj, PyObject* name) {
  PyObject* r = PyObject_CallMethodNoArgs(obj, name);
  if (!r) nb::raise_python_error();
  return nb::steal(r);
}

nb::object attr(PyObject* obj, const TorchAttr& a) {
  PyObject* r = Py_TYPE(obj) == g_torch.tensor && a.getter != nullptr
                    ? a.getter(a.descr, obj, reinterpret_cast<PyObject*>(g_torch.tensor))
                    : PyObject_GetAttr(obj, a.name);
  if (!r) nb::raise_python_error();
  return nb::steal(r);
}

nb::object call0(PyObject* obj, const TorchAttr& a) {
  PyObject* r = Py_TYPE(obj) == g_torch.tensor && a.descr != nullptr ? PyObject_Vectorcall(a.descr, &obj, 1, nullptr)
                                                                     : PyObject_CallMethodNoArgs(obj, a.name);
  if (!r) nb::raise_python_error();
  return nb::steal(r);
}

bool truthy(const nb::object& o) {
  int r = PyObject_IsTrue(o.ptr());
  if (r < 0) nb::raise_python_error();
  return r != 0;
}

int64_t as_int64(PyObject* o) {
  long long x = PyLong_AsLongLong(o);
  if (x == -1 && PyErr_Occurred()) nb::raise_python_error();
  return static_cast<int64_t>(x);
}

// str(t.device) of a torch tensor, e.g. "meta" or "mps:0".
std::string torch_device_name(PyObject* t) {
  nb::object where = nb::steal(PyObject_GetAttrString(t, "device"));
  if (!where.is_valid()) nb::raise_python_error();
  return nb::cast<std::string>(nb::str(where));
}

// A torch tensor's view read from the attributes mlakit._torch_descriptor reads (is_cuda /
// is_cpu, get_device(), dtype, data_ptr(), shape, stride()), through the C API. A device other
// than the CPU or CUDA (meta, mps, xpu...) is reported as such: such a tensor has no memory
// mlakit can address, and the DLPack export would only say that it failed. False (nothing read
// past the dtype) when mlakit does not take its dtype: the caller then exports it through
// DLPack, whose error names the dtype.
bool view_of_torch(PyObject* obj, const char* name, mlakit::TensorView* v) {
  mlakit::Device device;
  if (truthy(attr(obj, g_torch.is_cuda))) {
    device = mlakit::Device::cuda(static_cast<int>(as_int64(call0(obj, g_torch.get_device).ptr())));
  } else if (truthy(attr(obj, g_torch.is_cpu))) {
    device = mlakit::Device::cpu();
  } else {
    throw Error(ErrorKind::kTypeMismatch, name,
                "is on device '" + torch_device_name(obj) + "'; mlakit runs on cpu and cuda tensors");
  }
  nb::object dt = attr(obj, g_torch.dtype);
  int code = -1;
  for (int i = 0; i < kTorchDtypes; ++i)
    if (g_torch.dtypes[i] != nullptr && dt.ptr() == g_torch.dtypes[i]) code = i;
  if (code < 0) return false;
  nb::object shape = attr(obj, g_torch.shape), strides = call0(obj, g_torch.stride);
  if (!PyTuple_Check(shape.ptr()) || !PyTuple_Check(strides.ptr()) ||
      PyTuple_GET_SIZE(shape.ptr()) != PyTuple_GET_SIZE(strides.ptr()))
    throw Error(ErrorKind::kTypeMismatch, name, "a torch tensor whose shape and stride() are not matching tuples");
  const Py_ssize_t ndim = PyTuple_GET_SIZE(shape.ptr());
  if (ndim > mlakit::TensorView::kMaxDims)
    throw Error(ErrorKind::kInvalidArgument, name,
                "has " + std::to_string(ndim) + " dimensions; mlakit takes at most 4");
  nb::object ptr = call0(obj, g_torch.data_ptr);
  void* data = PyLong_AsVoidPtr(ptr.ptr());
  if (!data && PyErr_Occurred()) nb::raise_python_error();
  v->data = data;
  v->dtype = static_cast<mlakit::DType>(code);
  v->ndim = static_cast<int>(ndim);
  for (Py_ssize_t d = 0; d < ndim; ++d) {
    v->shape[d] = as_int64(PyTuple_GET_ITEM(shape.ptr(), d));
    v->strides[d] = as_int64(PyTuple_GET_ITEM(strides.ptr(), d));
  }
  normalize_degenerate_strides(*v);
  v->device = device;
  return true;
}

// The bytes of a contiguous 1-D int32/int64 CPU torch tensor, appended to `key` after its
// element size and length; false (key unchanged) for anything else.
bool append_host_offsets(PyObject* t, std::string* key) {
  if (g_torch.tensor == nullptr || !PyType_IsSubtype(Py_TYPE(t), g_torch.tensor)) return false;
  nb::object dt = attr(t, g_torch.dtype);
  const int64_t itemsize = dt.ptr() == g_torch.dtypes[4] ? 4 : dt.ptr() == g_torch.int64 ? 8 : 0;
  if (itemsize == 0 || !truthy(attr(t, g_torch.is_cpu))) return false;
  nb::object shape = attr(t, g_torch.shape);
  if (!PyTuple_Check(shape.ptr()) || PyTuple_GET_SIZE(shape.ptr()) != 1) return false;
  const int64_t n = as_int64(PyTuple_GET_ITEM(shape.ptr(), 0));
  if (n > 1) {
    nb::object strides = call0(t, g_torch.stride);
    if (!PyTuple_Check(strides.ptr()) || PyTuple_GET_SIZE(strides.ptr()) != 1 ||
        as_int64(PyTuple_GET_ITEM(strides.ptr(), 0)) != 1)
      return false;
  }
  const char* data = nullptr;
  if (n > 0) {
    nb::object ptr = call0(t, g_torch.data_ptr);
    data = static_cast<const char*>(PyLong_AsVoidPtr(ptr.ptr()));
    if (!data) {
      if (PyErr_Occurred()) nb::raise_python_error();
      return false;
    }
  }
  const int64_t head[2] = {itemsize, n};
  key->append(reinterpret_cast<const char*>(head), sizeof(head));
  if (n > 0) key->append(data, static_cast<size_t>(n * itemsize));
  return true;
}

// Whether offsets `t` match the entries src[i..i+4] of flash_attn_varlen_func's version-counter
// record (mlakit._varlen._source): weak references to the tensor object and to the tensor it is
// a view of, the version counter, shape (1-D) and strides. The object itself is the cheap test;
// its base (_base, or itself) must otherwise be the recorded one.
bool same_offsets(PyObject* src, Py_ssize_t i, PyObject* t) {
  auto deref = [](PyObject* ref) {
    PyObject* o = PyObject_CallNoArgs(ref);  // a weakref.ref: the referent or None
    if (!o) nb::raise_python_error();
    return nb::steal(o);
  };
  auto equal = [](const nb::object& a, PyObject* b) {
    int r = PyObject_RichCompareBool(a.ptr(), b, Py_EQ);
    if (r < 0) nb::raise_python_error();
    return r == 1;
  };
  if (deref(PyTuple_GET_ITEM(src, i)).ptr() != t) {
    nb::object base = attr(t, g_torch.base);
    if (deref(PyTuple_GET_ITEM(src, i + 1)).ptr() != (base.is_none() ? t : base.ptr())) return false;
  }
  if (!equal(attr(t, g_torch.version), PyTuple_GET_ITEM(src, i + 2))) return false;
  nb::object shape = attr(t, g_torch.shape);  // offsets are 1-D: other ranks never match
  return PyTuple_Check(shape.ptr()) && PyTuple_GET_SIZE(shape.ptr()) == 1 &&
         equal(shape, PyTuple_GET_ITEM(src, i + 3)) && equal(call0(t, g_torch.stride), PyTuple_GET_ITEM(src, i + 4));
}

std::string py_type_name(nb::handle obj) {
  return nb::cast<std::string>(nb::str(obj.type().attr("__qualname__")));
}

}  // namespace

TensorArg tensor_arg(nb::handle obj, const char* name, bool writable) {
  if (obj.is_none())
    throw Error(ErrorKind::kTypeMismatch, name, "is None; expected an array");
  TensorArg arg;
  if (is_descriptor(obj)) {
    arg.view = view_of_descriptor(obj, name);
    arg.torch = true;  // built from a torch tensor by mlakit._torch_descriptor
    return arg;
  }
  std::optional<mlakit::DType> reinterpret_as;
  nb::handle src = obj;
  if (is_torch_tensor(obj)) {
    arg.torch = true;
    // One C call through PyTorch's DLPack exchange table when it has one (torch_exchange.h);
    // subclasses keep the attribute reads, which run their overrides.
    if (Py_TYPE(obj.ptr()) == g_torch.tensor && exchange_view(obj.ptr(), &arg.view)) {
      normalize_degenerate_strides(arg.view);
      return arg;
    }
    if (view_of_torch(obj.ptr(), name, &arg.view)) return arg;
    // DLPack refuses tensors that require grad; mlakit is forward-only (as mlakit._native).
    if (truthy(attr(obj.ptr(), g_torch.s_requires_grad))) {
      arg.detached = call0(obj.ptr(), g_torch.s_detach);
      src = arg.detached;
    }
  }
  if (nb::isinstance<Reinterpreted>(obj)) {
    const Reinterpreted& r = nb::cast<const Reinterpreted&>(obj);
    src = r.array;
    reinterpret_as = r.dtype;
  }
  if (writable) {
    nb::ndarray<> a;
    if (!import_array(src, &a))
      throw Error(ErrorKind::kTypeMismatch, name,
                  "expected a writable array supporting DLPack or the buffer protocol, got " + py_type_name(src));
    arg.view = view_of(a, name, reinterpret_as);
    arg.writable_array = std::move(a);
  } else {
    nb::ndarray<nb::ro> a;
    if (!import_array(src, &a))
      throw Error(ErrorKind::kTypeMismatch, name,
                  "expected an array supporting DLPack or the buffer protocol, got " + py_type_name(src));
    arg.view = view_of(a, name, reinterpret_as);
    arg.readonly_array = std::move(a);
  }
  return arg;
}

void transpose_2d(mlakit::TensorView* v, const char* name) {
  if (v->ndim != 2)
    throw Error(ErrorKind::kInvalidArgument, name,
                "given head-major it must be [H, rows] (2 dimensions), got " + std::to_string(v->ndim));
  std::swap(v->shape[0], v->shape[1]);
  std::swap(v->strides[0], v->strides[1]);
  normalize_degenerate_strides(*v);  // size-1 dimensions: the row-major value of the new order
}

nb::object torch_new_empty(nb::handle like, int64_t d0, int64_t d1, int64_t d2, mlakit::DType dtype) {
  PyObject* args[5] = {like.ptr(), PyLong_FromLongLong(d0), PyLong_FromLongLong(d1), PyLong_FromLongLong(d2),
                       nullptr};
  PyObject* r = nullptr;
  const int code = static_cast<int>(dtype);
  if (code >= 0 && code < kTorchDtypes && g_torch.dtypes[code] != nullptr && args[1] && args[2] && args[3]) {
    // Another dtype than like's (the bf16 output of e4m3 inputs): new_empty(*sizes, dtype=...).
    args[4] = g_torch.dtypes[code];
    nb::object kwnames = nb::make_tuple("dtype");
    r = PyObject_VectorcallMethod(g_torch.new_empty.name, args, 4,
                                  kwnames.ptr());
    for (int i = 1; i < 4; ++i) Py_XDECREF(args[i]);
    if (!r) nb::raise_python_error();
    return nb::steal(r);
  }
  if (args[1] && args[2] && args[3]) {
    // Sizes as separate ints: PyTorch parses them faster than a tuple (as mlakit._empty does).
    r = Py_TYPE(like.ptr()) == g_torch.tensor && g_torch.new_empty.descr != nullptr
            ? PyObject_Vectorcall(g_torch.new_empty.descr, args, 4, nullptr)
            : PyObject_VectorcallMethod(g_torch.new_empty.name, args, 4, nullptr);
  }
  for (int i = 1; i < 4; ++i) Py_XDECREF(args[i]);
  if (!r) nb::raise_python_error();
  return nb::steal(r);
}

mlakit::Stream stream_arg(nb::handle stream, const TensorArg& like) {
  if (!stream.is_none()) return as_stream(nb::cast<uintptr_t>(stream));
  if (!like.torch || like.view.device.type != mlakit::DeviceType::kCUDA || g_torch.raw_stream == nullptr)
    return nullptr;
  mlakit::Stream s = nullptr;
  if (exchange_current_stream(like.view.device.index, &s)) return s;
  nb::object index = nb::steal(PyLong_FromLong(like.view.device.index));
  if (!index.is_valid()) nb::raise_python_error();
  PyObject* r = PyObject_CallOneArg(g_torch.raw_stream, index.ptr());
  if (!r) nb::raise_python_error();
  nb::object h = nb::steal(r);
  return as_stream(nb::cast<uintptr_t>(h));
}

std::optional<TensorArg> optional_tensor_arg(nb::handle obj, const char* name, bool writable) {
  if (obj.is_none()) return std::nullopt;
  return tensor_arg(obj, name, writable);
}

bool is_host_int_dtype(const nb::dlpack::dtype& t) {
  const auto code = static_cast<nb::dlpack::dtype_code>(t.code);
  const bool integral = code == nb::dlpack::dtype_code::Int || code == nb::dlpack::dtype_code::UInt;
  return integral && (t.bits == 32 || t.bits == 64) && t.lanes == 1;
}

// A host int32/int64 (signed or unsigned) array's checks, and one entry widened to int64 (a
// uint64 past int64's range saturates; the int32 range check then rejects it).
static void check_host_int_array(const nb::ndarray<nb::ro>& a, const char* name) {
  int type = a.device_type();
  if (type != kDLCPU && type != kDLCUDAHost)
    throw Error(ErrorKind::kTypeMismatch, name,
                "must be a host (CPU) array: plan() reads it on the host and never synchronizes the device");
  if (!is_host_int_dtype(a.dtype()))
    throw Error(ErrorKind::kTypeMismatch, name, "must be an int32 or int64 array, got " + describe_dl_dtype(a.dtype()));
}

static int64_t host_int_at(const char* p, bool is_signed, int bits) {
  if (bits == 32)
    // Each branch widened on its own: a bare ?: would convert int32 to uint32 (-1 -> 2^32 - 1).
    return is_signed ? static_cast<int64_t>(*reinterpret_cast<const int32_t*>(p))
                     : static_cast<int64_t>(*reinterpret_cast<const uint32_t*>(p));
  if (is_signed) return *reinterpret_cast<const int64_t*>(p);
  uint64_t u = *reinterpret_cast<const uint64_t*>(p);
  return u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                                        : static_cast<int64_t>(u);
}


// Reads rows x n integers (row r, column i at base + r * s0 + i * s1 bytes) into int32 values,
// each checked against int32's range.
static void read_host_ints(const char* base, bool is_signed, int bits, int64_t rows, int64_t n, int64_t s0,
                           int64_t s1, bool table, const char* name, std::vector<int32_t>* out) {
  std::vector<int32_t>& values = *out;
  values.resize(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t x = host_int_at(base + r * s0 + i * s1, is_signed, bits);
      if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max())
        throw Error(ErrorKind::kInvalidArgument, name,
                    (table ? "entry [" + std::to_string(r) + ", " + std::to_string(i) + "]"
                           : "entry " + std::to_string(i)) +
                        " = " + std::to_string(x) + " does not fit in int32");
      values[static_cast<size_t>(r * n + i)] = static_cast<int32_t>(x);
    }
  }
}

std::vector<int32_t> host_indptr(nb::handle obj, const char* name, int64_t* cols) {
  std::vector<int32_t> values;
  HostInts h;
  // An exact torch tensor (engines keep lengths and block tables in them) through PyTorch's
  // exchange table: one C call, where the DLPack import costs several microseconds. Anything it
  // does not take (a CUDA tensor, another dtype, more dimensions) goes to the import below, whose
  // checks name the problem.
  if (!obj.is_none() && Py_TYPE(obj.ptr()) == g_torch.tensor && exchange_host_ints(obj.ptr(), &h) &&
      (h.ndim == 1 || cols != nullptr)) {
    const bool table = h.ndim == 2;
    const int64_t bytes = h.bits / 8;
    if (table) *cols = h.shape[1];
    read_host_ints(static_cast<const char*>(h.data), h.is_signed, h.bits, table ? h.shape[0] : 1,
                   table ? h.shape[1] : h.shape[0], table ? h.strides[0] * bytes : 0,
                   h.strides[table ? 1 : 0] * bytes, table, name, &values);
    return values;
  }
  nb::ndarray<nb::ro> a;
  if (!obj.is_none() && import_array(obj, &a)) {
    // A 2-D array (a block table) is read row-major through its strides, so the caller need not
    // flatten it (a torch reshape from Python costs more than the whole read).
    const bool table = cols != nullptr && a.ndim() == 2;
    if (a.ndim() != 1 && !table)
      throw Error(ErrorKind::kInvalidArgument, name,
                  "must be 1-D, got " + std::to_string(a.ndim()) + " dimensions");
    check_host_int_array(a, name);
    const bool is_signed = static_cast<nb::dlpack::dtype_code>(a.dtype().code) == nb::dlpack::dtype_code::Int;
    const int bits = a.dtype().bits;
    const int64_t rows = table ? a.shape(0) : 1, n = table ? a.shape(1) : a.shape(0);
    const int64_t s0 = table ? a.stride(0) * (bits / 8) : 0, s1 = a.stride(table ? 1 : 0) * (bits / 8);
    if (table) *cols = n;
    read_host_ints(static_cast<const char*>(a.data()), is_signed, bits, rows, n, s0, s1, table, name, &values);
    return values;
  }
  // Plain Python sequences of ints (lists, tuples, ranges).
  if (!obj.is_none() && PySequence_Check(obj.ptr()) && !PyUnicode_Check(obj.ptr()) && !PyBytes_Check(obj.ptr())) {
    nb::sequence seq = nb::borrow<nb::sequence>(obj);
    size_t n = nb::len(seq);
    values.resize(n);
    for (size_t i = 0; i < n; ++i) {
      nb::object item = seq[i];
      if (!PyLong_Check(item.ptr()) && !PyIndex_Check(item.ptr()))
        throw Error(ErrorKind::kTypeMismatch, name,
                    "entry " + std::to_string(i) + " is a " + py_type_name(item) + ", expected an int");
      int overflow = 0;
      nb::object idx = nb::steal(PyNumber_Index(item.ptr()));
      if (!idx.is_valid()) nb::raise_python_error();
      long long x = PyLong_AsLongLongAndOverflow(idx.ptr(), &overflow);
      if (overflow || x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max())
        throw Error(ErrorKind::kInvalidArgument, name,
                    "entry " + std::to_string(i) + " does not fit in int32");
      values[i] = static_cast<int32_t>(x);
    }
    return values;
  }
  if (is_torch_tensor(obj))  // e.g. on the meta device: DLPack cannot export it
    throw Error(ErrorKind::kTypeMismatch, name,
                "is on device '" + torch_device_name(obj.ptr()) + "'; expected a host (CPU) int32 array");
  throw Error(ErrorKind::kTypeMismatch, name,
              "expected a host int32 array or a sequence of ints, got " + py_type_name(obj));
}

mlakit::DType parse_dtype(const std::string& s, const char* name) {
  if (s == "bf16" || s == "bfloat16") return mlakit::DType::kBF16;
  if (s == "fp16" || s == "float16" || s == "half") return mlakit::DType::kFP16;
  if (s == "fp32" || s == "float32") return mlakit::DType::kFP32;
  if (s == "fp64" || s == "float64") return mlakit::DType::kFP64;
  if (s == "int32") return mlakit::DType::kInt32;
  if (s == "e4m3" || s == "float8_e4m3fn" || s == "fp8" || s == "fp8_e4m3") return mlakit::DType::kE4M3;
  if (s == "uint8") return mlakit::DType::kUInt8;
  throw Error(ErrorKind::kTypeMismatch, name, "unknown dtype '" + s + "'");
}

mlakit::Device parse_device(const std::string& s, const char* name) {
  if (s == "cpu") return mlakit::Device::cpu();
  if (s == "cuda") return mlakit::Device::cuda(0);
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5) {
    const std::string idx = s.substr(5);
    if (idx.find_first_not_of("0123456789") == std::string::npos && idx.size() < 6)
      return mlakit::Device::cuda(std::stoi(idx));
  }
  throw Error(ErrorKind::kInvalidArgument, name, "unknown device '" + s + "' (use 'cpu', 'cuda' or 'cuda:N')");
}

void bind_tensor(nb::module_& m) {
  m.def(
      "_register_torch",
      [](nb::handle tensor_type, nb::tuple dtypes, nb::handle int64, nb::handle raw_stream) {
        if (!PyType_Check(tensor_type.ptr()) || nb::len(dtypes) < 5 || nb::len(dtypes) > kTorchDtypes)
          throw Error(ErrorKind::kInvalidArgument, "tensor_type",
                      "expected torch.Tensor and 5 to " + std::to_string(kTorchDtypes) + " dtypes");
        auto keep = [](PyObject* o) { Py_INCREF(o); return o; };
        auto name = [](const char* s) {
          PyObject* o = PyUnicode_InternFromString(s);
          if (!o) nb::raise_python_error();
          return o;
        };
        auto bind = [&](TorchAttr& a, const char* s, bool data_descriptor) {
          a.name = name(s);
          PyObject* d = PyObject_GetAttr(tensor_type.ptr(), a.name);
          if (!d) nb::raise_python_error();
          // Only what the fast reads can call as the generic lookup would: a data descriptor's
          // getter, a method (descriptor or function) called with the tensor; else the lookup.
          if (data_descriptor && Py_TYPE(d)->tp_descr_get != nullptr && Py_TYPE(d)->tp_descr_set != nullptr) {
            a.descr = d;
            a.getter = Py_TYPE(d)->tp_descr_get;
          } else if (!data_descriptor && (PyObject_TypeCheck(d, &PyMethodDescr_Type) || PyFunction_Check(d))) {
            a.descr = d;
          } else {
            Py_DECREF(d);
          }
        };
        bind(g_torch.dtype, "dtype", true);
        bind(g_torch.is_cuda, "is_cuda", true);
        bind(g_torch.is_cpu, "is_cpu", true);
        bind(g_torch.shape, "shape", true);
        bind(g_torch.base, "_base", true);
        bind(g_torch.version, "_version", true);
        bind(g_torch.get_device, "get_device", false);
        bind(g_torch.data_ptr, "data_ptr", false);
        bind(g_torch.stride, "stride", false);
        bind(g_torch.new_empty, "new_empty", false);
        g_torch.s_requires_grad = name("requires_grad");
        g_torch.s_detach = name("detach");
        for (size_t i = 0; i < nb::len(dtypes) && i < static_cast<size_t>(kTorchDtypes); ++i)
          if (!dtypes[i].is_none()) g_torch.dtypes[i] = keep(dtypes[i].ptr());
        g_torch.int64 = keep(int64.ptr());
        g_torch.raw_stream = raw_stream.is_none() ? nullptr : keep(raw_stream.ptr());
        g_torch.tensor = reinterpret_cast<PyTypeObject*>(keep(tensor_type.ptr()));
        register_torch_exchange(tensor_type.ptr());
      },
      nb::arg("tensor_type"), nb::arg("dtypes"), nb::arg("int64"), nb::arg("raw_stream").none(),
      "Lets the launching functions read torch tensors directly: torch.Tensor, its dtypes in mlakit's "
      "DType order (bf16, fp16, fp32, fp64, int32, float8_e4m3fn or None, uint8), torch.int64, and a device "
      "index -> current cudaStream_t callable (None: no CUDA).");
  m.def("_torch_exchange_in_use", &torch_exchange_in_use,
        "Whether torch tensors are read through PyTorch's DLPack exchange table (torch_exchange.h).");
  m.def(
      "_read_torch_view",
      [](nb::handle obj, const std::string& path) -> nb::object {
        mlakit::TensorView v;
        bool ok = false;
        if (path == "exchange") {
          ok = is_torch_tensor(obj) && exchange_view(obj.ptr(), &v);
        } else if (path == "attributes") {
          ok = is_torch_tensor(obj) && view_of_torch(obj.ptr(), "obj", &v);
        } else {
          throw Error(ErrorKind::kInvalidArgument, "path", "expected 'exchange' or 'attributes'");
        }
        if (!ok) return nb::none();
        normalize_degenerate_strides(v);
        nb::list shape, strides;
        for (int d = 0; d < v.ndim; ++d) {
          shape.append(v.shape[d]);
          strides.append(v.strides[d]);
        }
        return nb::make_tuple(reinterpret_cast<uintptr_t>(v.data), static_cast<int>(v.dtype), nb::tuple(shape),
                              nb::tuple(strides), v.device.is_cuda() ? 1 : 0, v.device.is_cuda() ? v.device.index : 0);
      },
      nb::arg("obj"), nb::arg("path"),
      "A torch tensor as the extension reads it, (data_ptr, dtype code, shape, strides, device type, device "
      "index), through the exchange table or the attribute reads; None where that path cannot read it "
      "(tests compare the two).");
  m.def(
      "_host_offsets_key",
      [](nb::handle a, nb::handle b) -> nb::object {
        std::string key;
        if (!append_host_offsets(a.ptr(), &key)) return nb::none();
        if (b.ptr() == a.ptr()) {
          key.append(key);
        } else if (!append_host_offsets(b.ptr(), &key)) {
          return nb::none();
        }
        PyObject* r = PyBytes_FromStringAndSize(key.data(), static_cast<Py_ssize_t>(key.size()));
        if (!r) nb::raise_python_error();
        return nb::steal(r);
      },
      nb::arg("a").none(), nb::arg("b").none(),
      "The values of two host offset tensors (contiguous 1-D int32/int64 CPU torch tensors) as one bytes "
      "object (element sizes, lengths, raw bytes: equal bytes = equal dtypes and values), compared to "
      "know a plan is still in force; None when either is not such a tensor.");

  m.def(
      "_same_source",
      [](nb::handle src, nb::handle cu_q, nb::handle cu_k) {
        if (src.is_none()) return false;
        if (!PyTuple_CheckExact(src.ptr()) || PyTuple_GET_SIZE(src.ptr()) != 10)
          throw Error(ErrorKind::kInvalidArgument, "src", "expected the 10-tuple of mlakit._varlen._source");
        if (!is_torch_tensor(cu_q) || !is_torch_tensor(cu_k)) return false;
        return same_offsets(src.ptr(), 0, cu_q.ptr()) && same_offsets(src.ptr(), 5, cu_k.ptr());
      },
      nb::arg("src").none(), nb::arg("cu_q").none(), nb::arg("cu_k").none(),
      "Whether two offset tensors match a version-counter record of mlakit._varlen._source (None: no).");

  nb::class_<Reinterpreted>(m, "_Reinterpreted",
                            "An integer array to be read as a float dtype of the same size (NumPy bfloat16, "
                            "ml_dtypes float8_e4m3fn).")
      .def("__init__",
           [](Reinterpreted* self, nb::object array, const std::string& dtype) {
             mlakit::DType t = parse_dtype(dtype, "dtype");
             if (t != mlakit::DType::kBF16 && t != mlakit::DType::kFP16 && t != mlakit::DType::kE4M3)
               throw Error(ErrorKind::kTypeMismatch, "dtype", "only bf16, fp16 and e4m3 can be reinterpreted");
             const size_t bits = 8 * mlakit::dtype_size(t);
             nb::ndarray<nb::ro> a;
             if (!import_array(array, &a) ||
                 !(static_cast<nb::dlpack::dtype_code>(a.dtype().code) == nb::dlpack::dtype_code::UInt ||
                   static_cast<nb::dlpack::dtype_code>(a.dtype().code) == nb::dlpack::dtype_code::Int) ||
                 a.dtype().bits != bits)
               throw Error(ErrorKind::kTypeMismatch, "array", "must be a " + std::to_string(bits) + "-bit integer array");
             new (self) Reinterpreted{std::move(array), t};
           },
           nb::arg("array"), nb::arg("dtype"))
      .def_ro("array", &Reinterpreted::array);
}

}  // namespace mlakit_py
