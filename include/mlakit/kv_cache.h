// The paged latent cache's formats, one vocabulary for every object that reads or writes the cache
// (MlaStep writes and reads all three, LatentAttention reads them), named as vLLM's kv_cache_dtype
// (docs/mla.md, docs/fp8.md).
#pragma once

#include <cstdint>

namespace mlakit {

//   kAuto      the object's 16-bit dtype (bf16 / fp16) [num_blocks, block_size, L + R]: kv_c then k_pe as given.
//   kFp8       vLLM "fp8" / "fp8_e4m3": e4m3 [num_blocks, block_size, L + R] with one float32
//              scale per layer (MlaLayer::k_scale, vLLM's layer._k_scale): value = code x scale.
//              Written as vLLM's concat_and_cache_mla writes it: code = e4m3(x / scale), x / scale
//              in float32, rounded to nearest even, saturated to +-448, NaN -> 0x7f.
//   kFp8DsMla  vLLM "fp8_ds_mla" (DeepSeek-V3.2's, FlashMLA's): 656-byte rows [num_blocks,
//              block_size, 656]: 512 e4m3 codes of kv_c, 4 float32 scales (one per 128 codes:
//              value = code x scale), then k_pe's 64 values in bf16, verbatim. Written with
//              FlashMLA's quantizer: per 128 values, scale = the smallest power of two >=
//              max(amax / 448, 1e-4) (amax in float32, NaN ignored), code = e4m3(x / scale), exact
//              division, rounded to nearest even (no value passes 448), NaN -> 0x7f. Needs
//              kv_lora_rank 512, qk_rope_head_dim 64 and dtype bf16. Reading takes any float32
//              scales (vLLM's own writer stores amax / 448 unrounded).
// FP8 caches: kv_lora_rank and qk_rope_head_dim multiples of 16; the cache tensor is e4m3 or
// uint8 (DType::kE4M3 / kUInt8, the bytes are the same). MlaStep writes its new tokens into the
// cache quantized and attends them as the cache holds them (their dequantized values), so an
// engine's later steps and its decode kernels read exactly the latents this step attended.
enum class KvCacheDtype : int32_t { kAuto = 0, kFp8 = 1, kFp8DsMla = 2 };
// "auto", "fp8", "fp8_ds_mla".
const char* kv_cache_dtype_name(KvCacheDtype t);
// LatentAttention reads all three (the FP8 ones decoded as MlaStep's gather decodes them: code x
// scale in float32, rounded to bf16; with a bf16 dtype).

}  // namespace mlakit
