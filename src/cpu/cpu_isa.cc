// CPUID / XCR0 checks and the Linux AMX permission request behind cpu_isa.h.
#include "cpu/cpu_isa.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "mlakit/error.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#define MLAKIT_CPU_X86 1
#endif
#if defined(MLAKIT_CPU_X86) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace mlakit {
namespace cpu {
namespace {

#ifdef MLAKIT_CPU_X86
struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned sub) {
  Regs r;
  if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) r = Regs{};
  return r;
}

unsigned long long xcr0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

bool has_osxsave() { return (cpuid(1, 0).c >> 27) & 1u; }

bool detect_avx512bf16() {
  if (!has_osxsave()) return false;
  // The OS saves the opmask and all 32 ZMM registers (XCR0 bits 1, 2, 5, 6, 7).
  if ((xcr0() & 0xE6u) != 0xE6u) return false;
  const Regs l7 = cpuid(7, 0);
  const bool f = (l7.b >> 16) & 1u, dq = (l7.b >> 17) & 1u, bw = (l7.b >> 30) & 1u,
             vl = (l7.b >> 31) & 1u;
  const bool bf16 = (cpuid(7, 1).a >> 5) & 1u;
  return f && dq && bw && vl && bf16;
}

// Linux keeps AMX tile data off until a process asks (arch_prctl ARCH_REQ_XCOMP_PERM); the first
// tile instruction faults otherwise. Asked once; the grant holds for every thread of the process.
bool request_amx_permission() {
#ifdef __linux__
  constexpr int kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  unsigned long long bitmask = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &bitmask) != 0) return false;
  return (bitmask >> kXfeatureXtiledata) & 1u;
#else
  return false;
#endif
}

bool detect_amx() {
  if (!detect_avx512bf16()) return false;  // every AMX-BF16 CPU has it; the softmax would use it
  const Regs l7 = cpuid(7, 0);
  const bool tile = (l7.d >> 24) & 1u, bf16 = (l7.d >> 22) & 1u;
  if (!tile || !bf16) return false;
  // XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA): the OS supports the tile state.
  if (((xcr0() >> 17) & 3u) != 3u) return false;
  return request_amx_permission();
}
#else
bool detect_avx512bf16() { return false; }
bool detect_amx() { return false; }
#endif

struct Detected {
  bool avx512bf16, amx;
};

const Detected& detected() {
  static const Detected d{detect_avx512bf16(), detect_amx()};
  return d;
}

bool parse_isa(const char* s, CpuIsa* isa) {
  for (CpuIsa i : {CpuIsa::kFp32, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
    if (std::strcmp(s, cpu_isa_name(i)) == 0) {
      *isa = i;
      return true;
    }
  }
  return false;
}

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAmx: return "amx";
    case CpuIsa::kAvx512Bf16: return "avx512bf16";
    case CpuIsa::kFp32: return "fp32";
  }
  return "?";
}

bool cpu_isa_available(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAmx: return cpu_amx_emulated() ? detected().avx512bf16 : detected().amx;
    case CpuIsa::kAvx512Bf16: return detected().avx512bf16;
    case CpuIsa::kFp32: return true;
  }
  return false;
}

bool cpu_has_amx() { return detected().amx; }

bool cpu_amx_emulated() {
#ifdef MLAKIT_CPU_AMX_EMULATE
  return true;
#else
  return false;
#endif
}

CpuIsa cpu_isa_best() {
  if (cpu_isa_available(CpuIsa::kAmx)) return CpuIsa::kAmx;
  if (cpu_isa_available(CpuIsa::kAvx512Bf16)) return CpuIsa::kAvx512Bf16;
  return CpuIsa::kFp32;
}

bool cpu_isa_requested(CpuIsa* isa) {
  const char* env = std::getenv("MLAKIT_CPU_ISA");
  if (env == nullptr || env[0] == '\0') return false;
  if (!parse_isa(env, isa)) {
    throw Error(ErrorKind::kInvalidArgument, "MLAKIT_CPU_ISA",
                std::string("'") + env + "' names no CPU path; use amx, avx512bf16 or fp32");
  }
  return true;
}

CpuIsa cpu_isa_in_use() {
  CpuIsa want;
  if (!cpu_isa_requested(&want)) return cpu_isa_best();
  CpuIsa use = want;
  while (!cpu_isa_available(use)) use = static_cast<CpuIsa>(static_cast<int>(use) - 1);
  if (use != want) {
    static std::once_flag noted;
    std::call_once(noted, [&] {
      std::fprintf(stderr, "mlakit: MLAKIT_CPU_ISA=%s: %s; the CPU backend runs %s\n", cpu_isa_name(want),
                   "this CPU or OS lacks it", cpu_isa_name(use));
    });
  }
  return use;
}

}  // namespace cpu
}  // namespace mlakit
