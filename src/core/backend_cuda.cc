// The CUDA backend in plain C++: it forwards to the CUDA seams (contract/prefill_launch.h,
// cuda/common/host_sync.h), which the no-CUDA build stubs, so this file compiles in every build.
#include <string>

#include "contract/latent_launch.h"
#include "contract/latent_layout.h"
#include "core/backend.h"
#include "core/launch_args.h"
#include "cuda/common/host_sync.h"
#include "mlakit/error.h"
#include "mlakit/runtime.h"

namespace mlakit {
namespace backend {
namespace {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index) : index_(index) {}
  Device device() const override { return Device::cuda(index_); }

  cuda::KernelChoice choose_kernel(int head_dim_qk, int head_dim_vo, DType dtype, DType out_dtype, int num_qo_heads,
                                   KernelPreference preference) const override {
    if (!cuda::prefill_supported(head_dim_qk, head_dim_vo, dtype, out_dtype)) {
      throw Error(ErrorKind::kUnsupported, "config.head_dim_qk",
                  "no CUDA kernel for (head_dim_qk, head_dim_vo) = (" + std::to_string(head_dim_qk) +
                      ", " + std::to_string(head_dim_vo) + ") in " + dtype_name(dtype) +
                      (dtype == DType::kE4M3 ? std::string(" -> ") + dtype_name(out_dtype) : std::string()));
    }
    return cuda::choose_prefill_kernel(head_dim_qk, head_dim_vo, dtype, out_dtype, num_qo_heads, device(),
                                       preference);
  }

  // Latent attention: the Hopper kernel's shape (src/cuda/sm90/latent_kernel_sm90.cuh): rows of
  // 64, the whole 576-wide row of one width, 16-bit inputs and cache.
  LatentChoice choose_latent(const LatentConfig& c) const override {
    if (c.kv_lora_rank != 512 || c.qk_rope_head_dim != 64) {
      throw Error(ErrorKind::kUnsupported, "config.kv_lora_rank",
                  "latent attention on CUDA takes kv_lora_rank 512 with qk_rope_head_dim 64 (DeepSeek's), got (" +
                      std::to_string(c.kv_lora_rank) + ", " + std::to_string(c.qk_rope_head_dim) +
                      "); other widths run on Device::cpu()");
    }
    std::string why;
    if (!cuda::latent_kernel_available(index_, &why)) {
      throw Error(ErrorKind::kUnsupported, "config.device", "no latent-attention kernel for " + to_string(device()) +
                                                                ": " + why + "; run it on Device::cpu()");
    }
    // 512 keys per split: one request alone over 4096 keys already spreads over 8 SMs; a batch
    // that fills the GPU splits less (plan::LatentScheduler), one CTA per SM.
    LatentChoice choice{latent::kCudaBlockRows, c.kv_split_size > 0 ? c.kv_split_size : 512, cuda::latent_grid(index_)};
    if (c.kv_cache_dtype != KvCacheDtype::kAuto) {
      choice.decoded_rows = c.max_decoded_rows / latent::kDecodedBlockRows * latent::kDecodedBlockRows;
    }
    return choice;
  }
  void latent_attention(const latent::LatentArgs& args, Stream stream) const override {
    cuda::launch_latent(args, index_, stream);
  }

  void* alloc_device(size_t bytes) const override { return device_alloc(bytes, device()); }
  void free_device(void* p) const noexcept override {
    if (p) cuda_rt::free_device(p, index_);
  }
  void* alloc_staging(size_t bytes) const override { return pinned_alloc(bytes); }
  void free_staging(void* p) const noexcept override { pinned_free(p); }

  void copy_to_device(void* dst, const void* src, size_t bytes, Stream stream) const override {
    cuda_rt::memcpy_async(dst, src, bytes, index_, stream);
  }
  void zero_device(void* p, size_t bytes) const override {
    if (bytes == 0) return;
    cuda_rt::memset_async(p, 0, bytes, index_, nullptr);
    cuda_rt::stream_synchronize(index_, nullptr);
  }
  Event create_event() const override { return cuda_rt::event_create(index_); }
  void record(Event e, Stream stream) const override { cuda_rt::event_record(e, stream); }
  void wait(Event e) const override { cuda_rt::event_synchronize(e); }
  void destroy_event(Event e) const noexcept override { cuda_rt::event_destroy(e); }
  unsigned long long capture_id(Stream stream) const override { return cuda_rt::stream_capture_id(stream); }
  void record_in_capture(Event e, Stream stream) const override { cuda_rt::event_record_in_capture(e, stream); }
  void drain() const noexcept override { cuda_rt::device_synchronize(index_); }

  void attention(const cuda::KernelChoice& choice, const AttentionCall& c,
                 Stream stream) const override {
    cuda::launch_prefill(choice, c.head_dim_qk, c.head_dim_vo, c.dtype, c.out_dtype, make_prefill_args(c), stream);
  }

  void merge(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
             const TensorView& lse_b, const TensorView& out, const TensorView* lse_out,
             Stream stream) const override {
    cuda::MergeArgs a{};
    a.out_a = out_a.data;
    a.lse_a = static_cast<const float*>(lse_a.data);
    a.out_b = out_b.data;
    a.lse_b = static_cast<const float*>(lse_b.data);
    a.out = out.data;
    a.lse_out = lse_out ? static_cast<float*>(lse_out->data) : nullptr;
    a.n = out_a.shape[0];
    a.h = out_a.shape[1];
    a.d = out_a.shape[2];
    a.oa_stride_tok = out_a.strides[0];
    a.oa_stride_head = out_a.strides[1];
    a.ob_stride_tok = out_b.strides[0];
    a.ob_stride_head = out_b.strides[1];
    a.o_stride_tok = out.strides[0];
    a.o_stride_head = out.strides[1];
    a.la_stride_tok = lse_a.strides[0];
    a.la_stride_head = lse_a.strides[1];
    a.lb_stride_tok = lse_b.strides[0];
    a.lb_stride_head = lse_b.strides[1];
    a.lo_stride_tok = lse_out ? lse_out->strides[0] : 0;
    a.lo_stride_head = lse_out ? lse_out->strides[1] : 0;
    cuda::launch_merge(out_a.dtype, a, stream);
  }

 private:
  int index_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device_index) {
  return std::make_unique<CudaBackend>(device_index);
}

}  // namespace backend
}  // namespace mlakit
