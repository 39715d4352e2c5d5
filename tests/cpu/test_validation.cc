// Every rejected input: the right ErrorKind, the right argument name, and not one byte written
// to the outputs (they are poisoned first and compared after the call).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "mlakit/mlakit.h"
#include "plan/validate.h"
#include "util/test_util.h"

namespace mlakit {
namespace {

using test::HostTensor;
using test::throws_error;

constexpr uint8_t kPoison = 0xA5;
constexpr int H = 4, HKV = 2, DQK = 16, DVO = 8;

// Entry points a case applies to.
enum : unsigned { kPlan = 1, kRun = 2, kOneShot = 4, kReference = 8 };

struct Call {
  TensorView q, k, v, out, lse;
  bool with_lse = true;
  std::vector<int32_t> qo, kv;
  const int32_t* qo_ptr;
  const int32_t* kv_ptr;
  int batch;
  PrefillOptions opt;
};

class Validation : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(99);
    qo_ = test::make_indptr({5, 0, 9});
    kv_ = test::make_indptr({7, 3, 9});
    const int64_t tq = qo_.back(), tk = kv_.back();
    q_ = HostTensor(DType::kBF16, {tq, H, DQK});
    k_ = HostTensor(DType::kBF16, {tk, HKV, DQK});
    v_ = HostTensor(DType::kBF16, {tk, HKV, DVO});
    q_.fill_normal(rng);
    k_.fill_normal(rng);
    v_.fill_normal(rng);
    out_ = HostTensor(DType::kBF16, {tq, H, DVO});
    lse_ = HostTensor(DType::kFP32, {tq, H});
    ref_out_ = HostTensor(DType::kFP32, {tq, H, DVO});
    ref_lse_ = HostTensor(DType::kFP32, {tq, H});
    config_.num_qo_heads = H;
    config_.num_kv_heads = HKV;
    config_.head_dim_qk = DQK;
    config_.head_dim_vo = DVO;
    config_.dtype = DType::kBF16;
    config_.max_batch = 8;
    config_.max_q_tokens = 64;
    config_.max_kv_tokens = 64;
  }

  // A valid call; `reference` selects the fp32 outputs the reference wants.
  Call base(bool reference) {
    Call c;
    c.q = q_.view();
    c.k = k_.view();
    c.v = v_.view();
    c.out = reference ? ref_out_.view() : out_.view();
    c.lse = reference ? ref_lse_.view() : lse_.view();
    c.qo = qo_;
    c.kv = kv_;
    c.batch = 3;
    c.qo_ptr = nullptr;
    c.kv_ptr = nullptr;
    return c;
  }
  static const int32_t* qo_of(const Call& c) { return c.qo_ptr ? c.qo_ptr : (c.qo.empty() ? nullptr : c.qo.data()); }
  static const int32_t* kv_of(const Call& c) { return c.kv_ptr ? c.kv_ptr : (c.kv.empty() ? nullptr : c.kv.data()); }

  void poison() {
    for (HostTensor* t : {&out_, &lse_, &ref_out_, &ref_lse_}) t->fill_bytes(kPoison);
  }
  void expect_untouched(const std::string& what) {
    for (HostTensor* t : {&out_, &lse_, &ref_out_, &ref_lse_}) {
      bool same = true;
      for (uint8_t b : t->bytes()) same = same && b == kPoison;
      EXPECT_TRUE(same) << what << ": an output buffer was written by a rejected call";
    }
  }

  // Runs the mutated call through every entry point in `where` and checks the error.
  void expect_rejected(const std::string& name, const std::function<void(Call&)>& mutate,
                       ErrorKind kind, const std::string& arg, unsigned where) {
    SCOPED_TRACE(name);
    if (where & kPlan) {
      RaggedPrefill p(config_);
      Call c = base(false);
      mutate(c);
      poison();
      EXPECT_TRUE(throws_error([&] { p.plan(qo_of(c), kv_of(c), c.batch, c.opt); }, kind, arg)) << "plan()";
      EXPECT_FALSE(p.planned());
      expect_untouched("plan");
    }
    if (where & kRun) {
      RaggedPrefill p(config_);
      p.plan(qo_.data(), kv_.data(), 3);
      Call c = base(false);
      mutate(c);
      poison();
      EXPECT_TRUE(throws_error([&] { p.run(c.q, c.k, c.v, c.out, c.with_lse ? &c.lse : nullptr); }, kind, arg))
          << "run()";
      expect_untouched("run");
    }
    if (where & kOneShot) {
      Call c = base(false);
      mutate(c);
      poison();
      EXPECT_TRUE(throws_error([&] {
        ragged_prefill(c.q, c.k, c.v, qo_of(c), kv_of(c), c.batch, c.opt, c.out, c.with_lse ? &c.lse : nullptr);
      }, kind, arg)) << "ragged_prefill()";
      expect_untouched("ragged_prefill");
    }
    if (where & kReference) {
      Call c = base(true);
      mutate(c);
      poison();
      EXPECT_TRUE(throws_error([&] {
        reference::ragged_prefill(c.q, c.k, c.v, qo_of(c), kv_of(c), c.batch, c.opt, c.out,
                                  c.with_lse ? &c.lse : nullptr);
      }, kind, arg)) << "reference::ragged_prefill()";
      expect_untouched("reference");
    }
  }

  HostTensor q_, k_, v_, out_, lse_, ref_out_, ref_lse_;
  std::vector<int32_t> qo_, kv_;
  PrefillConfig config_;
};

constexpr unsigned kTensorPaths = kRun | kOneShot | kReference;
constexpr unsigned kBatchPaths = kPlan | kOneShot | kReference;
constexpr ErrorKind kInv = ErrorKind::kInvalidArgument;
constexpr ErrorKind kType = ErrorKind::kTypeMismatch;

TEST_F(Validation, ValidCallsSucceedAndWrite) {
  for (unsigned where : {kRun, kOneShot, kReference}) {
    poison();
    Call c = base(where == kReference);
    if (where == kRun) {
      RaggedPrefill p(config_);
      p.plan(qo_of(c), kv_of(c), c.batch, c.opt);
      p.run(c.q, c.k, c.v, c.out, &c.lse);
    } else if (where == kOneShot) {
      ragged_prefill(c.q, c.k, c.v, qo_of(c), kv_of(c), c.batch, c.opt, c.out, &c.lse);
    } else {
      reference::ragged_prefill(c.q, c.k, c.v, qo_of(c), kv_of(c), c.batch, c.opt, c.out, &c.lse);
    }
    const HostTensor& o = where == kReference ? ref_out_ : out_;
    bool all_poison = true;
    for (uint8_t b : o.bytes()) all_poison = all_poison && b == kPoison;
    EXPECT_FALSE(all_poison) << "entry point " << where << " wrote nothing";
  }
}

TEST_F(Validation, NullPointers) {
  expect_rejected("q null", [](Call& c) { c.q.data = nullptr; }, kInv, "q", kTensorPaths);
  expect_rejected("k null", [](Call& c) { c.k.data = nullptr; }, kInv, "k", kTensorPaths);
  expect_rejected("v null", [](Call& c) { c.v.data = nullptr; }, kInv, "v", kTensorPaths);
  expect_rejected("out null", [](Call& c) { c.out.data = nullptr; }, kInv, "out", kTensorPaths);
  expect_rejected("lse null", [](Call& c) { c.lse.data = nullptr; }, kInv, "lse", kTensorPaths);
  expect_rejected("qo_indptr null", [](Call& c) { c.qo.clear(); }, kInv, "qo_indptr", kBatchPaths);
  expect_rejected("kv_indptr null", [](Call& c) { c.kv.clear(); }, kInv, "kv_indptr", kBatchPaths);
}

TEST_F(Validation, RankAndStrides) {
  expect_rejected("q 2-D", [](Call& c) { c.q.ndim = 2; }, kInv, "q", kTensorPaths);
  expect_rejected("k 4-D", [](Call& c) { c.k.ndim = 4; c.k.shape[3] = 1; c.k.strides[3] = 1; }, kInv, "k", kTensorPaths);
  expect_rejected("v 2-D", [](Call& c) { c.v.ndim = 2; }, kInv, "v", kTensorPaths);
  expect_rejected("out 2-D", [](Call& c) { c.out.ndim = 2; }, kInv, "out", kTensorPaths);
  expect_rejected("lse 3-D", [](Call& c) { c.lse.ndim = 3; c.lse.shape[2] = 1; c.lse.strides[2] = 1; }, kInv, "lse", kTensorPaths);
  expect_rejected("q last stride 2", [](Call& c) { c.q.strides[2] = 2; }, kInv, "q", kTensorPaths);
  expect_rejected("v last stride 0", [](Call& c) { c.v.strides[2] = 0; }, kInv, "v", kTensorPaths);
  expect_rejected("out last stride", [](Call& c) { c.out.strides[2] = 3; }, kInv, "out", kTensorPaths);
  // lse may have any strides, but no two of its elements may share an address.
  expect_rejected("lse heads overlap tokens", [](Call& c) { c.lse.strides[1] = 2; }, kInv, "lse", kTensorPaths);
  expect_rejected("lse token stride 0", [](Call& c) { c.lse.strides[0] = 0; }, kInv, "lse", kTensorPaths);
  expect_rejected("out head stride 0", [](Call& c) { c.out.strides[1] = 0; }, kInv, "out", kTensorPaths);
  expect_rejected("k negative token stride", [](Call& c) { c.k.strides[0] = -c.k.strides[0]; }, kInv, "k", kTensorPaths);
  expect_rejected("out negative head stride", [](Call& c) { c.out.strides[1] = -c.out.strides[1]; }, kInv, "out", kTensorPaths);
  expect_rejected("q misaligned element", [](Call& c) { c.q.data = static_cast<char*>(c.q.data) + 1; }, kInv, "q", kTensorPaths);
}

TEST_F(Validation, DTypes) {
  auto all_fp32 = [](Call& c) {
    c.q.dtype = c.k.dtype = c.v.dtype = c.out.dtype = DType::kFP32;
  };
  expect_rejected("fp32 inputs on a backend", all_fp32, kType, "q", kRun | kOneShot);
  expect_rejected("int32 inputs", [](Call& c) { c.q.dtype = c.k.dtype = c.v.dtype = DType::kInt32; }, kType, "q", kTensorPaths);
  expect_rejected("k dtype differs", [](Call& c) { c.k.dtype = DType::kFP16; }, kType, "k", kTensorPaths);
  expect_rejected("v dtype differs", [](Call& c) { c.v.dtype = DType::kFP16; }, kType, "v", kTensorPaths);
  expect_rejected("out dtype differs from input", [](Call& c) { c.out.dtype = DType::kFP16; }, kType, "out", kRun | kOneShot);
  expect_rejected("out fp32 on a backend", [](Call& c) { c.out.dtype = DType::kFP32; }, kType, "out", kRun | kOneShot);
  expect_rejected("reference out bf16", [](Call& c) { c.out.dtype = DType::kBF16; }, kType, "out", kReference);
  expect_rejected("lse fp64 on a backend", [](Call& c) { c.lse.dtype = DType::kFP64; }, kType, "lse", kRun | kOneShot);
  expect_rejected("lse bf16", [](Call& c) { c.lse.dtype = DType::kBF16; }, kType, "lse", kTensorPaths);
}

TEST_F(Validation, Devices) {
  expect_rejected("k on cuda", [](Call& c) { c.k.device = Device::cuda(0); }, kType, "k", kTensorPaths);
  expect_rejected("v on cuda:1", [](Call& c) { c.v.device = Device::cuda(1); }, kType, "v", kTensorPaths);
  expect_rejected("out on cuda", [](Call& c) { c.out.device = Device::cuda(0); }, kType, "out", kTensorPaths);
  expect_rejected("lse on cuda", [](Call& c) { c.lse.device = Device::cuda(0); }, kType, "lse", kTensorPaths);
}

TEST_F(Validation, HeadsAndShapes) {
  // H = 3 with Hkv = 2 (q, out and lse agree with each other).
  expect_rejected("H not a multiple of Hkv", [](Call& c) { c.q.shape[1] = 3; c.out.shape[1] = 3; c.lse.shape[1] = 3; },
                  kInv, "q", kTensorPaths);
  expect_rejected("H == 0", [](Call& c) { c.q.shape[1] = 0; c.out.shape[1] = 0; c.lse.shape[1] = 0; }, kInv, "q", kTensorPaths);
  expect_rejected("Hkv == 0", [](Call& c) { c.k.shape[1] = 0; c.v.shape[1] = 0; }, kInv, "k", kTensorPaths);
  expect_rejected("k/v heads differ", [](Call& c) { c.v.shape[1] = 1; }, kInv, "v", kTensorPaths);
  expect_rejected("q/k head dim differ", [](Call& c) { c.k.shape[2] = DQK / 2; }, kInv, "k", kTensorPaths);
  expect_rejected("v/out head dim differ", [](Call& c) { c.out.shape[2] = DVO / 2; }, kInv, "out", kTensorPaths);
  expect_rejected("out tokens", [](Call& c) { c.out.shape[0] -= 1; }, kInv, "out", kTensorPaths);
  expect_rejected("out heads", [](Call& c) { c.out.shape[1] = 2; }, kInv, "out", kTensorPaths);
  expect_rejected("lse tokens", [](Call& c) { c.lse.shape[0] -= 1; }, kInv, "lse", kTensorPaths);
  expect_rejected("lse heads", [](Call& c) { c.lse.shape[1] = 2; }, kInv, "lse", kTensorPaths);
  expect_rejected("q tokens != total_q", [](Call& c) { c.q.shape[0] -= 1; }, kInv, "q", kTensorPaths);
  expect_rejected("k tokens != total_kv", [](Call& c) { c.k.shape[0] -= 1; }, kInv, "k", kTensorPaths);
  expect_rejected("v tokens != total_kv", [](Call& c) { c.v.shape[0] -= 1; }, kInv, "v", kTensorPaths);
  // indptr totals disagreeing with the tensors (one-shot / reference see both at once)
  expect_rejected("qo_indptr totals more than q", [](Call& c) { c.qo.back() += 1; }, kInv, "q", kOneShot | kReference);
}

TEST_F(Validation, Indptr) {
  expect_rejected("batch_size < 0", [](Call& c) { c.batch = -1; }, kInv, "batch_size", kBatchPaths);
  expect_rejected("qo_indptr[0] != 0", [](Call& c) { c.qo[0] = 1; }, kInv, "qo_indptr", kBatchPaths);
  expect_rejected("kv_indptr[0] != 0", [](Call& c) { c.kv[0] = -1; }, kInv, "kv_indptr", kBatchPaths);
  expect_rejected("qo_indptr decreasing", [](Call& c) { c.qo = {0, 5, 4, 14}; }, kInv, "qo_indptr", kBatchPaths);
  expect_rejected("kv_indptr decreasing", [](Call& c) { c.kv = {0, 7, 10, 8}; }, kInv, "kv_indptr", kBatchPaths);
  // The message names the index where monotonicity breaks.
  try {
    const int32_t qo[] = {0, 5, 4, 14}, kv[] = {0, 7, 10, 19};
    plan::validate_indptr(qo, kv, 3);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("qo_indptr[2]"), std::string::npos) << e.what();
  }
}

TEST_F(Validation, Options) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  expect_rejected("window_left -2", [](Call& c) { c.opt.window_left = -2; }, kInv, "options.window_left", kBatchPaths);
  for (float bad : {-1.0f, nan, inf, -inf}) {
    expect_rejected("sm_scale " + std::to_string(bad), [bad](Call& c) { c.opt.sm_scale = bad; }, kInv,
                    "options.sm_scale", kBatchPaths);
    expect_rejected("soft cap " + std::to_string(bad), [bad](Call& c) { c.opt.logits_soft_cap = bad; }, kInv,
                    "options.logits_soft_cap", kBatchPaths);
  }
}

TEST_F(Validation, ReferenceAcceptsWideInputs) {
  // fp32/fp64 inputs and an fp64 out are valid for the reference only.
  HostTensor q64(DType::kFP64, q_.shape()), k64(DType::kFP64, k_.shape()), v64(DType::kFP64, v_.shape());
  HostTensor o64(DType::kFP64, ref_out_.shape()), l64(DType::kFP64, ref_lse_.shape());
  TensorView lv = l64.view();
  EXPECT_NO_THROW(reference::ragged_prefill(q64.view(), k64.view(), v64.view(), qo_.data(), kv_.data(), 3, {},
                                            o64.view(), &lv));
}

TEST_F(Validation, ReferenceRejectsDeviceTensors) {
  // The reference reads host memory: a consistent set of CUDA-tagged views must be refused.
  const Device gpu = Device::cuda(0);
  HostTensor o64(DType::kFP64, ref_out_.shape());
  o64.fill_bytes(0xAB);
  const std::vector<uint8_t> before = o64.bytes();
  EXPECT_TRUE(throws_error([&] {
    reference::ragged_prefill(q_.view(gpu), k_.view(gpu), v_.view(gpu), qo_.data(), kv_.data(), 3,
                              {}, o64.view(gpu), nullptr);
  }, ErrorKind::kTypeMismatch, "q"));
  double row[256];
  EXPECT_TRUE(throws_error([&] {
    reference::attention_row(q_.view(gpu), k_.view(gpu), v_.view(gpu), qo_.data(), kv_.data(), 3,
                             {}, 0, 0, row, nullptr);
  }, ErrorKind::kTypeMismatch, "q"));
  EXPECT_EQ(o64.bytes(), before);
}

// A plan used with tensors it was not made for.
TEST_F(Validation, PlanMismatch) {
  RaggedPrefill p(config_);
  poison();
  {
    TensorView o = out_.view(), l = lse_.view();
    EXPECT_TRUE(throws_error([&] { p.run(q_.view(), k_.view(), v_.view(), o, &l); }, kInv, "plan"));
    expect_untouched("run before plan");
  }
  // Different total_q: planned for other lengths.
  const auto qo2 = test::make_indptr({5, 1, 9}), kv2 = test::make_indptr({7, 3, 9});
  p.plan(qo2.data(), kv2.data(), 3);
  {
    TensorView l = lse_.view();
    EXPECT_TRUE(throws_error([&] { p.run(q_.view(), k_.view(), v_.view(), out_.view(), &l); }, kInv, "q"));
    expect_untouched("different total_q");
  }
  p.plan(qo_.data(), kv_.data(), 3);
  // Different heads than the config (consistent among themselves).
  {
    HostTensor q8(DType::kBF16, {q_.shape()[0], 2 * H, DQK}), o8(DType::kBF16, {q_.shape()[0], 2 * H, DVO});
    o8.fill_bytes(kPoison);
    EXPECT_TRUE(throws_error([&] { p.run(q8.view(), k_.view(), v_.view(), o8.view()); }, kInv, "q"));
    for (uint8_t b : o8.bytes()) ASSERT_EQ(b, kPoison);
    HostTensor k1(DType::kBF16, {k_.shape()[0], 1, DQK}), v1(DType::kBF16, {k_.shape()[0], 1, DVO});
    EXPECT_TRUE(throws_error([&] { p.run(q_.view(), k1.view(), v1.view(), out_.view()); }, kInv, "k"));
    expect_untouched("different kv heads");
  }
  // Different dtype than the config.
  {
    HostTensor q16(DType::kFP16, q_.shape()), k16(DType::kFP16, k_.shape()), v16(DType::kFP16, v_.shape());
    HostTensor o16(DType::kFP16, out_.shape());
    o16.fill_bytes(kPoison);
    EXPECT_TRUE(throws_error([&] { p.run(q16.view(), k16.view(), v16.view(), o16.view()); }, kType, "q"));
    for (uint8_t b : o16.bytes()) ASSERT_EQ(b, kPoison);
  }
  // Different head dims than the config.
  {
    HostTensor q2(DType::kBF16, {q_.shape()[0], H, 2 * DQK}), k2(DType::kBF16, {k_.shape()[0], HKV, 2 * DQK});
    EXPECT_TRUE(throws_error([&] { p.run(q2.view(), k2.view(), v_.view(), out_.view()); }, kInv, "q"));
    HostTensor v2(DType::kBF16, {k_.shape()[0], HKV, 2 * DVO}), o2(DType::kBF16, {q_.shape()[0], H, 2 * DVO});
    EXPECT_TRUE(throws_error([&] { p.run(q_.view(), k_.view(), v2.view(), o2.view()); }, kInv, "v"));
    expect_untouched("different head dims");
  }
  // Tensors on a device other than the config's.
  {
    TensorView q = q_.view(Device::cuda(0)), k = k_.view(Device::cuda(0)), v = v_.view(Device::cuda(0));
    TensorView o = out_.view(Device::cuda(0));
    EXPECT_TRUE(throws_error([&] { p.run(q, k, v, o); }, kType, "q"));
    expect_untouched("different device");
  }
}

// run() compares each tensor with the config before the tensors with each other, so the
// message names the tensor that is wrong and the config field it disagrees with.
TEST_F(Validation, RunNamesTheConfigField) {
  RaggedPrefill p(config_);  // H = 4, HKV = 2, DQK = 16, DVO = 8
  p.plan(qo_.data(), kv_.data(), 3);
  auto what = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what()) + " [" + e.argument() + "]";
    }
    return "no error";
  };
  poison();
  // q with 3 heads (as a q with 15 heads against a 16/16 config): not "a multiple of kv heads".
  HostTensor q3(DType::kBF16, {q_.shape()[0], 3, DQK}), o3(DType::kBF16, {q_.shape()[0], 3, DVO});
  const std::string m1 = what([&] { p.run(q3.view(), k_.view(), v_.view(), o3.view()); });
  EXPECT_NE(m1.find("config.num_qo_heads = 4"), std::string::npos) << m1;
  EXPECT_NE(m1.find("[q]"), std::string::npos) << m1;
  // v with the qk head dim (192 instead of 128 in MLA terms), out sized from the config: v is
  // the wrong one.
  HostTensor v16(DType::kBF16, {k_.shape()[0], HKV, DQK});
  const std::string m2 = what([&] { p.run(q_.view(), k_.view(), v16.view(), out_.view()); });
  EXPECT_NE(m2.find("config.head_dim_vo = 8"), std::string::npos) << m2;
  EXPECT_NE(m2.find("[v]"), std::string::npos) << m2;
  HostTensor k1(DType::kBF16, {k_.shape()[0], 1, DQK});
  const std::string m3 = what([&] { p.run(q_.view(), k1.view(), v_.view(), out_.view()); });
  EXPECT_NE(m3.find("config.num_kv_heads = 2"), std::string::npos) << m3;
  EXPECT_NE(m3.find("[k]"), std::string::npos) << m3;
  expect_untouched("config mismatches");
}

TEST(ValidationUnit, SixteenByteAlignmentForCuda) {
  alignas(16) static uint16_t buf[4096];
  plan::IndptrTotals t;
  t.total_q = 2;
  t.total_kv = 2;
  TensorView q(buf, DType::kBF16, {2, 2, 16}), k(buf, DType::kBF16, {2, 1, 16}), v(buf, DType::kBF16, {2, 1, 8});
  TensorView o(buf, DType::kBF16, {2, 2, 8});
  plan::TensorRules cuda_rules;
  cuda_rules.need_16B_alignment = true;
  EXPECT_NO_THROW(plan::validate_prefill_tensors(q, k, v, o, nullptr, t, cuda_rules));
  TensorView q_off(buf + 1, DType::kBF16, {2, 2, 16});  // 2-byte offset
  EXPECT_TRUE(throws_error([&] { plan::validate_prefill_tensors(q_off, k, v, o, nullptr, t, cuda_rules); }, kInv, "q"));
  EXPECT_NO_THROW(plan::validate_prefill_tensors(q_off, k, v, o, nullptr, t, plan::TensorRules{}));
  TensorView k_str(buf, DType::kBF16, {2, 1, 16}, {20, 20, 1});  // 40-byte token stride
  EXPECT_TRUE(throws_error([&] { plan::validate_prefill_tensors(q, k_str, v, o, nullptr, t, cuda_rules); }, kInv, "k"));
  TensorView o_str(buf, DType::kBF16, {2, 2, 8}, {24, 12, 1});  // 24-byte head stride
  EXPECT_TRUE(throws_error([&] { plan::validate_prefill_tensors(q, k, v, o_str, nullptr, t, cuda_rules); }, kInv, "out"));
  EXPECT_NO_THROW(plan::validate_prefill_tensors(q, k_str, v, o_str, nullptr, t, plan::TensorRules{}));
}

TEST(ValidationUnit, ConfigErrors) {
  PrefillConfig c;
  c.num_qo_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim_qk = 64;
  c.head_dim_vo = 64;
  c.max_batch = 2;
  c.max_q_tokens = 16;
  c.max_kv_tokens = 16;
  EXPECT_NO_THROW(RaggedPrefill{c});
  auto bad = [&](auto mutate, ErrorKind kind, const char* arg) {
    PrefillConfig x = c;
    mutate(x);
    EXPECT_TRUE(throws_error([&] { RaggedPrefill p(x); }, kind, arg));
    EXPECT_TRUE(throws_error([&] { RaggedPrefill::workspace_sizes(x); }, kind, arg));
  };
  bad([](PrefillConfig& x) { x.num_qo_heads = 0; }, kInv, "config.num_qo_heads");
  bad([](PrefillConfig& x) { x.num_kv_heads = -1; }, kInv, "config.num_kv_heads");
  bad([](PrefillConfig& x) { x.num_kv_heads = 3; }, kInv, "config.num_kv_heads");
  bad([](PrefillConfig& x) { x.head_dim_qk = 0; }, kInv, "config.head_dim_qk");
  bad([](PrefillConfig& x) { x.head_dim_vo = 0; }, kInv, "config.head_dim_vo");
  bad([](PrefillConfig& x) { x.head_dim_qk = 513; }, ErrorKind::kUnsupported, "config.head_dim_qk");
  bad([](PrefillConfig& x) { x.head_dim_vo = 1000; }, ErrorKind::kUnsupported, "config.head_dim_vo");
  bad([](PrefillConfig& x) { x.dtype = DType::kFP32; }, kType, "config.dtype");
  bad([](PrefillConfig& x) { x.max_batch = 0; }, kInv, "config.max_batch");
  bad([](PrefillConfig& x) { x.max_q_tokens = 0; }, kInv, "config.max_q_tokens");
  bad([](PrefillConfig& x) { x.max_kv_tokens = -5; }, kInv, "config.max_kv_tokens");
  if (cuda_device_count() == 0) {
    bad([](PrefillConfig& x) { x.device = Device::cuda(0); }, ErrorKind::kUnsupported, "config.device");
  }
  // One-shot with unsupported head dims: rejected before anything is written.
  const auto qo = test::make_indptr({2}), kv = test::make_indptr({2});
  HostTensor q(DType::kBF16, {2, 1, 600}), k(DType::kBF16, {2, 1, 600}), v(DType::kBF16, {2, 1, 8});
  HostTensor o(DType::kBF16, {2, 1, 8});
  o.fill_bytes(kPoison);
  EXPECT_TRUE(throws_error([&] { ragged_prefill(q.view(), k.view(), v.view(), qo.data(), kv.data(), 1, {}, o.view()); },
                           ErrorKind::kUnsupported, "config.head_dim_qk"));
  for (uint8_t b : o.bytes()) ASSERT_EQ(b, kPoison);
}

// ---- merge_states ----

class MergeValidation : public ::testing::Test {
 protected:
  static constexpr int64_t N = 6, MH = 3, D = 8;
  void SetUp() override {
    std::mt19937_64 rng(5);
    a_ = HostTensor(DType::kBF16, {N, MH, D});
    b_ = HostTensor(DType::kBF16, {N, MH, D});
    la_ = HostTensor(DType::kFP32, {N, MH});
    lb_ = HostTensor(DType::kFP32, {N, MH});
    for (HostTensor* t : {&a_, &b_, &la_, &lb_}) t->fill_normal(rng);
    out_ = HostTensor(DType::kBF16, {N, MH, D});
    lo_ = HostTensor(DType::kFP32, {N, MH});
    ref_out_ = HostTensor(DType::kFP32, {N, MH, D});
    ref_lo_ = HostTensor(DType::kFP32, {N, MH});
  }
  struct M {
    TensorView a, la, b, lb, out, lo;
  };
  M base(bool ref) {
    return {a_.view(), la_.view(), b_.view(), lb_.view(), ref ? ref_out_.view() : out_.view(),
            ref ? ref_lo_.view() : lo_.view()};
  }
  void expect_rejected(const std::string& name, const std::function<void(M&)>& mutate, ErrorKind kind,
                       const std::string& arg, bool backend = true, bool ref = true) {
    SCOPED_TRACE(name);
    for (int which = 0; which < 2; ++which) {
      if ((which == 0 && !backend) || (which == 1 && !ref)) continue;
      M m = base(which == 1);
      mutate(m);
      for (HostTensor* t : {&out_, &lo_, &ref_out_, &ref_lo_}) t->fill_bytes(kPoison);
      if (which == 0) {
        EXPECT_TRUE(throws_error([&] { merge_states(m.a, m.la, m.b, m.lb, m.out, &m.lo); }, kind, arg)) << "merge_states";
      } else {
        EXPECT_TRUE(throws_error([&] { reference::merge_states(m.a, m.la, m.b, m.lb, m.out, &m.lo); }, kind, arg))
            << "reference::merge_states";
      }
      for (HostTensor* t : {&out_, &lo_, &ref_out_, &ref_lo_})
        for (uint8_t byte : t->bytes()) ASSERT_EQ(byte, kPoison) << "output written by a rejected merge";
    }
  }
  HostTensor a_, b_, la_, lb_, out_, lo_, ref_out_, ref_lo_;
};

TEST_F(MergeValidation, ValidCallsSucceed) {
  M m = base(false);
  EXPECT_NO_THROW(merge_states(m.a, m.la, m.b, m.lb, m.out, &m.lo));
  EXPECT_NO_THROW(merge_states(m.a, m.la, m.b, m.lb, m.out, nullptr));
  // The reference also takes fp32 out and fp64 lse.
  HostTensor l64(DType::kFP64, {N, MH});
  TensorView lv = l64.view();
  EXPECT_NO_THROW(reference::merge_states(m.a, m.la, m.b, m.lb, ref_out_.view(), &lv));
}

TEST_F(MergeValidation, BadInputs) {
  expect_rejected("out_a null", [](M& m) { m.a.data = nullptr; }, kInv, "out_a");
  expect_rejected("lse_a null", [](M& m) { m.la.data = nullptr; }, kInv, "lse_a");
  expect_rejected("out null", [](M& m) { m.out.data = nullptr; }, kInv, "out");
  expect_rejected("lse_out null", [](M& m) { m.lo.data = nullptr; }, kInv, "lse_out");
  expect_rejected("out_b 2-D", [](M& m) { m.b.ndim = 2; }, kInv, "out_b");
  expect_rejected("lse_b 3-D", [](M& m) { m.lb.ndim = 3; m.lb.shape[2] = 1; m.lb.strides[2] = 1; }, kInv, "lse_b");
  expect_rejected("out last stride", [](M& m) { m.out.strides[2] = 2; }, kInv, "out");
  expect_rejected("out_a negative stride", [](M& m) { m.a.strides[0] = -m.a.strides[0]; }, kInv, "out_a");
  expect_rejected("out_a int32", [](M& m) { m.a.dtype = m.b.dtype = m.out.dtype = DType::kInt32; }, kType, "out_a");
  expect_rejected("out_a fp64 on the backend", [](M& m) { m.a.dtype = m.b.dtype = m.out.dtype = DType::kFP64; }, kType,
                  "out_a", true, false);
  expect_rejected("out_b dtype", [](M& m) { m.b.dtype = DType::kFP16; }, kType, "out_b");
  expect_rejected("out dtype", [](M& m) { m.out.dtype = DType::kFP16; }, kType, "out", true, false);
  expect_rejected("lse_a fp64 on the backend", [](M& m) { m.la.dtype = DType::kFP64; }, kType, "lse_a", true, false);
  expect_rejected("lse_b bf16", [](M& m) { m.lb.dtype = DType::kBF16; }, kType, "lse_b");
  expect_rejected("lse_out fp16", [](M& m) { m.lo.dtype = DType::kFP16; }, kType, "lse_out");
  expect_rejected("out_b on cuda", [](M& m) { m.b.device = Device::cuda(0); }, kType, "out_b");
  expect_rejected("lse_a on cuda", [](M& m) { m.la.device = Device::cuda(0); }, kType, "lse_a");
  expect_rejected("out on cuda", [](M& m) { m.out.device = Device::cuda(0); }, kType, "out");
  expect_rejected("out_b shape", [](M& m) { m.b.shape[2] = D / 2; }, kInv, "out_b");
  expect_rejected("out shape", [](M& m) { m.out.shape[0] = N - 1; }, kInv, "out");
  expect_rejected("lse_a shape", [](M& m) { m.la.shape[1] = MH - 1; }, kInv, "lse_a");
  expect_rejected("lse_b shape", [](M& m) { m.lb.shape[0] = N + 1; }, kInv, "lse_b");
  expect_rejected("lse_out shape", [](M& m) { m.lo.shape[1] = 1; }, kInv, "lse_out");
}

TEST(MergeDispatch, CudaTensorsWithoutCuda) {
  if (built_with_cuda()) GTEST_SKIP() << "built with CUDA";
  HostTensor a(DType::kBF16, {2, 1, 8}), l(DType::kFP32, {2, 1});
  auto cu = [](const HostTensor& t) { return t.view(Device::cuda(0)); };
  EXPECT_TRUE(throws_error([&] { merge_states(cu(a), cu(l), cu(a), cu(l), cu(a), nullptr); }, ErrorKind::kUnsupported,
                           "device"));
}

}  // namespace
}  // namespace mlakit
