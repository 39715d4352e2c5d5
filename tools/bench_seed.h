// `mlakit-bench seed`: the seed's serving workload through mlakit's MLA step. N requests of P
// prompt tokens (N = 1 and 100, P = 999 by default) scheduled as a chunked-prefill engine does
// (tools/seed_schedule.h; token budgets 8192 and 2048), every step planned once and run through
// all layers (27 for DeepSeek-Coder-V2-Lite) eagerly and as a replayed CUDA graph. Reports per
// step and per request the step's wall and device time (planning included), the host's share,
// and the time-to-first-token share the attention steps account for, laid out like the seed's
// "Serving Benchmark Result" block.
#pragma once

namespace mlakit_bench {

// argv[0] is "seed". Returns the process exit code (0 ok, 1 check or run failure, 2 usage).
int run_seed(int argc, char** argv);

}  // namespace mlakit_bench
