// ALPHA_HD marks functions that compile for both the host and CUDA devices (shared by CPU and CUDA kernels,
// so both backends compute bit-identical values where that is promised, e.g. dropout masks).
#pragma once
#if defined(__CUDACC__)
#define ALPHA_HD __host__ __device__ __forceinline__
#else
#define ALPHA_HD inline
#endif
