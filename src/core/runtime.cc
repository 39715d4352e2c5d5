// Public runtime helpers: CPU memory and copies here, CUDA work forwarded to cuda_rt
// (runtime_cuda.cc, or the no_cuda.cc stubs), plus host float <-> bf16/fp16 conversions.
#include "mlakit/runtime.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_set>

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

uint32_t f2u(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
float u2f(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
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

uint16_t float_to_bf16(float f) {
  uint32_t u = f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even; overflow carries into inf correctly
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_float(uint16_t h) { return u2f(static_cast<uint32_t>(h) << 16); }

uint16_t float_to_fp16(float f) {
  uint32_t u = f2u(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65536: inf
  if (a < 0x38800000u) {
    // Result is subnormal (or zero) in fp16: value / 2^-24, rounded to nearest even.
    if (a < 0x33000000u) return sign;  // below half the smallest subnormal (2^-25): zero
    uint32_t exp = a >> 23;                         // biased fp32 exponent, 102..112
    uint32_t mant = (a & 0x7fffffu) | 0x800000u;    // 24-bit significand
    uint32_t shift = 126 - exp;                     // bits to drop: 14..24
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias exponent (127 -> 15) and round 13 dropped bits to nearest even.
  uint32_t r = a - 0x38000000u;  // subtract (127 - 15) << 23
  r += 0xfffu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}

float fp16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return u2f(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return u2f(sign);
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  return u2f(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace mlakit
