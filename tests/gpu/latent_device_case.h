// LatentAttention's GPU tests' shared parts: whether the CUDA backend can run here (it needs a
// Hopper GPU: elsewhere constructing the object throws kUnsupported, and the tests skip saying
// why), device copies of a LatentCase's tensors with poisoned outputs, reading the results back
// into the LatentResult the CPU checks take (util/latent_check.h), and one request of a batch cut
// out as a case of its own.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "mlakit/error.h"
#include "mlakit/latent.h"
#include "mlakit/runtime.h"
#include "util/latent_case.h"
#include "util/latent_check.h"
#include "util/test_util.h"

namespace mlakit {
namespace test {

inline LatentConfig on_cuda(LatentConfig c) {
  c.device = Device::cuda(0);
  return c;
}

// Why LatentAttention cannot run on CUDA device 0 here ("" when it can): no usable GPU, or a
// supported config (512 + 64, bf16) refused with kUnsupported -- a GPU other than sm90, or a
// build without the Hopper kernel. Any other error is a bug and propagates.
inline std::string latent_cuda_unavailable_reason() {
  std::string why;
  if (!gpu_available(&why)) return "no GPU: " + why;
  LatentConfig c;
  c.num_blocks = 1;
  c.max_batch = 1;
  c.max_q_tokens = 1;
  c.max_kv_tokens = 64;
  try {
    LatentAttention probe(on_cuda(c));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kUnsupported) throw;
    return device_description(Device::cuda(0)) + ": " + e.what();
  }
  return "";
}

// Copies host bytes into a device buffer of the same size (a captured graph keeps reading the
// buffer, so new inputs go into it rather than into a new one).
inline void copy_to_device(const HostTensor& h, const DeviceTensor& d, Stream stream = nullptr) {
  const TensorView v = d.view();
  copy_bytes(v.data, v.device, h.data(), Device::cpu(), h.nbytes(), stream);
}

// Every byte of a device buffer = 0xFF: NaN in bf16, fp16 and fp32 (and -1 in int32).
inline void poison(const DeviceTensor& d, Stream stream = nullptr) {
  const TensorView v = d.view();
  fill_bytes(v.data, v.device, 0xFF, static_cast<size_t>(v.numel()) * dtype_size(v.dtype), stream);
}

// How a case's tensors are laid out on the device.
struct LatentDeviceLayout {
  // lse and max_logits in [H, T'] memory read through transposed [T', H] views.
  bool lse_ht = false;
  // Sparse plans: the int32 row step of the device indices (0 = topk, contiguous). Larger: the
  // rows are padded, the pad filled with 0 -- a valid key, so reading it would show.
  int64_t index_row_stride = 0;
  // out as a [T', H, L] view of rows this many elements apart (0: L, contiguous). The pad keeps
  // its poison; a stride that is no multiple of 8 puts the rows' starts off 16-byte alignment.
  int64_t out_head_stride = 0;
};

// A LatentCase's inputs and outputs on a CUDA device: q (and q_pe), the cache, the optional
// inputs it uses, and out, lse, max_logits of T' = the case's q rows, all poisoned at creation.
struct LatentDeviceLayer {
  Device device;
  LatentDeviceLayout layout;
  int64_t rows = 0, heads = 0, lora = 0, topk = 0, out_stride = 0;
  DType dtype = DType::kBF16;
  std::unique_ptr<DeviceTensor> q, q_pe, cache, indices, topk_length, sink, k_scale, out, lse, max;
  TensorView q_pe_view, indices_view, topk_length_view, sink_view, k_scale_view, lse_view, max_view, out_view;
  bool use_topk_length = false, use_sink = false;

  LatentDeviceLayer(const LatentCase& m, Device d, LatentDeviceLayout l = {}) : device(d), layout(l) {
    rows = m.q.shape()[0];
    heads = m.cfg.num_heads;
    lora = m.cfg.kv_lora_rank;
    dtype = m.cfg.dtype;
    topk = m.opts.topk;
    use_topk_length = topk > 0 && m.use_topk_length;
    use_sink = m.use_sink;
    q = std::make_unique<DeviceTensor>(m.q, d);
    if (m.split_q) {
      q_pe = std::make_unique<DeviceTensor>(m.q_pe, d);
      q_pe_view = q_pe->view();
    }
    cache = std::make_unique<DeviceTensor>(m.cache, d);
    if (topk > 0) {
      const HostTensor idx = padded_indices(m);
      indices = std::make_unique<DeviceTensor>(idx, d);
      indices_view = TensorView(indices->view().data, DType::kInt32, {rows, topk}, {index_stride(), 1}, d);
      if (use_topk_length) {
        topk_length = std::make_unique<DeviceTensor>(m.topk_length, d);
        topk_length_view = topk_length->view();
      }
    }
    if (use_sink) {
      sink = std::make_unique<DeviceTensor>(m.sink, d);
      sink_view = sink->view();
    }
    if (m.cfg.kv_cache_dtype == KvCacheDtype::kFp8) {
      k_scale = std::make_unique<DeviceTensor>(m.k_scale, d);
      k_scale_view = k_scale->view();
    }
    out_stride = layout.out_head_stride > 0 ? layout.out_head_stride : lora;
    HostTensor o(dtype, {rows, heads, out_stride}), s(DType::kFP32, {rows, heads});
    o.fill_bytes(0xFF);
    s.fill_bytes(0xFF);
    out = std::make_unique<DeviceTensor>(o, d);
    out_view = TensorView(out->view().data, dtype, {rows, heads, lora}, {heads * out_stride, out_stride, 1}, d);
    lse = std::make_unique<DeviceTensor>(s, d);
    max = std::make_unique<DeviceTensor>(s, d);
    lse_view = scalar_view(*lse);
    max_view = scalar_view(*max);
  }

  int64_t index_stride() const { return layout.index_row_stride > 0 ? layout.index_row_stride : topk; }

  // The case's indices [T', topk] in rows of index_stride() entries.
  HostTensor padded_indices(const LatentCase& m) const {
    const int64_t stride = index_stride();
    HostTensor h(DType::kInt32, {rows, stride});
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t e = 0; e < topk; ++e) h.set(t * stride + e, m.indices.get(t * topk + e));
    return h;
  }

  // The inputs of another case of the same shapes (a later step) into the same buffers.
  void load(const LatentCase& m, Stream stream = nullptr) const {
    copy_to_device(m.q, *q, stream);
    if (q_pe) copy_to_device(m.q_pe, *q_pe, stream);
    copy_to_device(m.cache, *cache, stream);
    if (indices) {
      // Staged in a host tensor that must outlive the copy: synchronize before it goes.
      const HostTensor idx = padded_indices(m);
      copy_to_device(idx, *indices, stream);
      synchronize(device, stream);
    }
    if (topk_length) copy_to_device(m.topk_length, *topk_length, stream);
    if (sink) copy_to_device(m.sink, *sink, stream);
    if (k_scale) copy_to_device(m.k_scale, *k_scale, stream);
  }

  // out, lse and max_logits back to all 0xFF (NaN).
  void poison_outputs(Stream stream = nullptr) const {
    poison(*out, stream);
    poison(*lse, stream);
    poison(*max, stream);
  }

  // The layer's views; max_logits only when asked.
  LatentLayer layer(bool with_max_logits = true) const {
    LatentLayer y;
    y.q = q->view();
    if (q_pe) y.q_pe = &q_pe_view;
    y.kv_cache = cache->view();
    if (indices) y.indices = &indices_view;
    if (topk_length) y.topk_length = &topk_length_view;
    if (sink) y.attn_sink = &sink_view;
    if (k_scale) y.k_scale = &k_scale_view;
    if (with_max_logits) y.max_logits = &max_view;
    return y;
  }

  // One run() under attn's current plan; lse and max_logits written when asked.
  void run(const LatentAttention& attn, Stream stream = nullptr, bool with_lse = true,
           bool with_max_logits = true) const {
    attn.run(layer(with_max_logits), out_view, with_lse ? &lse_view : nullptr, stream);
  }

  // The outputs as the CPU tests' LatentResult (out [T', H, L], lse and max [T', H] buffers:
  // [H, T'] memory with layout.lse_ht). Synchronizes the device first.
  LatentResult fetch(const LatentPlanInfo& info) const {
    synchronize(device);
    LatentResult r{HostTensor(dtype, {rows, heads, lora}), HostTensor(DType::kFP32, {rows, heads}),
                   HostTensor(DType::kFP32, {rows, heads}), info};
    if (out_stride == lora) {
      out->copy_to(r.out);
    } else {
      const HostTensor full = out_rows();
      const size_t row_bytes = static_cast<size_t>(lora) * dtype_size(dtype);
      for (int64_t i = 0; i < rows * heads; ++i)
        std::memcpy(static_cast<uint8_t*>(r.out.data()) + static_cast<size_t>(i) * row_bytes,
                    full.bytes().data() + static_cast<size_t>(i * out_stride) * dtype_size(dtype), row_bytes);
    }
    lse->copy_to(r.lse);
    max->copy_to(r.max);
    return r;
  }

  // Whether every byte of out's buffer outside the [T', H, L] view is still 0xFF.
  bool out_pad_poisoned() const {
    synchronize(device);
    const HostTensor full = out_rows();
    const size_t es = dtype_size(dtype);
    for (int64_t i = 0; i < rows * heads; ++i)
      for (size_t b = static_cast<size_t>(i * out_stride + lora) * es; b < static_cast<size_t>((i + 1) * out_stride) * es; ++b)
        if (full.bytes()[b] != 0xFF) return false;
    return true;
  }

 private:
  HostTensor out_rows() const {
    HostTensor full(dtype, {rows, heads, out_stride});
    out->copy_to(full);
    return full;
  }
  TensorView scalar_view(const DeviceTensor& t) const {
    void* p = t.view().data;
    return layout.lse_ht ? TensorView(p, DType::kFP32, {rows, heads}, {1, rows}, device)
                         : TensorView(p, DType::kFP32, {rows, heads}, device);
  }
};

struct LatentCudaRun {
  LatentDeviceLayout layout;
  const LatentBatch* batch = nullptr;  // planned instead of m.batch()
  bool with_lse = true, with_max_logits = true;
};

// Plans and runs `m` on CUDA device 0 through a fresh object (or `attn`, whose config is on the
// device), every output poisoned first, and reads the results back.
inline LatentResult run_latent_cuda(const LatentCase& m, LatentAttention* attn = nullptr,
                                    const LatentCudaRun& how = {}) {
  std::unique_ptr<LatentAttention> own;
  if (attn == nullptr) {
    own = std::make_unique<LatentAttention>(on_cuda(m.cfg));
    attn = own.get();
  }
  attn->plan(how.batch ? *how.batch : m.batch(), m.opts);
  const LatentDeviceLayer d(m, attn->config().device, how.layout);
  d.run(*attn, nullptr, how.with_lse, how.with_max_logits);
  return d.fetch(attn->info());
}

// For a run that asked for no lse or no max_logits: the reference's values in their place, so
// that expect_matches judges out (and whatever was asked for) alone.
inline void take_reference_scalars(LatentResult& r, const LatentRef& ref, int64_t total_q, bool lse,
                                   bool max_logits) {
  const int64_t H = r.lse.shape()[1];
  for (int64_t i = 0; i < total_q * H; ++i) {
    if (lse) r.lse.set(i, ref.lse.get(i));
    if (max_logits) r.max.set(i, ref.max.get(i));
  }
}

// Request r of `batch` as a case of its own: its q rows (and q_pe, index rows, topk_length), its
// block table row; the config, cache, options and sink stay the batch's.
inline LatentCase single_request(const LatentCase& batch, size_t r) {
  int64_t t0 = 0;
  for (size_t i = 0; i < r; ++i) t0 += batch.q_lens[i];
  const int64_t n = batch.q_lens[r];
  LatentCase one = batch;
  one.q_lens = {batch.q_lens[r]};
  one.kv_lens = {batch.kv_lens[r]};
  one.block_table.assign(batch.block_table.begin() + static_cast<std::ptrdiff_t>(r * batch.cols),
                         batch.block_table.begin() + static_cast<std::ptrdiff_t>((r + 1) * batch.cols));
  auto rows_of = [&](const HostTensor& src) {
    std::vector<int64_t> shape = src.shape();
    const int64_t per_row = src.numel() / shape[0];
    shape[0] = n;
    HostTensor dst(src.dtype(), shape);
    for (int64_t i = 0; i < n * per_row; ++i) dst.set(i, src.get(t0 * per_row + i));
    return dst;
  };
  one.q = rows_of(batch.q);
  if (batch.split_q) one.q_pe = rows_of(batch.q_pe);
  if (batch.opts.topk > 0) {
    one.indices = rows_of(batch.indices);
    one.topk_length = rows_of(batch.topk_length);
  }
  return one;
}

}  // namespace test
}  // namespace mlakit

// Skips the current test, printing why, when LatentAttention cannot run on CUDA here (no GPU, not
// an sm90 GPU, no Hopper kernel in this build).
#define MLAKIT_SKIP_IF_NO_LATENT_CUDA()                                                \
  do {                                                                                 \
    const std::string mlakit_latent_why_ = ::mlakit::test::latent_cuda_unavailable_reason(); \
    if (!mlakit_latent_why_.empty()) {                                                 \
      std::printf("[  SKIPPED ] LatentAttention on CUDA: %s\n", mlakit_latent_why_.c_str()); \
      std::fflush(stdout);                                                             \
      GTEST_SKIP() << "LatentAttention on CUDA: " << mlakit_latent_why_;               \
    }                                                                                  \
  } while (0)
