// The MLA step on FP8 latent caches (MlaConfig::kv_cache_dtype: vLLM's fp8 with a per-layer
// scale, DeepSeek-V3.2's 656-byte fp8_ds_mla rows) on the CPU backend:
//   * the step against the float64 reference on the dequantized cache (ragged batches, context
//     0 / 1 / odd / past a chunk, block sizes 1 / 16 / 64, context chunks, bucket rows and
//     graph_rows, all-zero latents and outlier channels), outputs poisoned first;
//   * the cache bytes after a step against the formats written down in the tests
//     (util/kv_cache_spec.h), and a prefill over several steps chained through one FP8 cache;
//   * prefill and decode agree: a token's output is the same whether its latent was new in the
//     step or already in the cache (the step attends the new tokens as the cache holds them);
//   * the reference's decoding: exact (its result on an FP8 cache equals its result on a 16-bit
//     cache holding the decoded values);
//   * a NaN latent stays NaN for the queries that see it and stays in its request; FP8 attention
//     on an FP8 cache;
//   * configs and layer tensors rejected by name, nothing written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "mlakit/mlakit.h"
#include "util/kv_cache_spec.h"
#include "util/mla_case.h"
#include "util/mla_steps.h"
#include "util/test_util.h"

namespace mlakit {
namespace test {
namespace {

// kFp8 at a small latent (the reference stays fast); fp8_ds_mla has DeepSeek's 512 / 64.
MlaConfig cache_dims(KvCacheDtype f, DType dtype = DType::kBF16, int block_size = 16, int heads = 4) {
  MlaConfig c;
  c.num_heads = heads;
  c.kv_lora_rank = f == KvCacheDtype::kFp8DsMla ? 512 : 64;
  c.block_size = block_size;
  c.dtype = dtype;
  c.kv_cache_dtype = f;
  c.absorb_max_query_len = 0;  // the up-projection path; absorbed requests: test_mla_absorb.cc
  return c;
}

// Latent rows quantization must survive: new token 2 all zero (amax 0), and three channels 20x
// the rest in every new token (outliers).
void add_zero_row_and_outliers(MlaCase& m) {
  const int64_t L = m.cfg.kv_lora_rank;
  for (int64_t x = 0; x < L; ++x) m.kv_c.set(2 * L + x, 0.0);
  for (int64_t t = 0; t < m.kv_c.shape()[0]; ++t)
    for (int64_t ch : {int64_t{3}, int64_t{17}, L - 2}) m.kv_c.set(t * L + ch, 20.0 * m.kv_c.get(t * L + ch));
}

struct CacheCase {
  const char* name;
  KvCacheDtype format;
  DType dtype;
  int block_size;
  int64_t workspace_rows;  // 0: one launch; else context chunks
  int64_t graph_rows;      // > 0: launches padded to this many rows, tensors with bucket rows
  bool special;            // an all-zero latent row and outlier channels
};

class CpuMlaStepFp8Cache : public ::testing::TestWithParam<CacheCase> {};

TEST_P(CpuMlaStepFp8Cache, MatchesReferenceAndWritesTheFormat) {
  const CacheCase& p = GetParam();
  const int extra = p.graph_rows > 0 ? 11 : 0;
  // Context 0, 1, not a block multiple, past a chunk; a request with no new token.
  MlaCase m = make_mla_case(cache_dims(p.format, p.dtype, p.block_size), {5, 1, 30, 0, 17}, {0, 1, 37, 9, 130},
                            200 + p.block_size, 3, extra);
  if (p.special) add_zero_row_and_outliers(m);
  MlaConfig cfg = m.cfg;
  cfg.workspace_rows = p.workspace_rows;
  MlaPlanOptions o;
  if (p.graph_rows > 0) {
    cfg.max_tokens = 64;
    o.graph_rows = p.graph_rows;
  }
  HostTensor cache_after;
  const StepResult r = run_step(m, cfg, &cache_after, o);
  EXPECT_EQ(r.info.chunked, p.workspace_rows > 0);
  if (p.graph_rows > 0) EXPECT_EQ(r.info.launch_rows, p.graph_rows);
  expect_matches(r, m, mla_reference(m));
  // The new tokens in the format's bytes at their slots, every other byte untouched.
  EXPECT_EQ(cache_after.bytes(), expected_cache(m).bytes());
  // Rows past the step (a token bucket's): not written.
  const int64_t per_row = m.cfg.num_heads * m.cfg.v_head_dim;
  for (int64_t i = m.total_q() * per_row; i < r.out.numel(); ++i) ASSERT_TRUE(std::isnan(r.out.get(i))) << i;
}

INSTANTIATE_TEST_SUITE_P(
    Formats, CpuMlaStepFp8Cache,
    ::testing::Values(CacheCase{"fp8_bf16_bs16", KvCacheDtype::kFp8, DType::kBF16, 16, 0, 0, false},
                      CacheCase{"fp8_bf16_bs64_chunked_special", KvCacheDtype::kFp8, DType::kBF16, 64, 60, 0, true},
                      CacheCase{"fp8_fp16_bs1_special", KvCacheDtype::kFp8, DType::kFP16, 1, 0, 0, true},
                      CacheCase{"fp8_bf16_bs16_graph_rows", KvCacheDtype::kFp8, DType::kBF16, 16, 0, 240, false},
                      CacheCase{"ds_mla_bs16", KvCacheDtype::kFp8DsMla, DType::kBF16, 16, 0, 0, false},
                      CacheCase{"ds_mla_bs64_chunked_special", KvCacheDtype::kFp8DsMla, DType::kBF16, 64, 60, 0, true},
                      CacheCase{"ds_mla_bs1_graph_rows_special", KvCacheDtype::kFp8DsMla, DType::kBF16, 1, 0, 240,
                                true}),
    [](const ::testing::TestParamInfo<CacheCase>& i) { return std::string(i.param.name); });

// A prefill over three steps on one FP8 cache: each step's context is partly what the steps
// before it wrote, so a new token encoded wrongly, or attended otherwise than the cache holds it,
// fails the next step's comparison with the reference (which decodes the cache) or the bytes.
struct StepsParam {
  KvCacheDtype format;
  int block_size;
  int64_t workspace_rows;
};

class CpuMlaStepsFp8Cache : public ::testing::TestWithParam<StepsParam> {};

TEST_P(CpuMlaStepsFp8Cache, LaterStepsReadWhatEarlierStepsWrote) {
  const StepsParam p = GetParam();
  MlaConfig cfg = cache_dims(p.format, DType::kBF16, p.block_size);
  cfg.workspace_rows = p.workspace_rows;
  const std::vector<MlaCase> cases = make_prefill_steps(
      cfg, {0, 5, 70, 0}, {{37, 11, 3, 0}, {20, 0, 64, 1}, {1, 40, 9, 17}}, 61 + p.block_size, /*extra_q_rows=*/7);
  MlaStep step(cases[0].cfg);
  HostTensor cache = cases[0].cache;
  for (size_t s = 0; s < cases.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const MlaCase& m = cases[s];
    step.plan(m.batch());
    expect_matches(run_planned(step, m, cache), m, mla_reference(m));
    EXPECT_EQ(cache.bytes(), expected_cache(m).bytes()) << "cache after the step";
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, CpuMlaStepsFp8Cache,
                         ::testing::Values(StepsParam{KvCacheDtype::kFp8, 16, 0}, StepsParam{KvCacheDtype::kFp8, 64, 90},
                                           StepsParam{KvCacheDtype::kFp8DsMla, 16, 0},
                                           StepsParam{KvCacheDtype::kFp8DsMla, 64, 100}),
                         [](const ::testing::TestParamInfo<StepsParam>& i) {
                           return std::string(kv_cache_dtype_name(i.param.format)) + "_bs" +
                                  std::to_string(i.param.block_size) + "_ws" + std::to_string(i.param.workspace_rows);
                         });

TEST(CpuMlaStepsFp8Cache, TheScaleIsReadWhenTheStepRuns) {
  // kFp8's layer scale changed in its buffer between steps (one MlaStep, one scale tensor): each
  // step decodes its context and encodes its new tokens with the value the buffer holds when it
  // runs, as a replayed CUDA graph must (tests/gpu: CudaMlaGraphFp8Cache).
  std::vector<MlaCase> cases = make_prefill_steps(cache_dims(KvCacheDtype::kFp8), {0, 5, 70, 0},
                                                  {{37, 11, 3, 0}, {20, 0, 64, 1}, {1, 40, 9, 17}}, 67, 7);
  set_scale_per_step(cases, {0.0173, 0.0411, 0.0097});
  MlaStep step(cases[0].cfg);
  HostTensor cache = cases[0].cache, scale = cases[0].k_scale;
  for (size_t s = 0; s < cases.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const MlaCase& m = cases[s];
    scale.set(0, m.k_scale.get(0));
    step.plan(m.batch());
    HostTensor out(m.cfg.dtype, {m.q.shape()[0], m.cfg.num_heads, m.cfg.v_head_dim});
    HostTensor lse(DType::kFP32, {m.q.shape()[0], m.cfg.num_heads});
    out.fill_bytes(0xFF);
    lse.fill_bytes(0xFF);
    MlaLayer y = m.layer();
    y.kv_cache = cache.view();
    y.k_scale = scale.view();
    TensorView lse_v = lse.view();
    step.run(y, out.view(), &lse_v);
    expect_matches(StepResult{out, lse, step.info()}, m, mla_reference(m));
    EXPECT_EQ(cache.bytes(), expected_cache(m).bytes()) << "cache after the step";
  }
}

// Output rows [first, first + n) of a step result as doubles.
std::vector<double> out_rows(const HostTensor& out, const MlaConfig& c, int64_t first, int64_t n) {
  const int64_t w = c.num_heads * c.v_head_dim;
  std::vector<double> all = out.to_doubles();
  return std::vector<double>(all.begin() + first * w, all.begin() + (first + n) * w);
}

TEST(CpuMlaStepFp8Cache, PrefillAndDecodeAgree) {
  // An engine prefills a prompt (its tokens new in the step), then later steps read those tokens
  // from the cache. The last token's output must not depend on which happened: step A has the
  // whole prompt new; step B has all but the last token in the cache as step A wrote it and the
  // last token new. Through a 16-bit cache both are the same computation; through an FP8 cache
  // too, because the step attends its new tokens as the cache holds them (attending the raw new
  // tokens instead, the difference would be the quantization's).
  for (KvCacheDtype f : {KvCacheDtype::kFp8, KvCacheDtype::kFp8DsMla}) {
    SCOPED_TRACE(kv_cache_dtype_name(f));
    const int n = 40;
    const MlaCase a = make_mla_case(cache_dims(f), {n}, {0}, 77);
    HostTensor cache_a;
    const StepResult ra = run_step(a, a.cfg, &cache_a);
    MlaCase b = a;  // same block table, weight, scale; the prompt's first n - 1 tokens as context
    b.cfg.max_context_tokens = n;
    b.q_lens = {1};
    b.ctx_lens = {n - 1};
    b.cache = cache_a;
    const int64_t L = a.cfg.kv_lora_rank, R = a.cfg.qk_rope_head_dim, dq = a.cfg.qk_nope_head_dim + R;
    const int64_t H = a.cfg.num_heads;
    b.q = HostTensor(a.cfg.dtype, {1, H, dq});
    b.kv_c = HostTensor(a.cfg.dtype, {1, L});
    b.k_pe = HostTensor(a.cfg.dtype, {1, R});
    for (int64_t i = 0; i < H * dq; ++i) b.q.set(i, a.q.get((n - 1) * H * dq + i));
    for (int64_t i = 0; i < L; ++i) b.kv_c.set(i, a.kv_c.get((n - 1) * L + i));
    for (int64_t i = 0; i < R; ++i) b.k_pe.set(i, a.k_pe.get((n - 1) * R + i));
    b.slot_mapping = {a.slot_mapping.back()};
    HostTensor cache_b;
    const StepResult rb = run_step(b, b.cfg, &cache_b);
    EXPECT_EQ(cache_b.bytes(), cache_a.bytes()) << "the last token's row, written again the same";
    const double d = relative_error(out_rows(rb.out, b.cfg, 0, 1), out_rows(ra.out, a.cfg, n - 1, 1));
    std::printf("[   INFO   ] %s: last token, new vs cached: relative difference %.2e\n", kv_cache_dtype_name(f), d);
    EXPECT_LE(d, 2e-3);
  }
}

TEST(CpuMlaStepFp8Cache, ReferenceDecodesExactly) {
  // The reference on an FP8 cache against the reference on a 16-bit cache holding the decoded
  // latents (exact in bf16: e4m3 codes times powers of two) and new tokens already rounded
  // through the format: the same numbers, so the same float64 result, bit for bit.
  for (KvCacheDtype f : {KvCacheDtype::kFp8, KvCacheDtype::kFp8DsMla}) {
    SCOPED_TRACE(kv_cache_dtype_name(f));
    MlaCase m = make_mla_case(cache_dims(f), {9, 1, 20}, {0, 33, 17}, 91);
    if (f == KvCacheDtype::kFp8) {  // a power-of-two scale: decoded values are bf16 numbers
      m.k_scale.set(0, 1.0 / 64);
      for (int64_t r = 0; r < m.cache.shape()[0] * m.cache.shape()[1]; ++r) {
        uint8_t* row = static_cast<uint8_t*>(m.cache.data()) + r * m.cache_row_elems();
        for (int64_t i = 0; i < m.cache_row_elems(); ++i) row[i] = spec::e4m3_code(static_cast<float>(std::ldexp(std::sin(double(r * 7 + i)), 2)));
      }
    }
    MlaCase plain = m;
    plain.cfg.kv_cache_dtype = KvCacheDtype::kAuto;
    const int64_t L = m.cfg.kv_lora_rank, R = m.cfg.qk_rope_head_dim, rows = m.cache.shape()[0] * m.cache.shape()[1];
    plain.cache = HostTensor(m.cfg.dtype, {m.cache.shape()[0], m.cache.shape()[1], L + R});
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<double> v = spec::decode(f, static_cast<const uint8_t*>(m.cache.data()) + r * m.cache_row_elems(),
                                                 static_cast<int>(L), static_cast<int>(R), m.k_scale_value());
      for (int64_t x = 0; x < L + R; ++x) {
        plain.cache.set(r * (L + R) + x, v[static_cast<size_t>(x)]);
        ASSERT_EQ(plain.cache.get(r * (L + R) + x), v[static_cast<size_t>(x)]) << "not exact in bf16";
      }
    }
    for (int64_t t = 0; t < m.total_q(); ++t) {
      const std::vector<uint8_t> row = m.encoded_row(t);
      const std::vector<double> v = spec::decode(f, row.data(), static_cast<int>(L), static_cast<int>(R), m.k_scale_value());
      for (int64_t x = 0; x < L; ++x) plain.kv_c.set(t * L + x, v[static_cast<size_t>(x)]);
      for (int64_t x = 0; x < R; ++x) plain.k_pe.set(t * R + x, v[static_cast<size_t>(L + x)]);
    }
    const MlaRef a = mla_reference(m), b = mla_reference(plain);
    EXPECT_EQ(a.out.bytes(), b.out.bytes());
    EXPECT_EQ(a.lse.bytes(), b.lse.bytes());
  }
}

TEST(CpuMlaStepFp8Cache, NanInALatentIsNeverANumber) {
  // A NaN in one new token's latent: it is written as the NaN code, the queries attending that
  // token (its own and the later ones of its request) get NaN, as the reference's do, and the
  // other request's outputs stay numbers matching the reference. No format turns a NaN into a
  // number; the 16-bit cache is checked alike (the fp32 attention path wrote such rows as 0
  // until it told a NaN sum from an empty row). Earlier queries of the same request may get NaN
  // as well, through the masked part of the attention's tile (0 x NaN): not asserted either way.
  for (KvCacheDtype f : {KvCacheDtype::kAuto, KvCacheDtype::kFp8, KvCacheDtype::kFp8DsMla}) {
    SCOPED_TRACE(kv_cache_dtype_name(f));
    MlaCase m = make_mla_case(cache_dims(f), {6, 5}, {10, 3}, 97);
    const int64_t L = m.cfg.kv_lora_rank, w = m.cfg.num_heads * m.cfg.v_head_dim;
    m.kv_c.set(3 * L + 7, std::numeric_limits<double>::quiet_NaN());  // request 0's 4th new token
    HostTensor cache_after;
    const StepResult r = run_step(m, m.cfg, &cache_after);
    EXPECT_EQ(cache_after.bytes(), expected_cache(m).bytes());
    const MlaRef ref = mla_reference(m);
    const std::vector<double> got = r.out.to_doubles(), want = ref.out.to_doubles();
    for (int64_t i = 3 * w; i < 6 * w; ++i) {
      ASSERT_TRUE(std::isnan(got[static_cast<size_t>(i)])) << "output " << i << " of a query that sees the NaN";
      ASSERT_TRUE(std::isnan(want[static_cast<size_t>(i)])) << "reference " << i;
    }
    const std::vector<double> other(got.begin() + 6 * w, got.begin() + 11 * w),
        other_ref(want.begin() + 6 * w, want.begin() + 11 * w);
    EXPECT_LE(relative_error(other, other_ref), 1e-2);  // +inf on any NaN
  }
}

TEST(CpuMlaStepFp8Cache, Fp8AttentionOnAnFp8Cache) {
  // Both FP8 options at once (the CPU's FP8 attention rounds what the gather hands it, here the
  // decoded cache): within the FP8 attention's error of the reference on the same cache.
  MlaCase m = make_mla_case(cache_dims(KvCacheDtype::kFp8DsMla, DType::kBF16, 16, 8), {5, 1, 30, 0, 17},
                            {0, 1, 37, 9, 130}, 31);
  for (int64_t ws : {int64_t{0}, int64_t{60}}) {
    SCOPED_TRACE("workspace_rows " + std::to_string(ws));
    MlaConfig cfg = m.cfg;
    cfg.workspace_rows = ws;
    cfg.fp8_attention = true;
    HostTensor cache_after;
    const StepResult r = run_step(m, cfg, &cache_after);
    EXPECT_EQ(cache_after.bytes(), expected_cache(m).bytes());
    expect_matches(r, m, mla_reference(m), 6e-2, 0.15);  // test_mla_step_fp8.cc's FP8 attention bounds
    MlaConfig no_fp8_attention = cfg;
    no_fp8_attention.fp8_attention = false;  // and not the 16-bit attention's answer: FP8 ran
    EXPECT_GT(relative_error(r.out.to_doubles(), run_step(m, no_fp8_attention).out.to_doubles()), 1e-3);
  }
}

TEST(CpuMlaStepFp8Cache, BadConfigsRejectedByName) {
  MlaConfig c = cache_dims(KvCacheDtype::kFp8);
  c.num_blocks = 10;
  c.max_batch = 2;
  c.max_tokens = 100;
  MlaConfig bad = c;
  bad.kv_cache_dtype = static_cast<KvCacheDtype>(7);
  EXPECT_TRUE(throws_error([&] { MlaStep s(bad); }, ErrorKind::kInvalidArgument, "config.kv_cache_dtype"));
  bad = c;
  bad.kv_lora_rank = 72;  // a multiple of 8, not of 16
  EXPECT_TRUE(throws_error([&] { MlaStep s(bad); }, ErrorKind::kInvalidArgument, "config.kv_lora_rank"));
  bad = c;
  bad.qk_rope_head_dim = 40;
  EXPECT_TRUE(throws_error([&] { MlaStep s(bad); }, ErrorKind::kInvalidArgument, "config.qk_rope_head_dim"));
  MlaConfig ds = cache_dims(KvCacheDtype::kFp8DsMla);
  ds.num_blocks = 10;
  ds.max_batch = 2;
  ds.max_tokens = 100;
  bad = ds;
  bad.kv_lora_rank = 256;  // the 656-byte rows are DeepSeek-V3.2's 512 + 64
  EXPECT_TRUE(throws_error([&] { MlaStep s(bad); }, ErrorKind::kUnsupported, "config.kv_lora_rank"));
  bad = ds;
  bad.qk_rope_head_dim = 32;
  EXPECT_TRUE(throws_error([&] { MlaStep s(bad); }, ErrorKind::kUnsupported, "config.qk_rope_head_dim"));
  bad = ds;
  bad.dtype = DType::kFP16;  // its k_pe is bf16
  EXPECT_TRUE(throws_error([&] { MlaStep s(bad); }, ErrorKind::kUnsupported, "config.dtype"));
  EXPECT_TRUE(throws_error([&] { MlaStep::workspace_sizes(bad); }, ErrorKind::kUnsupported, "config.dtype"));
  // The FP8 cache adds no buffer: the gather decodes into the 16-bit rows it fills anyway.
  MlaConfig plain = ds;
  plain.kv_cache_dtype = KvCacheDtype::kAuto;
  EXPECT_EQ(MlaStep::workspace_sizes(ds).device_bytes, MlaStep::workspace_sizes(plain).device_bytes);
  EXPECT_EQ(MlaStep::workspace_sizes(ds).host_bytes, MlaStep::workspace_sizes(plain).host_bytes);
}

TEST(CpuMlaStepFp8Cache, BadLayerTensorsRejectedByNameNothingWritten) {
  for (KvCacheDtype f : {KvCacheDtype::kFp8, KvCacheDtype::kFp8DsMla}) {
    SCOPED_TRACE(kv_cache_dtype_name(f));
    const MlaCase m = make_mla_case(cache_dims(f), {6, 3}, {10, 0}, 29);
    MlaStep step(m.cfg);
    step.plan(m.batch());
    HostTensor cache = m.cache;
    HostTensor out(m.cfg.dtype, {m.total_q(), m.cfg.num_heads, m.cfg.v_head_dim});
    out.fill_bytes(0xAB);
    const std::vector<uint8_t> out_before = out.bytes(), cache_before = cache.bytes();
    MlaLayer y = m.layer();
    y.kv_cache = cache.view();
    auto expect_rejected = [&](const MlaLayer& bad, ErrorKind kind, const std::string& name) {
      EXPECT_TRUE(throws_error([&] { step.run(bad, out.view()); }, kind, name));
      EXPECT_EQ(out.bytes(), out_before);
      EXPECT_EQ(cache.bytes(), cache_before);
    };
    const int64_t nb = m.cfg.num_blocks, bs = m.cfg.block_size, w = m.cache_row_elems();
    // A 16-bit cache for an FP8 format; the other format's row width.
    HostTensor cache16(m.cfg.dtype, {nb, bs, m.cfg.kv_lora_rank + m.cfg.qk_rope_head_dim});
    MlaLayer bad = y;
    bad.kv_cache = cache16.view();
    expect_rejected(bad, ErrorKind::kTypeMismatch, "kv_cache");
    HostTensor wrong_width(DType::kUInt8, {nb, bs, f == KvCacheDtype::kFp8 ? 656 : 576});
    bad = y;
    bad.kv_cache = wrong_width.view();
    expect_rejected(bad, ErrorKind::kInvalidArgument, "kv_cache");
    // An e4m3 view of the same bytes is the same cache: accepted (below, by running it).
    MlaLayer as_e4m3 = y;
    as_e4m3.kv_cache.dtype = DType::kE4M3;
    HostTensor scale(DType::kFP32, {1});
    scale.set(0, 0.5);
    HostTensor scale64(DType::kFP64, {1}), scales(DType::kFP32, {2});
    if (f == KvCacheDtype::kFp8) {
      bad = y;
      bad.k_scale = TensorView();  // missing
      expect_rejected(bad, ErrorKind::kInvalidArgument, "k_scale");
      bad = y;
      bad.k_scale = scale64.view();
      expect_rejected(bad, ErrorKind::kTypeMismatch, "k_scale");
      bad = y;
      bad.k_scale = scales.view();  // two scales
      expect_rejected(bad, ErrorKind::kInvalidArgument, "k_scale");
      bad = y;
      bad.k_scale = scale.view(Device::cuda(0));  // another device
      expect_rejected(bad, ErrorKind::kTypeMismatch, "k_scale");
      MlaLayer zero_d = y;  // a 0-d scale (vLLM's layer._k_scale) is fine
      zero_d.k_scale = TensorView(m.k_scale.view().data, DType::kFP32, {});
      EXPECT_NO_THROW(step.run(zero_d, out.view()));
    } else {
      bad = y;
      bad.k_scale = scale.view();  // fp8_ds_mla keeps its scales in the rows
      expect_rejected(bad, ErrorKind::kTypeMismatch, "k_scale");
    }
    EXPECT_NO_THROW(step.run(as_e4m3, out.view()));
    EXPECT_EQ(cache.bytes(), expected_cache(m).bytes());
  }
  // The 16-bit cache takes no scale either.
  const MlaCase m = make_mla_case(cache_dims(KvCacheDtype::kAuto), {4}, {3}, 5);
  MlaStep step(m.cfg);
  step.plan(m.batch());
  HostTensor out(m.cfg.dtype, {m.total_q(), m.cfg.num_heads, m.cfg.v_head_dim});
  HostTensor scale(DType::kFP32, {1});
  MlaLayer y = m.layer();
  y.k_scale = scale.view();
  EXPECT_TRUE(throws_error([&] { step.run(y, out.view()); }, ErrorKind::kTypeMismatch, "k_scale"));
}

}  // namespace
}  // namespace test
}  // namespace mlakit
