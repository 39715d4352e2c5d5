// The MLA step's own device work besides attention (which goes through core/backend.h):
// writing new latents into the paged cache and gathering latent rows out of it. One
// implementation per device (mla_ops_cpu.cc; mla_ops_cuda.cc over src/cuda/mla). Row counts
// that vary per step are read from the plan in the device workspace (`count`), so launches
// captured in a CUDA graph follow a new plan; `rows` (the launch size) is fixed by the caller.
#pragma once

#include <cstdint>
#include <memory>

#include "mlakit/tensor.h"

namespace mlakit {
namespace mla {

// The paged latent cache [num_blocks, block_size, width]: slot s is row s % block_size of
// block s / block_size.
struct CacheView {
  void* data;
  int64_t block_stride, row_stride;  // elements
  int block_size;
  int width;  // latent + rope
};

// cache[slots[r]] = [kv_c[r], k_pe[r]] for r < *count (rows >= *count untouched).
struct CacheWriteArgs {
  CacheView cache;
  const void* kv_c;
  int64_t kv_c_stride;
  const void* k_pe;
  int64_t k_pe_stride;
  int latent_dim, rope_dim;
  const int32_t* slots;  // workspace
  const int32_t* count;  // workspace
  int64_t rows;          // launch size, >= any *count it will see
  DType dtype;
};

// out[r] = cache[map[r]] for r < *count; zeros for *count <= r < rows.
struct GatherArgs {
  CacheView cache;
  const int32_t* map;    // workspace
  const int32_t* count;  // workspace
  int64_t rows;
  void* out;
  int64_t out_stride;
  DType dtype;
};

class MlaOps {
 public:
  virtual ~MlaOps() = default;
  virtual void write_cache(const CacheWriteArgs& a, Stream stream) const = 0;
  virtual void gather(const GatherArgs& a, Stream stream) const = 0;
};

std::unique_ptr<MlaOps> make_ops(Device device);

}  // namespace mla
}  // namespace mlakit
