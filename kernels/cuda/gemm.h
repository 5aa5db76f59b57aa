// Batched matrix products on the GPU for the CUDA training engine, through cuBLASLt (gemm_cublaslt.cpp;
// cuBLASLt is opened at run time, so binaries start without it), the CPU reference on emulated devices
// (gemm_emulated.cpp: device memory is host memory) or the stub without CUDA (no_cuda.cpp: throws
// "built without CUDA"). Matrices are row-major like kernels/cpu/matmul.h; accumulation is fp32 (never
// TF32: fp32 inputs give the CPU's results within fp32 rounding). Asynchronous on `stream`
// (cudaStream_t as void*; nullptr = the default stream). GEMMs of one device share one cuBLASLt
// workspace: calls on different streams of one device must not run at the same time.
#pragma once
#include <cstdint>

#include "amp/half.h"

namespace ds::cuda {

enum class GemmType { F32, BF16, F16 };  // BF16, F16: raw uint16_t bit patterns (amp/half.h)
inline GemmType gemm_type(amp::Half type) { return type == amp::Half::BF16 ? GemmType::BF16 : GemmType::F16; }
inline amp::Half half_type(GemmType type) { return type == GemmType::BF16 ? amp::Half::BF16 : amp::Half::F16; }  // not F32

// c[batch][m, n] = alpha · op(a)[m, k] · op(b)[k, n] + beta · c, for each batch entry i:
//   a + i·stride_a: [m, k], or stored [k, m] when trans_a   (ab_type)
//   b + i·stride_b: [k, n], or stored [n, k] when trans_b   (ab_type)
//   c + i·stride_c: [m, n]                                  (c_type: F32, or ab_type when 16-bit)
// Strides are in elements; 0 broadcasts a or b to every entry. beta = 0 never reads c (NaN there is
// overwritten). k = 0 gives c = beta · c; m, n or batch = 0 does nothing.
// Throws std::invalid_argument for sizes or batch outside [0, 2^31), negative strides, a 16-bit c of
// another type than the inputs, or batch entries of c that overlap (batch > 1 and stride_c < m·n); std::runtime_error naming
// cuBLASLt's or CUDA's status and the shape when the GPU library fails (or cannot be loaded).
void gemm(const void* a, const void* b, void* c, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b,
          GemmType ab_type, GemmType c_type, float alpha, float beta, int64_t batch, int64_t stride_a,
          int64_t stride_b, int64_t stride_c, void* stream);

}  // namespace ds::cuda
