#include "mla/mla_plan_build.h"

#include <algorithm>
#include <cstring>

#include "mla/gather_entry.h"
#include "plan/kernel_select.h"
#include "plan/schedule_block.h"

namespace mlakit {
namespace mla {

PlanBuilder::PlanBuilder(const MlaConfig& c, const MlaLayout& l, const cuda::KernelChoice& k)
    : config_(c),
      layout_(l),
      // Every launch's queries are the step's new tokens; its keys at most the workspace rows.
      scheduler_(c.max_batch, c.max_tokens, l.rows, k.block_m, k.block_n,
                 plan::kv_split_settings(k)),
      kind_(static_cast<plan::ScheduleKind>(k.schedule_kind)),
      grid_blocks_(k.grid_blocks),
      qo_(static_cast<size_t>(c.max_batch) + 1),
      kv_(static_cast<size_t>(c.max_batch) + 1),
      ctx_start_(static_cast<size_t>(c.max_batch) + 1) {}

void PlanBuilder::build(const MlaBatch& b, const MlaPlanOptions& o, const BatchTotals& t,
                        uint8_t* block, StepPlan* out, const uint8_t* absorbed) {
  const MlaConfig& c = config_;
  const MlaLayout& l = layout_;
  const int n = b.batch_size;
  const int64_t bs = c.block_size;
  auto* counts = reinterpret_cast<int32_t*>(block + l.counts_offset);
  auto* slots = reinterpret_cast<int32_t*>(block + l.slots_offset);
  auto* gather = reinterpret_cast<int32_t*>(block + l.gather_offset);
  auto* absorbed_list = reinterpret_cast<int32_t*>(block + l.absorbed_offset);
  auto up = [&](int r) { return absorbed == nullptr || absorbed[r] == 0; };

  // Cache slots of positions [p0, p0 + count) of request r, written to dst: one division for the
  // run, then block by block (a 64-bit division per token was most of plan()'s cost at 8k tokens).
  auto write_slots = [&](int r, int64_t p0, int64_t count, int32_t* dst) {
    const int32_t* row = b.block_table + static_cast<int64_t>(r) * b.block_table_cols;
    int64_t blk = p0 / bs, off = p0 % bs;
    while (count > 0) {
      const int64_t run = std::min(count, bs - off);
      const int32_t base = static_cast<int32_t>(row[blk] * bs + off);
      for (int64_t k = 0; k < run; ++k) dst[k] = base + static_cast<int32_t>(k);
      dst += run;
      count -= run;
      off = 0;
      ++blk;
    }
  };
  // ctx_start_: the up-projected requests' contexts, concatenated (what the chunks cover).
  qo_[0] = 0;
  ctx_start_[0] = 0;
  for (int r = 0; r < n; ++r) {
    qo_[r + 1] = qo_[r] + b.query_lens[r];
    ctx_start_[r + 1] = ctx_start_[r] + (up(r) ? b.context_lens[r] : 0);
  }
  // The absorbed new tokens, in request order: the tail of the first launch's map.
  int64_t num_absorbed = 0;
  for (int r = 0; r < n; ++r) {
    if (up(r)) continue;
    for (int64_t i = qo_[r]; i < qo_[r + 1]; ++i) absorbed_list[num_absorbed++] = static_cast<int32_t>(i);
  }
  auto append_absorbed = [&](int32_t* dst) {
    for (int64_t j = 0; j < num_absorbed; ++j) dst[j] = new_token_entry(absorbed_list[j]);
  };
  // New tokens: the slots the first launch's gather writes them to.
  for (int r = 0; r < n; ++r) {
    if (b.slot_mapping) {
      for (int64_t i = qo_[r]; i < qo_[r + 1]; ++i) slots[i] = static_cast<int32_t>(b.slot_mapping[i]);
    } else {
      write_slots(r, b.context_lens[r], b.query_lens[r], slots + qo_[r]);
    }
  }

  PrefillOptions po;
  po.sm_scale = o.sm_scale;
  const int head_dim_qk = c.qk_nope_head_dim + c.qk_rope_head_dim;
  out->totals = t;
  out->launches.clear();
  out->visible_pairs = 0;
  out->graph = o.graph_rows > 0;
  out->up_requests = false;
  for (int r = 0; r < n && !out->up_requests; ++r) out->up_requests = up(r) && b.query_lens[r] > 0;
  int64_t used_gather = 0;

  // rows_used: map entries (the absorbed tail included); gemm_used: the rows attention reads.
  auto add_launch = [&](int64_t rows_used, int64_t gemm_used, int64_t rows_launched, bool causal, bool new_tokens) {
    const int i = static_cast<int>(out->launches.size());
    counts[i] = static_cast<int32_t>(rows_used);
    po.causal = causal;
    const plan::ScheduleResult r = plan::write_schedule_block(block + l.block_offset(i), l.schedule, scheduler_,
                                                              qo_.data(), kv_.data(), n, po, head_dim_qk, kind_,
                                                              c.num_heads, grid_blocks_);
    out->visible_pairs += r.visible_pairs;
    out->launches.push_back(
        LaunchPlan{used_gather, rows_launched, out->graph ? rows_launched : gemm_used, causal, new_tokens});
    used_gather += rows_used;
    out->used_bytes = l.block_offset(i) + plan::block_used_bytes(l.schedule, kind_, r);
  };

  if (!t.chunked) {
    // [context; new] per request, one causal launch (bottom-right aligned). Context rows come
    // from the cache, new tokens from kv_c / k_pe (written to the cache by the same gather).
    // An absorbed request has no keys here.
    kv_[0] = 0;
    for (int r = 0; r < n; ++r) {
      if (!up(r)) {
        kv_[r + 1] = kv_[r];
        continue;
      }
      const int64_t len = static_cast<int64_t>(b.context_lens[r]) + b.query_lens[r];
      kv_[r + 1] = static_cast<int32_t>(kv_[r] + len);
      write_slots(r, 0, b.context_lens[r], gather + kv_[r]);
      for (int64_t j = 0; j < b.query_lens[r]; ++j) {
        gather[kv_[r] + b.context_lens[r] + j] = new_token_entry(static_cast<int32_t>(qo_[r] + j));
      }
    }
    const int64_t rows = kv_[n];
    append_absorbed(gather + rows);
    add_launch(rows + num_absorbed, rows, o.graph_rows > 0 ? o.graph_rows : rows + num_absorbed, true, true);
  } else {
    // New tokens over themselves, causal; this gather also writes them into the cache.
    kv_[0] = 0;
    int64_t up_tokens = 0;
    for (int r = 0; r < n; ++r) {
      const int64_t len = up(r) ? b.query_lens[r] : 0;
      kv_[r + 1] = static_cast<int32_t>(kv_[r] + len);
      for (int64_t j = 0; j < len; ++j) gather[up_tokens++] = new_token_entry(static_cast<int32_t>(qo_[r] + j));
    }
    append_absorbed(gather + up_tokens);
    add_launch(t.total_q, up_tokens, t.total_q, true, true);
    // Then the concatenated contexts in chunks of the workspace rows, read from the cache only
    // (after the write above, in stream order); every key precedes every new token, so no mask.
    // A request with nothing in a chunk gets lse = -inf there.
    const int64_t up_context = ctx_start_[n];
    for (int64_t c0 = 0; c0 < up_context; c0 += l.rows) {
      const int64_t c1 = std::min(up_context, c0 + l.rows);
      kv_[0] = 0;
      int64_t w = used_gather;
      for (int r = 0; r < n; ++r) {
        const int64_t lo = std::max<int64_t>(ctx_start_[r], c0), hi = std::min<int64_t>(ctx_start_[r + 1], c1);
        const int64_t len = std::max<int64_t>(0, hi - lo);
        kv_[r + 1] = static_cast<int32_t>(kv_[r] + len);
        write_slots(r, lo - ctx_start_[r], len, gather + w);
        w += len;
      }
      add_launch(c1 - c0, c1 - c0, c1 - c0, false, false);
    }
  }

  MlaHeader h{};
  h.total_q = static_cast<int32_t>(t.total_q);
  h.chunked = t.chunked ? 1 : 0;
  h.num_chunks = static_cast<int32_t>(out->launches.size()) - 1;
  h.absorbed_tokens = static_cast<int32_t>(num_absorbed);
  std::memcpy(block, &h, sizeof(h));
}

}  // namespace mla
}  // namespace mlakit
