// The rule for MlaPlanOptions::graph_rows buckets (include/mlakit/mla.h).
#include <algorithm>
#include <string>

#include "mlakit/error.h"
#include "mlakit/mla.h"

namespace mlakit {

int64_t graph_rows_bucket(int64_t rows, int64_t cap, int64_t step_above) {
  // Fine steps where a step's rows are few (a bucket of 1024 for 100 rows would multiply the
  // up-projection's work), coarser ones above, where the padding is a small share.
  constexpr int64_t kFine = 256, kFineUntil = 1024;
  if (step_above < 1) {
    throw Error(ErrorKind::kInvalidArgument, "step_above", "must be >= 1, got " + std::to_string(step_above));
  }
  if (rows < 0 || rows > cap) {
    throw Error(ErrorKind::kInvalidArgument, "rows",
                std::to_string(rows) + " is outside [0, cap = " + std::to_string(cap) + "]");
  }
  const int64_t unit = rows <= kFineUntil ? kFine : step_above;
  const int64_t up = std::max<int64_t>(unit, (rows + unit - 1) / unit * unit);
  return std::min(cap, up);
}

}  // namespace mlakit
