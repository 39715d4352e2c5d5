#include "plan/tail_merge.h"

#include <algorithm>

#include "plan/run_order.h"
#include "plan/scheduler.h"

namespace mlakit {
namespace plan {

int merge_tail_runs(SeqRun* runs, int num_runs, const TailMergeBatch& b, int max_runs) {
  if (!(b.causal || b.window_left >= 0) || max_runs < 2 || num_runs < 2) return num_runs;
  const int groups = b.heads / b.head_group;
  // The window: the longest suffix of runs within the limits.
  int w = 0;
  int64_t segments = 0, kv_head_rows = 0;
  for (int i = num_runs - 1; i >= 0 && w < max_runs && w < kTailMergeRuns; --i) {
    const SeqRun& r = runs[i];
    if (r.split_tiles != 0) break;
    const int64_t s = segments + static_cast<int64_t>(r.num_tiles) * groups;
    const int64_t k = kv_head_rows + static_cast<int64_t>(b.kv_indptr[r.seq + 1] - b.kv_indptr[r.seq]) * b.heads;
    if (s > kTailMergeMaxSegments || k > kTailMergeKvHeadRows) break;
    segments = s;
    kv_head_rows = k;
    ++w;
  }
  if (w < 2) return num_runs;

  const int first = num_runs - w;
  SeqRun window[kTailMergeRuns];
  std::copy(runs + first, runs + num_runs, window);
  struct Segment {
    int run;    // in window[]
    int index;  // in its run's order: items [index * head_group, (index + 1) * head_group)
    int32_t cost;
  };
  Segment seg[kTailMergeMaxSegments];
  int n = 0;
  for (int r = 0; r < w; ++r) {
    const SeqRun& run = window[r];
    const int64_t lq = b.qo_indptr[run.seq + 1] - b.qo_indptr[run.seq];
    const int64_t lk = b.kv_indptr[run.seq + 1] - b.kv_indptr[run.seq];
    for (int i = 0; i < run.num_tiles * groups; ++i) {
      const RunSlot s = run_slot(i * b.head_group, run.num_tiles, b.head_group);
      const int64_t r0 = static_cast<int64_t>(s.q_tile) * b.block_m;
      seg[n++] = Segment{r, i, tile_cost(r0, std::min(lq, r0 + b.block_m), lq, lk, b.causal, b.window_left, b.block_n)};
    }
  }
  // Longest first, ties in the run-major order (insertion sort: stable, no allocation, n <= 48).
  for (int i = 1; i < n; ++i) {
    const Segment x = seg[i];
    int j = i;
    for (; j > 0 && seg[j - 1].cost < x.cost; --j) seg[j] = seg[j - 1];
    seg[j] = x;
  }

  int entries = first;
  int32_t item = window[0].item_begin;
  for (int i = 0; i < n; ++i) {
    const int32_t local = seg[i].index * b.head_group;
    SeqRun* prev = entries > first ? &runs[entries - 1] : nullptr;
    const bool extends = prev != nullptr && prev->seq == window[seg[i].run].seq &&
                         run_local_index(*prev, item) == local;
    if (!extends) {
      SeqRun e = window[seg[i].run];
      e.item_begin = item;
      e.local_begin = local;
      runs[entries++] = e;
    }
    item += b.head_group;
  }
  return entries;
}

}  // namespace plan
}  // namespace mlakit
