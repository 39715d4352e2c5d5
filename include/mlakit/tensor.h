// Plain tensor views: what every mlakit call takes. No CUDA headers needed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace mlakit {

// kE4M3: the OCP 8-bit float e4m3fn (PyTorch's float8_e4m3fn): 1 sign, 4 exponent (bias 7) and
// 3 mantissa bits, finite range +-448, subnormals down to 2^-9, no infinities, NaN = 0x7f / 0xff.
// kUInt8: raw bytes, as engines allocate FP8 caches (vLLM's fp8 and fp8_ds_mla caches are uint8);
// only the MLA step's FP8 latent cache takes it (MlaConfig::kv_cache_dtype).
enum class DType : int32_t { kBF16 = 0, kFP16 = 1, kFP32 = 2, kFP64 = 3, kInt32 = 4, kE4M3 = 5, kUInt8 = 6 };

// Size in bytes of one element.
size_t dtype_size(DType t);
// "bf16", "fp16", "fp32", "fp64", "int32", "e4m3", "uint8".
const char* dtype_name(DType t);

enum class DeviceType : int32_t { kCPU = 0, kCUDA = 1 };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  static Device cpu() { return {DeviceType::kCPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::kCUDA, i}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};
std::string to_string(Device d);

// A non-owning, strided view. Strides are in elements (not bytes), like PyTorch and DLPack.
// mlakit kernels need the last dimension contiguous (stride 1); other strides are free, so
// views into larger tensors (e.g. one head slice of a fused QKV buffer) work without copies.
struct TensorView {
  static constexpr int kMaxDims = 4;
  void* data = nullptr;
  DType dtype = DType::kBF16;
  int ndim = 0;
  int64_t shape[kMaxDims] = {0, 0, 0, 0};
  int64_t strides[kMaxDims] = {0, 0, 0, 0};
  Device device;

  TensorView() = default;
  // Contiguous (row-major) view.
  TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape,
             Device device = Device::cpu());
  // Explicit strides, in elements.
  TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape,
             std::initializer_list<int64_t> strides, Device device = Device::cpu());

  int64_t size(int d) const { return shape[d]; }
  int64_t stride(int d) const { return strides[d]; }
  int64_t numel() const;
  bool defined() const { return data != nullptr || numel() == 0; }
  bool is_contiguous() const;
  // Pointer to element (i0, i1, ...) — host arithmetic only, never dereferenced here.
  void* ptr_at(int64_t i0, int64_t i1 = 0, int64_t i2 = 0) const;
  std::string describe() const;  // e.g. "bf16[999, 16, 192] strides [3072, 192, 1] on cuda:0"
};

// A CUDA stream passed as an opaque handle (a cudaStream_t cast to void*); nullptr = default
// stream. Ignored by the CPU backend.
using Stream = void*;

}  // namespace mlakit
