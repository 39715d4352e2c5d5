// One launch of the MLA gather op (src/mla/mla_ops.h) with its expected result, for op-level
// tests of each device: a paged cache, strided kv_c / k_pe views, a map that interleaves context
// slots with every new token once (~t), a count below the launch rows (the rest must become
// zeros), an output row stride wider than a latent row (the gap must stay untouched), and the
// cache expected after it (each new token at its slot, nothing else changed). With
// with_new_tokens = false it is a context-chunk launch: no new tokens, the cache only read.
//
// In each cache format (mlakit/mla.h, KvCacheDtype). FP8 formats: the expected bytes come from
// the formats' definitions written down in the tests (util/kv_cache_spec.h), not from the
// library's codec; cached rows hold random codes (a few NaN codes) and, for fp8_ds_mla, scales
// that are and are not powers of two; new tokens carry what quantization must survive: an
// all-zero tile (amax 0), a tile below FlashMLA's 1e-4 floor, an outlier, NaN, +-inf, -0, and
// for fp8 values past 448 x k_scale (saturated).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "mla/mla_ops.h"
#include "mlakit/runtime.h"
#include "util/kv_cache_spec.h"
#include "util/test_util.h"

namespace mlakit {
namespace test {

struct GatherFormat {
  KvCacheDtype format = KvCacheDtype::kAuto;
  DType dtype = DType::kBF16;  // of kv_c, k_pe and the gathered rows
};

inline std::string gather_format_name(const GatherFormat& f) {
  return std::string(kv_cache_dtype_name(f.format)) + "_" + dtype_name(f.dtype);
}

// The formats (and 16-bit dtypes) every gather test covers.
inline std::vector<GatherFormat> all_gather_formats() {
  return {{KvCacheDtype::kAuto, DType::kBF16},
          {KvCacheDtype::kFp8, DType::kBF16},
          {KvCacheDtype::kFp8, DType::kFP16},
          {KvCacheDtype::kFp8DsMla, DType::kBF16}};
}

struct GatherCase {
  GatherFormat fmt;
  int block_size = 0, latent = 0, rope = 0;
  int64_t num_blocks = 0, tokens = 0, rows = 0, count = 0;
  int64_t kv_c_stride = 0, k_pe_stride = 0, out_stride = 0;
  int64_t row_elems = 0;  // elements of one cache row (16-bit values, or bytes for FP8 formats)
  bool with_new_tokens = false;
  float k_scale = 1.0f;   // kFp8's layer scale
  HostTensor cache, kv_c, k_pe, out;  // inputs; out poisoned
  HostTensor k_scale_t;               // fp32 [1]
  std::vector<int32_t> map, slots, count_arr;
  HostTensor want_out, want_cache;

  int width() const { return latent + rope; }
  bool fp8() const { return fmt.format != KvCacheDtype::kAuto; }
  // The op's arguments over the given (host or device) copies of the tensors above.
  mla::GatherArgs args(void* cache_p, const void* kv_c_p, const void* k_pe_p, const int32_t* map_p,
                       const int32_t* slots_p, const int32_t* count_p, void* out_p,
                       const float* k_scale_p = nullptr) const {
    mla::GatherArgs a{};
    a.cache = mla::CacheView{cache_p, static_cast<int64_t>(block_size) * row_elems, row_elems, block_size, width(),
                             fmt.format, fmt.format == KvCacheDtype::kFp8 ? k_scale_p : nullptr};
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
    a.dtype = fmt.dtype;
    return a;
  }
};

namespace gather_detail {

inline void set16(HostTensor& t, int64_t i, float x) {
  const uint16_t h = spec::round16(x, t.dtype());
  std::memcpy(static_cast<uint8_t*>(t.data()) + 2 * i, &h, 2);
}

// Values quantization must survive, in new token `tok`'s kv_c (row stride `stride`).
inline void add_special_values(HostTensor& kv_c, int64_t stride, int64_t tok, int latent, KvCacheDtype f) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t r = tok * stride;
  if (f == KvCacheDtype::kFp8DsMla) {
    if (tok == 0) {
      for (int i = 0; i < 128; ++i) set16(kv_c, r + i, 0.0f);                        // tile 0: amax 0
      for (int i = 128; i < 256; ++i) set16(kv_c, r + i, 3e-4f * ((i % 7) - 3));      // tile 1: below the floor
      set16(kv_c, r + 300, 3000.0f);                                                  // tile 2: an outlier
      set16(kv_c, r + 400, nan);                                                      // tile 3: NaN, -0
      set16(kv_c, r + 401, -0.0f);
    } else if (tok == 1) {
      set16(kv_c, r + 130, -inf);  // tile 1: decodes to NaN (0 x inf), nothing finite
    }
    return;
  }
  if (tok == 0) {
    const float vals[] = {0.0f, -0.0f, 1e-6f, 3000.0f, -3000.0f, nan, inf, -inf, 7.7f};
    for (int i = 0; i < 9 && i < latent; ++i) set16(kv_c, r + i, vals[i]);
  }
}

}  // namespace gather_detail

inline GatherCase make_gather_case(int block_size, bool with_new_tokens, uint64_t seed,
                                   GatherFormat fmt = GatherFormat{}) {
  std::mt19937_64 rng(seed);
  GatherCase g;
  g.fmt = fmt;
  g.block_size = block_size;
  g.latent = fmt.format == KvCacheDtype::kFp8DsMla ? 512 : 64;
  g.rope = fmt.format == KvCacheDtype::kFp8DsMla ? 64 : 16;
  g.with_new_tokens = with_new_tokens;
  g.tokens = with_new_tokens ? 37 : 0;
  const int64_t context = 90;
  g.count = g.tokens + context;
  g.rows = g.count + 21;  // padding rows, as a graph-sized launch has
  g.num_blocks = (g.tokens + context + 40) / block_size + 3;
  g.kv_c_stride = g.latent + 24;  // strided views: only the first latent / rope values are rows
  g.k_pe_stride = g.rope + 8;
  g.out_stride = g.width() + 8;
  g.row_elems = g.fp8() ? spec::row_bytes(fmt.format, g.latent, g.rope) : g.width();
  g.k_scale = fmt.format == KvCacheDtype::kFp8 ? 0.0173f : 1.0f;  // not a power of two: x / scale rounds
  g.k_scale_t = HostTensor(DType::kFP32, {1});
  g.k_scale_t.set(0, g.k_scale);
  const int W = g.width();
  const DType t = fmt.dtype;

  g.cache = HostTensor(g.fp8() ? DType::kUInt8 : t, {g.num_blocks, block_size, g.row_elems});
  g.kv_c = HostTensor(t, {std::max<int64_t>(g.tokens, 1), g.kv_c_stride});
  g.k_pe = HostTensor(t, {std::max<int64_t>(g.tokens, 1), g.k_pe_stride});
  g.kv_c.fill_normal(rng);
  g.k_pe.fill_normal(rng);
  if (!g.fp8()) {
    g.cache.fill_normal(rng);
  } else {
    // Random codes; a few NaN codes in row 3 (a NaN in the cache must come out NaN).
    auto* c = static_cast<uint8_t*>(g.cache.data());
    std::uniform_int_distribution<int> byte(0, 255);
    for (size_t i = 0; i < g.cache.nbytes(); ++i) {
      uint8_t b = static_cast<uint8_t>(byte(rng));
      if ((b & 0x7f) == 0x7f) b ^= 1;
      c[i] = b;
    }
    c[3 * g.row_elems + 5] = 0x7f;
    c[3 * g.row_elems + 6] = 0xff;
    if (fmt.format == KvCacheDtype::kFp8DsMla) {
      // Per row: scales (powers of two and not), k_pe in bf16.
      std::uniform_real_distribution<float> u(0.001f, 0.05f);
      std::normal_distribution<float> n01;
      for (int64_t r = 0; r < g.num_blocks * block_size; ++r) {
        uint8_t* row = c + r * g.row_elems;
        for (int tile = 0; tile < 4; ++tile) {
          const float s = (r + tile) % 2 ? std::ldexp(1.0f, static_cast<int>(rng() % 15) - 10) : u(rng);
          std::memcpy(row + 512 + 4 * tile, &s, 4);
        }
        for (int i = 0; i < 64; ++i) {
          const uint16_t h = float_to_bf16(n01(rng));
          std::memcpy(row + 528 + 2 * i, &h, 2);
        }
      }
    }
    for (int64_t tok = 0; tok < std::min<int64_t>(g.tokens, 2); ++tok)
      gather_detail::add_special_values(g.kv_c, g.kv_c_stride, tok, g.latent, fmt.format);
  }
  g.out = HostTensor(t, {g.rows, g.out_stride});
  g.out.fill_bytes(0xFF);

  // Distinct slots, shuffled over the cache: the new tokens' first, then the context rows'.
  std::vector<int32_t> all(static_cast<size_t>(g.num_blocks * block_size));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  g.slots.assign(all.begin(), all.begin() + g.tokens);
  // Entries past the step's tokens are stale (a former plan's): valid slots the op must not use.
  for (int i = 0; i < 5; ++i) g.slots.push_back(all[static_cast<size_t>(g.tokens + context + i)]);
  std::vector<int32_t> entries(all.begin() + g.tokens, all.begin() + g.tokens + context);
  for (int32_t tk = 0; tk < g.tokens; ++tk) entries.push_back(mla::new_token_entry(tk));
  std::shuffle(entries.begin(), entries.end(), rng);
  g.map = entries;
  // Past the count: stale entries too (context slots), which must not be copied.
  for (int64_t r = g.count; r < g.rows; ++r) g.map.push_back(all[static_cast<size_t>(r % context)]);
  g.count_arr = {static_cast<int32_t>(g.count)};

  // The expected result, byte by byte.
  const size_t es = 2, out_row_bytes = static_cast<size_t>(W) * es;
  const size_t cache_row_bytes = static_cast<size_t>(g.row_elems) * dtype_size(g.cache.dtype());
  g.want_out = g.out;
  g.want_cache = g.cache;
  auto* out = static_cast<uint8_t*>(g.want_out.data());
  auto* cache = static_cast<uint8_t*>(g.want_cache.data());
  const auto* cache0 = static_cast<const uint8_t*>(g.cache.data());
  const auto* kv_c = static_cast<const uint8_t*>(g.kv_c.data());
  const auto* k_pe = static_cast<const uint8_t*>(g.k_pe.data());
  std::vector<uint8_t> row(cache_row_bytes);
  for (int64_t r = 0; r < g.rows; ++r) {
    uint8_t* dst = out + static_cast<size_t>(r * g.out_stride) * es;
    if (r >= g.count) {
      std::memset(dst, 0, out_row_bytes);
      continue;
    }
    const int32_t e = g.map[static_cast<size_t>(r)];
    const int64_t tk = e < 0 ? ~e : 0;  // the new token of a ~t entry
    const uint8_t* src_kv_c = kv_c + static_cast<size_t>(tk * g.kv_c_stride) * es;
    const uint8_t* src_k_pe = k_pe + static_cast<size_t>(tk * g.k_pe_stride) * es;
    if (!g.fp8()) {
      if (e >= 0) {
        std::memcpy(dst, cache0 + static_cast<size_t>(e) * cache_row_bytes, out_row_bytes);
        continue;
      }
      std::memcpy(dst, src_kv_c, static_cast<size_t>(g.latent) * es);
      std::memcpy(dst + static_cast<size_t>(g.latent) * es, src_k_pe, static_cast<size_t>(g.rope) * es);
      std::memcpy(cache + static_cast<size_t>(g.slots[static_cast<size_t>(tk)]) * cache_row_bytes, dst, out_row_bytes);
      continue;
    }
    if (e >= 0) {
      std::memcpy(row.data(), cache0 + static_cast<size_t>(e) * cache_row_bytes, cache_row_bytes);
    } else {
      std::vector<uint16_t> a(static_cast<size_t>(g.latent)), b(static_cast<size_t>(g.rope));
      std::memcpy(a.data(), src_kv_c, a.size() * 2);
      std::memcpy(b.data(), src_k_pe, b.size() * 2);
      spec::encode(fmt.format, t, a.data(), g.latent, b.data(), g.rope, g.k_scale, row.data());
      std::memcpy(cache + static_cast<size_t>(g.slots[static_cast<size_t>(tk)]) * cache_row_bytes, row.data(),
                  cache_row_bytes);
    }
    const std::vector<uint16_t> v = spec::decode16(fmt.format, t, row.data(), g.latent, g.rope, g.k_scale);
    std::memcpy(dst, v.data(), out_row_bytes);
  }
  return g;
}

// Whether the gathered rows match: bytes equal, except that where a NaN is expected any NaN
// passes (its payload is the device's); a NaN where a number is expected fails.
inline ::testing::AssertionResult same_rows(const HostTensor& got, const HostTensor& want) {
  if (got.nbytes() != want.nbytes()) return ::testing::AssertionFailure() << "sizes differ";
  const auto* g = static_cast<const uint8_t*>(got.data());
  const auto* w = static_cast<const uint8_t*>(want.data());
  for (int64_t i = 0; i < want.numel(); ++i) {
    uint16_t a, b;
    std::memcpy(&a, g + 2 * i, 2);
    std::memcpy(&b, w + 2 * i, 2);
    const bool want_nan = std::isnan(want.get(i));
    if (want_nan ? !std::isnan(got.get(i)) : a != b) {
      return ::testing::AssertionFailure() << "element " << i << ": got 0x" << std::hex << a << ", want 0x" << b;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace test
}  // namespace mlakit
