// The MLA prefill step (DeepSeek-V2/V3 multi-head latent attention), as an engine calls it per
// layer, under one plan per engine step:
//
//   1. cache write: the new tokens' latents kv_c [T, L] and RoPE'd keys k_pe [T, R] go into the
//      paged latent cache [num_blocks, block_size, L + R] at their slots (inside the gather of
//      step 2's first launch, which takes the new rows straight from kv_c / k_pe); an FP8 cache
//      (KvCacheDtype) is written quantized and read decoded by the same gather;
//   2. up-projection of the latents with kv_b_proj [H * (Dn + Dv), L] (the checkpoint layout:
//      per head Dn rows of K "nope", then Dv rows of V) into per-head K_nope and V, written where
//      attention reads them (no copies, V never padded);
//   3. attention of the new tokens over their request's context and themselves, causal, with K in
//      two parts: per-head K_nope [rows, H, Dn] and the one shared k_pe [rows, R], broadcast over
//      heads inside the kernel (no [rows, H, Dn + R] K is ever materialized);
//   4. context (chunked prefill, prefix-cache hits): cached latents gathered through the block
//      table and up-projected like the new ones. When a step's context + new tokens fit
//      config.workspace_rows, each request's context K/V sits ahead of its new K/V and one causal
//      launch covers [context; new] (bottom-right aligned: no merge). Otherwise the new tokens run
//      first, then the context in chunks of workspace_rows rows, merged by LSE.
//   5. out [T, H, Dv] (ready for the output projection); optional lse [T, H] (float32, natural log;
//      any non-overlapping strides, as RaggedPrefill::run takes: an [H, T] buffer's transposed view).
//
// Absorbed requests (MlaConfig::absorb_max_query_len): a request with few new tokens against its
// context skips steps 2-4. Its new tokens are written into the cache by the same gather; then
// its q_nope is absorbed through W_UK (each head's Dn rows of kv_b_proj) into the latent space,
// it attends over the cached latent rows themselves (mlakit/latent.h: every head reads the same
// L + R wide rows, with V their first L columns), and the L wide result is projected through W_UV
// (each head's Dv rows) into out. The same attention in fewer FLOPs when the context is long
// against the new tokens (up-projecting the context costs 2 L H (Dn + Dv) a row; attending in
// latent space adds 2 (L + R + L) - 2 (Dn + R + Dv) a (query, key) pair and head): what engines
// run for decode, speculative verification and short extends.
//
// L = kv_lora_rank (512), Dn = qk_nope_head_dim (128), R = qk_rope_head_dim (64),
// Dv = v_head_dim (128) for DeepSeek-Coder-V2-Lite (H = 16) and DeepSeek-V3 (H = 128).
//
// plan() runs on the host from host lengths and the host block table, in microseconds, and never
// synchronizes the device; it publishes everything that varies per step (slots, gather maps,
// attention schedules) into the device workspace with stream-ordered copies (or, with
// MlaConfig::upload_in_run, leaves that copy to the step's first run()). run() only launches,
// once per layer, and reads the per-step data from the workspace, so the whole step (one layer or
// a loop of layers) can be captured into a CUDA graph and replayed after re-planning; see
// MlaPlanOptions::graph_rows. The CPU backend (Device::cpu()) runs the same step, its
// up-projection through the BLAS (OpenBLAS).
#pragma once

#include <cstdint>
#include <memory>

#include "mlakit/kv_cache.h"
#include "mlakit/prefill.h"
#include "mlakit/tensor.h"

namespace mlakit {

struct MlaConfig {
  int num_heads = 16;
  int kv_lora_rank = 512;
  int qk_nope_head_dim = 128;
  int qk_rope_head_dim = 64;
  int v_head_dim = 128;
  DType dtype = DType::kBF16;  // of q, latents, weight and out (bf16 or fp16), and of a kAuto cache
  // The paged latent cache [num_blocks, block_size, kv_lora_rank + qk_rope_head_dim] (656 bytes a
  // row for kFp8DsMla), in kv_cache_dtype's format.
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;
  int block_size = 16;
  int64_t num_blocks = 0;
  // Capacity of a step.
  int max_batch = 0;               // requests
  int64_t max_tokens = 0;          // new tokens (sum of query lengths)
  int64_t max_context_tokens = 0;  // cached tokens attended (sum of context lengths)
  // Latent and K/V rows of the device workspace for one attention launch (>= max_tokens).
  // 0 = max_tokens + max_context_tokens: every step then runs as one launch.
  int64_t workspace_rows = 0;
  Device device = Device::cpu();
  KernelPreference kernel = KernelPreference::kAuto;  // CUDA attention kernel (mlakit/prefill.h)
  KvSplitMode kv_split = KvSplitMode::kAuto;          // key-range splitting (mlakit/prefill.h)
  // Where the plan goes to the device. false: plan() enqueues the copy on its stream. true: plan()
  // only writes host memory (its one CUDA call an event wait that returns at once unless the
  // previous plan's upload has not run yet); the first run() after it enqueues the upload, and a
  // run() captured into a CUDA graph records it as the graph's first node, so each replay uploads
  // the plan in force when it runs: per step the host calls plan() and launches the graph, no
  // other CUDA call. Costs one copy of the whole plan block per step (a fixed size, so one
  // captured copy fits every plan) and makes a plan() issued while the previous step's upload is
  // still queued wait for it. run() then updates the step's upload state: call it from one thread
  // at a time (as plan()), and launch the step's graphs on one stream (plan() waits for the last
  // upload only). A captured graph reads the step's staging memory: destroy it before the step.
  bool upload_in_run = false;
  // FP8 attention: run each launch's attention on e4m3 q, K and V (DType::kE4M3, FA3-style
  // descales; mlakit/prefill.h) with out in `dtype`. Per launch, the scales come from what the
  // step reads anyway, so no pass over K or V is added:
  //   s_K    = max(C * max_h |W_K,h|, P) / 448, one for K "nope" of every head and for k_pe;
  //   s_V[h] = C * |W_V,h| / 448;
  // C = the largest L2 norm of the launch's latent rows, P = the largest |k_pe| of its rows,
  // |W_K,h| (|W_V,h|) = the largest L2 norm of head h's K (V) rows of kv_b_proj. By Cauchy-Schwarz
  // no up-projected value exceeds 448 after scaling, so nothing saturates; e4m3 keeps 3 mantissa
  // bits at every magnitude, so the headroom costs only values below ~2^-10 of the largest.
  // q is scaled per head by its largest |q| over the step's new tokens / 448. Values are rounded
  // to nearest even e4m3. The attention's error is then that of e4m3 inputs (docs/fp8.md).
  // The CPU backend runs it; CUDA refuses it (kUnsupported): there it would need the rounding
  // fused into the up-projection to pay (docs/fp8.md).
  bool fp8_attention = false;
  // Absorbed requests (top of this file): a request whose new tokens number 1 ..
  // absorb_max_query_len and no more than its context tokens attends in latent space; the others
  // up-project. -1 = the backend's measured crossover (docs/mla.md): 128 on the CPU; 64 on CUDA
  // where the latent kernel runs this config (Hopper; kv_lora_rank 512, qk_rope_head_dim 64; a
  // power-of-two block_size up to 256; an FP8 cache with bf16), else 0; and on CUDA, in a step
  // where some request up-projects anyway, only requests of at most 128 (token, head) rows
  // (8 new tokens at 16 heads, 1 at 128). 0 = never. A value > 0 on a config
  // the latent attention does not take is refused (kUnsupported naming this field), and so is
  // any with fp8_attention.
  int absorb_max_query_len = -1;
  // Capacity of a step's absorbed new tokens; once a step's absorbed requests reach it, the later
  // ones up-project instead. The workspace holds (Dn + R + 2 L + Dv) 16-bit values and one float
  // per absorbed token and head (a 16-bit cache; 688 KB a token at 128 heads, 86 KB at 16).
  // 0 = min(max_tokens, 512); max_tokens with max_topk > 0.
  int64_t max_absorbed_tokens = 0;
  // DeepSeek-V3.2 steps (MlaPlanOptions::topk): the largest top-k a plan may take; 0 = none.
  // Needs the latent attention as absorbed requests do (refused naming this field otherwise).
  int max_topk = 0;
  // FP8 caches on CUDA: the workspace rows into which the latent attention of absorbed and
  // sparse tokens decodes the cache rows of a step that reads each of them many times (V3.2
  // prefill chunks past position max_topk) once, instead of in every item that reads them
  // (LatentConfig::max_decoded_rows: 1,152 bytes a row). 0 = none.
  int64_t max_decoded_rows = 0;
};

// One engine step's requests, all host arrays. Request b has context_lens[b] tokens in the cache
// (positions [0, context_lens[b])) and query_lens[b] new tokens (positions
// [context_lens[b], context_lens[b] + query_lens[b])), whose q/kv_c/k_pe rows are consecutive in
// request order. Position p lives in cache slot block_table[b][p / block_size] * block_size +
// p % block_size.
struct MlaBatch {
  int batch_size = 0;
  const int32_t* query_lens = nullptr;
  const int32_t* context_lens = nullptr;
  const int32_t* block_table = nullptr;  // [batch_size, block_table_cols], row-major
  int block_table_cols = 0;
  // Optional [total new tokens] slots of the new tokens (vLLM's slot mapping); null = from the
  // block table. When given, the new tokens are written to these slots. Either way the new
  // tokens' slots must be distinct and none may be a context slot of a request of the step (as a
  // paged-cache allocator guarantees; not checked): run() reads context and writes new tokens in
  // one kernel.
  const int64_t* slot_mapping = nullptr;
};

struct MlaPlanOptions {
  float sm_scale = 0.0f;  // 0 => 1 / sqrt(qk_nope_head_dim + qk_rope_head_dim)
  // CUDA graphs: the gather and up-projection launches of run() are sized on the host, so a
  // graph replays correctly after re-planning only if the launches it captured cover the new
  // step. graph_rows = G > 0 sizes them for G rows (>= this step's context + new tokens, <=
  // workspace_rows; a step that needs context chunks is rejected): plan every step of a graph
  // with the same G, and allocate the layer tensors with at least as many rows as were captured.
  // 0 = sized for this step exactly (eager). graph_rows_bucket() gives a rule for G, of the rows
  // MlaStep::gathered_rows() counts (absorbed requests' contexts are not gathered).
  int64_t graph_rows = 0;
  // With graph_rows > 0, the rows the absorbed requests' launches (q copy, absorption, latent
  // attention, W_UV projection) cover, and so the most new tokens the step absorbs (requests past
  // it up-project): -1 = MlaConfig::max_absorbed_tokens; 0 = none (no such launches are
  // captured). A bucket of MlaStep::absorbed_tokens() keeps the step's choice. Ignored when eager.
  int64_t graph_absorbed_tokens = -1;
  // DeepSeek-V3.2's sparse attention (DSA), topk = K > 0 (<= config.max_topk): a new token at
  // position p >= K (it sees more than K keys) attends to the keys its row of
  // MlaLayer::indices names (the layer's indexer output: request-local positions; an entry < 0
  // or >= its request's context + new tokens is skipped, a repeated one counts each time; its
  // first topk_length[t] entries when given), in latent space, as the absorbed requests do. A
  // token at p < K sees at most K keys, all of which top-K selects: it attends densely (causal),
  // through the up-projection. A request whose new tokens straddle K is split there. The sparse
  // tokens must fit config.max_absorbed_tokens (and graph_absorbed_tokens in a graph).
  int topk = 0;
};

// A graph_rows for a step of `rows` rows (its context + new tokens) under a workspace of `cap`
// rows: rows rounded up to a multiple of 256 up to 1024 rows, then to a multiple of
// `step_above`, never above cap. Capture one graph per bucket and replay it for every step that
// rounds to it. The rounding is gather and up-projection work on rows nothing reads: at the
// seed's 100 x 999-token schedule, 1.2% of the rows at budget 8192 and 4.5% at 2048 with
// step_above 256 (6 and 5 graphs); 1024 pads 4.5% and 20% in 3 and 2 graphs and measured
// 1.0% and 2.9% slower on the H200. Throws kInvalidArgument when rows is outside [0, cap] or
// step_above < 1.
int64_t graph_rows_bucket(int64_t rows, int64_t cap, int64_t step_above = 256);

struct MlaPlanInfo {
  int batch_size = 0;
  int64_t total_q = 0;        // new tokens
  int64_t total_context = 0;  // cached tokens attended
  bool chunked = false;       // false: one causal launch over [context; new]
  int num_context_chunks = 0; // chunked: context launches (each merged by LSE)
  int64_t launch_rows = 0;    // rows the first gather/up-projection covers (graph_rows or exact)
  int64_t visible_pairs = 0;  // unmasked (query, key) pairs per head
  int absorbed_requests = 0;  // requests attended in latent space (MlaConfig::absorb_max_query_len)
  int64_t absorbed_tokens = 0;  // their new tokens
  int absorb_max_query_len = 0;  // the config's, resolved (-1 becomes the backend's crossover)
  int64_t sparse_tokens = 0;  // new tokens attending through the indices (options.topk > 0)
};

// One layer's tensors for run(). T >= the plan's new tokens (rows past them are ignored, so
// bucket-sized buffers work); strided views are fine where the last dim is contiguous.
struct MlaLayer {
  TensorView q;          // [T, H, Dn + R], RoPE applied to the last R
  TensorView kv_c;       // [T, L]
  TensorView k_pe;       // [T, R], RoPE applied
  TensorView kv_b_proj;  // [H * (Dn + Dv), L]
  TensorView kv_cache;   // [num_blocks, block_size, L + R] (656 for kFp8DsMla); new tokens written into it
  // kv_cache_dtype kFp8 only: the layer's cache scale, float32, one element ([] or [1]) on the
  // step's device (vLLM's layer._k_scale). Read when the step runs, so a captured CUDA graph
  // replays with the value the buffer holds then. Other formats take none.
  TensorView k_scale;
  // Sparse plans (MlaPlanOptions::topk = K > 0): int32 [T, K], every new token's row of the
  // layer's indexer output (only the rows of tokens at positions >= K are read), and optionally
  // int32 [T] top-k lengths. On the step's device; last dimension contiguous.
  const TensorView* indices = nullptr;
  const TensorView* topk_length = nullptr;
};

class MlaStep {
 public:
  // Bytes the object allocates: host staging (pinned for CUDA) and device workspace.
  static WorkspaceSizes workspace_sizes(const MlaConfig& config);

  // Allocates everything the step uses. On CUDA it also chooses the up-projection GEMM's
  // algorithm per class of row counts by timing cuBLASLt's candidates on its own buffers, on a
  // stream of its own that it waits for (docs/mla.md; tens of ms; MLAKIT_GEMM_TUNE=0 skips it):
  // create the step outside any graph capture, as its allocations already require.
  explicit MlaStep(const MlaConfig& config);
  ~MlaStep();
  MlaStep(const MlaStep&) = delete;
  MlaStep& operator=(const MlaStep&) = delete;

  // Plans a step on the host (no device sync). A rejected plan leaves the previous one in force.
  void plan(const MlaBatch& batch, const MlaPlanOptions& options = {}, Stream stream = nullptr);

  // One layer: cache write, up-projection, attention into out [T, H, Dv] (and lse [T, H] if
  // given). Only launches; throws (writing nothing, the cache included) if a tensor does not
  // match the config or the plan.
  void run(const MlaLayer& layer, const TensorView& out, const TensorView* lse = nullptr,
           Stream stream = nullptr) const;

  // For graph buckets (no checks; only the lengths of `batch` are read): the new tokens the step
  // absorbs (up to config.max_absorbed_tokens; with topk > 0 its sparse tokens), and the rows its
  // first gather covers, every new token and the context of each request part that up-projects,
  // when at least those tokens are absorbed. What graph_absorbed_tokens and graph_rows must reach.
  int64_t absorbed_tokens(const MlaBatch& batch, int topk = 0) const;
  int64_t gathered_rows(const MlaBatch& batch, int topk = 0) const;

  const MlaConfig& config() const;
  MlaPlanInfo info() const;
  bool planned() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

namespace reference {

// The whole step in float64, the plain way: for every request, K and V of every position
// (context latents read from `layer.kv_cache` through the block table, new ones straight from
// kv_c / k_pe) up-projected and materialized as [rows, H, Dn + R] and [rows, H, Dv], then
// softmax over every visible key (context and new tokens up to the query's own). Host tensors
// of any float dtype; out fp32/fp64 [total_q, H, Dv]; lse (optional) fp32/fp64 [total_q, H].
// Does not write the cache. FP8 caches (config.kv_cache_dtype) are decoded exactly (code x
// scale in double), and the new tokens are taken as the cache will hold them: quantized into
// the format and decoded, as the step attends them.
void mla_step(const MlaConfig& config, const MlaBatch& batch, const MlaLayer& layer,
              float sm_scale, const TensorView& out, const TensorView* lse = nullptr);

}  // namespace reference
}  // namespace mlakit
