// The CPU backend's entry for latent attention: every work item of the plan on the persistent
// pool (pulled longest first from an atomic counter), then every split merge. An item computes
// its rows completely from its own key range, and a merge adds its splits in split order, so
// the result depends only on the plan's items: repeated runs are bitwise equal and, since a
// request's items depend only on its own lengths, so is a request alone or in any batch.
#include <cmath>
#include <cstring>

#include "cpu/aligned_scratch.h"
#include "cpu/cpu_backend.h"
#include "cpu/cpu_isa.h"
#include "cpu/half_convert.h"
#include "cpu/latent_cpu.h"
#include "cpu/latent_item.h"
#include "cpu/thread_pool.h"
#include "contract/kv_cache_format.h"

namespace mlakit {
namespace cpu {
namespace latent_cpu {

Run make_run(const LatentArgs& a, StoreRow store) {
  Run r;
  r.a = &a;
  const auto* block = static_cast<const uint8_t*>(a.plan);
  r.h = reinterpret_cast<const LatentHeader*>(block);
  r.qo = reinterpret_cast<const int32_t*>(block + r.h->qo_indptr_offset);
  r.kv = reinterpret_cast<const int32_t*>(block + r.h->kv_lens_offset);
  r.page_ptr = reinterpret_cast<const int32_t*>(block + r.h->page_indptr_offset);
  r.pages = reinterpret_cast<const int32_t*>(block + r.h->pages_offset);
  r.items = reinterpret_cast<const LatentItem*>(block + r.h->items_offset);
  r.merges = reinterpret_cast<const LatentMerge*>(block + r.h->merges_offset);
  r.H = a.num_heads;
  r.L = a.kv_lora_rank;
  r.R = a.rope_dim;
  r.D = r.L + r.R;
  while ((1 << r.block_shift) < r.h->block_size) ++r.block_shift;
  r.cache_format = a.cache_format;
  r.fp8_rows = a.cache_format != 0;
  r.k_scale = a.cache_format == 2 ? *a.k_scale : 0.0f;
  r.row_bytes = a.cache_format == 1 ? mla::kDsMlaRowBytes : a.cache_format == 2 ? r.D : 2 * r.D;
  r.store = store;
  return r;
}

namespace {

template <DType D>
void store_scalar(void* dst, const float* src, int n, float mul) {
  auto* out = static_cast<uint16_t*>(dst);
  for (int d = 0; d < n; ++d) out[d] = Elem<D>::store(src[d] * mul);
}

// One merge: each row's splits combined by their lse in split order (mlakit/merge.h's formula),
// then the sink, as a final row.
void run_merge(const Run& run, const LatentMerge& m) {
  thread_local AlignedScratch<float> buf;
  const LatentArgs& a = *run.a;
  const int L = run.L;
  float* o = buf.ensure(static_cast<size_t>(L));
  for (int i = 0; i < m.rows; ++i) {
    float mx_lse = kNegInf, mx = kNegInf;
    for (int s = 0; s < m.splits; ++s) {
      const int64_t p = m.partial + static_cast<int64_t>(s) * m.rows + i;
      mx_lse = std::max(mx_lse, a.partial_lse[p]);
      mx = std::max(mx, a.partial_max[p]);
    }
    const int64_t g = m.row_begin + i, t = g / run.H, hd = g % run.H;
    float lse = kNegInf, mul = 0.0f;
    std::memset(o, 0, sizeof(float) * static_cast<size_t>(L));
    if (mx_lse > kNegInf) {
      float sum = 0.0f;
      for (int s = 0; s < m.splits; ++s) {
        const int64_t p = m.partial + static_cast<int64_t>(s) * m.rows + i;
        const float w = std::exp(a.partial_lse[p] - mx_lse);  // 0 for an empty split
        if (w == 0.0f) continue;
        sum += w;
        const float* src = a.partial_out + p * L;
        for (int d = 0; d < L; ++d) o[d] += w * src[d];
      }
      lse = mx_lse + std::log(sum);
      mul = 1.0f / sum;
      if (a.attn_sink != nullptr) mul /= 1.0f + std::exp(a.attn_sink[hd * a.sink_stride] - lse);
    }
    run.store(static_cast<uint16_t*>(a.out) + t * a.out_stride_tok + hd * a.out_stride_head, o, L, mul);
    if (a.lse) a.lse[t * a.lse_stride_tok + hd * a.lse_stride_head] = lse;
    if (a.max_logits) a.max_logits[t * a.max_stride_tok + hd * a.max_stride_head] = mx;
  }
}

}  // namespace
}  // namespace latent_cpu

void run_latent(const latent::LatentArgs& a) {
  using namespace latent_cpu;
  void (*item_fn)(const Run&, const LatentItem&) = nullptr;
  StoreRow store = nullptr;
  if (a.dtype == DType::kFP16) {
    item_fn = item_fp32<DType::kFP16>;
    store = store_scalar<DType::kFP16>;
  } else if (products_isa(a.dtype, a.dtype, cpu_isa_in_use()) == CpuIsa::kAmx) {
    item_fn = item_amx;  // its softmax and stores are the AVX-512 BF16 path's
    store = store_bf16_avx512;
  } else if (products_isa(a.dtype, a.dtype, cpu_isa_in_use()) != CpuIsa::kFp32 &&
             cpu_isa_available(CpuIsa::kAvx512Bf16)) {
    item_fn = item_avx512bf16;
    store = store_bf16_avx512;
  } else {
    item_fn = item_fp32<DType::kBF16>;
    store = store_scalar<DType::kBF16>;
  }
  const Run run = make_run(a, store);
  const int threads = run_threads();
  parallel_for(run.h->num_items, threads, [&](int64_t i) { item_fn(run, run.items[i]); });
  parallel_for(run.h->num_merges, threads, [&](int64_t i) { run_merge(run, run.merges[i]); });
}

}  // namespace cpu
}  // namespace mlakit
