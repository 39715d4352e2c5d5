// The paged latent cache's formats, one vocabulary for every object that reads the cache
// (LatentAttention now; named as vLLM's kv_cache_dtype).
#pragma once

#include <cstdint>

namespace mlakit {

//   kAuto      the object's 16-bit dtype (bf16 / fp16): [num_blocks, block_size, L + R] rows of
//              kv_c (L values) then k_pe (R values), as MlaStep writes them.
//   kFp8       vLLM "fp8": e4m3 [num_blocks, block_size, L + R] with one float32 scale per layer.
//   kFp8DsMla  vLLM "fp8_ds_mla" (DeepSeek-V3.2's, FlashMLA's): 656-byte rows of 512 e4m3 codes,
//              4 float32 scales (one per 128 codes) and 64 bf16 RoPE values.
// LatentAttention reads kAuto caches; the FP8 formats are refused (kUnsupported) until its
// readers for them exist.
enum class KvCacheDtype : int32_t { kAuto = 0, kFp8 = 1, kFp8DsMla = 2 };

}  // namespace mlakit
