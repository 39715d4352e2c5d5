// The build's kernel table: the entries that the per-kernel translation units define, gathered
// from the one list in kernel_list.h. A line without its file fails at link time, not at run time.
#include "cuda/kernel_list.h"
#include "contract/prefill_launch.h"

namespace mlakit {
namespace cuda {

#define MLAKIT_DECLARE_ENTRY(arch, tag, dqk, dvo) \
  extern const KernelEntry MLAKIT_KERNEL_ENTRY_NAME(arch, tag, dqk, dvo);
MLAKIT_SM80_KERNELS(MLAKIT_DECLARE_ENTRY)
#if MLAKIT_WITH_SM90
MLAKIT_SM90_KERNELS(MLAKIT_DECLARE_ENTRY)
#endif
#undef MLAKIT_DECLARE_ENTRY

namespace {
// Addresses, not copies: constant expressions, so no cross-file initialization order matters.
#define MLAKIT_LIST_ENTRY(arch, tag, dqk, dvo) &MLAKIT_KERNEL_ENTRY_NAME(arch, tag, dqk, dvo),
const KernelEntry* const kTable[] = {
#if MLAKIT_WITH_SM90
    MLAKIT_SM90_KERNELS(MLAKIT_LIST_ENTRY)
#endif
    MLAKIT_SM80_KERNELS(MLAKIT_LIST_ENTRY)};
#undef MLAKIT_LIST_ENTRY
}  // namespace

const KernelEntry* const* kernel_table(int* count) {
  *count = static_cast<int>(sizeof(kTable) / sizeof(kTable[0]));
  return kTable;
}

}  // namespace cuda
}  // namespace mlakit
