// Latent-space ("absorbed") MLA attention: what a DeepSeek engine runs for decode, speculative
// (MTP) verification and short extends, and for DeepSeek-V3.2's sparse attention (DSA). q's
// "nope" part is absorbed through W_UK into the latent space, so every query head attends over
// the same cached latent rows (multi-query attention with one shared KV head):
//
//   q           [T, H, L + R]   q_nope·W_UK (L = kv_lora_rank, 512) | q_pe with RoPE (R = 64);
//               or q_nope [T, H, L] and q_pe [T, H, R] as two tensors
//   kv_cache    [num_blocks, block_size, L + R]   MlaStep's paged latent cache: kv_c | k_pe; or,
//               with config.kv_cache_dtype = kFp8DsMla, DeepSeek-V3.2's [num_blocks, block_size,
//               656] uint8 / e4m3 rows (mlakit/kv_cache.h), or with kFp8 vLLM's [num_blocks,
//               block_size, L + R] e4m3 codes and one scale a layer (layer.k_scale): each row
//               decoded into bf16 as the keys are read (code x scale in float32, rounded once: the
//               values MlaStep's gather and its up-projection see), with no copy of the cache
//   out         [T, H, L]       softmax(sm_scale · q K^T) V with K = the cache rows (L + R wide)
//               and V = their first L columns; the engine up-projects it with W_UV
//   lse         [T, H]          optional, float32, natural log (any non-overlapping strides:
//                               an [H, T] buffer through a transposed view)
//   max_logits  [T, H]          optional, float32: the largest sm_scale · q·k of each row
//
// Requests: request b has query_lens[b] new tokens, whose q rows are consecutive (in request
// order), and kv_lens[b] tokens in the cache, the new ones included (FlashMLA's cache_seqlens,
// FlashInfer's kv_len: the engine writes the new tokens' latents into the cache, e.g. with
// MlaStep or its own cache write, before this runs). Position p of request b lives in cache slot
// block_table[b][p / block_size] * block_size + p % block_size.
//
// Dense mode (options.topk = 0): new token i (0-based) of request b attends to positions
// [0, kv_lens[b] - query_lens[b] + i] with `causal` (bottom-right aligned, as FlashMLA and
// FlashInfer), to all kv_lens[b] positions without.
//
// Sparse mode (options.topk = K > 0, DSA): query token t attends to the keys its row of
// `indices` [T, K] (int32) names, its first topk_length[t] entries when topk_length is given.
// An entry names a key by its request-local position (options.indices = kPositions: what the
// indexer produces; turned into a cache slot through the block table here) or by its global
// cache slot (kSlots: block * block_size + offset, FlashMLA's convention). An entry is used when
// it is >= 0 and below the bound (kPositions: the request's kv_len; kSlots: num_blocks *
// block_size); -1 and everything else outside is skipped (FlashMLA skips -1 and >= s_kv alike).
// A repeated entry counts once per occurrence, as in FlashMLA. `causal` does not apply: the
// indexer's choice is taken as it is.
//
// attn_sink (optional, float32 [H], FlashMLA's): out is scaled by exp(lse) / (exp(lse) +
// exp(sink[h])); lse and max_logits are not changed.
//
// A row that sees no key (kv_len 0, causal rows ahead of the cache, no valid index) gets
// out = 0, lse = -inf and max_logits = -inf (mlakit's convention, as RaggedPrefill; FlashMLA
// writes lse = +inf there).
//
// plan() runs on the host from host lengths and the host block table, or the engine's device
// block table (LatentBatch::device_block_table), in microseconds with no device sync, and
// publishes the plan (lengths, the pages of every request unless the table is the device's, the
// work items and split merges) into a fixed-capacity workspace; run() reads what varies per
// plan from there, so a captured run() replays correctly after re-planning (as RaggedPrefill;
// MlaStep's upload_in_run is offered too). Work: rows of (new token x head) in blocks of up to 64, so every cache row
// is read once for all the heads (and tokens) of a block; requests with at most 128 such rows
// split their keys into ranges merged by LSE in a fixed order. A request's splits depend only on
// its own lengths: its result is the same bits alone or in any batch, run after run.
//
// Backends (docs/latent-attention.md): the CPU, every width LatentConfig takes (multi-threaded;
// AVX-512 BF16 products where present, fp32 elsewhere and for fp16); and CUDA on Hopper (compute
// capability 9.0, in builds whose MLAKIT_CUDA_ARCHS include 90a), one kernel for DeepSeek's
// widths: kv_lora_rank 512 with qk_rope_head_dim 64, bf16 or fp16, any page size, dense and
// sparse, on the 16-bit, fp8_ds_mla or fp8 cache (the FP8 ones with bf16, on both backends). On
// CUDA, other widths are refused at construction (kUnsupported naming config.kv_lora_rank), and
// so are other GPUs and builds without the kernel (kUnsupported naming config.device), each
// message pointing to Device::cpu().
#pragma once

#include <cstdint>
#include <memory>

#include "mlakit/kv_cache.h"
#include "mlakit/prefill.h"
#include "mlakit/tensor.h"

namespace mlakit {

struct LatentConfig {
  int num_heads = 16;         // query heads H, 1 .. 128
  int kv_lora_rank = 512;     // L: latent, V and out width (multiple of 32, <= 512; CUDA: 512)
  int qk_rope_head_dim = 64;  // R (multiple of 32, <= 128; CUDA: 64)
  DType dtype = DType::kBF16; // of q, q_pe, out and a kAuto cache: bf16 or fp16
  // kAuto (the cache in `dtype`); kFp8DsMla (656-byte rows; needs L 512, R 64 and bf16); kFp8
  // (vLLM's: L + R e4m3 codes a row and one float32 scale a layer, LatentLayer::k_scale; bf16).
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;
  // The paged cache [num_blocks, block_size, L + R]: block_size a power of two, 1 .. 256.
  int block_size = 64;
  int64_t num_blocks = 0;
  // Capacity of a plan.
  int max_batch = 0;          // requests
  int64_t max_q_tokens = 0;   // new tokens (sum of query_lens)
  int64_t max_kv_tokens = 0;  // cached tokens (sum of kv_lens; dense and kPositions sparse plans)
  int max_topk = 0;           // sparse plans: the largest options.topk; 0 = dense plans only
  // Keys per split of a short request's key range (a multiple of 64; 0 = the backend's choice:
  // 1024 on the CPU; 512 on CUDA, where a decode batch of 128 requests over 4,096 keys at 16
  // heads then makes about 8 waves of items on an H100's 132 SMs). Part of what a result's bits
  // depend on: objects with different values may differ in the last bits.
  int kv_split_size = 0;
  // FP8 caches on CUDA: rows (1,152 bytes each) of a bf16 workspace into which run() decodes a
  // plan's cached rows once, when its items read each row many times (extends, DSA prefill:
  // every 64 heads of every new token read them), before the kernel attends them as bf16; each
  // request's rows take a multiple of 64. Other plans (decode, MTP; plans whose requests' rows
  // exceed it) decode each row in every item that reads it. 0: never. The CPU ignores it.
  int64_t max_decoded_rows = 0;
  Device device = Device::cpu();
  // Where the plan goes to the device, as MlaConfig::upload_in_run (mlakit/mla.h): false, plan()
  // copies it on its stream; true, the first run() after a plan() uploads it (a captured run()
  // records the upload as its graph's first node).
  bool upload_in_run = false;
};

// One plan's requests, all host arrays.
struct LatentBatch {
  int batch_size = 0;
  const int32_t* query_lens = nullptr;   // [batch_size] new tokens per request
  const int32_t* kv_lens = nullptr;      // [batch_size] cached tokens per request, new ones included
  const int32_t* block_table = nullptr;  // [batch_size, block_table_cols], row-major
  int block_table_cols = 0;
  // Instead of block_table: the same table in memory of the config's device (an engine's own
  // device block table, as FlashMLA and FlashInfer take it), row stride block_table_cols.
  // plan() then neither reads nor copies it: run() reads the pages from it, so the table must
  // hold the step's values whenever a run of the plan (or a graph replaying one) executes. Its
  // entries are not checked (an entry outside [0, num_blocks) reads outside the cache, as in
  // FlashMLA and FlashInfer); the rest of plan() is the same (kv_lens are host values). Saves
  // the check and the copy of every entry: what plan() costs most at large batches.
  const int32_t* device_block_table = nullptr;
  // kSlots sparse plans read neither kv_lens nor a block table: all may be null there.
};

// How a sparse plan's indices name keys (see the top of this file).
enum class LatentIndices : int32_t { kPositions = 0, kSlots = 1 };

// Where a plan on an FP8 cache decodes its rows (LatentConfig::max_decoded_rows): kAuto, once
// into the workspace when each row is read by at least 3 items on average and the rows fit, else
// in the kernel; kOnce whenever they fit; kInKernel never. kSlots plans always decode in the kernel.
enum class LatentFp8Decode : int32_t { kAuto = 0, kOnce = 1, kInKernel = 2 };

struct LatentPlanOptions {
  // 0 => 1 / sqrt(kv_lora_rank + qk_rope_head_dim), FlashMLA's default. DeepSeek checkpoints
  // need the non-absorbed scale, qk_head_dim^-0.5 (x mscale^2 with YaRN), as MlaStep takes it:
  // absorption changes no logit.
  float sm_scale = 0.0f;
  bool causal = true;   // dense plans: bottom-right causal among the new tokens
  int topk = 0;         // 0: dense; > 0: sparse, indices [T, topk] (<= config.max_topk)
  LatentIndices indices = LatentIndices::kPositions;  // sparse plans
  // true: every request splits its keys by config.kv_split_size alone, so a result is the same
  // bits alone or in any batch (what a batch-invariant engine needs). false: a batch that fills
  // the GPU on its own splits long requests less (fewer partial rows to write and merge), so the
  // last bits of a result may depend on the batch it is planned with; the same plan gives the
  // same bits every run. The CPU backend always splits by kv_split_size.
  bool batch_invariant = false;
  LatentFp8Decode fp8_decode = LatentFp8Decode::kAuto;  // FP8 caches on CUDA
};

// What the last plan() decided, for tools and tests.
struct LatentPlanInfo {
  int batch_size = 0;
  int64_t total_q = 0;       // new tokens
  int64_t total_kv = 0;      // cached tokens attended (sum of kv_lens; 0 for kSlots plans)
  bool sparse = false;
  int topk = 0;
  int num_items = 0;         // work items: (block of <= block_rows rows, key range)
  int num_merges = 0;        // row blocks whose split key ranges are merged
  int64_t partial_rows = 0;  // rows of fp32 partial results the splits write
  int block_rows = 0;        // (token, head) rows per item at most
  int kv_split_size = 0;     // keys per split in this plan (config.kv_split_size, or a multiple)
  // Dense: visible (query, key) pairs per head; sparse: total_q * topk (entries, before -1 and
  // topk_length, which only run() sees).
  int64_t visible_pairs = 0;
  int64_t decoded_rows = 0;  // rows decoded once into the workspace by each run() (0: in the kernel)
  const char* cpu_isa = "";  // the CPU's products for the config's dtype ("avx512bf16", "fp32")
};

// One layer's tensors for run(), on the config's device. T >= the plan's new tokens (rows past
// them are neither read into a result nor written). Last dimensions contiguous, other strides
// free (16-byte aligned rows on CUDA).
struct LatentLayer {
  TensorView q;                              // [T, H, L + R]; [T, H, L] (q_nope) when q_pe is given
  const TensorView* q_pe = nullptr;          // [T, H, R], RoPE applied
  TensorView kv_cache;                       // [num_blocks, block_size, L + R]
  const TensorView* indices = nullptr;       // sparse plans: int32 [T, topk]
  const TensorView* topk_length = nullptr;   // sparse plans, optional: int32 [T]
  const TensorView* attn_sink = nullptr;     // optional: float32 [H]
  const TensorView* max_logits = nullptr;    // optional output: float32 [T, H], any strides
  // kv_cache_dtype kFp8 only: the layer's cache scale, float32, one element ([] or [1]) on the
  // config's device (vLLM's layer._k_scale, MlaLayer::k_scale). Read when run() executes, so a
  // captured CUDA graph replays with the value the buffer holds then.
  const TensorView* k_scale = nullptr;
};

class LatentAttention {
 public:
  // Bytes the object allocates: host staging and the device workspace (plan block + the split
  // partial results + on CUDA with an FP8 cache, max_decoded_rows bf16 rows).
  static WorkspaceSizes workspace_sizes(const LatentConfig& config);

  explicit LatentAttention(const LatentConfig& config);
  ~LatentAttention();
  LatentAttention(const LatentAttention&) = delete;
  LatentAttention& operator=(const LatentAttention&) = delete;

  // Plans on the host (no device sync). A rejected plan leaves the previous one in force.
  void plan(const LatentBatch& batch, const LatentPlanOptions& options = {}, Stream stream = nullptr);

  // One layer: out [T, H, L] (the config's dtype) and, if given, lse [T, H] (float32). Only
  // launches; throws, writing nothing, if a tensor does not match the config or the plan.
  void run(const LatentLayer& layer, const TensorView& out, const TensorView* lse = nullptr,
           Stream stream = nullptr) const;

  const LatentConfig& config() const;
  const LatentPlanOptions& options() const;  // of the current plan
  LatentPlanInfo info() const;
  bool planned() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

namespace reference {

// Latent attention in float64, the plain way: per query row, the keys it sees (dense: its
// visible positions through the block table; sparse: its valid index entries, repeats
// included), a two-pass softmax, the sink. Host tensors of any float dtype (the cache of the
// config's dtype); out fp32/fp64 [total_q, H, L]; lse and layer.max_logits fp32/fp64 [total_q, H].
void latent_attention(const LatentConfig& config, const LatentBatch& batch, const LatentPlanOptions& options,
                      const LatentLayer& layer, const TensorView& out, const TensorView* lse = nullptr);

}  // namespace reference
}  // namespace mlakit
