// Tuning constants of the sm90 kernel, measured on the H200 (docs/performance.md has the table of
// ideas measured, including the variants that lost and were removed).
#pragma once

namespace mlakit {
namespace cuda {
namespace sm90 {

// At a block's first item the second consumer warpgroup sleeps this long (ns) before its first S,
// so the two warpgroups' first S products queue one after the other instead of interleaving and
// the first warpgroup's softmax starts while the second's S runs: +2-3% on ragged batches of
// ~1000-token sequences. After the first item the warpgroups stay apart by themselves (they do
// not meet at an item's end), so later items do not sleep (sleeping at every item measured
// 0.2-0.8% slower).
constexpr unsigned kDephaseNs = 150;

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
