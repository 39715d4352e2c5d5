#include "mla/absorb_choice.h"

namespace mlakit {
namespace mla {

AbsorbChoice choose_absorbed(const MlaBatch& b, int max_query_len, int64_t capacity, uint8_t* absorbed) {
  AbsorbChoice c;
  for (int r = 0; r < b.batch_size; ++r) {
    const int64_t q = b.query_lens[r], ctx = b.context_lens[r];
    // Few new tokens against a context at least as long: the context's up-projection is what
    // latent space saves (with no context, absorbing q costs as much as up-projecting its rows).
    const bool take = q >= 1 && q <= max_query_len && q <= ctx && c.tokens + q <= capacity;
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
