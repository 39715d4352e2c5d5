// The float64 reference of latent attention, deliberately plain: for each query token, the
// cache rows it attends (dense: every visible position through the block table; sparse: each
// valid entry of its index row, repeats included) read into double (FP8 rows decoded exactly:
// code x scale), then per head a two-pass softmax and the sink. It shares the argument checks with the backends but none of their
// planning or kernels: positions, slots and masks are worked out here again. Tokens are
// independent and spread over threads; each one's arithmetic is one sequential loop, so the
// result does not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/half_convert.h"
#include "cpu/reference_values.h"
#include "cpu/thread_pool.h"
#include "cpu/kv_cache_codec.h"
#include "mlakit/error.h"
#include "mlakit/latent.h"
#include "plan/latent_checks.h"

namespace mlakit {
namespace reference {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

int64_t load_i32(const TensorView& t, int64_t i0, int64_t i1 = 0) {
  return *static_cast<const int32_t*>(t.ptr_at(i0, i1));
}

}  // namespace

void latent_attention(const LatentConfig& config, const LatentBatch& batch, const LatentPlanOptions& options,
                      const LatentLayer& layer, const TensorView& out, const TensorView* lse) {
  LatentConfig c = config;
  c.device = Device::cpu();  // host tensors, whatever the object runs on
  plan::check_latent_config(c);
  const plan::LatentTotals tot = plan::check_latent_plan(c, batch, options);
  plan::LatentTensorRules rules;
  rules.reference = true;
  plan::check_latent_tensors(c, options, tot, layer, out, lse, rules);

  const int64_t H = c.num_heads, L = c.kv_lora_rank, R = c.qk_rope_head_dim, D = L + R, bs = c.block_size;
  const double scale = options.sm_scale > 0.0f ? options.sm_scale : 1.0 / std::sqrt(static_cast<double>(D));
  const bool sparse = options.topk > 0;
  const TensorView& cache = layer.kv_cache;
  const bool fp8_rows = c.kv_cache_dtype != KvCacheDtype::kAuto;
  const float k_scale = layer.k_scale != nullptr ? *static_cast<const float*>(layer.k_scale->data) : 0.0f;
  mla::CacheCodec codec;
  codec.format = c.kv_cache_dtype;
  codec.latent = static_cast<int>(L);
  codec.rope = static_cast<int>(R);
  codec.dtype = c.dtype;

  // Token t's request and its index within it.
  std::vector<int> req_of(static_cast<size_t>(tot.total_q));
  std::vector<int64_t> first(static_cast<size_t>(batch.batch_size) + 1, 0);
  for (int r = 0; r < batch.batch_size; ++r) {
    first[static_cast<size_t>(r) + 1] = first[static_cast<size_t>(r)] + batch.query_lens[r];
    for (int64_t t = first[static_cast<size_t>(r)]; t < first[static_cast<size_t>(r) + 1]; ++t)
      req_of[static_cast<size_t>(t)] = r;
  }
  auto block_of = [&](int r, int64_t p) {
    return static_cast<int64_t>(batch.block_table[static_cast<int64_t>(r) * batch.block_table_cols + p / bs]);
  };

  cpu::parallel_for(tot.total_q, cpu::pool_size(), [&](int64_t t) {
    const int r = req_of[static_cast<size_t>(t)];
    // The (block, offset) of every key the token attends, in order.
    std::vector<std::pair<int64_t, int64_t>> keys;
    if (!sparse) {
      const int64_t q = batch.query_lens[r], kv = batch.kv_lens[r], i = t - first[static_cast<size_t>(r)];
      const int64_t visible = options.causal ? std::min(kv, std::max<int64_t>(0, kv - q + i + 1)) : kv;
      for (int64_t p = 0; p < visible; ++p) keys.emplace_back(block_of(r, p), p % bs);
    } else {
      int64_t n = options.topk;
      if (layer.topk_length) n = std::min<int64_t>(n, std::max<int64_t>(0, load_i32(*layer.topk_length, t)));
      for (int64_t e = 0; e < n; ++e) {
        const int64_t x = load_i32(*layer.indices, t, e);
        if (options.indices == LatentIndices::kPositions) {
          if (x >= 0 && x < batch.kv_lens[r]) keys.emplace_back(block_of(r, x), x % bs);
        } else if (x >= 0 && x < c.num_blocks * bs) {
          keys.emplace_back(x / bs, x % bs);
        }
      }
    }
    const int64_t nk = static_cast<int64_t>(keys.size());
    std::vector<double> k(static_cast<size_t>(nk * D));
    for (int64_t j = 0; j < nk; ++j) {
      const auto& key = keys[static_cast<size_t>(j)];
      if (fp8_rows) {  // code x scale, exactly
        mla::decode_row_exact(codec, static_cast<const uint8_t*>(cache.ptr_at(key.first, key.second)), k_scale,
                              &k[static_cast<size_t>(j * D)]);
        continue;
      }
      for (int64_t d = 0; d < D; ++d)
        k[static_cast<size_t>(j * D + d)] = load_real(cache.ptr_at(key.first, key.second, d), c.dtype);
    }
    std::vector<double> qv(static_cast<size_t>(D)), s(static_cast<size_t>(nk)), o(static_cast<size_t>(L));
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t d = 0; d < L; ++d) qv[static_cast<size_t>(d)] = load_real(layer.q.ptr_at(t, h, d), layer.q.dtype);
      for (int64_t d = 0; d < R; ++d) {
        qv[static_cast<size_t>(L + d)] = layer.q_pe ? load_real(layer.q_pe->ptr_at(t, h, d), layer.q_pe->dtype)
                                                    : load_real(layer.q.ptr_at(t, h, L + d), layer.q.dtype);
      }
      double mx = kNegInf;
      for (int64_t j = 0; j < nk; ++j) {
        double dot = 0.0;
        for (int64_t d = 0; d < D; ++d) dot += qv[static_cast<size_t>(d)] * k[static_cast<size_t>(j * D + d)];
        s[static_cast<size_t>(j)] = dot * scale;
        mx = std::max(mx, s[static_cast<size_t>(j)]);
      }
      std::fill(o.begin(), o.end(), 0.0);
      double sum = 0.0;
      for (int64_t j = 0; j < nk; ++j) {
        const double e = std::exp(s[static_cast<size_t>(j)] - mx);
        sum += e;
        for (int64_t d = 0; d < L; ++d) o[static_cast<size_t>(d)] += e * k[static_cast<size_t>(j * D + d)];
      }
      const double l = nk > 0 ? mx + std::log(sum) : kNegInf;
      double mul = nk > 0 ? 1.0 / sum : 0.0;
      if (layer.attn_sink && nk > 0) {
        const double sink = *static_cast<const float*>(layer.attn_sink->ptr_at(h));
        mul /= 1.0 + std::exp(sink - l);  // exp(lse) / (exp(lse) + exp(sink)), without overflow
      }
      for (int64_t d = 0; d < L; ++d) store_wide(out.ptr_at(t, h, d), out.dtype, o[static_cast<size_t>(d)] * mul);
      if (lse) store_wide(lse->ptr_at(t, h), lse->dtype, l);
      if (layer.max_logits) store_wide(layer.max_logits->ptr_at(t, h), layer.max_logits->dtype, nk > 0 ? mx : kNegInf);
    }
  });
}

}  // namespace reference
}  // namespace mlakit
