// Which instruction set carries the CPU backend's matrix products, chosen once per process:
// the best the CPU and the OS grant (AMX tiles, else AVX-512 BF16, else the fp32 path), or a
// lower one forced by MLAKIT_CPU_ISA=amx|avx512bf16|fp32 (tests, comparisons).
#pragma once

namespace mlakit {
namespace cpu {

enum class CpuIsa : int { kFp32 = 0, kAvx512Bf16 = 1, kAmx = 2 };

// "fp32", "avx512bf16", "amx".
const char* cpu_isa_name(CpuIsa isa);

// Whether this CPU (CPUID) and the OS (XCR0; for AMX also the Linux tile-data permission,
// asked for here on the first call) let the process use `isa`. kFp32 is always available.
bool cpu_isa_available(CpuIsa isa);

// The best available path.
CpuIsa cpu_isa_best();

// The path the backend runs: cpu_isa_best(), or MLAKIT_CPU_ISA's when that is set. A forced path
// the machine lacks falls to the best available one below it, with a note on stderr (once).
// Throws mlakit::Error (kInvalidArgument, "MLAKIT_CPU_ISA") for a value that names no path.
CpuIsa cpu_isa_in_use();

// MLAKIT_CPU_ISA's path when set and valid; false when unset. Throws as cpu_isa_in_use().
bool cpu_isa_requested(CpuIsa* isa);

}  // namespace cpu
}  // namespace mlakit
