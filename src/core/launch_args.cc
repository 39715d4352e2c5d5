#include "core/launch_args.h"

#include <algorithm>

namespace mlakit {
namespace backend {

cuda::PrefillArgs make_prefill_args(const AttentionCall& c) {
  const TensorView& q = *c.q;
  const TensorView& k = *c.k;
  const TensorView& v = *c.v;
  const TensorView& out = *c.out;
  cuda::PrefillArgs a{};
  a.q = q.data;
  a.k = k.data;
  a.v = v.data;
  a.out = out.data;
  a.lse = c.lse ? static_cast<float*>(c.lse->data) : nullptr;
  a.q_stride_tok = q.strides[0];
  a.q_stride_head = q.strides[1];
  a.k_stride_tok = k.strides[0];
  a.k_stride_head = k.strides[1];
  a.v_stride_tok = v.strides[0];
  a.v_stride_head = v.strides[1];
  a.o_stride_tok = out.strides[0];
  a.o_stride_head = out.strides[1];
  a.lse_stride_tok = c.lse ? c.lse->strides[0] : 0;
  a.lse_stride_head = c.lse ? c.lse->strides[1] : 0;
  if (c.k_rope != nullptr) {
    a.k_rope = c.k_rope->data;
    a.kr_stride_tok = c.k_rope->strides[0];
    // A single shared head broadcasts: the kernel then reads the same row for every kv head.
    a.kr_stride_head = c.k_rope->shape[1] > 1 ? c.k_rope->strides[1] : 0;
    a.k_rope_dim = static_cast<int>(c.k_rope->shape[2]);
  } else {
    a.k_rope = nullptr;  // plain K: every column from k
    a.kr_stride_tok = 0;
    a.kr_stride_head = 0;
    a.k_rope_dim = 0;
  }
  // Capacity-sized buffers may hold more rows than the plan's totals; a kernel may read up to
  // these bounds (never past them), so each is the smaller of the two tensors sharing it.
  a.q_rows = std::min(q.shape[0], out.shape[0]);
  a.kv_rows = std::min(k.shape[0], v.shape[0]);
  a.num_qo_heads = c.num_qo_heads;
  a.num_kv_heads = c.num_kv_heads;
  a.schedule = c.schedule.block;
  a.scratch = c.scratch;
  a.qo_indptr_offset = static_cast<int64_t>(c.schedule.layout.qo_indptr_offset);
  a.kv_indptr_offset = static_cast<int64_t>(c.schedule.layout.kv_indptr_offset);
  a.tiles_offset = static_cast<int64_t>(c.schedule.layout.tiles_offset);
  // Descale factors: pointer and (batch, head) strides, or null (= 1).
  auto descale = [](const TensorView* t, const float** p, int64_t* sb, int64_t* sh) {
    *p = t != nullptr ? static_cast<const float*>(t->data) : nullptr;
    *sb = t != nullptr ? t->strides[0] : 0;
    *sh = t != nullptr ? t->strides[1] : 0;
  };
  descale(c.descales.q, &a.q_descale, &a.qd_stride_b, &a.qd_stride_h);
  descale(c.descales.k, &a.k_descale, &a.kd_stride_b, &a.kd_stride_h);
  descale(c.descales.v, &a.v_descale, &a.vd_stride_b, &a.vd_stride_h);
  return a;
}

}  // namespace backend
}  // namespace mlakit
