// The plan of latent attention (mlakit/latent.h) as plan() publishes it and every backend reads
// it: one block, the same bytes in the host staging buffer and in the device workspace, written
// by src/plan/latent_schedule.cc. Everything that changes between plans lives here, so a
// captured run() replays after re-planning; a persistent kernel reads the header, pulls items
// from `items` (the costliest first: worker_item) and, once every split of a merge is written,
// combines them.
//
// Work item: up to block_rows rows of one request, a row being (new token, head) packed as
// token * H + head (consecutive tokens of a request, all heads of each), over one key range.
// Dense items read positions [key_begin, key_end) of their request (each row further limited
// by its causal bound); sparse items are one token's heads over entries [key_begin, key_end)
// of its index row. An item either finishes its rows (partial == -1: out, lse, max_logits) or
// writes them as a partial result at partial rows [partial, partial + rows): fp32 O normalized
// by its own sum, its lse (natural log, -inf when empty) and its max logit. A merge combines
// `splits` partials of the same rows, split s at [partial + s * rows, ...), in split order.
//
// FP8 caches on CUDA, decoded once (LatentConfig::max_decoded_rows): when a plan reads each
// cached row in many items (extends, DSA prefill), run() first decodes its requests' rows into a
// bf16 workspace of 64-row blocks, request r's positions at workspace blocks pages[page_indptr[r]
// ..] (consecutive), and the 16-bit kernel attends those. The header then describes the
// workspace (`decoded` 1, block_size 64, the pages those blocks, no device table) and the `src_`
// fields the cache the rows come from, which only the decode reads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "contract/host_device.h"

namespace mlakit {
namespace latent {

// A request (dense) or a token of a request (sparse) splits its key range when the request has
// at most this many rows (new tokens x heads): decode, MTP, small extends; the layout's bounds
// assume it. Larger requests have row blocks enough to fill a machine in a full batch; a dense
// plan that leaves half the workers idle splits them too when its block holds that
// (plan/latent_schedule.cc).
constexpr int kSplitRowsMax = 128;
// At most this many splits per range; longer ranges get longer splits (a multiple of 64 keys).
constexpr int kMaxSplits = 32;

struct LatentHeader {
  int32_t batch_size;
  int32_t total_q;
  int32_t num_items;
  int32_t num_merges;
  int32_t sparse;        // 0: dense; 1: sparse
  int32_t index_kind;    // sparse: LatentIndices (0 request positions, 1 cache slots)
  int32_t causal;        // dense: 0 / 1
  int32_t topk;          // sparse: entries per index row
  int32_t block_size;    // page size of the cache
  int32_t num_heads;
  int32_t block_rows;    // rows per item at most
  int32_t partial_rows;  // partial rows this plan writes
  float sm_scale;        // resolved (never 0)
  float sm_scale_log2;   // sm_scale * log2(e)
  // Byte offsets from the block's start: the fixed part's arrays (where the capacity puts them)
  // and the packed ones after it (where this plan put them).
  int32_t qo_indptr_offset;
  int32_t kv_lens_offset;
  int32_t page_indptr_offset;
  int32_t items_offset;
  int32_t merges_offset;
  int32_t pages_offset;
  // A plan on the engine's device block table (LatentBatch::device_block_table): its address and
  // row stride; request b's blocks are then device_table[b * table_cols ..], and `pages` is
  // empty. 0: the pages are in the block.
  int32_t table_cols;
  int32_t decoded;  // 1: the rows are decoded into the bf16 workspace first (above)
  int64_t device_table;
  // Decoded plans: workspace blocks to fill (pages[0 .. decoded_pages) are 0, 1, ...), and the
  // cache the rows come from: its page size, request r's blocks at src_pages[src_page_indptr[r]
  // ..], or the engine's device table (src_device_table, src_table_cols) when not 0.
  int32_t decoded_pages;
  int32_t src_block_size;
  int32_t src_page_indptr_offset;
  int32_t src_pages_offset;
  int32_t src_table_cols;
  int32_t reserved;
  int64_t src_device_table;
};
static_assert(sizeof(LatentHeader) == 128, "header size is part of the layout");

// Rows of a decoded plan's workspace block.
constexpr int kDecodedBlockRows = 64;

// Request r's cache blocks in position order: the engine's device table's row, or the block's
// pages (host and device code alike).
MLAKIT_HD const int32_t* request_pages(const LatentHeader& h, const int32_t* page_ptr, const int32_t* pages, int r) {
  if (h.device_table != 0)
    return reinterpret_cast<const int32_t*>(static_cast<uintptr_t>(h.device_table)) + static_cast<int64_t>(r) * h.table_cols;
  return pages + page_ptr[r];
}

// A decoded plan's source blocks of request r in position order (the decode's reads).
MLAKIT_HD const int32_t* request_src_pages(const LatentHeader& h, const uint8_t* block, int r) {
  if (h.src_device_table != 0)
    return reinterpret_cast<const int32_t*>(static_cast<uintptr_t>(h.src_device_table)) + static_cast<int64_t>(r) * h.src_table_cols;
  const auto* ptr = reinterpret_cast<const int32_t*>(block + h.src_page_indptr_offset);
  return reinterpret_cast<const int32_t*>(block + h.src_pages_offset) + ptr[r];
}

struct LatentItem {
  int32_t request;
  int32_t row_begin;  // packed row token * H + head of its first row
  int32_t rows;
  int32_t token;      // sparse: the token whose index row it reads; dense: the first row's token
  int32_t key_begin;  // dense: positions; sparse: index entries
  int32_t key_end;
  int32_t partial;    // -1: final rows; else its first partial row
  int32_t split;      // which split of its rows' range (0 when unsplit)
};
static_assert(sizeof(LatentItem) == 32, "two 16-byte words");

struct LatentMerge {
  int32_t row_begin;
  int32_t rows;
  int32_t partial;  // split s, row i at partial + s * rows + i
  int32_t splits;
};
static_assert(sizeof(LatentMerge) == 16, "one 16-byte word");

// The fixed part of a block: header, then per request its new tokens' offsets (qo_indptr,
// batch + 1), kv_lens (batch) and page offsets (page_indptr, batch + 1: request b's cache blocks
// in position order are pages[page_indptr[b] .. page_indptr[b + 1])). items, merges and pages
// follow, packed at the offsets the header gives, so a plan publishes only what it uses.
struct LatentLayout {
  size_t qo_indptr_offset = 0;
  size_t kv_lens_offset = 0;
  size_t page_indptr_offset = 0;
  size_t src_page_indptr_offset = 0;  // decoded plans (max_decoded_blocks > 0)
  size_t arrays_offset = 0;  // where items start
  size_t total_bytes = 0;    // capacity of the block
  int64_t max_items = 0, max_merges = 0, max_pages = 0;
  int64_t max_partial_rows = 0;
  // Workspace blocks of a decoded plan (0: no plan decodes); its pages hold that many besides
  // the cache's, and the source pages max_pages.
  int64_t max_decoded_blocks = 0;
};

MLAKIT_HD int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// How a range of `keys` keys splits: `count` ranges of `len` keys (the last may be shorter).
struct Split {
  int64_t count;
  int64_t len;
};
MLAKIT_HD Split split_range(int64_t keys, int64_t split_size) {
  if (keys <= split_size) return {1, keys > 0 ? keys : 1};
  const int64_t n = ceil_div(keys, split_size);
  if (n <= kMaxSplits) return {n, split_size};
  const int64_t len = ceil_div(ceil_div(keys, kMaxSplits), 64) * 64;
  return {ceil_div(keys, len), len};
}

// Whether a plan's items come in pairs: at heads = 2 x block_rows, items 2i and 2i + 1 are one
// token's (or one row block's tokens') two head blocks over the same keys (the planner writes a
// split's head blocks next to each other), so two workers can share each key tile: the CUDA
// kernel on fp8_ds_mla caches runs a pair on a cluster of two CTAs that decode each tile once.
MLAKIT_HD bool paired_items(int heads, int block_rows) { return heads == 2 * block_rows; }

// The item persistent worker `worker` of `workers` takes in its round `round` (0, 1, ...):
// rounds alternate direction (worker w takes w, then 2 workers - 1 - w, ...), so that items
// listed costliest first reach the workers as a greedy longest-first assignment would (the
// lightest-loaded worker takes the next item), which a fixed stride is not: it hands worker 0 the
// costliest item of every round. Increasing in `round`, so a worker stops at the first past the
// plan's items.
MLAKIT_HD int64_t worker_item(int64_t round, int worker, int workers) {
  return round * workers + ((round & 1) != 0 ? workers - 1 - worker : worker);
}

inline size_t align_to(size_t x, size_t a) { return (x + a - 1) / a * a; }

// The block's capacity for a config (bounds every plan within it can reach).
//   heads H, block_rows BR, the cache's block_size, max_batch B, max_q_tokens Q, max_kv_tokens
//   K (dense and positions plans), max_topk (0: no sparse plans), split_size S, decoded_rows
//   (the workspace's rows a decoded plan may fill; 0: none).
inline LatentLayout make_layout(int heads, int block_rows, int block_size, int max_batch, int64_t max_q,
                                int64_t max_kv, int max_topk, int64_t split_size, int64_t decoded_rows = 0) {
  LatentLayout l;
  const int64_t B = max_batch, Q = max_q, K = max_kv, H = heads, BR = block_rows;
  const int64_t split_blocks = ceil_div(kSplitRowsMax, BR);  // row blocks of a request that splits
  // Rows a split request (or token) can hold, summed over the plan: each has <= kSplitRowsMax.
  const int64_t split_rows = H * Q < kSplitRowsMax * B ? H * Q : kSplitRowsMax * B;
  // Dense: unsplit requests give <= ceil(q H / BR) items each; a split request's row blocks
  // ceil(q H / BR) <= split_blocks, times its splits, which are <= kMaxSplits and
  // <= ceil(kv / S) (<= kv / S + 1, summed: K / S + B).
  const int64_t d_splits_total = B * kMaxSplits < K / split_size + B ? B * kMaxSplits : K / split_size + B;
  int64_t items = ceil_div(Q * H, BR) + B + split_blocks * d_splits_total;
  int64_t merges = split_blocks * B;
  const int64_t d_partial_a = split_rows * kMaxSplits;
  const int64_t d_partial_b = static_cast<int64_t>(kSplitRowsMax) * (K / split_size + B);
  int64_t partial = d_partial_a < d_partial_b ? d_partial_a : d_partial_b;
  if (max_topk > 0) {
    // Sparse: a token's heads in ceil(H / BR) blocks; tokens of split requests (<= Q, and
    // <= B * (kSplitRowsMax / H) of them) times their splits.
    const int64_t hb = ceil_div(H, BR);
    // split_range gives ceil(topk / S) splits up to kMaxSplits, never more than kMaxSplits.
    const int64_t t_need = ceil_div(max_topk, split_size);
    const int64_t t_splits = t_need < kMaxSplits ? t_need : kMaxSplits;
    const int64_t per_req = kSplitRowsMax / H > 0 ? kSplitRowsMax / H : 1;
    const int64_t split_tokens = Q < B * per_req ? Q : B * per_req;
    const int64_t s_items = hb * (Q + split_tokens * t_splits);
    const int64_t s_merges = hb * split_tokens;
    const int64_t s_partial = split_tokens * H * t_splits;
    items = items > s_items ? items : s_items;
    merges = merges > s_merges ? merges : s_merges;
    partial = partial > s_partial ? partial : s_partial;
  }
  l.max_items = items;
  l.max_merges = merges;
  l.max_pages = K / block_size + B;  // ceil(kv / block_size) <= kv / block_size + 1 per request
  l.max_partial_rows = partial;
  l.max_decoded_blocks = decoded_rows / kDecodedBlockRows;

  size_t off = sizeof(LatentHeader);
  l.qo_indptr_offset = off;
  off = align_to(off + sizeof(int32_t) * static_cast<size_t>(B + 1), 16);
  l.kv_lens_offset = off;
  off = align_to(off + sizeof(int32_t) * static_cast<size_t>(B), 16);
  l.page_indptr_offset = off;
  off = align_to(off + sizeof(int32_t) * static_cast<size_t>(B + 1), 16);
  if (l.max_decoded_blocks > 0) {
    l.src_page_indptr_offset = off;
    off = align_to(off + sizeof(int32_t) * static_cast<size_t>(B + 1), 16);
  }
  l.arrays_offset = off;
  off += sizeof(LatentItem) * static_cast<size_t>(items) + sizeof(LatentMerge) * static_cast<size_t>(merges);
  off += sizeof(int32_t) * static_cast<size_t>(l.max_pages + l.max_decoded_blocks);
  l.total_bytes = align_to(off, 256);
  return l;
}

}  // namespace latent
}  // namespace mlakit
