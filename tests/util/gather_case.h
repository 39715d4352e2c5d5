// One launch of the MLA gather op (src/mla/mla_ops.h) with its expected result, for op-level
// tests of each device: a paged cache, strided kv_c / k_pe views, a map that interleaves context
// slots with every new token once (~t), a count below the launch rows (the rest must become
// zeros), an output row stride wider than a latent row (the gap must stay untouched), and the
// cache expected after it (each new token at its slot, nothing else changed). With
// with_new_tokens = false it is a context-chunk launch: no new tokens, the cache only read.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "mla/mla_ops.h"
#include "util/test_util.h"

namespace mlakit {
namespace test {

struct GatherCase {
  int block_size = 0, latent = 0, rope = 0;
  int64_t num_blocks = 0, tokens = 0, rows = 0, count = 0;
  int64_t kv_c_stride = 0, k_pe_stride = 0, out_stride = 0;
  bool with_new_tokens = false;
  HostTensor cache, kv_c, k_pe, out;  // inputs; out poisoned
  std::vector<int32_t> map, slots, count_arr;
  HostTensor want_out, want_cache;

  int width() const { return latent + rope; }
  // The op's arguments over the given (host or device) copies of the tensors above.
  mla::GatherArgs args(void* cache_p, const void* kv_c_p, const void* k_pe_p, const int32_t* map_p,
                       const int32_t* slots_p, const int32_t* count_p, void* out_p) const {
    mla::GatherArgs a{};
    a.cache = mla::CacheView{cache_p, static_cast<int64_t>(block_size) * width(), width(), block_size, width()};
    a.map = map_p;
    a.count = count_p;
    a.rows = rows;
    a.out = out_p;
    a.out_stride = out_stride;
    if (with_new_tokens) {
      a.fresh.kv_c = kv_c_p;
      a.fresh.kv_c_stride = kv_c_stride;
      a.fresh.k_pe = k_pe_p;
      a.fresh.k_pe_stride = k_pe_stride;
      a.fresh.latent_dim = latent;
      a.fresh.slots = slots_p;
    }
    a.dtype = DType::kBF16;
    return a;
  }
};

inline GatherCase make_gather_case(int block_size, bool with_new_tokens, uint64_t seed) {
  std::mt19937_64 rng(seed);
  GatherCase g;
  g.block_size = block_size;
  g.latent = 64;
  g.rope = 16;
  g.with_new_tokens = with_new_tokens;
  g.tokens = with_new_tokens ? 37 : 0;
  const int64_t context = 90;
  g.count = g.tokens + context;
  g.rows = g.count + 21;  // padding rows, as a graph-sized launch has
  g.num_blocks = (g.tokens + context + 40) / block_size + 3;
  g.kv_c_stride = g.latent + 24;  // strided views: only the first latent / rope values are rows
  g.k_pe_stride = g.rope + 8;
  g.out_stride = g.width() + 8;
  const int W = g.width();

  g.cache = HostTensor(DType::kBF16, {g.num_blocks, block_size, W});
  g.kv_c = HostTensor(DType::kBF16, {std::max<int64_t>(g.tokens, 1), g.kv_c_stride});
  g.k_pe = HostTensor(DType::kBF16, {std::max<int64_t>(g.tokens, 1), g.k_pe_stride});
  g.cache.fill_normal(rng);
  g.kv_c.fill_normal(rng);
  g.k_pe.fill_normal(rng);
  g.out = HostTensor(DType::kBF16, {g.rows, g.out_stride});
  g.out.fill_bytes(0xFF);

  // Distinct slots, shuffled over the cache: the new tokens' first, then the context rows'.
  std::vector<int32_t> all(static_cast<size_t>(g.num_blocks * block_size));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  g.slots.assign(all.begin(), all.begin() + g.tokens);
  // Entries past the step's tokens are stale (a former plan's): valid slots the op must not use.
  for (int i = 0; i < 5; ++i) g.slots.push_back(all[static_cast<size_t>(g.tokens + context + i)]);
  std::vector<int32_t> entries(all.begin() + g.tokens, all.begin() + g.tokens + context);
  for (int32_t t = 0; t < g.tokens; ++t) entries.push_back(mla::new_token_entry(t));
  std::shuffle(entries.begin(), entries.end(), rng);
  g.map = entries;
  // Past the count: stale entries too (context slots), which must not be copied.
  for (int64_t r = g.count; r < g.rows; ++r) g.map.push_back(all[static_cast<size_t>(r % context)]);
  g.count_arr = {static_cast<int32_t>(g.count)};

  // The expected result, byte by byte.
  const size_t es = 2, row_bytes = static_cast<size_t>(W) * es;
  g.want_out = g.out;
  g.want_cache = g.cache;
  auto* out = static_cast<uint8_t*>(g.want_out.data());
  auto* cache = static_cast<uint8_t*>(g.want_cache.data());
  const auto* cache0 = static_cast<const uint8_t*>(g.cache.data());
  const auto* kv_c = static_cast<const uint8_t*>(g.kv_c.data());
  const auto* k_pe = static_cast<const uint8_t*>(g.k_pe.data());
  for (int64_t r = 0; r < g.rows; ++r) {
    uint8_t* dst = out + static_cast<size_t>(r * g.out_stride) * es;
    if (r >= g.count) {
      std::memset(dst, 0, row_bytes);
      continue;
    }
    const int32_t e = g.map[static_cast<size_t>(r)];
    if (e >= 0) {
      std::memcpy(dst, cache0 + static_cast<size_t>(e) * row_bytes, row_bytes);
      continue;
    }
    const int64_t t = ~e;
    std::memcpy(dst, kv_c + static_cast<size_t>(t * g.kv_c_stride) * es, static_cast<size_t>(g.latent) * es);
    std::memcpy(dst + static_cast<size_t>(g.latent) * es, k_pe + static_cast<size_t>(t * g.k_pe_stride) * es,
                static_cast<size_t>(g.rope) * es);
    std::memcpy(cache + static_cast<size_t>(g.slots[static_cast<size_t>(t)]) * row_bytes, dst, row_bytes);
  }
  return g;
}

}  // namespace test
}  // namespace mlakit
