#include "bench_latent_plan.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <numeric>
#include <random>

#include "bench_json.h"
#include "bench_timer.h"
#include "mlakit/latent.h"
#include "mlakit/runtime.h"

namespace mlakit_bench {

namespace {

struct Shape {
  const char* name;
  int heads;
  int new_tokens;
  bool ragged;        // contexts uniform in [512, 8192) (fixed seed), else 4096
  bool device_table;  // the table in the device's memory (LatentBatch::device_block_table)
  bool upload_in_run = false;  // LatentConfig::upload_in_run: plan() writes host memory only
};

constexpr int kBatch = 128;
constexpr int kPage = 64;

LatentPlanRow time_shape(const Shape& s, mlakit::Device dev, int iters) {
  LatentPlanRow row;
  row.name = s.name;
  row.batch = kBatch;
  row.heads = s.heads;
  row.new_tokens = s.new_tokens;
  std::mt19937 gen(7);
  std::vector<int32_t> q(kBatch, s.new_tokens), kv(kBatch, 4096);
  if (s.ragged) {
    std::uniform_int_distribution<int32_t> len(512, 8191);
    for (int32_t& k : kv) k = len(gen);
  }
  const int cols = (*std::max_element(kv.begin(), kv.end()) + kPage - 1) / kPage;
  std::vector<int32_t> table(static_cast<size_t>(kBatch) * cols);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), gen);

  mlakit::LatentConfig c;
  c.num_heads = s.heads;
  c.block_size = kPage;
  c.num_blocks = static_cast<int64_t>(table.size());
  c.max_batch = kBatch;
  c.max_q_tokens = static_cast<int64_t>(kBatch) * s.new_tokens;
  c.max_kv_tokens = std::accumulate(kv.begin(), kv.end(), int64_t{0});
  c.device = dev;
  c.upload_in_run = s.upload_in_run;
  mlakit::LatentAttention attn(c);
  mlakit::LatentBatch b;
  b.batch_size = kBatch;
  b.query_lens = q.data();
  b.kv_lens = kv.data();
  b.block_table = table.data();
  b.block_table_cols = cols;
  void* dtable = nullptr;
  if (s.device_table) {
    const size_t bytes = sizeof(int32_t) * table.size();
    dtable = mlakit::device_alloc(bytes, dev);
    mlakit::copy_bytes(dtable, dev, table.data(), mlakit::Device::cpu(), bytes);
    mlakit::synchronize(dev);
    b.block_table = nullptr;
    b.device_block_table = static_cast<const int32_t*>(dtable);
  }
  struct Free {
    void* p;
    mlakit::Device d;
    ~Free() {
      if (p) {
        mlakit::synchronize(d);
        mlakit::device_free(p, d);
      }
    }
  } free_table{dtable, dev};
  for (int i = 0; i < 20; ++i) attn.plan(b);  // warm-up
  mlakit::synchronize(dev);
  row.median_us = median_host_us(iters, [&] { attn.plan(b); }, [&] { mlakit::synchronize(dev); });
  mlakit::synchronize(dev);
  row.items = attn.info().num_items;
  row.merges = attn.info().num_merges;
  return row;
}

}  // namespace

std::vector<LatentPlanRow> run_latent_plan_cost(mlakit::Device dev, int iters) {
  const Shape shapes[] = {{"decode_h16", 16, 1, false, false},       {"decode_h128", 128, 1, false, false},
                          {"ragged_h16", 16, 1, true, false},        {"ragged_h128", 128, 1, true, false},
                          {"mtp2_h16", 16, 2, false, false},         {"mtp2_h128", 128, 2, false, false},
                          {"decode_h16_dtable", 16, 1, false, true}, {"decode_h128_dtable", 128, 1, false, true},
                          {"ragged_h16_dtable", 16, 1, true, true},
                          {"decode_h16_upload_in_run", 16, 1, false, false, true},
                          {"decode_h128_upload_in_run", 128, 1, false, false, true},
                          {"decode_h16_dtable_upload_in_run", 16, 1, false, true, true},
                          {"decode_h128_dtable_upload_in_run", 128, 1, false, true, true}};
  std::printf("\nLatentAttention plan() host cost, batch %d, page %d, shuffled block table, %s, median of %d "
              "calls\n", kBatch, kPage, mlakit::to_string(dev).c_str(), iters);
  std::printf("%-33s %6s %6s %8s %8s %10s\n", "shape", "heads", "new", "items", "merges", "plan us");
  std::vector<LatentPlanRow> rows;
  for (const Shape& s : shapes) {
    LatentPlanRow row;
    try {
      row = time_shape(s, dev, iters);
      std::printf("%-33s %6d %6d %8d %8d %10.2f\n", row.name.c_str(), row.heads, row.new_tokens, row.items,
                  row.merges, row.median_us);
    } catch (const std::exception& e) {
      row.name = s.name;
      row.error = e.what();
      std::printf("%-33s ERROR %s\n", s.name, row.error.c_str());
    }
    rows.push_back(row);
  }
  return rows;
}

std::vector<std::string> latent_plan_json(const std::vector<LatentPlanRow>& rows, int indent) {
  std::vector<std::string> out;
  for (const LatentPlanRow& r : rows) {
    JsonObject o;
    o.str("shape", r.name).num("batch", r.batch).num("heads", r.heads).num("new_tokens", r.new_tokens)
        .num("items", r.items).num("merges", r.merges).num("plan_us", r.median_us);
    if (!r.error.empty()) o.str("error", r.error);
    out.push_back(o.dump(indent));
  }
  return out;
}

}  // namespace mlakit_bench
