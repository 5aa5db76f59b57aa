// DS_HD: a function compiled for both host and device under nvcc (`__host__ __device__`), a plain
// function elsewhere. For the element and row bodies shared by CPU loops and CUDA kernels.
#pragma once
#if defined(__CUDACC__)
#define DS_HD __host__ __device__
#else
#define DS_HD
#endif
