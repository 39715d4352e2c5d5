// A small persistent thread pool for the CPU backend: threads are created once (on first use)
// and reused by every run, so a run costs a wake-up instead of thread creation.
#pragma once

#include <cstdint>
#include <functional>

namespace mlakit {
namespace cpu {

// Threads the pool can use, the calling thread included: std::thread::hardware_concurrency()
// (at least 1).
int pool_size();

// Threads one CPU kernel run uses: MLAKIT_CPU_THREADS when it holds a number from 1 to
// pool_size(), else pool_size(). Read at every run, so a benchmark can compare thread counts in
// one process.
int run_threads();

// Calls fn(i) for every i in [0, n) exactly once, on up to max_threads threads (the caller is
// one of them; capped by pool_size() and by n). Items are handed out one at a time from an
// atomic counter, so uneven items balance themselves. Returns when all items are done; the
// first exception thrown by fn is rethrown here. Calls from several threads are serialized;
// a call made from inside fn runs inline on that thread.
void parallel_for(int64_t n, int max_threads, const std::function<void(int64_t)>& fn);

}  // namespace cpu
}  // namespace mlakit
