#include "gpu/gpu_case.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

namespace mlakit {
namespace test {

std::string describe(const GpuCase& c) {
  std::ostringstream s;
  s << kernel_preference_name(c.kernel) << " " << dtype_name(c.dtype);
  if (c.dtype == DType::kE4M3) {
    s << "->" << dtype_name(c.out_dtype)
      << (c.fp8 == Fp8Inputs::kExactP ? " exact-P" : c.fp8 == Fp8Inputs::kNormal ? " normal" : " outliers")
      << (c.descales ? " descaled" : "");
  }
  s << " H=" << c.heads << "/" << c.kv_heads << " d=" << c.dqk << "/"
    << c.dvo << " causal=" << c.opts.causal << " window=" << c.opts.window_left
    << " cap=" << c.opts.logits_soft_cap << " seed=" << c.seed << " q_lens=[";
  for (size_t i = 0; i < c.q_lens.size(); ++i) s << (i ? "," : "") << c.q_lens[i];
  s << "] kv_lens=[";
  for (size_t i = 0; i < c.kv_lens.size(); ++i) s << (i ? "," : "") << c.kv_lens[i];
  s << "]";
  if (c.q_token_pad) s << " q_pad=" << c.q_token_pad;
  if (c.out_pad) s << " out_pad=" << c.out_pad;
  return s.str();
}

double tolerance_for(const GpuCase& c) {
  if (c.dtype != DType::kE4M3) return tolerance_for(c.dtype);
  const bool exact = c.fp8 == Fp8Inputs::kExactP && c.opts.sm_scale == 0.f && c.opts.logits_soft_cap == 0.f;
  return exact ? tolerance_for(c.out_dtype) : 3e-2;
}

namespace {

// e4m3 inputs of the case (Fp8Inputs) and their descale factors [batch + 2, Hkv] (the two extra
// rows: a buffer larger than the batch, as engines size it), written into q, k, v, qd, kd, vd.
void make_fp8_inputs(const GpuCase& c, const std::vector<int32_t>& qo, const std::vector<int32_t>& kv,
                     std::mt19937_64& rng, HostTensor& q, HostTensor& k, HostTensor& v, HostTensor& qd,
                     HostTensor& kd, HostTensor& vd) {
  const int batch = static_cast<int>(qo.size()) - 1;
  const int group = c.heads / c.kv_heads;
  const int64_t qrow = q.shape()[2];  // dqk + pad
  for (HostTensor* d : {&qd, &kd, &vd}) {
    *d = HostTensor(DType::kFP32, {batch + 2, c.kv_heads});
    for (int64_t i = 0; i < d->numel(); ++i) d->set(i, 1.0);
  }
  if (c.fp8 == Fp8Inputs::kExactP) {
    std::uniform_int_distribution<int> chan(0, c.dqk - 1), sign(0, 1), small(-2, 2), pow2(0, 1);
    std::uniform_real_distribution<double> vscale(0.5, 2.0);
    q.fill_bytes(0);
    for (int64_t r = 0; r < q.shape()[0] * c.heads; ++r)
      for (int i = 0; i < 4; ++i) q.set(r * qrow + chan(rng), sign(rng) ? 1.0 : -1.0);
    for (int64_t i = 0; i < k.numel(); ++i) k.set(i, small(rng));
    v.fill_normal(rng);
    if (c.descales) {
      for (int64_t i = 0; i < qd.numel(); ++i) {
        qd.set(i, pow2(rng) ? 2.0 : 1.0);
        kd.set(i, pow2(rng) ? 2.0 : 1.0);
        vd.set(i, vscale(rng));
      }
    }
    return;
  }
  // Normal values, per (sequence, kv head) scaled into e4m3's range like an engine's quantizer.
  std::normal_distribution<double> normal(0.0, 1.0);
  // Distinct channels: a channel drawn twice would be x 400 (scores of ~1e5 nats, where the
  // e4m3 products' truncated accumulation errs by tens of nats and near-tied rows flip; docs/fp8.md).
  auto distinct_channels = [&](int count, int width) {
    std::vector<int> all(static_cast<size_t>(width));
    for (int e = 0; e < width; ++e) all[static_cast<size_t>(e)] = e;
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(static_cast<size_t>(count));
    return all;
  };
  std::vector<int> q_out, v_out;
  if (c.fp8 == Fp8Inputs::kOutliers) {
    q_out = distinct_channels(4, c.dqk);
    v_out = distinct_channels(2, c.dvo);
  }
  auto quantize = [&](HostTensor& t, int64_t row_width, int width, const std::vector<int32_t>& ptr, bool is_q,
                      const std::vector<int>& outliers, HostTensor& d) {
    const int heads = static_cast<int>(t.shape()[1]);
    std::vector<double> x(static_cast<size_t>(t.numel()), 0.0);
    for (int64_t r = 0; r < t.shape()[0]; ++r)
      for (int h = 0; h < heads; ++h)
        for (int e = 0; e < width; ++e) {
          double y = normal(rng);
          if (std::find(outliers.begin(), outliers.end(), e) != outliers.end()) y *= 20.0;
          x[static_cast<size_t>((r * heads + h) * row_width + e)] = y;
        }
    for (int b = 0; b < batch; ++b)
      for (int hk = 0; hk < c.kv_heads; ++hk) {
        const int h0 = is_q ? hk * group : hk, h1 = is_q ? (hk + 1) * group : hk + 1;
        double amax = 0;
        for (int64_t r = ptr[b]; r < ptr[b + 1]; ++r)
          for (int h = h0; h < h1; ++h)
            for (int e = 0; e < width; ++e) amax = std::max(amax, std::fabs(x[static_cast<size_t>((r * heads + h) * row_width + e)]));
        const double scale = c.descales && amax > 0 ? amax / 448.0 : 1.0;
        d.set(b * c.kv_heads + hk, scale);
        const float stored = static_cast<float>(d.get(b * c.kv_heads + hk));
        for (int64_t r = ptr[b]; r < ptr[b + 1]; ++r)
          for (int h = h0; h < h1; ++h)
            for (int e = 0; e < width; ++e) {
              const int64_t i = (r * heads + h) * row_width + e;
              t.set(i, x[static_cast<size_t>(i)] / stored);
            }
      }
  };
  quantize(q, qrow, c.dqk, qo, true, q_out, qd);
  quantize(k, c.dqk, c.dqk, kv, false, q_out, kd);  // q and k share their outlier channels
  quantize(v, c.dvo, c.dvo, kv, false, v_out, vd);
}

// A view of the first `width` elements of each innermost row of a [n, h, width + pad] tensor.
TensorView narrow_last(const TensorView& full, int64_t width) {
  TensorView v = full;
  v.shape[2] = width;
  return v;
}

// "lse t=T (seq B row R) h=H got G want W; out t=T (seq B row R) h=H row relerr E": the (token,
// head) with the largest LSE error and the one with the largest output error relative to its
// row's norm, so that a failure names the row to reproduce (with the seed describe() prints).
std::string worst_rows(const std::vector<double>& got, const std::vector<double>& want, const HostTensor& lse,
                       const HostTensor& ref_lse, const std::vector<int32_t>& qo, int heads, int dvo) {
  int64_t lse_at = -1, out_at = -1;
  double lse_err = -1, out_err = -1;
  for (int64_t i = 0; i < lse.numel(); ++i) {
    const double g = lse.get(i), w = ref_lse.get(i);
    const double e = (std::isinf(g) && g == w) ? 0.0 : std::fabs(g - w);
    if (!(e <= lse_err)) lse_err = e, lse_at = i;  // NaN wins
    double d2 = 0, w2 = 0;
    for (int d = 0; d < dvo; ++d) {
      const double x = got[static_cast<size_t>(i * dvo + d)], y = want[static_cast<size_t>(i * dvo + d)];
      d2 += (x - y) * (x - y);
      w2 += y * y;
    }
    const double r = std::sqrt(d2) / std::max(std::sqrt(w2), 1e-30);
    if (!(r <= out_err)) out_err = r, out_at = i;
  }
  auto where = [&](int64_t i) {
    const int64_t t = i / heads;
    const size_t b = static_cast<size_t>(std::upper_bound(qo.begin(), qo.end(), static_cast<int32_t>(t)) - qo.begin()) - 1;
    std::ostringstream s;
    s << "t=" << t << " (seq " << b << " row " << t - qo[b] << ") h=" << i % heads;
    return s.str();
  };
  std::ostringstream s;
  if (lse_at >= 0) {
    s << "lse " << where(lse_at) << " got " << lse.get(lse_at) << " want " << ref_lse.get(lse_at) << "; out "
      << where(out_at) << " row relerr " << out_err;
  }
  return s.str();
}

}  // namespace

PrefillConfig cuda_config(int heads, int kv_heads, int dqk, int dvo, DType dtype, int max_batch, int64_t max_q,
                          int64_t max_kv, KernelPreference kernel) {
  PrefillConfig cfg;
  cfg.num_qo_heads = heads;
  cfg.num_kv_heads = kv_heads;
  cfg.head_dim_qk = dqk;
  cfg.head_dim_vo = dvo;
  cfg.dtype = dtype;
  cfg.max_batch = max_batch > 0 ? max_batch : 1;
  cfg.max_q_tokens = max_q > 0 ? max_q : 1;
  cfg.max_kv_tokens = max_kv > 0 ? max_kv : 1;
  cfg.device = Device::cuda(0);
  cfg.kernel = kernel;
  return cfg;
}

bool kernel_available(KernelPreference kernel, int dqk, int dvo, DType dtype, std::string* why) {
  const PrefillConfig cfg = cuda_config(1, 1, dqk, dvo, dtype, 1, 1, 1, kernel);
  try {
    RaggedPrefill::workspace_sizes(cfg);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kUnsupported) throw;
    if (why) *why = e.what();
    return false;
  }
  return true;
}

CaseResult run_gpu_case(const GpuCase& c, int repeats) {
  const int batch = static_cast<int>(c.q_lens.size());
  const std::vector<int32_t> qo = make_indptr(c.q_lens);
  const std::vector<int32_t> kv = make_indptr(c.kv_lens);
  const int64_t total_q = qo.back(), total_kv = kv.back();
  std::mt19937_64 rng(c.seed);

  HostTensor q(c.dtype, {total_q, c.heads, c.dqk + c.q_token_pad});
  HostTensor k(c.dtype, {total_kv, c.kv_heads, c.dqk});
  HostTensor v(c.dtype, {total_kv, c.kv_heads, c.dvo});
  const bool fp8 = c.dtype == DType::kE4M3;
  const DType out_dtype = fp8 ? c.out_dtype : c.dtype;
  PrefillOptions opts = c.opts;
  HostTensor qd, kd, vd;  // e4m3: descale factors
  if (fp8) {
    make_fp8_inputs(c, qo, kv, rng, q, k, v, qd, kd, vd);
    if (c.fp8 == Fp8Inputs::kExactP && opts.sm_scale == 0.f && opts.logits_soft_cap == 0.f) {
      opts.sm_scale = 0.69314718055994531f;  // ln 2: integer scores in log2 units
    }
  } else {
    q.fill_normal(rng);
    k.fill_normal(rng);
    v.fill_normal(rng);
  }
  TensorView qd_host = qd.view(), kd_host = kd.view(), vd_host = vd.view();
  const Descales host_descales = fp8 && c.descales ? Descales{&qd_host, &kd_host, &vd_host} : Descales{};

  // Reference in float64 on the host.
  HostTensor ref_out(DType::kFP64, {total_q, c.heads, c.dvo});
  HostTensor ref_lse(DType::kFP64, {total_q, c.heads});
  TensorView ref_lse_view = ref_lse.view();
  reference::ragged_prefill(narrow_last(q.view(), c.dqk), k.view(), v.view(), qo.data(), kv.data(),
                            batch, opts, ref_out.view(), &ref_lse_view, host_descales);

  // The same inputs on the GPU; outputs poisoned with NaN bytes.
  const Device dev = Device::cuda(0);
  DeviceTensor dq(q, dev), dk(k, dev), dv(v, dev);
  // Descales on the device (dummies of one element when absent, not passed).
  DeviceTensor dqd(fp8 ? qd : HostTensor(DType::kFP32, {1, 1}), dev), dkd(fp8 ? kd : HostTensor(DType::kFP32, {1, 1}), dev),
      dvd(fp8 ? vd : HostTensor(DType::kFP32, {1, 1}), dev);
  TensorView qd_dev = dqd.view(), kd_dev = dkd.view(), vd_dev = dvd.view();
  const Descales dev_descales = fp8 && c.descales ? Descales{&qd_dev, &kd_dev, &vd_dev} : Descales{};
  HostTensor out(out_dtype, {total_q, c.heads, c.dvo + c.out_pad});
  HostTensor lse(DType::kFP32, {total_q, c.heads});
  out.fill_bytes(0xFF);
  lse.fill_bytes(0xFF);
  DeviceTensor dout(out, dev), dlse(lse, dev);

  PrefillConfig cfg = cuda_config(c.heads, c.kv_heads, c.dqk, c.dvo, c.dtype, batch, total_q, total_kv, c.kernel);
  cfg.kv_split = c.kv_split;
  cfg.out_dtype = out_dtype;
  RaggedPrefill prefill(cfg);
  if (c.kernel != KernelPreference::kAuto) {
    // The kernel asked for is the one that runs.
    EXPECT_EQ(prefill.info().kernel_arch, c.kernel == KernelPreference::kSm90 ? 90 : 80);
  }
  prefill.plan(qo.data(), kv.data(), batch, opts);
  const int split_slots = prefill.info().split_slots;
  TensorView lse_view = dlse.view();
  for (int r = 0; r < repeats; ++r) {
    prefill.run(narrow_last(dq.view(), c.dqk), dk.view(), dv.view(), narrow_last(dout.view(), c.dvo), &lse_view,
                dev_descales);
  }
  synchronize(dev);
  dout.copy_to(out);
  dlse.copy_to(lse);

  CaseResult res;
  res.split_slots = split_slots;
  res.grid_blocks = prefill.info().grid_blocks;
  res.out_bits = out.bytes();
  const std::vector<double> padded = out.to_doubles();
  std::vector<double> got;  // the output without its pad
  got.reserve(static_cast<size_t>(total_q) * c.heads * c.dvo);
  const int row = c.dvo + c.out_pad;
  for (size_t i = 0; i < padded.size(); ++i) {
    if (static_cast<int>(i % row) < c.dvo) got.push_back(padded[i]);
    else res.pad_written += std::isnan(padded[i]) ? 0 : 1;
  }
  std::vector<double> want = ref_out.to_doubles();
  res.out_values = got;
  for (double x : got) res.unwritten_or_nan += std::isnan(x) ? 1 : 0;
  // Per (row, head): 1 + sm_scale * |q| * max |k| over the sequence's keys of its kv head, in
  // dequantized units (the scaled LSE error's denominator).
  const double sm_scale = opts.sm_scale != 0.f ? opts.sm_scale : 1.0 / std::sqrt(static_cast<double>(c.dqk));
  std::vector<double> lse_scale(static_cast<size_t>(lse.numel()), 1.0);
  {
    const int group = c.heads / c.kv_heads;
    auto norm = [&](const HostTensor& t, int64_t row, int head, int width) {
      const int64_t base = (row * t.shape()[1] + head) * t.shape()[2];
      double s2 = 0;
      for (int e = 0; e < width; ++e) s2 += t.get(base + e) * t.get(base + e);
      return std::sqrt(s2);
    };
    for (int b = 0; b < batch; ++b)
      for (int hk = 0; hk < c.kv_heads; ++hk) {
        const double qs = fp8 && c.descales ? qd.get(b * c.kv_heads + hk) : 1.0;
        const double ks = fp8 && c.descales ? kd.get(b * c.kv_heads + hk) : 1.0;
        double kmax = 0;
        for (int64_t r = kv[b]; r < kv[b + 1]; ++r) kmax = std::max(kmax, norm(k, r, hk, c.dqk) * ks);
        for (int64_t r = qo[b]; r < qo[b + 1]; ++r)
          for (int h = hk * group; h < (hk + 1) * group; ++h)
            lse_scale[static_cast<size_t>(r * c.heads + h)] = 1.0 + sm_scale * norm(q, r, h, c.dqk) * qs * kmax;
      }
  }
  for (int64_t i = 0; i < lse.numel(); ++i) {
    const double g = lse.get(i), w = ref_lse.get(i);
    if (std::isnan(g)) {
      ++res.unwritten_or_nan;
      continue;
    }
    if (std::isinf(w) || std::isinf(g)) {
      if (g != w) res.lse_max_abs_err = res.lse_max_scaled_err = INFINITY;
    } else {
      res.lse_max_abs_err = std::max(res.lse_max_abs_err, std::fabs(g - w));
      res.lse_max_scaled_err = std::max(res.lse_max_scaled_err, std::fabs(g - w) / lse_scale[static_cast<size_t>(i)]);
    }
    if (std::isinf(w) && w < 0) {
      // A row with no visible key: out must be exactly 0 and lse -inf.
      bool ok = std::isinf(g) && g < 0;
      for (int d = 0; d < c.dvo; ++d) ok = ok && got[i * c.dvo + d] == 0.0;
      res.empty_rows_wrong += ok ? 0 : 1;
    }
  }
  res.out_relerr = relative_error(got, want);
  res.worst = worst_rows(got, want, lse, ref_lse, qo, c.heads, c.dvo);
  return res;
}

}  // namespace test
}  // namespace mlakit
