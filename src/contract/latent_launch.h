// What one run() of latent attention hands a backend: pointers and element strides of the
// layer's tensors, which stay fixed across plans (a captured launch keeps them), and where the
// plan block and the split partials live. Everything that varies per plan is read from the
// block (contract/latent_layout.h). Plain data, for host code and kernels alike.
#pragma once

#include <cstdint>
#include <string>

#include "contract/host_device.h"
#include "mlakit/tensor.h"

namespace mlakit {
namespace latent {

// The Hopper kernel's (token, head) rows an item, the block_rows CUDA objects plan with: one
// 64-row wgmma tile (cuda/sm90/latent_common_sm90.cuh).
constexpr int kCudaBlockRows = 64;

struct LatentArgs {
  // q [T, H, L + R], or q_nope [T, H, L] with q_pe [T, H, R] (q_pe null: q holds every column).
  const void* q;
  int64_t q_stride_tok, q_stride_head;
  const void* q_pe;
  int64_t qpe_stride_tok, qpe_stride_head;
  // The paged cache [num_blocks, block_size, L + R] of the dtype, or of fp8_ds_mla's 656-byte rows
  // (cache_format 1: e4m3 codes of the latent, four float32 scales, the rope part in bf16;
  // contract/kv_cache_format.h), or of vLLM's fp8 rows (cache_format 2: L + R e4m3 codes). Strides in
  // elements of the cache tensor (bytes for the FP8 formats).
  const void* cache;
  int64_t cache_stride_block, cache_stride_row;
  int32_t cache_format;  // 0: 16-bit rows; 1: fp8_ds_mla rows; 2: fp8 rows (L + R codes) x *k_scale
  const float* k_scale;  // cache_format 2: the layer's scale (device memory on CUDA), read at run
  int64_t num_slots;  // num_blocks * block_size: the bound of kSlots indices
  int32_t block_size;  // rows a cache block (the config's page size)
  // Outputs: out [T, H, L] (dtype), lse and max_logits [T, H] float32 (null: not asked for).
  void* out;
  int64_t out_stride_tok, out_stride_head;
  float* lse;
  int64_t lse_stride_tok, lse_stride_head;
  float* max_logits;
  int64_t max_stride_tok, max_stride_head;
  // Sparse: indices int32 [T, topk] (row stride), topk_length int32 [T] (null: all topk).
  const int32_t* indices;
  int64_t indices_stride_tok;
  const int32_t* topk_length;
  int64_t topk_length_stride;
  // attn_sink float32 [H] (null: none).
  const float* attn_sink;
  int64_t sink_stride;
  // The published plan block and the split partials: O fp32 [max_partial_rows, L], then lse and
  // max logit fp32 [max_partial_rows] each.
  const void* plan;
  float* partial_out;
  float* partial_lse;
  float* partial_max;
  int num_heads;
  int kv_lora_rank;
  int rope_dim;
  DType dtype;  // of q, q_pe, the cache and out
  // FP8 caches decoded once (contract/latent_layout.h): the bf16 workspace [decoded_capacity,
  // L + R] the decode writes and the 16-bit kernel reads (null: none), and which plans a kernel
  // launch serves: 0 every plan, 1 decoded plans only, 2 the others only (the dispatch launches
  // both kernels, so a captured run replays whichever the plan then holds).
  void* decoded;
  int64_t decoded_capacity;
  int32_t run_when;
};

// Whether a kernel launched with `run_when` has the items of a plan whose header says `decoded`.
MLAKIT_HD bool latent_launch_runs(int32_t run_when, int32_t decoded) {
  return run_when == 0 || (run_when == 1) == (decoded != 0);
}

// Whether the CUDA kernel may copy whole 64-key tiles of this cache as TMA boxes: 16-bit rows in
// blocks of 64 or more laid end to end (then a tile from a multiple of 64, where every split
// starts, lies in one block, and the cache is one [num_slots, L + R] matrix of rows), with slot
// numbers in int32 (TMA's coordinates). Other caches, and partial tiles, are copied row by row.
inline bool cache_tiles_by_tma(const LatentArgs& a) {
  return a.cache_format == 0 && a.block_size >= 64 && a.num_slots <= INT32_MAX &&
         a.cache_stride_block == int64_t{a.block_size} * a.cache_stride_row;
}

}  // namespace latent

// The CUDA seam of latent attention (src/cuda/latent_dispatch.cu; src/cuda/no_cuda.cc stubs it).
namespace cuda {

// Whether CUDA device `device` has a latent-attention kernel in this build (the Hopper kernel:
// an sm_90 device and a build with 90a in MLAKIT_CUDA_ARCHS); if not, why (for the caller's error).
bool latent_kernel_available(int device, std::string* why);

// The kernel's persistent grid on `device` (its SMs): the workers a plan's items are spread over.
int latent_grid(int device);

// One run on `device`: the kernel over every work item, then the split merges, on `stream`.
void launch_latent(const latent::LatentArgs& args, int device, Stream stream);

}  // namespace cuda
}  // namespace mlakit
