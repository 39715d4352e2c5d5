// MLAKIT_HD marks small functions that host C++ (planner, CPU backend) and CUDA kernels share.
// Plain C++ translation units see an ordinary inline function; nvcc compiles it for both sides.
#pragma once

#if defined(__CUDACC__)
#define MLAKIT_HD __host__ __device__ __forceinline__
#else
#define MLAKIT_HD inline
#endif
