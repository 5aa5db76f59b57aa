// The matmul of 16-bit training: matmul.h's product with both operands rounded to bf16 or fp16 (to
// nearest, ties to even) and multiplied with fp32 accumulation into fp32 C, as DeepSpeed's bf16 and
// fp16 models multiply (torch runs their Linear layers in 16 bits) and as the CUDA backend does on
// tensor cores. Same arguments and layouts as matmul().
//
// bf16 runs on oneDNN's AMX or AVX-512-BF16 kernels where the CPU has them (~3x OpenBLAS's sgemm on
// an AMX Xeon); fp16, and bf16 on CPUs without those units, multiply the rounded values with sgemm.
// Both are exact products (8- or 11-bit significands) summed in fp32, so the paths differ only in
// the summation order. On oneDNN, deterministic at any thread count: the product is cut into blocks
// by its shape alone (as matmul does), each block one single-threaded oneDNN call, and its K loop the
// one a single call runs; on sgemm, matmul's rules (README.md: small products follow OpenBLAS's
// threads on some cores).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "amp/half.h"

namespace ds::cpu {

void matmul_half(amp::Half type, const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K,
                 bool trans_a, bool trans_b, bool accumulate);

// The reference: the operands rounded, then matmul_reference (each dot product in double).
void matmul_half_reference(amp::Half type, const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K,
                           bool trans_a, bool trans_b, bool accumulate);

// What runs bf16 products here: oneDNN's implementation name (e.g. "brg:avx512_core_amx_bf16"), or
// "sgemm on rounded operands" when this CPU has no bf16 units (AMX or AVX-512-BF16) for oneDNN to use.
std::string matmul_bf16_kernel();
// Whether oneDNN has bf16 units here to multiply on (AMX or AVX-512-BF16): without them bf16 products cost
// fp32's sgemm plus the rounding, no faster than fp32.
bool bf16_units();
// The oneDNN library loaded, e.g. "2.6.3 (OpenMP)": its CPU runtime must be OpenMP, our threads' pool.
std::string onednn_version();

// oneDNN kernels are made per product shape and kept for the next product of that shape, at most this many (when
// full the cache starts again); how many are kept now.
inline constexpr size_t kMatmulHalfKernelsKept = 256;
size_t matmul_half_kernels_cached();

}  // namespace ds::cpu
