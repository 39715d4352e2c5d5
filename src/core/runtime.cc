// Public runtime helpers: CPU memory and copies here, CUDA work forwarded to cuda_rt
// (runtime_cuda.cc, or the no_cuda.cc stubs), plus host float <-> bf16/fp16 conversions.
#include "mlakit/runtime.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>
#include <mutex>
#include <new>
#include <unordered_set>

#include "cpu/cpu_backend.h"
#include "cpu/cpu_isa.h"
#include "cpu/e4m3_convert.h"
#include "cpu/half_convert.h"
#include "cuda/kernel_list.h"
#include "cuda/common/host_sync.h"
#include "mlakit/error.h"

namespace mlakit {

namespace {
constexpr size_t kHostAlign = 256;  // matches the workspace alignment contract

void* host_aligned_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  // std::aligned_alloc needs a size that is a multiple of the alignment.
  size_t rounded = (bytes + kHostAlign - 1) / kHostAlign * kHostAlign;
  void* p = std::aligned_alloc(kHostAlign, rounded);
  if (!p) throw Error(ErrorKind::kRuntime, "", "host allocation of " + std::to_string(bytes) + " bytes failed");
  return p;
}

// pinned_alloc falls back to plain memory when CUDA cannot give page-locked memory; remember
// which pointers those are so pinned_free releases each the right way.
std::mutex g_fallback_mu;
std::unordered_set<void*>& fallback_set() {
  static std::unordered_set<void*> s;
  return s;
}

}  // namespace

bool built_with_cuda() {
#ifdef MLAKIT_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() { return cuda_rt::device_count(nullptr); }

std::string cuda_unavailable_reason() {
  std::string why;
  if (cuda_rt::device_count(&why) > 0) return "";
  return why.empty() ? "no CUDA device" : why;
}

std::string device_description(Device d) {
  if (d.is_cpu()) return "cpu";
  return cuda_rt::device_name(d.index);
}

namespace {
constexpr const char* kVersion = "0.1.0";  // the project's version (CMakeLists.txt, pyproject.toml)

constexpr DType kInputDtypes[] = {DType::kBF16, DType::kFP16, DType::kE4M3};

#ifdef MLAKIT_WITH_CUDA
DType dtype_of_tag(const char* tag) {
  for (DType t : kInputDtypes)
    if (std::strcmp(dtype_name(t), tag) == 0) return t;
  throw Error(ErrorKind::kRuntime, "", std::string("kernel_list.h names an unknown dtype tag ") + tag);
}

// A CUDA backend's dtypes: those of its kernels, in kInputDtypes' order.
BackendInfo cuda_backend(const char* name, std::vector<KernelShape> shapes) {
  BackendInfo b;
  b.name = name;
  for (DType t : kInputDtypes)
    for (const KernelShape& k : shapes)
      if (k.dtype == t) {
        b.dtypes.push_back(t);
        break;
      }
  b.shapes = std::move(shapes);
  return b;
}
#endif
}  // namespace

LibraryInfo library_info() {
  LibraryInfo info;
  info.version = kVersion;
  info.built_with_cuda = built_with_cuda();
  cpu::CpuIsa requested;
  info.cpu_isa_requested = cpu::cpu_isa_requested(&requested) ? cpu::cpu_isa_name(requested) : "";
  const cpu::CpuIsa isa = cpu::cpu_isa_in_use();
  info.cpu_isa = cpu::cpu_isa_name(isa);
  info.cpu_isa_best = cpu::cpu_isa_name(cpu::cpu_isa_best());
  info.cpu_has_amx = cpu::cpu_has_amx();
  // e4m3 as its default bf16 output takes it.
  for (DType t : kInputDtypes)
    info.cpu_products.push_back({t, cpu::cpu_isa_name(cpu::products_isa(t, t == DType::kE4M3 ? DType::kBF16 : t, isa))});

  BackendInfo cpu_backend;
  cpu_backend.name = "cpu";
  cpu_backend.dtypes.assign(std::begin(kInputDtypes), std::end(kInputDtypes));
  cpu_backend.max_head_dim = cpu::kMaxHeadDim;
  info.backends.push_back(cpu_backend);
#ifdef MLAKIT_WITH_CUDA
#define MLAKIT_SHAPE_OF(arch, tag, dqk, dvo) KernelShape{dtype_of_tag(#tag), dqk, dvo},
  info.backends.push_back(cuda_backend("cuda sm80", {MLAKIT_SM80_KERNELS(MLAKIT_SHAPE_OF)}));
#ifdef MLAKIT_WITH_SM90
  info.backends.push_back(cuda_backend("cuda sm90", {MLAKIT_SM90_KERNELS(MLAKIT_SHAPE_OF)}));
#endif
#undef MLAKIT_SHAPE_OF
#endif
  const std::vector<KvCacheDtype> latent_caches = {KvCacheDtype::kAuto, KvCacheDtype::kFp8, KvCacheDtype::kFp8DsMla};
  info.latent_backends.push_back({"cpu", {DType::kBF16, DType::kFP16}, 0, 0, latent_caches});
#ifdef MLAKIT_WITH_SM90
  info.latent_backends.push_back({"cuda sm90", {DType::kBF16, DType::kFP16}, 512, 64, latent_caches});
#endif
  return info;
}

void* device_alloc(size_t bytes, Device d) {
  if (d.is_cpu()) return host_aligned_alloc(bytes);
  if (bytes == 0) return nullptr;
  return cuda_rt::alloc_device(bytes, d.index);
}

void device_free(void* p, Device d) {
  if (!p) return;
  if (d.is_cpu()) std::free(p);
  else cuda_rt::free_device(p, d.index);
}

void* pinned_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  if (cuda_rt::device_count(nullptr) > 0) {
    if (void* p = cuda_rt::alloc_pinned(bytes)) return p;
  }
  void* p = host_aligned_alloc(bytes);
  std::lock_guard<std::mutex> lock(g_fallback_mu);
  fallback_set().insert(p);
  return p;
}

void pinned_free(void* p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> lock(g_fallback_mu);
    auto it = fallback_set().find(p);
    if (it != fallback_set().end()) {
      fallback_set().erase(it);
      std::free(p);
      return;
    }
  }
  cuda_rt::free_pinned(p);
}

void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes,
                Stream stream) {
  if (bytes == 0) return;
  if (dst_dev.is_cpu() && src_dev.is_cpu()) {
    std::memmove(dst, src, bytes);
    return;
  }
  cuda_rt::memcpy_async(dst, src, bytes, dst_dev.is_cuda() ? dst_dev.index : src_dev.index, stream);
}

void fill_bytes(void* dst, Device d, int byte_value, size_t bytes, Stream stream) {
  if (bytes == 0) return;
  if (d.is_cpu()) std::memset(dst, byte_value, bytes);
  else cuda_rt::memset_async(dst, byte_value, bytes, d.index, stream);
}

void synchronize(Device d, Stream stream) {
  if (d.is_cuda()) cuda_rt::stream_synchronize(d.index, stream);
}

// One converter for the whole library: the CPU backend's (cpu/half_convert.h), so the helpers
// tools and tests use round exactly like the backend and the reference (NaN payloads included).
uint16_t float_to_bf16(float f) { return cpu::float_to_bf16(f); }
float bf16_to_float(uint16_t h) { return cpu::bf16_to_float(h); }
uint16_t float_to_fp16(float f) { return cpu::float_to_fp16(f); }
float fp16_to_float(uint16_t h) { return cpu::fp16_to_float(h); }
uint8_t float_to_e4m3(float f) { return cpu::float_to_e4m3(f); }
float e4m3_to_float(uint8_t x) { return cpu::e4m3_to_float(x); }

}  // namespace mlakit
