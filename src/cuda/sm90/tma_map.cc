#include "cuda/sm90/tma_map.h"

#include <cuda_runtime.h>

#include <mutex>
#include <string>

#include "mlakit/error.h"

namespace mlakit {
namespace cuda {
namespace sm90 {

namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_fn() {
  static EncodeTiled fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) ==
            cudaSuccess &&
        q == cudaDriverEntryPointSuccess) {
      fn = reinterpret_cast<EncodeTiled>(p);
    }
  });
  if (fn == nullptr) {
    throw Error(ErrorKind::kRuntime, "", "the CUDA driver does not provide cuTensorMapEncodeTiled");
  }
  return fn;
}

// A stride of a dimension of extent 1 is never used to address anything, and callers may pass 0
// or any value there; TMA still wants a multiple of 16 bytes.
uint64_t usable_stride(int64_t extent, int64_t stride_elems, uint64_t elem_bytes, uint64_t fallback_bytes) {
  return extent > 1 ? static_cast<uint64_t>(stride_elems) * elem_bytes : fallback_bytes;
}

CUresult encode(CUtensorMap* map, const TmaTensor& t, int box_rows) {
  // e4m3 is copied as bytes; its 64-column boxes are 64-byte rows, so the 64-byte swizzle (the
  // 16-bit types' boxes are 128-byte rows: the 128-byte swizzle).
  const bool fp8 = t.dtype == DType::kE4M3;
  const CUtensorMapDataType type = fp8                       ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : t.dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                             : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const uint64_t es = fp8 ? 1 : 2;
  const uint64_t row_bytes = static_cast<uint64_t>(t.cols) * es;
  const uint64_t fallback = (row_bytes + 15) / 16 * 16;
  const uint64_t rows = t.rows > 0 ? static_cast<uint64_t>(t.rows) : 1;
  cuuint64_t dims[3];
  cuuint64_t strides[2];
  cuuint32_t box[3];
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  cuuint32_t rank;
  if (t.heads > 0) {
    rank = 3;
    dims[0] = static_cast<cuuint64_t>(t.cols);
    dims[1] = static_cast<cuuint64_t>(t.heads);
    dims[2] = rows;
    strides[0] = usable_stride(t.heads, t.stride_head, es, fallback);
    strides[1] = usable_stride(t.rows, t.stride_tok, es, fallback);
    box[0] = 64;
    box[1] = 1;
    box[2] = static_cast<cuuint32_t>(box_rows);
  } else {
    rank = 2;
    dims[0] = static_cast<cuuint64_t>(t.cols);
    dims[1] = rows;
    strides[0] = usable_stride(t.rows, t.stride_tok, es, fallback);
    box[0] = 64;
    box[1] = static_cast<cuuint32_t>(box_rows);
  }
  return encode_fn()(map, type, rank, const_cast<void*>(t.base), dims, strides, box, elem_strides,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, fp8 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

}  // namespace

bool try_encode_tma_map(CUtensorMap* map, const TmaTensor& t, int box_rows) {
  return encode(map, t, box_rows) == CUDA_SUCCESS;
}

void encode_tma_map(CUtensorMap* map, const TmaTensor& t, int box_rows, const char* what) {
  const CUresult r = encode(map, t, box_rows);
  if (r != CUDA_SUCCESS) {
    throw Error(ErrorKind::kRuntime, what,
                "cuTensorMapEncodeTiled failed (CUresult " + std::to_string(static_cast<int>(r)) +
                    "): TMA needs 16-byte aligned data and strides");
  }
}

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
