// The check of a block table's row that plan() runs on every entry of a host table (latent
// attention's and the MLA step's planners), kept to a vectorized pass.
#pragma once

#include <cstdint>
#include <string>

#include "mlakit/error.h"

namespace mlakit {
namespace plan {

// Entries [0, blocks) of request r's row must name blocks of the cache, [0, num_blocks) (below
// 2^31: config checks). The row is first checked as a whole, one unsigned compare an entry
// (a negative entry is above every limit) OR-ed: a loop the compiler vectorizes with SSE2, the
// x86-64 baseline, where two signed bounds an entry stayed scalar and took a third of plan() at
// batch 128 over 4096 tokens. The offending entry is looked for only then. Throws Error
// (kInvalidArgument) naming "block_table".
inline void check_block_table_row(const int32_t* row, int64_t blocks, int64_t num_blocks, int r) {
  const uint32_t limit = static_cast<uint32_t>(num_blocks);
  uint32_t outside = 0;
  for (int64_t i = 0; i < blocks; ++i) outside |= static_cast<uint32_t>(row[i]) >= limit;
  if (outside == 0) return;
  for (int64_t i = 0; i < blocks; ++i) {
    if (static_cast<uint32_t>(row[i]) >= limit) {
      throw Error(ErrorKind::kInvalidArgument, "block_table",
                  "block_table[" + std::to_string(r) + "][" + std::to_string(i) + "] = " + std::to_string(row[i]) +
                      " is outside [0, config.num_blocks = " + std::to_string(num_blocks) + ")");
    }
  }
}

}  // namespace plan
}  // namespace mlakit
