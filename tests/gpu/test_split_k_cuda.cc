// Split K on the CUDA kernel: K "nope" interleaved with V in one up-projection buffer, the
// shared RoPE key inside latent rows (head stride 0), against the same K concatenated (bit for
// bit: the kernel must stage the same tile) and the float64 reference. Outputs NaN-poisoned.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "gpu/gpu_case.h"
#include "mlakit/mlakit.h"
#include "util/split_k_case.h"
#include "util/test_util.h"

namespace mlakit {
namespace test {
namespace {

struct SplitCase {
  int heads, kv_heads, dn, rope, dvo;
  DType dtype;
  bool causal;
};

// Each case against each kernel, selected explicitly.
using SplitParam = std::tuple<SplitCase, KernelPreference>;

std::string name_of(const ::testing::TestParamInfo<SplitParam>& i) {
  const SplitCase& c = std::get<0>(i.param);
  return std::string(kernel_preference_name(std::get<1>(i.param))) + "_h" + std::to_string(c.heads) + "_" + std::to_string(c.kv_heads) + "_d" + std::to_string(c.dn) +
         "r" + std::to_string(c.rope) + "v" + std::to_string(c.dvo) + "_" + dtype_name(c.dtype) +
         (c.causal ? "_causal" : "_full");
}

class CudaSplitK : public ::testing::TestWithParam<SplitParam> {
 protected:
  void SetUp() override {
    const SplitCase& c = std::get<0>(GetParam());
    MLAKIT_SKIP_IF_KERNEL_UNAVAILABLE(std::get<1>(GetParam()), c.dn + c.rope, c.dvo, c.dtype);
  }
};

TEST_P(CudaSplitK, EqualsConcatenatedKAndReference) {
  const SplitCase sc = std::get<0>(GetParam());
  const DType t = sc.dtype;
  const SplitKProblem p = make_split_k_problem(t, sc.heads, sc.kv_heads, sc.dn, sc.rope, sc.dvo,
                                               512 + sc.rope, {300, 1, 0, 129, 64},
                                               {300, 77, 5, 400, 64}, 21);
  const Device dev = Device::cuda(0);
  PrefillConfig cfg;
  cfg.num_qo_heads = p.heads;
  cfg.num_kv_heads = p.kv_heads;
  cfg.head_dim_qk = p.dqk();
  cfg.head_dim_vo = p.dvo;
  cfg.dtype = t;
  cfg.max_batch = p.batch();
  cfg.max_q_tokens = p.qo.back();
  cfg.max_kv_tokens = p.kv.back();
  cfg.device = dev;
  cfg.kernel = std::get<1>(GetParam());
  RaggedPrefill attn(cfg);
  PrefillOptions o;
  o.causal = sc.causal;
  attn.plan(p.qo.data(), p.kv.data(), p.batch(), o);

  const int64_t tq = p.qo.back();
  DeviceTensor dq(p.q, dev), dkv(p.kv_buf, dev), dlat(p.latent, dev), dk(p.k_full, dev), dv(p.v, dev);
  HostTensor poison(t, {tq, p.heads, p.dvo}), lpoison(DType::kFP32, {tq, p.heads});
  poison.fill_bytes(0xFF);
  lpoison.fill_bytes(0xFF);
  DeviceTensor dout_split(poison, dev), dout_plain(poison, dev), dlse_split(lpoison, dev), dlse_plain(lpoison, dev);
  TensorView ls = dlse_split.view(), lp = dlse_plain.view();
  attn.run_split_k(dq.view(), k_part(dkv.view(), p.dn), rope_part(dlat.view(), p.rope),
                   v_part(dkv.view(), p.dn, p.dvo), dout_split.view(), &ls);
  attn.run(dq.view(), dk.view(), dv.view(), dout_plain.view(), &lp);
  synchronize(dev);

  HostTensor out_split(t, {tq, p.heads, p.dvo}), out_plain(t, {tq, p.heads, p.dvo});
  HostTensor lse_split(DType::kFP32, {tq, p.heads}), lse_plain(DType::kFP32, {tq, p.heads});
  dout_split.copy_to(out_split);
  dout_plain.copy_to(out_plain);
  dlse_split.copy_to(lse_split);
  dlse_plain.copy_to(lse_plain);
  int64_t nan = 0;
  for (int64_t i = 0; i < out_split.numel(); ++i) nan += std::isnan(out_split.get(i)) ? 1 : 0;
  for (int64_t i = 0; i < lse_split.numel(); ++i) nan += std::isnan(lse_split.get(i)) ? 1 : 0;
  EXPECT_EQ(nan, 0) << "unwritten (poisoned) or NaN outputs";
  EXPECT_EQ(out_split.bytes(), out_plain.bytes()) << "split K differs from the concatenated K";
  EXPECT_EQ(lse_split.bytes(), lse_plain.bytes());

  HostTensor ref(DType::kFP64, {tq, p.heads, p.dvo});
  reference::ragged_prefill(p.q.view(), p.k_full.view(), p.v.view(), p.qo.data(), p.kv.data(),
                            p.batch(), o, ref.view(), nullptr);
  EXPECT_LE(relative_error(out_split, ref), t == DType::kBF16 ? 1e-2 : 2e-3);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaSplitK,
    ::testing::Combine(::testing::Values(SplitCase{16, 16, 128, 64, 128, DType::kBF16, true},
                      SplitCase{16, 16, 128, 64, 128, DType::kFP16, true},
                      SplitCase{16, 16, 128, 64, 128, DType::kBF16, false},
                      SplitCase{4, 2, 128, 64, 128, DType::kBF16, true},  // grouped heads
                      SplitCase{4, 4, 64, 64, 128, DType::kBF16, true},   // (128, 128) kernel
                      SplitCase{4, 4, 56, 8, 64, DType::kFP16, true}),    // (64, 64), 8-wide RoPE
                       ::testing::ValuesIn(kAllKernels)),
    name_of);

}  // namespace
}  // namespace test
}  // namespace mlakit
