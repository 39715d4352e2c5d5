// Which requests of an MLA step attend in latent space (mlakit/mla.h, absorb_max_query_len), and
// what the choice does to the rows the up-projection gathers. Host-only, plain C++.
#pragma once

#include <cstdint>

#include "mlakit/mla.h"

namespace mlakit {
namespace mla {

struct AbsorbChoice {
  int requests = 0;     // absorbed
  int64_t tokens = 0;   // their new tokens
  int64_t up_context = 0;  // context tokens of the requests that up-project (the gathered context)
  int forced_left = 0;  // requests `forced` names that did not fit the capacity
};

// Request r is absorbed when its tokens still fit `capacity` together with those of the absorbed
// requests before it (request order), and either forced[r] (a sparse step's part past top-k:
// sparse_split.h) or 1 <= query_lens[r] <= max_query_len and query_lens[r] <= context_lens[r].
// Writes absorbed[r] (0/1) for every request when `absorbed` is not null. Lengths must have
// been checked (non-negative).
AbsorbChoice choose_absorbed(const MlaBatch& batch, int max_query_len, int64_t capacity, uint8_t* absorbed,
                             const uint8_t* forced = nullptr);

}  // namespace mla
}  // namespace mlakit
