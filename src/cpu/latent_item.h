// What the CPU paths of latent attention share: the plan block read in place, where an item's
// rows and keys are (q rows of (token, head), cache rows through the pages or the indices), and
// how an item's rows end (final out / lse / max_logits, or a split's partial result). A path's
// item function computes each row's unnormalized O, the base-2 reference its exponentials were
// taken against and their sum, and (when max_logits are asked for) its largest logit, then calls
// finish_row().
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "contract/latent_launch.h"
#include "contract/latent_layout.h"

namespace mlakit {
namespace cpu {
namespace latent_cpu {

using latent::LatentArgs;
using latent::LatentHeader;
using latent::LatentItem;
using latent::LatentMerge;

constexpr float kLog2eF = 1.4426950408889634f;
constexpr float kLn2F = 0.6931471805599453f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Stores n floats times `mul` into a row of the output's dtype.
using StoreRow = void (*)(void* dst, const float* src, int n, float mul);

// One run: the arguments and the plan block's arrays.
struct Run {
  const LatentArgs* a = nullptr;
  const LatentHeader* h = nullptr;
  const int32_t* qo = nullptr;        // [batch + 1]
  const int32_t* kv = nullptr;        // [batch]
  const int32_t* page_ptr = nullptr;  // [batch + 1]
  const int32_t* pages = nullptr;
  const LatentItem* items = nullptr;
  const LatentMerge* merges = nullptr;
  int H = 0, L = 0, R = 0, D = 0;     // heads, latent, rope, L + R
  int block_shift = 0;                // log2(block_size)
  StoreRow store = nullptr;

  // The cache's rows: D 16-bit values, or (fp8_rows) fp8_ds_mla's 656 bytes, which the item
  // functions decode into 16-bit rows (decode_keys) before their products.
  bool fp8_rows = false;
  int cache_format = 0;  // LatentArgs::cache_format
  float k_scale = 0.0f;  // fp8 (format 2): the layer's scale, read once a run
  int row_bytes = 0;     // of one cache row, as the prefetches read it
  const void* cache_row(int64_t block, int64_t offset) const {
    const int64_t elem = fp8_rows ? 1 : 2;
    return static_cast<const uint8_t*>(a->cache) + (block * a->cache_stride_block + offset * a->cache_stride_row) * elem;
  }
  // Key position p of request r, through its pages.
  const void* key_row(int r, int64_t p) const {
    return cache_row(latent::request_pages(*h, page_ptr, pages, r)[p >> block_shift],
                     p & ((int64_t{1} << block_shift) - 1));
  }
  // Sparse: entry e of token t's index row as a cache row, null when it names no key.
  const void* entry_row(int r, int64_t t, int64_t e) const {
    const int64_t x = a->indices[t * a->indices_stride_tok + e];
    if (h->index_kind == 0) return x >= 0 && x < kv[r] ? key_row(r, x) : nullptr;
    return x >= 0 && x < a->num_slots ? cache_row(x >> block_shift, x & ((int64_t{1} << block_shift) - 1)) : nullptr;
  }
  // Sparse: the end of an item's entries, cut at the token's topk_length (negative: none).
  int64_t entry_end(const LatentItem& it) const {
    if (a->topk_length == nullptr) return it.key_end;
    const int64_t n = a->topk_length[static_cast<int64_t>(it.token) * a->topk_length_stride];
    return std::clamp<int64_t>(n, it.key_begin, it.key_end);
  }
  // Dense: the keys [lo, hi) row `g` (packed token * H + head) of an item sees.
  void dense_range(const LatentItem& it, int64_t g, int64_t* lo, int64_t* hi) const {
    const int64_t t = g / H, q = qo[it.request + 1] - qo[it.request], k = kv[it.request];
    const int64_t vis = h->causal ? std::clamp<int64_t>(k - q + (t - qo[it.request]) + 1, 0, k) : k;
    *lo = it.key_begin;
    *hi = std::max<int64_t>(it.key_begin, std::min<int64_t>(vis, it.key_end));
  }
  // q's row of packed row g: its first L columns (q or q_nope) and its last R (q or q_pe).
  const uint16_t* q_nope(int64_t g) const {
    return static_cast<const uint16_t*>(a->q) + (g / H) * a->q_stride_tok + (g % H) * a->q_stride_head;
  }
  const uint16_t* q_rope(int64_t g) const {
    if (a->q_pe == nullptr) return q_nope(g) + L;
    return static_cast<const uint16_t*>(a->q_pe) + (g / H) * a->qpe_stride_tok + (g % H) * a->qpe_stride_head;
  }
};

Run make_run(const LatentArgs& a, StoreRow store);

// An FP8 cache row (fp8_ds_mla or fp8) decoded into a bf16 row of L + R values, as the MLA step's
// gather hands it to its up-projection (code x scale in float32, rounded to nearest even;
// fp8_ds_mla's rope part copied). AVX-512 where present.
void decode_fp8_row(const Run& run, const void* raw, uint16_t* dst);

// Whether max_logits are asked for (then partial rows carry theirs too).
inline bool wants_max(const Run& run) { return run.a->max_logits != nullptr; }

// The last step of every row: `o` its unnormalized output (L floats), `m2` the base-2 reference of
// its exponentials (any value: the exponentials and their sum `l` are relative to it; 0 sum: the
// row saw no key) and `max_logit` its largest scaled logit (read only when wants_max). Final rows
// get out = o / l x the sink's factor, lse and max_logits; split rows their partial (o / l, lse,
// max).
inline float lse_of(float m2, float l) { return l > 0.0f ? (m2 + std::log2(l)) * kLn2F : kNegInf; }

inline void finish_row(const Run& run, const LatentItem& it, int i, const float* o, float m2, float l,
                       float max_logit) {
  const LatentArgs& a = *run.a;
  const int64_t g = it.row_begin + i;
  const float lse = lse_of(m2, l);
  const float mx = l > 0.0f ? max_logit : kNegInf;
  if (it.partial >= 0) {
    const int64_t p = it.partial + i;
    float* dst = a.partial_out + p * run.L;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int d = 0; d < run.L; ++d) dst[d] = o[d] * inv;
    a.partial_lse[p] = lse;
    a.partial_max[p] = mx;
    return;
  }
  const int64_t t = g / run.H, hd = g % run.H;
  float mul = l > 0.0f ? 1.0f / l : 0.0f;
  // The sink: out x exp(lse) / (exp(lse) + exp(sink)) = 1 / (1 + exp(sink - lse)).
  if (a.attn_sink != nullptr && l > 0.0f) mul /= 1.0f + std::exp(a.attn_sink[hd * a.sink_stride] - lse);
  run.store(static_cast<uint16_t*>(a.out) + t * a.out_stride_tok + hd * a.out_stride_head, o, run.L, mul);
  if (a.lse) a.lse[t * a.lse_stride_tok + hd * a.lse_stride_head] = lse;
  if (a.max_logits) a.max_logits[t * a.max_stride_tok + hd * a.max_stride_head] = mx;
}

// The fp32 path's item (any CPU; fp16, and bf16 without AVX-512 BF16). D: the dtype.
template <DType D>
void item_fp32(const Run& run, const LatentItem& it);
// The AVX-512 BF16 path's item (bf16; only where cpu_isa_available(kAvx512Bf16)).
void item_avx512bf16(const Run& run, const LatentItem& it);
// The amx path's item (bf16; only where the amx path is in use: AMX tiles and AVX-512 BF16).
void item_amx(const Run& run, const LatentItem& it);
// Its output store: 16 lanes at a time, round to nearest even.
void store_bf16_avx512(void* dst, const float* src, int n, float mul);

}  // namespace latent_cpu
}  // namespace cpu
}  // namespace mlakit
