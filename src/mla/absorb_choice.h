// Which requests of an MLA step attend in latent space (mlakit/mla.h, absorb_max_query_len), and
// what the choice does to the rows the up-projection gathers. Host-only, plain C++.
#pragma once

#include <cstdint>

#include "mlakit/mla.h"

namespace mlakit {
namespace mla {

// The new-token counts a request may have to be absorbed. A "mixed" step, where some request
// with new tokens up-projects anyway (a prompt or a long chunk beside short requests), takes
// mixed_max_query_len instead: its absorbed launches run beside the up-projection's and must pay
// on their own, while in a step that absorbs every request they replace it.
struct AbsorbRule {
  int max_query_len = 0;        // 0: none
  int mixed_max_query_len = 0;  // <= max_query_len
};

// The rule of MlaConfig::absorb_max_query_len = max_query_len. With automatic_cuda (the CUDA
// backend's own choice, -1), a mixed step absorbs only requests whose (token, head) rows the
// latent kernel splits over the keys across SMs (latent::kSplitRowsMax: 8 new tokens at 16 heads,
// 1 at 128). A request of more rows was measured slower than up-projecting, alone beside an
// up-projection: 49 new tokens at 16 heads over 950 cached took 58 us a layer in the latent
// kernel with each 64-row block walking the whole context on one SM, against ~14 us of
// up-projection and attention saved (H100, bench/results/mla-absorb-h100). The latent plan
// splits such a lone request's keys too, by 512 (two ranges there), which halves that at best;
// the rule stands until measured again. An explicit limit is taken as it is.
AbsorbRule absorb_rule(int max_query_len, bool automatic_cuda, int num_heads);

struct AbsorbChoice {
  int requests = 0;     // absorbed
  int64_t tokens = 0;   // their new tokens
  int64_t up_context = 0;  // context tokens of the requests that up-project (the gathered context)
  int forced_left = 0;  // requests `forced` names that did not fit the capacity
};

// Request r is absorbed when its tokens still fit `capacity` together with those of the absorbed
// requests before it (request order), and either forced[r] (a sparse step's part past top-k:
// sparse_split.h) or 1 <= query_lens[r] <= limit and query_lens[r] <= context_lens[r], where
// the limit is rule.max_query_len, or rule.mixed_max_query_len when some request with new
// tokens (and not forced) fails that test at rule.max_query_len. Writes absorbed[r] (0/1) for
// every request when `absorbed` is not null. Lengths must have been checked (non-negative).
AbsorbChoice choose_absorbed(const MlaBatch& batch, const AbsorbRule& rule, int64_t capacity, uint8_t* absorbed,
                             const uint8_t* forced = nullptr);

}  // namespace mla
}  // namespace mlakit
