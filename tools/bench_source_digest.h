// The digest of the source tree this mlakit-bench was built from: bench/run_record.py's
// source_digest, computed at build time, recorded in --json beside git_commit (a device machine's
// copy of the repository can name an older commit than the files that were built).
#pragma once

namespace mlakit_bench {

const char* source_digest();

}  // namespace mlakit_bench
