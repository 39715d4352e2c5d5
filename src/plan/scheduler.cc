#include "plan/scheduler.h"

#include <string>

#include "mlakit/error.h"

namespace mlakit {
namespace plan {

namespace {

// sum_{i=a}^{b-1} max(0, c + s*i) for slope s in {-1, 0, 1}.
int64_t sum_pos_linear(int64_t a, int64_t b, int64_t c, int s) {
  if (s > 0) a = std::max(a, 1 - c);  // c + i > 0  <=>  i >= 1 - c
  if (s < 0) b = std::min(b, c);      // c - i > 0  <=>  i < c
  if (s == 0 && c <= 0) return 0;
  if (b <= a) return 0;
  const int64_t n = b - a;
  return n * c + s * ((a + b - 1) * n / 2);  // (a + b - 1) * n is always even
}

}  // namespace

int64_t visible_pairs(int64_t lq, int64_t lk, bool causal, int window_left) {
  if (lq <= 0 || lk <= 0) return 0;
  const int64_t d = lk - lq;
  // Row i sees [lo(i), hi(i)) with hi(i) = causal ? d + 1 + i : lk (d + 1 + i <= lk for every
  // row, so the min with lk never bites) and lo(i) = max(0, d - w + i) with a window.
  // Split rows where lo leaves 0: before it the count is max(0, hi); after it, hi - lo.
  const int64_t split = window_left >= 0 ? std::clamp<int64_t>(window_left - d, 0, lq) : lq;
  int64_t total = causal ? sum_pos_linear(0, split, d + 1, 1) : sum_pos_linear(0, split, lk, 0);
  if (split < lq) {
    const int64_t w = window_left;
    total += causal ? sum_pos_linear(split, lq, w + 1, 0)      // (d+1+i) - (d-w+i)
                    : sum_pos_linear(split, lq, lq + w, -1);   // lk - (d-w+i)
  }
  return total;
}

int32_t tile_cost(int64_t row_begin, int64_t row_end, int64_t lq, int64_t lk, bool causal,
                  int window_left, int block_n) {
  const KvRange span = rule::MaskRule<int64_t>{lq, lk, causal, window_left}.tile_range(row_begin, row_end - row_begin);
  const int64_t lo = span.lo, hi = span.hi;
  if (hi <= lo) return 1;
  const int64_t kv_tiles = (hi + block_n - 1) / block_n - lo / block_n;
  return static_cast<int32_t>(kv_tiles + 1);
}

Scheduler::Scheduler(int max_batch, int64_t max_q_tokens, int64_t max_kv_tokens, int block_m,
                     int block_n, KvSplitSettings split)
    : block_m_(block_m),
      block_n_(block_n),
      max_batch_(max_batch),
      max_q_tokens_(max_q_tokens),
      max_kv_tokens_(max_kv_tokens),
      split_(split) {
  if (block_m <= 0 || block_n <= 0 || max_batch < 0 || max_q_tokens < 0 || max_kv_tokens < 0) {
    throw Error(ErrorKind::kInvalidArgument, "scheduler", "bad capacity or tile shape");
  }
  max_tiles_ = max_tiles_for(max_batch, max_q_tokens, block_m);
  cost_.resize(static_cast<size_t>(max_tiles_));
  // Costs are 1 .. ceil(max_kv_len / block_n) + 1 <= max_kv_tokens / block_n + 2.
  bucket_.resize(static_cast<size_t>(max_kv_tokens / block_n + 3));
  run_scratch_.resize(static_cast<size_t>(max_batch));
}

ScheduleResult Scheduler::build(const int32_t* qo, const int32_t* kv, int batch, bool causal,
                                int window_left, WorkTile* tiles) {
  if (batch > max_batch_ || qo[batch] > max_q_tokens_ || kv[batch] > max_kv_tokens_) {
    throw Error(ErrorKind::kInvalidArgument, "batch_size", "batch exceeds the scheduler capacity");
  }
  ScheduleResult r;
  // Pass 1: cost of every tile (generation order: seq, then q_tile) and the cost histogram,
  // over only the buckets this batch can reach.
  int64_t max_kv_len = 0;
  for (int b = 0; b < batch; ++b) max_kv_len = std::max<int64_t>(max_kv_len, kv[b + 1] - kv[b]);
  const int32_t max_cost = static_cast<int32_t>((max_kv_len + block_n_ - 1) / block_n_ + 1);
  std::fill(bucket_.begin(), bucket_.begin() + max_cost + 1, 0);
  int n = 0;
  for (int b = 0; b < batch; ++b) {
    const int64_t lq = qo[b + 1] - qo[b], lk = kv[b + 1] - kv[b];
    r.visible_pairs += visible_pairs(lq, lk, causal, window_left);
    for (int64_t r0 = 0; r0 < lq; r0 += block_m_) {
      const int32_t c = tile_cost(r0, std::min(lq, r0 + block_m_), lq, lk, causal, window_left, block_n_);
      cost_[n++] = c;
      ++bucket_[c];
    }
  }
  // Start offsets, highest cost first.
  int32_t off = 0;
  for (int32_t c = max_cost; c >= 0; --c) {
    const int32_t cnt = bucket_[c];
    bucket_[c] = off;
    off += cnt;
  }
  // Pass 2: place tiles stably (ties keep generation order: lower seq, then lower q_tile).
  int t = 0;
  for (int b = 0; b < batch; ++b) {
    const int64_t lq = qo[b + 1] - qo[b];
    const int32_t ntiles = static_cast<int32_t>((lq + block_m_ - 1) / block_m_);
    for (int32_t qt = 0; qt < ntiles; ++qt) tiles[bucket_[cost_[t++]]++] = WorkTile{b, qt};
  }
  r.num_tiles = n;
  return r;
}

ScheduleResult Scheduler::build_runs(const int32_t* qo, const int32_t* kv, int batch, bool causal,
                                     int window_left, int heads, SeqRun* runs) {
  if (batch > max_batch_ || qo[batch] > max_q_tokens_ || kv[batch] > max_kv_tokens_) {
    throw Error(ErrorKind::kInvalidArgument, "batch_size", "batch exceeds the scheduler capacity");
  }
  ScheduleResult r;
  int n = 0;
  for (int b = 0; b < batch; ++b) {
    const int64_t lq = qo[b + 1] - qo[b], lk = kv[b + 1] - kv[b];
    r.visible_pairs += visible_pairs(lq, lk, causal, window_left);
    if (lq <= 0) continue;
    const int32_t ntiles = static_cast<int32_t>((lq + block_m_ - 1) / block_m_);
    int64_t cost = 0;
    for (int32_t t = 0; t < ntiles; ++t) {
      const int64_t r0 = static_cast<int64_t>(t) * block_m_;
      cost += tile_cost(r0, std::min(lq, r0 + block_m_), lq, lk, causal, window_left, block_n_);
    }
    const KvSplit ks = kv_split_for(lq, lk, causal, window_left, heads, block_m_, block_n_, split_);
    run_scratch_[n++] = SeqRun{b, ntiles, 0, static_cast<int32_t>(std::min<int64_t>(cost, INT32_MAX)),
                               ks.split_tiles, ks.chunk_tiles, 0, ks.halves_last ? 1 : 0};
    r.num_tiles += ntiles;
    r.max_q_tiles = std::max(r.max_q_tiles, static_cast<int>(ntiles));
  }
  // Longest first; the tie-break keeps the order a function of the lengths alone.
  std::sort(run_scratch_.begin(), run_scratch_.begin() + n, [](const SeqRun& a, const SeqRun& b) {
    return a.cost != b.cost ? a.cost > b.cost : a.seq < b.seq;
  });
  int64_t item = 0, slot = 0;
  for (int i = 0; i < n; ++i) {
    runs[i] = run_scratch_[i];
    runs[i].item_begin = static_cast<int32_t>(std::min<int64_t>(item, INT32_MAX));
    runs[i].slot_begin = static_cast<int32_t>(std::min<int64_t>(slot, INT32_MAX));
    item += static_cast<int64_t>(runs[i].num_tiles + runs[i].split_tiles) * heads;
    slot += static_cast<int64_t>(runs[i].split_tiles) * heads;
  }
  if (item > INT32_MAX) {
    throw Error(ErrorKind::kInvalidArgument, "qo_indptr", "more than 2^31 - 1 (q tile, head) work items");
  }
  // kv_split_slot_bound sized the slots for any batch within the capacity; this cannot fire
  // unless that bound and the rule disagree.
  if (slot > split_.slot_capacity && slot > 0) {
    throw Error(ErrorKind::kRuntime, "", "plan: split slots exceed the sized capacity (mlakit bug)");
  }
  r.num_runs = n;
  r.num_items = static_cast<int>(item);
  r.split_slots = static_cast<int>(slot);
  return r;
}

}  // namespace plan
}  // namespace mlakit
