// TensorView basics: sizes, contiguity, addressing and descriptions for error messages.
#include "mlakit/tensor.h"

#include <sstream>

#include "mlakit/error.h"

namespace mlakit {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kBF16:
    case DType::kFP16:
      return 2;
    case DType::kFP32:
    case DType::kInt32:
      return 4;
    case DType::kFP64:
      return 8;
    case DType::kE4M3:
    case DType::kUInt8:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kBF16: return "bf16";
    case DType::kFP16: return "fp16";
    case DType::kFP32: return "fp32";
    case DType::kFP64: return "fp64";
    case DType::kInt32: return "int32";
    case DType::kE4M3: return "e4m3";
    case DType::kUInt8: return "uint8";
  }
  return "unknown";
}

std::string to_string(Device d) {
  if (d.is_cpu()) return "cpu";
  if (d.is_cuda()) return "cuda:" + std::to_string(d.index);
  return "unknown:" + std::to_string(d.index);
}

namespace {
int copy_shape(TensorView& t, std::initializer_list<int64_t> shape) {
  if (shape.size() > static_cast<size_t>(TensorView::kMaxDims)) {
    throw Error(ErrorKind::kInvalidArgument, "shape",
                "at most " + std::to_string(TensorView::kMaxDims) + " dimensions are supported");
  }
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  return i;
}
}  // namespace

TensorView::TensorView(void* data_, DType dtype_, std::initializer_list<int64_t> shape_,
                       Device device_)
    : data(data_), dtype(dtype_), device(device_) {
  ndim = copy_shape(*this, shape_);
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    strides[d] = s;
    s *= shape[d];
  }
}

TensorView::TensorView(void* data_, DType dtype_, std::initializer_list<int64_t> shape_,
                       std::initializer_list<int64_t> strides_, Device device_)
    : data(data_), dtype(dtype_), device(device_) {
  ndim = copy_shape(*this, shape_);
  if (strides_.size() != static_cast<size_t>(ndim)) {
    throw Error(ErrorKind::kInvalidArgument, "strides",
                "got " + std::to_string(strides_.size()) + " strides for " + std::to_string(ndim) +
                    " dimensions");
  }
  int i = 0;
  for (int64_t s : strides_) strides[i++] = s;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t expect = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    // A dimension of size 1 may carry any stride without changing addressing.
    if (shape[d] != 1 && strides[d] != expect) return false;
    expect *= shape[d];
  }
  return true;
}

void* TensorView::ptr_at(int64_t i0, int64_t i1, int64_t i2) const {
  int64_t off = 0;
  const int64_t idx[3] = {i0, i1, i2};
  for (int d = 0; d < ndim && d < 3; ++d) off += idx[d] * strides[d];
  return static_cast<char*>(data) + off * static_cast<int64_t>(dtype_size(dtype));
}

std::string TensorView::describe() const {
  std::ostringstream os;
  os << dtype_name(dtype) << "[";
  for (int d = 0; d < ndim; ++d) os << (d ? ", " : "") << shape[d];
  os << "] strides [";
  for (int d = 0; d < ndim; ++d) os << (d ? ", " : "") << strides[d];
  os << "] on " << to_string(device);
  return os.str();
}

}  // namespace mlakit
