// Small device helpers so tools, tests and bindings need no CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mlakit/kv_cache.h"
#include "mlakit/tensor.h"

namespace mlakit {

// True when the library was compiled with its CUDA backends.
bool built_with_cuda();
// Number of usable CUDA devices; 0 when the library has no CUDA or no GPU/driver is present.
int cuda_device_count();
// Why CUDA is unusable here ("built without CUDA", "no CUDA device: ..."), empty when usable.
std::string cuda_unavailable_reason();
// "NVIDIA H200 (sm_90, 132 SMs)" or "cpu".
std::string device_description(Device d);

// One (dtype, head_dim_qk, head_dim_vo) a backend runs.
struct KernelShape {
  DType dtype = DType::kBF16;
  int head_dim_qk = 0;
  int head_dim_vo = 0;
};

// What one backend of this build runs.
struct BackendInfo {
  std::string name;                 // "cpu", "cuda sm80", "cuda sm90"
  std::vector<DType> dtypes;        // input dtypes it takes
  int max_head_dim = 0;             // > 0: every head dim pair up to this (the CPU backend)
  std::vector<KernelShape> shapes;  // otherwise exactly these (the CUDA kernels)
};

// What this build of the library is and what it runs on this machine.
struct LibraryInfo {
  std::string version;            // "0.1.0"
  bool built_with_cuda = false;
  // The CPU backend's path for its matrix products: "amx", "avx512bf16" or "fp32" -- the best
  // this CPU and OS grant, or a lower one forced with MLAKIT_CPU_ISA (docs/cpu-backend.md).
  std::string cpu_isa;
  std::string cpu_isa_best;       // the best available here
  // Whether this CPU and OS grant AMX tiles (AMX-TILE and AMX-BF16 in CPUID, the tile state in
  // XCR0, and Linux's arch_prctl permission): where they do, "amx" is the best path.
  bool cpu_has_amx = false;
  std::string cpu_isa_requested;  // MLAKIT_CPU_ISA as given ("" when unset)
  // The products each input dtype takes in the CPU backend: bf16, and e4m3 with its default bf16
  // output (decoded exactly into bf16), on cpu_isa; fp16 (rounded to bf16 it would lose its
  // accuracy) on "fp32", as e4m3 with an fp16 output.
  struct Products {
    DType dtype = DType::kBF16;
    std::string isa;
  };
  std::vector<Products> cpu_products;
  std::vector<BackendInfo> backends;
  // LatentAttention's backends (mlakit/latent.h): the CPU takes any kv_lora_rank and
  // qk_rope_head_dim that are multiples of 32 (up to 512 and 128); the Hopper kernel ("cuda sm90",
  // in builds with 90a) takes (512, 64) only. widths = {0, 0}: any of the CPU's. Both read the
  // 16-bit cache and the FP8 ones (kv_cache_dtypes; with bf16, fp8_ds_mla at (512, 64)).
  struct LatentBackend {
    std::string name;
    std::vector<DType> dtypes;
    int kv_lora_rank = 0, qk_rope_head_dim = 0;
    std::vector<KvCacheDtype> kv_cache_dtypes;
  };
  std::vector<LatentBackend> latent_backends;
};
// Throws mlakit::Error (kInvalidArgument, "MLAKIT_CPU_ISA") when MLAKIT_CPU_ISA names no path.
LibraryInfo library_info();

// Memory on a device. For the CPU, plain aligned host memory.
void* device_alloc(size_t bytes, Device d);
void device_free(void* p, Device d);
// Page-locked host memory (plain host memory when CUDA is unavailable).
void* pinned_alloc(size_t bytes);
void pinned_free(void* p);
// Copies bytes between any two of host/device; async on the stream for CUDA, then the caller
// synchronizes. dst_dev / src_dev say where each pointer lives.
void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes,
                Stream stream = nullptr);
void fill_bytes(void* dst, Device d, int byte_value, size_t bytes, Stream stream = nullptr);
void synchronize(Device d, Stream stream = nullptr);

// Host <-> 16-bit float conversion (round to nearest even), for tools and tests.
uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t h);
uint16_t float_to_fp16(float f);
float fp16_to_float(uint16_t h);
// Host <-> e4m3 (OCP float8 e4m3fn): exact decode; encode rounds to nearest even, saturates to
// +-448 and keeps NaN (as the GPU's cvt.rn.satfinite does).
uint8_t float_to_e4m3(float f);
float e4m3_to_float(uint8_t x);

}  // namespace mlakit
