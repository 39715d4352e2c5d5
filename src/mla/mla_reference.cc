// The float64 reference of the MLA step, deliberately plain: per request, every key and value is
// materialized at full width from the latents (context from the cache through the block table,
// new tokens straight from kv_c / k_pe, so the backends' cache round trip is checked too), then
// each query row takes a two-pass softmax over its visible keys. Speed does not matter here. FP8
// caches go through the host codec (kv_cache_codec.h), decoded exactly in double.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cpu/half_convert.h"
#include "cpu/reference_values.h"
#include "cpu/kv_cache_codec.h"
#include "mla/mla_checks.h"
#include "mla/mla_layout.h"
#include "mlakit/error.h"
#include "mlakit/mla.h"

namespace mlakit {
namespace reference {
namespace {

double at(const TensorView& t, int64_t i0, int64_t i1 = 0, int64_t i2 = 0) {
  return load_real(t.ptr_at(i0, i1, i2), t.dtype);
}

void check_out(const TensorView& t, const char* name, int nd, int64_t d0, int64_t d1, int64_t d2) {
  if (t.ndim != nd) throw Error(ErrorKind::kInvalidArgument, name, "expected " + std::to_string(nd) + "-D, got " + t.describe());
  if (t.dtype != DType::kFP32 && t.dtype != DType::kFP64) {
    throw Error(ErrorKind::kTypeMismatch, name, "must be fp32 or fp64");
  }
  if (!t.device.is_cpu()) throw Error(ErrorKind::kTypeMismatch, name, "must be a host tensor");
  if (t.shape[0] != d0 || t.shape[1] != d1 || (nd == 3 && t.shape[2] != d2)) {
    throw Error(ErrorKind::kInvalidArgument, name, "has the wrong shape: " + t.describe());
  }
}

}  // namespace

void mla_step(const MlaConfig& config, const MlaBatch& batch, const MlaLayer& layer, float sm_scale,
              const TensorView& out, const TensorView* lse) {
  MlaConfig c = config;
  c.device = Device::cpu();  // the reference reads host tensors, whatever the step runs on
  mla::check_config(c);
  const mla::MlaLayout lay = mla::make_layout(c, 64);
  const mla::BatchTotals tot = mla::check_batch(c, lay, batch, MlaPlanOptions{});
  const int64_t H = c.num_heads, L = c.kv_lora_rank, R = c.qk_rope_head_dim;
  const int64_t Dn = c.qk_nope_head_dim, Dv = c.v_head_dim, Dqk = Dn + R;
  // Tensor checks shared with the step; `out` stands in through a view of the step's dtype.
  const TensorView fake_out(layer.q.data, c.dtype, {tot.total_q, H, Dv});
  mla::check_layer(c, layer, fake_out, nullptr, mla::TensorRules{tot.total_q, false});
  check_out(out, "out", 3, tot.total_q, H, Dv);
  if (lse) check_out(*lse, "lse", 2, tot.total_q, H, 0);
  if (!std::isfinite(sm_scale) || sm_scale < 0.0f) {
    throw Error(ErrorKind::kInvalidArgument, "sm_scale", "must be finite and >= 0");
  }
  const double scale = sm_scale > 0.0f ? sm_scale : 1.0 / std::sqrt(static_cast<double>(Dqk));

  // The weight once, in double: row h * (Dn + Dv) + d.
  const int64_t wr = H * (Dn + Dv);
  std::vector<double> w(static_cast<size_t>(wr * L));
  for (int64_t r = 0; r < wr; ++r)
    for (int64_t x = 0; x < L; ++x) w[static_cast<size_t>(r * L + x)] = at(layer.kv_b_proj, r, x);

  // FP8 caches: rows decoded exactly; the new tokens quantized into the format and decoded, as
  // the step writes and attends them (mlakit/mla.h, KvCacheDtype).
  const mla::CacheCodec codec = mla::cache_codec(c);
  const bool fp8_cache = c.kv_cache_dtype != KvCacheDtype::kAuto;
  const float k_scale = c.kv_cache_dtype == KvCacheDtype::kFp8 ? *static_cast<const float*>(layer.k_scale.data) : 1.0f;
  std::vector<uint8_t> row(static_cast<size_t>(mla::cache_row_elements(codec)));
  std::vector<uint16_t> kv_c16(static_cast<size_t>(L)), k_pe16(static_cast<size_t>(R));

  int64_t q0 = 0;
  std::vector<double> lat, k, v, s, qv;
  for (int b = 0; b < batch.batch_size; ++b) {
    const int64_t ctx = batch.context_lens[b], nq = batch.query_lens[b], rows = ctx + nq;
    // Latent rows [rows, L + R] of every position of the request.
    lat.assign(static_cast<size_t>(rows * (L + R)), 0.0);
    for (int64_t p = 0; p < rows; ++p) {
      double* dst = &lat[static_cast<size_t>(p * (L + R))];
      if (p < ctx) {
        const int64_t blk = batch.block_table[static_cast<int64_t>(b) * batch.block_table_cols + p / c.block_size];
        const int64_t off = p % c.block_size;
        if (fp8_cache) {
          mla::decode_row_exact(codec, static_cast<const uint8_t*>(layer.kv_cache.ptr_at(blk, off)), k_scale, dst);
        } else {
          for (int64_t x = 0; x < L + R; ++x) dst[x] = at(layer.kv_cache, blk, off, x);
        }
      } else {
        const int64_t t = q0 + p - ctx;
        if (fp8_cache) {
          for (int64_t x = 0; x < L; ++x) kv_c16[static_cast<size_t>(x)] = *static_cast<const uint16_t*>(layer.kv_c.ptr_at(t, x));
          for (int64_t x = 0; x < R; ++x) k_pe16[static_cast<size_t>(x)] = *static_cast<const uint16_t*>(layer.k_pe.ptr_at(t, x));
          mla::encode_row(codec, kv_c16.data(), k_pe16.data(), k_scale, row.data());
          mla::decode_row_exact(codec, row.data(), k_scale, dst);
        } else {
          for (int64_t x = 0; x < L; ++x) dst[x] = at(layer.kv_c, t, x);
          for (int64_t x = 0; x < R; ++x) dst[L + x] = at(layer.k_pe, t, x);
        }
      }
    }
    // K [rows, H, Dn + R] and V [rows, H, Dv], materialized.
    k.assign(static_cast<size_t>(rows * H * Dqk), 0.0);
    v.assign(static_cast<size_t>(rows * H * Dv), 0.0);
    for (int64_t p = 0; p < rows; ++p) {
      const double* lp = &lat[static_cast<size_t>(p * (L + R))];
      for (int64_t h = 0; h < H; ++h) {
        double* kp = &k[static_cast<size_t>((p * H + h) * Dqk)];
        double* vp = &v[static_cast<size_t>((p * H + h) * Dv)];
        for (int64_t d = 0; d < Dn + Dv; ++d) {
          const double* wp = &w[static_cast<size_t>((h * (Dn + Dv) + d) * L)];
          double acc = 0.0;
          for (int64_t x = 0; x < L; ++x) acc += wp[x] * lp[x];
          if (d < Dn) kp[d] = acc;
          else vp[d - Dn] = acc;
        }
        for (int64_t x = 0; x < R; ++x) kp[Dn + x] = lp[L + x];
      }
    }
    // Each new token sees the context and the new tokens up to itself.
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t t = q0 + i, visible = ctx + i + 1;
      for (int64_t h = 0; h < H; ++h) {
        s.assign(static_cast<size_t>(visible), 0.0);
        qv.resize(static_cast<size_t>(Dqk));
        for (int64_t d = 0; d < Dqk; ++d) qv[static_cast<size_t>(d)] = at(layer.q, t, h, d);
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < visible; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < Dqk; ++d) dot += qv[static_cast<size_t>(d)] * k[static_cast<size_t>((j * H + h) * Dqk + d)];
          s[static_cast<size_t>(j)] = dot * scale;
          mx = std::max(mx, s[static_cast<size_t>(j)]);
        }
        double sum = 0.0;
        std::vector<double> o(static_cast<size_t>(Dv), 0.0);
        for (int64_t j = 0; j < visible; ++j) {
          const double e = std::exp(s[static_cast<size_t>(j)] - mx);
          sum += e;
          for (int64_t d = 0; d < Dv; ++d) o[static_cast<size_t>(d)] += e * v[static_cast<size_t>((j * H + h) * Dv + d)];
        }
        for (int64_t d = 0; d < Dv; ++d) store_wide(out.ptr_at(t, h, d), out.dtype, o[static_cast<size_t>(d)] / sum);
        if (lse) store_wide(lse->ptr_at(t, h), lse->dtype, mx + std::log(sum));
      }
    }
    q0 += nq;
  }
}

}  // namespace reference
}  // namespace mlakit
