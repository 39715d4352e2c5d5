#include "gpu/gpu_case.h"

#include <cstring>
#include <sstream>

namespace mlakit {
namespace test {

std::string describe(const GpuCase& c) {
  std::ostringstream s;
  s << kernel_preference_name(c.kernel) << " " << dtype_name(c.dtype) << " H=" << c.heads << "/" << c.kv_heads << " d=" << c.dqk << "/"
    << c.dvo << " causal=" << c.opts.causal << " window=" << c.opts.window_left
    << " cap=" << c.opts.logits_soft_cap << " q_lens=[";
  for (size_t i = 0; i < c.q_lens.size(); ++i) s << (i ? "," : "") << c.q_lens[i];
  s << "] kv_lens=[";
  for (size_t i = 0; i < c.kv_lens.size(); ++i) s << (i ? "," : "") << c.kv_lens[i];
  s << "]";
  if (c.q_token_pad) s << " q_pad=" << c.q_token_pad;
  if (c.out_pad) s << " out_pad=" << c.out_pad;
  return s.str();
}

namespace {

// A view of the first `width` elements of each innermost row of a [n, h, width + pad] tensor.
TensorView narrow_last(const TensorView& full, int64_t width) {
  TensorView v = full;
  v.shape[2] = width;
  return v;
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
  q.fill_normal(rng);
  k.fill_normal(rng);
  v.fill_normal(rng);

  // Reference in float64 on the host.
  HostTensor ref_out(DType::kFP64, {total_q, c.heads, c.dvo});
  HostTensor ref_lse(DType::kFP64, {total_q, c.heads});
  TensorView ref_lse_view = ref_lse.view();
  reference::ragged_prefill(narrow_last(q.view(), c.dqk), k.view(), v.view(), qo.data(), kv.data(),
                            batch, c.opts, ref_out.view(), &ref_lse_view);

  // The same inputs on the GPU; outputs poisoned with NaN bytes.
  const Device dev = Device::cuda(0);
  DeviceTensor dq(q, dev), dk(k, dev), dv(v, dev);
  HostTensor out(c.dtype, {total_q, c.heads, c.dvo + c.out_pad});
  HostTensor lse(DType::kFP32, {total_q, c.heads});
  out.fill_bytes(0xFF);
  lse.fill_bytes(0xFF);
  DeviceTensor dout(out, dev), dlse(lse, dev);

  PrefillConfig cfg = cuda_config(c.heads, c.kv_heads, c.dqk, c.dvo, c.dtype, batch, total_q, total_kv, c.kernel);
  cfg.kv_split = c.kv_split;
  RaggedPrefill prefill(cfg);
  if (c.kernel != KernelPreference::kAuto) {
    // The kernel asked for is the one that runs.
    EXPECT_EQ(prefill.info().kernel_arch, c.kernel == KernelPreference::kSm90 ? 90 : 80);
  }
  prefill.plan(qo.data(), kv.data(), batch, c.opts);
  const int split_slots = prefill.info().split_slots;
  TensorView lse_view = dlse.view();
  for (int r = 0; r < repeats; ++r) {
    prefill.run(narrow_last(dq.view(), c.dqk), dk.view(), dv.view(), narrow_last(dout.view(), c.dvo), &lse_view);
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
  for (int64_t i = 0; i < lse.numel(); ++i) {
    const double g = lse.get(i), w = ref_lse.get(i);
    if (std::isnan(g)) {
      ++res.unwritten_or_nan;
      continue;
    }
    if (std::isinf(w) || std::isinf(g)) {
      if (g != w) res.lse_max_abs_err = INFINITY;
    } else {
      res.lse_max_abs_err = std::max(res.lse_max_abs_err, std::fabs(g - w));
    }
    if (std::isinf(w) && w < 0) {
      // A row with no visible key: out must be exactly 0 and lse -inf.
      bool ok = std::isinf(g) && g < 0;
      for (int d = 0; d < c.dvo; ++d) ok = ok && got[i * c.dvo + d] == 0.0;
      res.empty_rows_wrong += ok ? 0 : 1;
    }
  }
  res.out_relerr = relative_error(got, want);
  return res;
}

}  // namespace test
}  // namespace mlakit
