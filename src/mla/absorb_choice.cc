#include "mla/absorb_choice.h"

#include <algorithm>

#include "contract/latent_layout.h"

namespace mlakit {
namespace mla {

namespace {
// Few new tokens against a context at least as long: the context's up-projection is what
// latent space saves (with no context, absorbing q costs as much as up-projecting its rows).
bool qualifies(int64_t q, int64_t ctx, int limit) { return q >= 1 && q <= limit && q <= ctx; }
}  // namespace

AbsorbRule absorb_rule(int max_query_len, bool automatic_cuda, int num_heads) {
  AbsorbRule r{max_query_len, max_query_len};
  if (automatic_cuda && num_heads > 0) {
    r.mixed_max_query_len = std::min(max_query_len, std::max(1, latent::kSplitRowsMax / num_heads));
  }
  return r;
}

AbsorbChoice choose_absorbed(const MlaBatch& b, const AbsorbRule& rule, int64_t capacity, uint8_t* absorbed,
                             const uint8_t* forced) {
  AbsorbChoice c;
  bool mixed = false;
  for (int r = 0; r < b.batch_size && !mixed && rule.mixed_max_query_len < rule.max_query_len; ++r) {
    const bool must = forced != nullptr && forced[r] != 0;
    mixed = !must && b.query_lens[r] >= 1 && !qualifies(b.query_lens[r], b.context_lens[r], rule.max_query_len);
  }
  const int limit = mixed ? rule.mixed_max_query_len : rule.max_query_len;
  for (int r = 0; r < b.batch_size; ++r) {
    const int64_t q = b.query_lens[r], ctx = b.context_lens[r];
    const bool must = forced != nullptr && forced[r] != 0;
    const bool fits = c.tokens + q <= capacity;
    if (must && !fits) ++c.forced_left;
    const bool take = fits && (must || qualifies(q, ctx, limit));
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
