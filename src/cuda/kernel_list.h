// Every CUDA prefill kernel the build holds, one line each: X(arch, dtype tag, Dqk, Dvo).
// Each line has one translation unit, src/cuda/<arch>/prefill_<arch>_d<Dqk>x<Dvo>_<tag>.cu, that
// instantiates it (one per file keeps builds parallel and short) and defines its table entry;
// src/cuda/kernel_table.cu gathers the entries. Adding a kernel = one line here + one such file.
#pragma once

#define MLAKIT_SM80_KERNELS(X) \
  X(sm80, bf16, 192, 128)      \
  X(sm80, fp16, 192, 128)      \
  X(sm80, bf16, 128, 128)      \
  X(sm80, fp16, 128, 128)      \
  X(sm80, bf16, 64, 64)        \
  X(sm80, fp16, 64, 64)

// Built only when MLAKIT_CUDA_ARCHS includes 90a (MLAKIT_WITH_SM90 = 1). e4m3: FP8 inputs, bf16
// output (dtype_traits.cuh's MLAKIT_OUT_e4m3).
#define MLAKIT_SM90_KERNELS(X) \
  X(sm90, bf16, 192, 128)      \
  X(sm90, fp16, 192, 128)      \
  X(sm90, bf16, 128, 128)      \
  X(sm90, fp16, 128, 128)      \
  X(sm90, e4m3, 192, 128)      \
  X(sm90, e4m3, 128, 128)

// Name of the entry object a kernel's translation unit defines.
#define MLAKIT_KERNEL_ENTRY_NAME(arch, tag, dqk, dvo) kernel_entry_##arch##_##tag##_##dqk##x##dvo
