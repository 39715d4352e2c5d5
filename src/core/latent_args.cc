#include "core/latent_args.h"

namespace mlakit {
namespace backend {

size_t latent_partial_bytes(int64_t rows, int kv_lora_rank) {
  return static_cast<size_t>(rows) * (static_cast<size_t>(kv_lora_rank) + 2) * sizeof(float);
}

latent::LatentArgs make_latent_args(const LatentConfig& c, const LatentLayer& y, const TensorView& out,
                                    const TensorView* lse, const void* plan, void* partials, int64_t partial_rows,
                                    void* decoded, int64_t decoded_rows) {
  latent::LatentArgs a{};
  a.q = y.q.data;
  a.q_stride_tok = y.q.strides[0];
  a.q_stride_head = y.q.strides[1];
  if (y.q_pe) {
    a.q_pe = y.q_pe->data;
    a.qpe_stride_tok = y.q_pe->strides[0];
    a.qpe_stride_head = y.q_pe->strides[1];
  }
  a.cache = y.kv_cache.data;
  a.cache_stride_block = y.kv_cache.strides[0];
  a.cache_stride_row = y.kv_cache.strides[1];
  a.cache_format = c.kv_cache_dtype == KvCacheDtype::kFp8DsMla ? 1 : c.kv_cache_dtype == KvCacheDtype::kFp8 ? 2 : 0;
  if (y.k_scale) a.k_scale = static_cast<const float*>(y.k_scale->data);
  a.num_slots = c.num_blocks * c.block_size;
  a.block_size = static_cast<int32_t>(c.block_size);
  a.out = out.data;
  a.out_stride_tok = out.strides[0];
  a.out_stride_head = out.strides[1];
  if (lse) {
    a.lse = static_cast<float*>(lse->data);
    a.lse_stride_tok = lse->strides[0];
    a.lse_stride_head = lse->strides[1];
  }
  if (y.max_logits) {
    a.max_logits = static_cast<float*>(y.max_logits->data);
    a.max_stride_tok = y.max_logits->strides[0];
    a.max_stride_head = y.max_logits->strides[1];
  }
  if (y.indices) {
    a.indices = static_cast<const int32_t*>(y.indices->data);
    a.indices_stride_tok = y.indices->strides[0];
  }
  if (y.topk_length) {
    a.topk_length = static_cast<const int32_t*>(y.topk_length->data);
    a.topk_length_stride = y.topk_length->strides[0];
  }
  if (y.attn_sink) {
    a.attn_sink = static_cast<const float*>(y.attn_sink->data);
    a.sink_stride = y.attn_sink->strides[0];
  }
  a.plan = plan;
  if (partials != nullptr) {
    a.partial_out = static_cast<float*>(partials);
    a.partial_lse = a.partial_out + partial_rows * c.kv_lora_rank;
    a.partial_max = a.partial_lse + partial_rows;
  }
  a.num_heads = c.num_heads;
  a.kv_lora_rank = c.kv_lora_rank;
  a.rope_dim = c.qk_rope_head_dim;
  a.dtype = c.dtype;
  a.decoded = decoded;
  a.decoded_capacity = decoded != nullptr ? decoded_rows : 0;
  return a;
}

}  // namespace backend
}  // namespace mlakit
