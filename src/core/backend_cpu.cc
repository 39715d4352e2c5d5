// The CPU backend: host memory for the "device" workspace, copies at once, no events, and the
// multi-threaded CPU kernels of src/cpu.
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "core/backend.h"
#include "cpu/cpu_backend.h"
#include "cpu/fp8_dequant.h"
#include "cpu/latent_cpu.h"
#include "mlakit/error.h"
#include "mlakit/runtime.h"

namespace mlakit {
namespace backend {
namespace {

constexpr int kCpuBlockM = 64;
constexpr int kCpuBlockN = 64;
// Latent attention: rows per item (cpu/latent_avx512bf16.cc packs up to 64 rows, 4 vectors of
// 16) and keys per split of a short request (decode, MTP). Splits feed idle cores when a batch
// has few requests and cost their partials and merge otherwise: one thread, 16 decodes over
// 4096 keys at 16 heads, 1024-key splits ran 1-2% under no splits, 512-key ones 4-5%.
constexpr int kCpuLatentRows = 64;
constexpr int kCpuLatentSplit = 1024;

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu(); }

  cuda::KernelChoice choose_kernel(int head_dim_qk, int head_dim_vo, DType, DType, int,
                                   KernelPreference) const override {
    if (head_dim_qk > cpu::kMaxHeadDim) {
      throw Error(ErrorKind::kUnsupported, "config.head_dim_qk", "the CPU backend supports head dims 1..512");
    }
    if (head_dim_vo > cpu::kMaxHeadDim) {
      throw Error(ErrorKind::kUnsupported, "config.head_dim_vo", "the CPU backend supports head dims 1..512");
    }
    const unsigned hw = std::thread::hardware_concurrency();
    return cuda::KernelChoice{kCpuBlockM, kCpuBlockN, static_cast<int>(hw ? hw : 1), 0};
  }

  const char* cpu_isa(DType dtype, DType out_dtype) const override {
    return cpu::cpu_isa_name(cpu::products_isa(dtype, out_dtype, cpu::cpu_isa_in_use()));
  }

  void* alloc_device(size_t bytes) const override { return device_alloc(bytes, Device::cpu()); }
  void free_device(void* p) const noexcept override { std::free(p); }
  // Nothing copies asynchronously out of CPU staging: plain memory is enough.
  void* alloc_staging(size_t bytes) const override { return device_alloc(bytes, Device::cpu()); }
  void free_staging(void* p) const noexcept override { std::free(p); }

  void copy_to_device(void* dst, const void* src, size_t bytes, Stream) const override {
    std::memcpy(dst, src, bytes);
  }
  void zero_device(void* p, size_t bytes) const override {
    if (bytes > 0) std::memset(p, 0, bytes);
  }
  Event create_event() const override { return nullptr; }
  void record(Event, Stream) const override {}
  void wait(Event) const override {}
  void destroy_event(Event) const noexcept override {}
  unsigned long long capture_id(Stream) const override { return 0; }
  void record_in_capture(Event, Stream) const override {}
  void drain() const noexcept override {}

  void attention(const cuda::KernelChoice&, const AttentionCall& c, Stream) const override {
    const auto* block = static_cast<const uint8_t*>(c.schedule.block);
    const plan::ScheduleLayout& l = c.schedule.layout;
    plan::ScheduleHeader h;
    std::memcpy(&h, block, sizeof(h));
    if (c.dtype == DType::kE4M3) {
      // FP8: dequantized into float32 (descales folded in), then the same kernel (cpu/fp8_dequant.h).
      cpu::run_prefill_e4m3(h, reinterpret_cast<const int32_t*>(block + l.qo_indptr_offset),
                            reinterpret_cast<const int32_t*>(block + l.kv_indptr_offset),
                            reinterpret_cast<const plan::WorkTile*>(block + l.tiles_offset), *c.q, *c.k, c.k_rope,
                            *c.v, *c.out, c.lse, c.descales);
      return;
    }
    cpu::run_prefill(h, reinterpret_cast<const int32_t*>(block + l.qo_indptr_offset),
                     reinterpret_cast<const int32_t*>(block + l.kv_indptr_offset),
                     reinterpret_cast<const plan::WorkTile*>(block + l.tiles_offset), *c.q, *c.k,
                     c.k_rope, *c.v, *c.out, c.lse);
  }

  LatentChoice choose_latent(const LatentConfig& c) const override {
    return LatentChoice{kCpuLatentRows, c.kv_split_size > 0 ? c.kv_split_size : kCpuLatentSplit};
  }
  void latent_attention(const latent::LatentArgs& args, Stream) const override { cpu::run_latent(args); }

  void merge(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
             const TensorView& lse_b, const TensorView& out, const TensorView* lse_out,
             Stream) const override {
    cpu::merge_states(out_a, lse_a, out_b, lse_b, out, lse_out);
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace backend
}  // namespace mlakit
