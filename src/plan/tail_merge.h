// The tail merge: the last short runs of a masked kSequenceRuns schedule interleaved longest
// item first.
//
// Why: the sm90 kernel's persistent blocks take items in the work array's order, run by run
// (plan/run_order.h), so a launch ends on its last runs' items. Under causal masking a run's items
// cost 1 to n kv tiles, longest first inside the run, but the run-major order does not put the
// shortest items of the batch last: an MLA step's launch (8 prompts of 999 tokens and a 400-token
// cut) ended with the 400-token run's 4-tile items starting ~10 us before the end while other
// blocks idled (block timelines, docs/perf-notes.md session 33: 5.8% of the launch after the
// blocks' last items). A list-scheduling simulation of the seed's N=100 steps with the measured
// item costs put the run-major order 5.6% (budget 8192) and 19.6% (budget 2048) above the
// perfectly balanced launch, a global longest-first order 2.3% and 9.4%, and this merge of the
// last three runs 2.6% and 9.4%. A global order over every run loses L2 locality (every
// sequence's K/V streams at once: measured -12 to -21% on the H200), so only the last few runs
// merge, within a K/V budget that stays in L2.
//
// Rule (a function of the batch's lengths, the mask and the head count; the order never changes
// a result, so batch invariance holds): with causal masking or a window, the last up to
// kTailMergeRuns runs (schedule_layout.h) merge when none of them splits its key range, their
// segments (one per head group and q tile: head_group items each) number at most
// kTailMergeMaxSegments, and their keys x heads are at most kTailMergeKvHeadRows (31 MB of K and V
// at (192, 128) in 16-bit types, 21 MB at (128, 128)); at least two runs, or nothing changes. The
// merged segments go longest first (tile_cost), ties in the run-major order; consecutive
// segments of one run share an entry.
#pragma once

#include <cstdint>

#include "plan/schedule_layout.h"

namespace mlakit {
namespace plan {

constexpr int64_t kTailMergeKvHeadRows = 3 * 1024 * 16;

struct TailMergeBatch {
  const int32_t* qo_indptr;
  const int32_t* kv_indptr;
  bool causal;
  int window_left;
  int heads, head_group;
  int block_m, block_n;
};

// Rewrites the tail of runs[0, num_runs) (room for num_runs + kTailMergeMaxSegments entries),
// merging at most min(max_runs, kTailMergeRuns) runs, and returns the number of entries; item
// ranges and every other entry stay as they were.
int merge_tail_runs(SeqRun* runs, int num_runs, const TailMergeBatch& batch, int max_runs);

}  // namespace plan
}  // namespace mlakit
