// `mlakit-bench seed`'s correctness check: one small MLA step (two requests, cached context and
// new tokens) on the benchmark's device against the float64 reference of the whole step.
#pragma once

#include "mlakit/tensor.h"

namespace mlakit_bench {

// True when the relative error (written to *err_out; NaN outputs count as infinite) is <= 1e-2.
bool seed_self_check(int heads, int block_size, mlakit::Device dev, double* err_out);

}  // namespace mlakit_bench
