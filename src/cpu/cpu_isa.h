// Which instruction set carries the CPU backend's matrix products: the best path this build has
// and the CPU and OS grant (AMX tiles, else AVX-512 BF16, else the fp32 path), or a lower one
// forced by MLAKIT_CPU_ISA=amx|avx512bf16|fp32 (tests, comparisons). Read at every run.
//
// kAmx is available where the CPU has AMX-TILE and AMX-BF16 (and AVX-512 BF16, which its softmax
// uses), XCR0 enables the tile state and Linux grants it (arch_prctl); cpu_has_amx() says that.
// A build with MLAKIT_CPU_AMX_EMULATE (tests only) emulates the tiles in plain C++: there kAmx is
// available wherever AVX-512 BF16 is, and cpu_has_amx() still reports the hardware.
#pragma once

namespace mlakit {
namespace cpu {

enum class CpuIsa : int { kFp32 = 0, kAvx512Bf16 = 1, kAmx = 2 };

// "fp32", "avx512bf16", "amx".
const char* cpu_isa_name(CpuIsa isa);

// Whether this build has the path and this CPU (CPUID) and the OS (XCR0) let the process use it.
// kFp32 is always available.
bool cpu_isa_available(CpuIsa isa);

// Whether the CPU has AMX-BF16 and the OS grants the process the tile data (on Linux asked for
// with arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) on the first call).
bool cpu_has_amx();

// The best available path.
CpuIsa cpu_isa_best();

// The path the backend runs: cpu_isa_best(), or MLAKIT_CPU_ISA's when that is set. A forced path
// the machine lacks falls to the best available one below it, with a note on stderr (once).
// Throws mlakit::Error (kInvalidArgument, "MLAKIT_CPU_ISA") for a value that names no path.
CpuIsa cpu_isa_in_use();

// MLAKIT_CPU_ISA's path when set and valid; false when unset. Throws as cpu_isa_in_use().
bool cpu_isa_requested(CpuIsa* isa);

// Whether this build emulates the AMX tiles (MLAKIT_CPU_AMX_EMULATE; tests only).
bool cpu_amx_emulated();

}  // namespace cpu
}  // namespace mlakit
