#include "mla/absorb_choice.h"

namespace mlakit {
namespace mla {

AbsorbChoice choose_absorbed(const MlaBatch& b, int max_query_len, int64_t capacity, uint8_t* absorbed,
                             const uint8_t* forced) {
  AbsorbChoice c;
  for (int r = 0; r < b.batch_size; ++r) {
    const int64_t q = b.query_lens[r], ctx = b.context_lens[r];
    const bool must = forced != nullptr && forced[r] != 0;
    const bool fits = c.tokens + q <= capacity;
    if (must && !fits) ++c.forced_left;
    // Few new tokens against a context at least as long: the context's up-projection is what
    // latent space saves (with no context, absorbing q costs as much as up-projecting its rows).
    const bool take = fits && (must || (q >= 1 && q <= max_query_len && q <= ctx));
    if (absorbed) absorbed[r] = take ? 1 : 0;
    if (take) {
      ++c.requests;
      c.tokens += q;
    } else {
      c.up_context += ctx;
    }
  }
  return c;
}

}  // namespace mla
}  // namespace mlakit
