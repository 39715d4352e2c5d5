#include "plan/latent_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "mlakit/error.h"
#include "plan/scheduler.h"

namespace mlakit {
namespace plan {

namespace {

using latent::LatentHeader;
using latent::LatentItem;
using latent::LatentMerge;

// Items go out costliest first, so that workers taking them in order (the CPU's pool from a
// counter, the GPU's persistent CTAs by latent::worker_item) finish close together. The order is
// set per part of a request, not per item: a request's full splits are alike (but for causal
// bounds) and so are its last ones, so sorting 2 x batch parts by the cost of one of their items
// (row vectors of 16 x key blocks of 64, the CPU kernel's steps) orders the items, and each
// part's items are written straight into the block. Sorting ~256 parts instead of ~1000 items
// keeps plan() within its microseconds (no staging pass over the items). Costs above the last
// bucket share it (the order only balances work).
constexpr int kCostBuckets = 4096;

int32_t item_cost(int rows, int64_t keys) {
  const int64_t c = (rows + 15) / 16 * ((keys + 63) / 64) + 1;
  return static_cast<int32_t>(std::min<int64_t>(c, kCostBuckets - 1));
}

[[noreturn]] __attribute__((noinline)) void over_capacity(const char* what) {
  throw Error(ErrorKind::kRuntime, "", std::string("latent attention: plan exceeds its ") + what + " capacity (internal)");
}

}  // namespace

int64_t LatentScheduler::widened_makespan(int64_t items, int64_t tiles, int64_t split_keys_max,
                                          int64_t whole_tiles_max, int64_t split_len, int workers) {
  // The longest item: the longest split of the request with the most keys (split_range's, which
  // lengthens splits past kMaxSplits), or a row block that does not split.
  const int64_t longest_split = split_keys_max > 0 ? latent::split_range(split_keys_max, split_len).len : 0;
  const int64_t longest = std::max((std::min(longest_split, split_keys_max) + 63) / 64, whole_tiles_max);
  const int64_t spread = (tiles + kItemStartTiles * items + workers - 1) / workers;
  return std::max(spread, longest + kItemStartTiles);
}

LatentScheduler::LatentScheduler(const LatentConfig& config, const latent::LatentLayout& layout, int block_rows,
                                 int split_size, int workers)
    : config_(config), layout_(layout), block_rows_(block_rows), split_size_(split_size), workers_(workers) {
  order_.resize(2 * static_cast<size_t>(config.max_batch));
  cost_.resize(2 * static_cast<size_t>(config.max_batch));
  splits_.resize(static_cast<size_t>(config.max_batch));
  partial_base_.resize(static_cast<size_t>(config.max_batch));
  merges_.resize(static_cast<size_t>(layout.max_merges));
  bucket_.resize(kCostBuckets + 1);
}

LatentScheduleResult LatentScheduler::build(const LatentBatch& b, const LatentPlanOptions& o, const LatentTotals& t,
                                            uint8_t* block) {
  const int H = config_.num_heads, BR = block_rows_, bs = config_.block_size;
  const bool sparse = o.topk > 0;
  const latent::LatentLayout& l = layout_;
  auto* qo = reinterpret_cast<int32_t*>(block + l.qo_indptr_offset);
  auto* kv = reinterpret_cast<int32_t*>(block + l.kv_lens_offset);
  auto* page_ptr = reinterpret_cast<int32_t*>(block + l.page_indptr_offset);

  LatentScheduleResult res;
  // Per request, in request order: the block's offsets and lengths, and the items it makes at
  // each widening of the split.
  const bool widen = workers_ > 0 && !o.batch_invariant;
  const int64_t head_blocks = (H + BR - 1) / BR;
  int64_t items_at[kMaxWiden + 1] = {};
  // For the split's cost model: key tiles of every row block, the most keys of a request whose
  // keys split, the most tiles of a row block that does not split.
  int64_t tiles = 0, split_keys_max = 0, whole_tiles_max = 0;
  // What the plan holds at split_size_ with every dense request's keys split (those of more than
  // kSplitRowsMax rows too): items, merges, partial rows; and whether any such request exists.
  int64_t all_items = 0, all_merges = 0, all_partial = 0;
  bool large = false;
  // For a decode once (FP8 caches): keys the items read, and the workspace rows the rows of the
  // requests they read take (each request's a multiple of a block).
  int64_t reads = 0, decode_rows = 0;
  const bool may_decode = layout_.max_decoded_blocks > 0 && t.reads_table && o.fp8_decode != LatentFp8Decode::kInKernel;
  qo[0] = 0;
  page_ptr[0] = 0;
  for (int r = 0; r < b.batch_size; ++r) {
    const int64_t q = b.query_lens[r];
    const int64_t kvr = t.reads_table ? b.kv_lens[r] : 0;
    qo[r + 1] = static_cast<int32_t>(qo[r] + q);
    kv[r] = static_cast<int32_t>(kvr);
    page_ptr[r + 1] = static_cast<int32_t>(page_ptr[r] + (t.reads_table ? (kvr + bs - 1) / bs : 0));
    if (may_decode && q > 0) {
      reads += sparse ? q * head_blocks * o.topk : (q * H + BR - 1) / BR * kvr;
      decode_rows += latent::ceil_div(kvr, latent::kDecodedBlockRows) * latent::kDecodedBlockRows;
    }
    if (!widen || q == 0) continue;
    const int64_t rows_r = q * H;
    const int64_t blocks = sparse ? q * head_blocks : (rows_r + BR - 1) / BR;
    const int64_t keys = sparse ? o.topk : kvr;
    // Splits at split_size << k: ceil(n / 2^k) of the n at split_size (one division a request:
    // this pass is inside plan()'s microseconds), through split_range where they exceed its cap.
    const int64_t n = keys > split_size_ ? (keys + split_size_ - 1) / split_size_ : 1;
    auto splits_at = [&](int k) {
      const int64_t nk = (n + (int64_t{1} << k) - 1) >> k;
      return nk <= latent::kMaxSplits ? nk : latent::split_range(keys, static_cast<int64_t>(split_size_) << k).count;
    };
    if (!sparse) {
      const int64_t n0 = splits_at(0);
      all_items += blocks * n0;
      all_merges += n0 > 1 ? blocks : 0;
      all_partial += n0 > 1 ? rows_r * n0 : 0;
      large = large || rows_r > latent::kSplitRowsMax;
    }
    tiles += blocks * ((keys + 63) / 64);
    if (rows_r > latent::kSplitRowsMax) {
      for (int k = 0; k <= kMaxWiden; ++k) items_at[k] += blocks;
      whole_tiles_max = std::max(whole_tiles_max, (keys + 63) / 64);
      continue;
    }
    split_keys_max = std::max(split_keys_max, keys);
    for (int k = 0; k <= kMaxWiden; ++k) items_at[k] += blocks * splits_at(k);
  }
  int64_t split = split_size_;
  if (widen) {
    int64_t best = widened_makespan(items_at[0], tiles, split_keys_max, whole_tiles_max, split_size_, workers_);
    for (int k = 1; k <= kMaxWiden; ++k) {
      const int64_t len = static_cast<int64_t>(split_size_) << k;
      const int64_t e = widened_makespan(items_at[k], tiles, split_keys_max, whole_tiles_max, len, workers_);
      if (e < best) best = e, split = len;  // ties keep the finer split
    }
  }
  res.split_size = static_cast<int>(split);
  // A dense batch that leaves at least half the workers without an item (a lone MTP or extend
  // request: 4 new tokens at 128 heads make 8 row blocks, each walking its whole context on one
  // SM) splits its large requests' keys as well, when the block holds what that makes (a request
  // of more than kSplitRowsMax rows is not within the layout's bounds; the totals above are
  // exact). Not batch-invariant: options.batch_invariant keeps them whole.
  const bool split_large = widen && !sparse && large && 2 * items_at[0] <= workers_ && all_items <= l.max_items &&
                           all_merges <= l.max_merges && all_partial <= l.max_partial_rows;
  // Each request's items in two parts, sorted together by cost: its full splits (every split
  // but the last; alike but for causal bounds) and its last split (or its one item). Sorting
  // these 2 x batch parts orders the items costliest first without a pass over the items (a
  // ragged batch's last splits range from a tile to a full split). Each part's sort key is the
  // cost of one of its items; its partial rows are the request's, placed by request order.
  int32_t* const costs = cost_.data();
  int32_t cost_lo = kCostBuckets, cost_hi = 0;
  int64_t partial = 0;
  for (int r = 0; r < b.batch_size; ++r) {
    const int64_t q = qo[r + 1] - qo[r];
    const int64_t rows_r = q * H;
    const bool may_split = rows_r <= latent::kSplitRowsMax || split_large;
    const int64_t keys = sparse ? o.topk : kv[r];
    const latent::Split sp = may_split ? latent::split_range(keys, split) : latent::Split{1, keys};
    splits_[static_cast<size_t>(r)] = sp;
    partial_base_[static_cast<size_t>(r)] = partial;
    if (sp.count > 1) partial += rows_r * sp.count;
    const int rows = static_cast<int>(std::min<int64_t>(BR, sparse ? H : rows_r));
    const int32_t full = q > 0 && sp.count > 1 ? item_cost(rows, sp.len) : -1;
    const int32_t last = q > 0 ? item_cost(rows, keys - (sp.count - 1) * sp.len) : -1;
    costs[2 * r] = full;
    costs[2 * r + 1] = last;
    for (const int32_t c : {full, last}) {
      if (c < 0) continue;
      cost_lo = std::min(cost_lo, c);
      cost_hi = std::max(cost_hi, c);
    }
  }
  if (partial > l.max_partial_rows) over_capacity("split");
  if (sparse) res.visible_pairs = t.total_q * o.topk;
  // Parts by cost, descending, stable (request order within a cost): a counting sort.
  int32_t* const order = order_.data();
  const int nb = cost_hi >= cost_lo ? cost_hi - cost_lo + 1 : 0;
  std::fill(bucket_.begin(), bucket_.begin() + nb, 0);
  int num_parts = 0;
  for (int e = 0; e < 2 * b.batch_size; ++e)
    if (costs[e] >= 0) ++bucket_[static_cast<size_t>(cost_hi - costs[e])], ++num_parts;
  for (int c = 0, start = 0; c < nb; ++c) {
    const int32_t n = bucket_[static_cast<size_t>(c)];
    bucket_[static_cast<size_t>(c)] = start;
    start += n;
  }
  for (int e = 0; e < 2 * b.batch_size; ++e)
    if (costs[e] >= 0) order[bucket_[static_cast<size_t>(cost_hi - costs[e])]++] = e;

  // Items, straight into the block (locals: this loop is most of plan()'s time at batch 128).
  auto* const items = reinterpret_cast<LatentItem*>(block + l.arrays_offset);
  const int64_t max_items = l.max_items;
  int num_items = 0;
  auto add = [&](const LatentItem& item) {
    // The capacity bounds every plan within the config (latent::make_layout); reaching it is a bug.
    if (num_items >= max_items) over_capacity("item");
    items[num_items++] = item;
  };
  // Item `it` (rows, token, request set) over split s of a range of `hi` keys split as `sp`; its
  // rows' partial rows start at `region` (split s at region + s x rows).
  auto add_split = [&](LatentItem it, const latent::Split& sp, int64_t s, int64_t hi, int64_t region) {
    if (sp.count == 1) {
      it.key_end = static_cast<int32_t>(hi);
      add(it);
      return;
    }
    // Splits past the block's last visible key stay (empty): the merge reads every split.
    it.key_begin = static_cast<int32_t>(std::min(s * sp.len, hi));
    it.key_end = static_cast<int32_t>(std::min((s + 1) * sp.len, hi));
    it.partial = static_cast<int32_t>(region + s * it.rows);
    it.split = static_cast<int32_t>(s);
    add(it);
  };

  // A merge per split row block (dense) or token's head block (sparse), written with its last
  // split (once per block, in the order of the last parts).
  int num_merges = 0;
  auto add_merge = [&](const LatentItem& it, int64_t region, int64_t splits) {
    if (num_merges >= l.max_merges) over_capacity("split");
    merges_[static_cast<size_t>(num_merges++)] =
        LatentMerge{it.row_begin, it.rows, static_cast<int32_t>(region), static_cast<int32_t>(splits)};
  };

  // Where items pair (latent::paired_items: H = 2 BR, so a request's rows are whole pairs of
  // blocks), a token's two head blocks go side by side in every split: `it` (its first block,
  // whose partial rows start at `region`) and the block after it, which has the same tokens and
  // keys.
  auto add_pair = [&](const LatentItem& it, const latent::Split& sp, int64_t s_begin, int64_t s_end, int64_t hi,
                      int64_t region, bool last_part) {
    LatentItem it2 = it;
    it2.row_begin += BR;
    for (int64_t s = s_begin; s < s_end; ++s) {
      add_split(it, sp, s, hi, region);
      add_split(it2, sp, s, hi, region + BR * sp.count);
    }
    if (last_part && sp.count > 1) {
      add_merge(it, region, sp.count);
      add_merge(it2, region + BR * sp.count, sp.count);
    }
  };
  // The loop twice, for paired and unpaired plans: the paired branch inside the one loop cost
  // the unpaired plans 0.6-0.7 us of their ~8 (batch 128, this loop is most of plan()).
  auto write_items = [&](auto paired_tag) {
    constexpr bool paired = decltype(paired_tag)::value;
    const int pair_step = paired ? 2 * BR : BR;
    for (int oi = 0; oi < num_parts; ++oi) {
      const int r = order[oi] >> 1;
      const bool last_part = (order[oi] & 1) != 0;
      const int64_t q = qo[r + 1] - qo[r];
      const int64_t kvr = kv[r];
      const int64_t rows_r = q * H;
      const latent::Split sp = splits_[static_cast<size_t>(r)];
      const int64_t s_begin = last_part ? sp.count - 1 : 0, s_end = last_part ? sp.count : sp.count - 1;
      const int64_t base = partial_base_[static_cast<size_t>(r)];
      if (!sparse) {
        if (last_part) res.visible_pairs += visible_pairs(q, kvr, o.causal, -1);
        const int64_t row0 = static_cast<int64_t>(qo[r]) * H;
        for (int64_t rb = 0; rb < rows_r; rb += pair_step) {
          // The block's first token and its keys: its last row sees the most (causal bounds grow
          // with the token). A decode's block is its one token's, which sees every key (no
          // divisions: this loop runs twice a request).
          const int rows = static_cast<int>(std::min<int64_t>(BR, rows_r - rb));
          const int64_t tok0 = q > 1 ? rb / H : 0;
          const int64_t hi = o.causal && q > 1 ? std::clamp<int64_t>(kvr - q + (rb + rows - 1) / H + 1, 0, kvr) : kvr;
          const LatentItem it{r, static_cast<int32_t>(row0 + rb), rows, static_cast<int32_t>(qo[r] + tok0), 0, 0, -1, 0};
          if constexpr (paired) {
            add_pair(it, sp, s_begin, s_end, hi, base + rb * sp.count, last_part);
          } else {
            for (int64_t s = s_begin; s < s_end; ++s) add_split(it, sp, s, hi, base + rb * sp.count);
            if (last_part && sp.count > 1) add_merge(it, base + rb * sp.count, sp.count);
          }
        }
        continue;
      }
      // Sparse: one token's heads per item, over its index entries.
      for (int64_t tok = qo[r]; tok < qo[r + 1]; ++tok) {
        for (int hb = 0; hb < H; hb += pair_step) {
          const int rows = std::min(BR, H - hb);
          const LatentItem it{r, static_cast<int32_t>(tok * H + hb), rows, static_cast<int32_t>(tok), 0, o.topk, -1, 0};
          const int64_t region = base + ((tok - qo[r]) * H + hb) * sp.count;
          if constexpr (paired) {
            add_pair(it, sp, s_begin, s_end, o.topk, region, last_part);
          } else {
            for (int64_t s = s_begin; s < s_end; ++s) add_split(it, sp, s, o.topk, region);
            if (last_part && sp.count > 1) add_merge(it, region, sp.count);
          }
        }
      }
    }
  };
  if (latent::paired_items(H, BR)) {
    write_items(std::true_type{});
  } else {
    write_items(std::false_type{});
  }

  // Merges after the items, pages last.
  const size_t merges_off = l.arrays_offset + sizeof(LatentItem) * static_cast<size_t>(num_items);
  std::memcpy(block + merges_off, merges_.data(), sizeof(LatentMerge) * static_cast<size_t>(num_merges));
  const size_t pages_off = merges_off + sizeof(LatentMerge) * static_cast<size_t>(num_merges);
  auto* pages = reinterpret_cast<int32_t*>(block + pages_off);
  // Decoded once: the kernel reads the workspace, request r's rows at consecutive blocks (the
  // pages), and the cache's pages go after them for the decode (latent_layout.h).
  const int64_t ws_blocks = decode_rows / latent::kDecodedBlockRows;
  const bool decoded = may_decode && decode_rows > 0 && ws_blocks <= layout_.max_decoded_blocks &&
                       (o.fp8_decode == LatentFp8Decode::kOnce || reads >= kDecodeOnceReads * decode_rows);
  int32_t* src_ptr = page_ptr;  // the cache's pages: their offsets, and where they go
  int32_t* src_pages = pages;
  if (decoded) {
    src_ptr = reinterpret_cast<int32_t*>(block + l.src_page_indptr_offset);
    std::memcpy(src_ptr, page_ptr, sizeof(int32_t) * static_cast<size_t>(b.batch_size + 1));
    for (int r = 0; r < b.batch_size; ++r) {
      const int64_t n = qo[r + 1] > qo[r] ? latent::ceil_div(kv[r], latent::kDecodedBlockRows) : 0;
      page_ptr[r + 1] = static_cast<int32_t>(page_ptr[r] + n);
    }
    for (int64_t g = 0; g < ws_blocks; ++g) pages[g] = static_cast<int32_t>(g);
    src_pages = pages + ws_blocks;
  }
  const size_t src_pages_off = static_cast<size_t>(reinterpret_cast<uint8_t*>(src_pages) - block);
  if (t.reads_table && !t.device_table) {
    for (int r = 0; r < b.batch_size; ++r) {
      const int32_t n = src_ptr[r + 1] - src_ptr[r];
      std::memcpy(src_pages + src_ptr[r], b.block_table + static_cast<int64_t>(r) * b.block_table_cols,
                  sizeof(int32_t) * static_cast<size_t>(n));
    }
  }

  LatentHeader h{};
  h.batch_size = b.batch_size;
  h.total_q = static_cast<int32_t>(t.total_q);
  h.num_items = num_items;
  h.num_merges = num_merges;
  h.sparse = sparse ? 1 : 0;
  h.index_kind = static_cast<int32_t>(o.indices);
  h.causal = o.causal ? 1 : 0;
  h.topk = o.topk;
  h.block_size = bs;
  h.num_heads = H;
  h.block_rows = BR;
  h.partial_rows = static_cast<int32_t>(partial);
  h.sm_scale = o.sm_scale > 0.0f
                   ? o.sm_scale
                   : 1.0f / std::sqrt(static_cast<float>(config_.kv_lora_rank + config_.qk_rope_head_dim));
  h.sm_scale_log2 = h.sm_scale * 1.4426950408889634f;
  h.qo_indptr_offset = static_cast<int32_t>(l.qo_indptr_offset);
  h.kv_lens_offset = static_cast<int32_t>(l.kv_lens_offset);
  h.page_indptr_offset = static_cast<int32_t>(l.page_indptr_offset);
  h.items_offset = static_cast<int32_t>(l.arrays_offset);
  h.merges_offset = static_cast<int32_t>(merges_off);
  h.pages_offset = static_cast<int32_t>(pages_off);
  const int64_t device_table =
      t.reads_table && t.device_table ? static_cast<int64_t>(reinterpret_cast<uintptr_t>(b.device_block_table)) : 0;
  if (decoded) {
    h.decoded = 1;
    h.decoded_pages = static_cast<int32_t>(ws_blocks);
    h.block_size = latent::kDecodedBlockRows;
    h.src_block_size = bs;
    h.src_page_indptr_offset = static_cast<int32_t>(l.src_page_indptr_offset);
    h.src_pages_offset = static_cast<int32_t>(src_pages_off);
    h.src_device_table = device_table;
    h.src_table_cols = device_table != 0 ? b.block_table_cols : 0;
    res.decoded_rows = decode_rows;
  } else {
    h.device_table = device_table;
    h.table_cols = device_table != 0 ? b.block_table_cols : 0;
  }
  std::memcpy(block, &h, sizeof(h));

  res.num_items = num_items;
  res.num_merges = num_merges;
  res.partial_rows = partial;
  res.used_bytes = src_pages_off + (device_table != 0 ? 0 : sizeof(int32_t) * static_cast<size_t>(src_ptr[b.batch_size]));
  return res;
}

}  // namespace plan
}  // namespace mlakit
