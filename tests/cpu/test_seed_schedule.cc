// The seed workload's chunked-prefill schedule (tools/seed_schedule): step counts of the seed's
// cases, budgets respected, requests cut at the budget continuing with their first part as
// context, and every prompt token processed exactly once.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlakit/mla.h"
#include "seed_schedule.h"

namespace mlakit_bench {
namespace {

void check_invariants(const std::vector<SeedStep>& steps, int n, int prompt, int budget) {
  std::vector<int32_t> done(static_cast<size_t>(n), 0);
  std::vector<int> finished(static_cast<size_t>(n), 0);
  for (const SeedStep& s : steps) {
    int64_t tokens = 0, ctx = 0;
    for (const SeedEntry& e : s.entries) {
      EXPECT_EQ(e.context, done[e.request]) << "context = what earlier steps processed";
      EXPECT_GT(e.new_tokens, 0);
      done[e.request] += e.new_tokens;
      EXPECT_EQ(e.finishes, done[e.request] == prompt);
      finished[e.request] += e.finishes ? 1 : 0;
      tokens += e.new_tokens;
      ctx += e.context;
    }
    EXPECT_EQ(tokens, s.tokens);
    EXPECT_EQ(ctx, s.context);
    EXPECT_LE(s.tokens, budget);
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(done[r], prompt) << r;
    EXPECT_EQ(finished[r], 1) << r;
  }
}

TEST(SeedSchedule, SeedCases) {
  // 100 x 999 tokens: 13 steps at 8192 (12 full), 49 at 2048; one request: one step.
  const auto a = seed_schedule(100, 999, 8192);
  EXPECT_EQ(a.size(), 13u);
  for (size_t i = 0; i + 1 < a.size(); ++i) EXPECT_EQ(a[i].tokens, 8192);
  EXPECT_EQ(a.back().tokens, 99900 - 12 * 8192);
  check_invariants(a, 100, 999, 8192);
  const auto b = seed_schedule(100, 999, 2048);
  EXPECT_EQ(b.size(), 49u);
  check_invariants(b, 100, 999, 2048);
  const auto c = seed_schedule(1, 999, 8192);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].tokens, 999);
  EXPECT_EQ(c[0].context, 0);
}

TEST(SeedSchedule, CutRequestContinuesWithContext) {
  // Budget 2048 over 999-token prompts: step 0 = requests 0, 1 and 50 tokens of request 2, which
  // continues next step with 50 tokens of context.
  const auto s = seed_schedule(5, 999, 2048);
  ASSERT_EQ(s[0].entries.size(), 3u);
  EXPECT_EQ(s[0].entries[2].new_tokens, 50);
  EXPECT_FALSE(s[0].entries[2].finishes);
  EXPECT_EQ(s[1].entries[0].request, 2);
  EXPECT_EQ(s[1].entries[0].context, 50);
  EXPECT_EQ(s[1].entries[0].new_tokens, 949);
  check_invariants(s, 5, 999, 2048);
  // A prompt longer than the budget spans several steps.
  const auto l = seed_schedule(2, 5000, 2048, 1);
  check_invariants(l, 2, 5000, 2048);
  EXPECT_EQ(l[2].entries[0].context, 4096);
}

// Every step of the seed's schedules fits its graph bucket (mlakit::graph_rows_bucket under the
// workspace rows), and the buckets are the ones the schedule JSON reports.
TEST(SeedSchedule, GraphBucketsOfTheSeedCases) {
  struct Case {
    int n, budget;
    std::set<int64_t> want;
    int64_t step = 256;
  };
  for (const Case& c : {Case{1, 8192, {1024}}, Case{100, 8192, {2048, 8192, 8448, 8704, 8960, 8993}},
                        Case{100, 2048, {2048, 2304, 2560, 2816, 2999}},
                        Case{100, 8192, {2048, 8192, 8993}, 1024}, Case{100, 2048, {2048, 2999}, 1024}}) {
    const auto steps = seed_schedule(c.n, 999, c.budget);
    const int64_t cap = seed_workspace_rows(steps, c.budget);
    std::set<int64_t> got;
    for (const SeedStep& s : steps) {
      const int64_t b = mlakit::graph_rows_bucket(s.tokens + s.context, cap, c.step);
      EXPECT_GE(b, s.tokens + s.context);
      got.insert(b);
    }
    EXPECT_EQ(got, c.want) << "N=" << c.n << " budget " << c.budget;
    const std::string json = seed_schedule_json(steps, c.budget, c.step, MlaDims{});
    for (int64_t b : c.want) EXPECT_NE(json.find("\"graph_rows\": " + std::to_string(b)), std::string::npos) << b;
  }
}

// Prompts of different lengths: requests finish in order within a step, and each prompt's
// tokens are all processed once.
TEST(SeedSchedule, UnequalPrompts) {
  const std::vector<int32_t> lens = {300, 77, 300, 1, 150};
  const auto steps = seed_schedule(lens, 256);
  std::vector<int32_t> done(lens.size(), 0);
  for (const SeedStep& s : steps) {
    int64_t tokens = 0;
    for (const SeedEntry& e : s.entries) {
      EXPECT_EQ(e.context, done[e.request]);
      done[e.request] += e.new_tokens;
      EXPECT_EQ(e.finishes, done[e.request] == lens[e.request]);
      tokens += e.new_tokens;
    }
    EXPECT_LE(tokens, 256);
  }
  for (size_t r = 0; r < lens.size(); ++r) EXPECT_EQ(done[r], lens[r]);
  EXPECT_EQ(steps.size(), 4u);  // 828 tokens under a 256-token budget
  EXPECT_THROW(seed_schedule(std::vector<int32_t>{5, 0}, 256), std::invalid_argument);
}

// The step's useful work: visible pairs counted by enumerating every (query, key) position of
// each entry, and the real rows; chunking moves work between steps but not its total.
TEST(SeedSchedule, StepFlops) {
  MlaDims d;
  d.heads = 3;
  const double per_pair = 2.0 * 3 * (128 + 64 + 128), per_row = 2.0 * 512 * 3 * (128 + 128);
  for (const auto& steps : {seed_schedule(5, 37, 16), seed_schedule(3, 999, 2048), seed_schedule(1, 1, 8)}) {
    double attention = 0, up = 0;
    for (const SeedStep& s : steps) {
      int64_t pairs = 0, rows = 0;
      for (const SeedEntry& e : s.entries) {
        for (int64_t q = e.context; q < e.context + e.new_tokens; ++q)
          for (int64_t k = 0; k < e.context + e.new_tokens; ++k) pairs += k <= q ? 1 : 0;
        rows += e.context + e.new_tokens;
      }
      const StepFlops f = seed_step_flops(s, d);
      EXPECT_DOUBLE_EQ(f.attention, per_pair * static_cast<double>(pairs));
      EXPECT_DOUBLE_EQ(f.up_projection, per_row * static_cast<double>(rows));
      EXPECT_DOUBLE_EQ(f.total(), f.attention + f.up_projection);
      attention += f.attention;
      up += f.up_projection;
    }
    int requests = 0, prompt = 0;
    for (const SeedStep& s : steps)
      for (const SeedEntry& e : s.entries) {
        requests = std::max(requests, e.request + 1);
        prompt = std::max(prompt, e.context + e.new_tokens);
      }
    EXPECT_DOUBLE_EQ(attention, per_pair * requests * (static_cast<double>(prompt) * (prompt + 1) / 2));
    EXPECT_GE(up, per_row * requests * prompt);  // context rows are up-projected again
  }
  // The seed's N=100 case at budget 8192: 104511 rows (99900 new + 4611 context) per layer.
  double up = 0;
  for (const SeedStep& s : seed_schedule(100, 999, 8192)) up += seed_step_flops(s, MlaDims{}).up_projection;
  EXPECT_DOUBLE_EQ(up, 2.0 * 512 * 16 * 256 * 104511);
}

}  // namespace
}  // namespace mlakit_bench
