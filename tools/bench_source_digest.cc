// The source digest mlakit-bench was built from (cmake/source_digest.cmake, at build time): its
// own translation unit, so a changed tree recompiles only this file.
#include "bench_source_digest.h"

#include "mlakit_source_digest.h"

namespace mlakit_bench {

const char* source_digest() { return MLAKIT_SOURCE_DIGEST; }

}  // namespace mlakit_bench
