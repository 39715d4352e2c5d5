#include "util/test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "mlakit/runtime.h"

namespace mlakit {
namespace test {

namespace {

// A contiguous (row-major) view of `shape` at `data` (TensorView's initializer-list constructor
// cannot take a runtime-sized shape).
TensorView row_major_view(void* data, DType dtype, const std::vector<int64_t>& shape, Device device) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.ndim = static_cast<int>(shape.size());
  int64_t s = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.shape[d] = shape[d];
    v.strides[d] = s;
    s *= shape[d];
  }
  v.device = device;
  return v;
}

}  // namespace

namespace {
int64_t product(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}
}  // namespace

HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)) {
  if (shape_.size() > static_cast<size_t>(TensorView::kMaxDims)) throw std::invalid_argument("too many dims");
  numel_ = product(shape_);
  bytes_.assign(static_cast<size_t>(numel_) * dtype_size(dtype_), 0);
}

TensorView HostTensor::view(Device device) const {
  return row_major_view(bytes_.empty() ? nullptr : bytes_.data(), dtype_, shape_, device);
}

double HostTensor::get(int64_t i) const {
  const uint8_t* p = bytes_.data() + static_cast<size_t>(i) * dtype_size(dtype_);
  switch (dtype_) {
    case DType::kBF16: { uint16_t h; std::memcpy(&h, p, 2); return bf16_to_float(h); }
    case DType::kFP16: { uint16_t h; std::memcpy(&h, p, 2); return fp16_to_float(h); }
    case DType::kFP32: { float f; std::memcpy(&f, p, 4); return f; }
    case DType::kFP64: { double d; std::memcpy(&d, p, 8); return d; }
    case DType::kInt32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case DType::kE4M3: return e4m3_to_float(*p);
    case DType::kUInt8: return *p;
  }
  return 0.0;
}

void HostTensor::set(int64_t i, double x) {
  uint8_t* p = bytes_.data() + static_cast<size_t>(i) * dtype_size(dtype_);
  switch (dtype_) {
    case DType::kBF16: { uint16_t h = float_to_bf16(static_cast<float>(x)); std::memcpy(p, &h, 2); break; }
    case DType::kFP16: { uint16_t h = float_to_fp16(static_cast<float>(x)); std::memcpy(p, &h, 2); break; }
    case DType::kFP32: { float f = static_cast<float>(x); std::memcpy(p, &f, 4); break; }
    case DType::kFP64: std::memcpy(p, &x, 8); break;
    case DType::kInt32: { int32_t v = static_cast<int32_t>(x); std::memcpy(p, &v, 4); break; }
    case DType::kE4M3: *p = float_to_e4m3(static_cast<float>(x)); break;
    case DType::kUInt8: *p = static_cast<uint8_t>(x); break;
  }
}

std::vector<double> HostTensor::to_doubles() const {
  std::vector<double> r(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) r[static_cast<size_t>(i)] = get(i);
  return r;
}

void HostTensor::fill_normal(std::mt19937_64& rng, double stddev, double mean) {
  std::normal_distribution<double> dist(mean, stddev);
  for (int64_t i = 0; i < numel_; ++i) set(i, dist(rng));
}

void HostTensor::fill_bytes(uint8_t pattern) { std::memset(bytes_.data(), pattern, bytes_.size()); }

DeviceTensor::DeviceTensor(const HostTensor& src, Device device)
    : bytes_(src.nbytes()), dtype_(src.dtype()), shape_(src.shape()), device_(device) {
  ptr_ = device_alloc(bytes_, device_);
  copy_bytes(ptr_, device_, src.data(), Device::cpu(), bytes_);
  synchronize(device_);
}

DeviceTensor::~DeviceTensor() { device_free(ptr_, device_); }

TensorView DeviceTensor::view() const { return row_major_view(ptr_, dtype_, shape_, device_); }

void DeviceTensor::copy_to(HostTensor& dst) const {
  if (dst.nbytes() != bytes_) throw std::invalid_argument("DeviceTensor::copy_to: size mismatch");
  synchronize(device_);
  copy_bytes(dst.data(), Device::cpu(), ptr_, device_, bytes_);
  synchronize(device_);
}

std::vector<int32_t> make_random_lengths(int batch, std::mt19937_64& rng,
                                         const std::vector<int32_t>& choices) {
  static const std::vector<int32_t> kDefault = {0, 1, 2, 7, 31, 63, 64, 65, 127, 129, 200, 333};
  const std::vector<int32_t>& c = choices.empty() ? kDefault : choices;
  std::uniform_int_distribution<size_t> pick(0, c.size() - 1);
  std::vector<int32_t> r(static_cast<size_t>(batch));
  for (auto& x : r) x = c[pick(rng)];
  return r;
}

std::vector<int32_t> make_indptr(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> p(lengths.size() + 1, 0);
  for (size_t i = 0; i < lengths.size(); ++i) p[i + 1] = p[i] + lengths[i];
  return p;
}

double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  const double inf = std::numeric_limits<double>::infinity();
  if (a.size() != b.size()) return inf;
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return inf;
    const double d = a[i] - b[i];
    num += d * d;
    den += b[i] * b[i];
  }
  if (std::isnan(num) || std::isinf(num)) return inf;
  if (den == 0.0) return num == 0.0 ? 0.0 : inf;
  return std::sqrt(num / den);
}

double relative_error(const HostTensor& a, const HostTensor& b) {
  return relative_error(a.to_doubles(), b.to_doubles());
}

double lse_error(const std::vector<double>& got, const std::vector<double>& want) {
  double e = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    if (std::isinf(want[i]) || std::isinf(got[i])) {
      if (got[i] != want[i]) return INFINITY;
      continue;
    }
    e = std::max(e, std::fabs(got[i] - want[i]) / (1.0 + std::fabs(want[i])));
  }
  return e;
}

bool gpu_available(std::string* why) {
  if (cuda_device_count() > 0) return true;
  if (why) *why = cuda_unavailable_reason();
  return false;
}

}  // namespace test
}  // namespace mlakit
