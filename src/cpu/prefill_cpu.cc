// The multi-threaded CPU prefill backend's entry: one work item = one (tile, q head) of the
// schedule; items are pulled from an atomic counter by the persistent pool (thread_pool.h) and
// computed by the path cpu_isa_in_use() names (cpu/cpu_isa.h). Every path's order of operations
// depends only on the item, so repeated runs are bitwise equal and a sequence's result does not
// depend on the batch around it.
#include <cmath>

#include "cpu/attention_item.h"
#include "cpu/cpu_backend.h"
#include "cpu/cpu_isa.h"
#include "cpu/thread_pool.h"

namespace mlakit {
namespace cpu {
namespace {

using ItemFn = void (*)(const Problem&, int64_t);

}  // namespace

CpuIsa products_isa(DType dtype, DType out_dtype, CpuIsa isa) {
  const bool bf16_products = dtype == DType::kBF16 || (dtype == DType::kE4M3 && out_dtype == DType::kBF16);
  return bf16_products ? isa : CpuIsa::kFp32;
}

void run_prefill(const plan::ScheduleHeader& header, const int32_t* qo_indptr,
                 const int32_t* kv_indptr, const plan::WorkTile* tiles, const TensorView& q,
                 const TensorView& k, const TensorView* k_rope, const TensorView& v,
                 const TensorView& out, const TensorView* lse, const Descales* descales) {
  Problem p{};
  p.descales = descales;
  p.header = &header;
  p.qo_indptr = qo_indptr;
  p.kv_indptr = kv_indptr;
  p.tiles = tiles;
  p.q = &q;
  p.k = &k;
  p.k_rope = k_rope;
  p.v = &v;
  p.out = &out;
  p.lse = (lse != nullptr && lse->data != nullptr) ? lse : nullptr;
  p.num_heads = static_cast<int>(q.shape[1]);
  p.num_kv_heads = static_cast<int>(k.shape[1]);
  p.dqk = static_cast<int>(q.shape[2]);
  p.dk_split = k_rope != nullptr ? p.dqk - static_cast<int>(k_rope->shape[2]) : p.dqk;
  p.dvo = static_cast<int>(v.shape[2]);
  p.block_m = header.block_m > 0 ? header.block_m : 64;
  p.block_n = header.block_n > 0 ? header.block_n : 64;
  p.sm_scale = header.sm_scale > 0.0f ? header.sm_scale
                                      : 1.0f / std::sqrt(static_cast<float>(p.dqk));
  p.soft_cap = header.soft_cap;
  const int64_t items = static_cast<int64_t>(header.num_tiles) * p.num_heads;
  if (items <= 0) return;
  ItemFn fn = nullptr;
  switch (q.dtype) {
    case DType::kBF16:
      switch (products_isa(q.dtype, out.dtype, cpu_isa_in_use())) {
        case CpuIsa::kAmx:
          prepare_amx(p);
          fn = run_item_amx;
          break;
        case CpuIsa::kAvx512Bf16:
          prepare_avx512bf16(p);
          fn = run_item_avx512bf16;
          break;
        case CpuIsa::kFp32: fn = run_item_fp32<DType::kBF16>; break;
      }
      break;
    case DType::kFP16: fn = run_item_fp32<DType::kFP16>; break;
    case DType::kFP32: fn = run_item_fp32<DType::kFP32>; break;
    default: return;  // validated by the caller
  }
  parallel_for(items, run_threads(), [&p, fn](int64_t item) { fn(p, item); });
}

}  // namespace cpu
}  // namespace mlakit
