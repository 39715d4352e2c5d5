// What every CPU attention path shares: one work item is one (tile, q head) of the schedule; a
// path's item function computes it completely (its rows of out and lse) from the Problem.
// Inputs reach a path through Elem<D>::load (cpu/half_convert.h), so a new input dtype needs
// only its Elem; each path converts rows into its own tiles (fp32, or bf16 pairs).
#pragma once

#include <algorithm>
#include <cstdint>

#include "contract/schedule_layout.h"
#include "mlakit/prefill.h"
#include "mlakit/tensor.h"
#include "plan/scheduler.h"

namespace mlakit {
namespace cpu {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct Problem {
  const plan::ScheduleHeader* header;
  const int32_t* qo_indptr;
  const int32_t* kv_indptr;
  const plan::WorkTile* tiles;
  const TensorView* q;
  const TensorView* k;
  const TensorView* k_rope;  // may be null (plain K)
  const TensorView* v;
  const TensorView* out;
  const TensorView* lse;  // may be null
  int num_heads, num_kv_heads, dqk, dvo, block_m, block_n;
  int dk_split;  // key columns [0, dk_split) from k, [dk_split, dqk) from k_rope
  float sm_scale, soft_cap;
  // What a path prepares once per run, before the items, on the calling thread (the AVX-512
  // BF16 path: V packed as key pairs for every q tile and head that reads it; the amx path: V
  // transposed in blocks of 32 keys).
  const void* prepared = nullptr;
  // e4m3 inputs decoded exactly into bf16 (fp8_dequant.cc) keep their descale factors here, per
  // (sequence, kv head): the scores take q * k descales, the output v's. Null: none.
  const Descales* descales = nullptr;
};

// One item's place in the batch: its sequence, head, rows and the rows' visible key ranges.
struct ItemRows {
  int seq = 0, head = 0, kv_head = 0, rope_head = 0;
  int64_t q_begin = 0, kv_begin = 0, lq = 0, lk = 0, row0 = 0;
  int rows = 0;  // 0: nothing to do

  ItemRows(const Problem& p, int64_t item) {
    const plan::WorkTile tile = p.tiles[item / p.num_heads];
    seq = tile.seq;
    head = static_cast<int>(item % p.num_heads);
    kv_head = head / (p.num_heads / p.num_kv_heads);
    rope_head = (p.k_rope != nullptr && p.k_rope->shape[1] > 1) ? kv_head : 0;
    q_begin = p.qo_indptr[tile.seq];
    kv_begin = p.kv_indptr[tile.seq];
    lq = p.qo_indptr[tile.seq + 1] - q_begin;
    lk = p.kv_indptr[tile.seq + 1] - kv_begin;
    row0 = static_cast<int64_t>(tile.q_tile) * p.block_m;
    rows = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(p.block_m, lq - row0)));
  }

  // The item's descale factors (Problem::descales; 1 when absent): scores x qk, output x v.
  float qk_factor(const Problem& p) const {
    return p.descales == nullptr ? 1.0f : factor(p.descales->q) * factor(p.descales->k);
  }
  float v_factor(const Problem& p) const { return p.descales == nullptr ? 1.0f : factor(p.descales->v); }
  float factor(const TensorView* d) const {
    return d == nullptr ? 1.0f : *static_cast<const float*>(d->ptr_at(seq, kv_head));
  }

  // Row r's visible keys [lo, hi) (hi >= lo), relative to the sequence's first key.
  plan::KvRange range(const Problem& p, int r) const {
    plan::KvRange kr = plan::visible_kv_range(row0 + r, lq, lk, p.header->causal != 0,
                                              p.header->window_left);
    kr.hi = std::max(kr.lo, kr.hi);
    return kr;
  }
};

// The fp32 path (any x86-64 or other CPU): inputs widened to fp32, products in fp32 vector code.
template <DType D>
void run_item_fp32(const Problem& p, int64_t item);

// The AVX-512 BF16 path (VDPBF16PS products, fp32 accumulation and softmax over 16 lanes), bf16
// inputs. Only called when cpu_isa_available(CpuIsa::kAvx512Bf16). prepare_avx512bf16 runs first,
// once per run on the calling thread, and sets p.prepared (valid until its next call there).
void prepare_avx512bf16(Problem& p);
void run_item_avx512bf16(const Problem& p, int64_t item);

// The amx path (TDPBF16PS tile products, the same softmax), bf16 inputs. Only called when
// cpu_isa_available(CpuIsa::kAmx). prepare_amx runs first, once per run on the calling thread
// (V packed transposed for the tiles), and sets p.prepared as prepare_avx512bf16 does.
void prepare_amx(Problem& p);
void run_item_amx(const Problem& p, int64_t item);

}  // namespace cpu
}  // namespace mlakit
