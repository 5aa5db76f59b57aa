// Dense fp32 matrix product, the one primitive behind Linear forward and backward:
//   C[M,N] (= or +=) op(A)[M,K] · op(B)[K,N]
// All matrices are row-major and contiguous. op(X) = X, or Xᵀ when the trans flag is set, in which
// case X is STORED transposed: A as [K,M] when trans_a, B as [N,K] when trans_b. For a Linear layer
// with weight W[out,in] and input x[n,in]:
//   forward   y[n,out]  = x · Wᵀ      matmul(x, W, y,   n,   out, in,  false, true,  false)
//   backward  dx[n,in]  = dy · W      matmul(dy, W, dx, n,   in,  out, false, false, false)
//             dW[out,in] += dyᵀ · x   matmul(dy, x, dW, out, in,  n,   true,  false, true)
// `accumulate` = false overwrites C (C's old contents, even NaN, are never read); true adds into it.
// Deterministic: the same inputs, OpenBLAS core and thread count give bit-identical C (see README.md).
#pragma once
#include <cstdint>

namespace ds::cpu {

// Fast path: OpenBLAS cblas_sgemm. Throws std::invalid_argument for negative sizes or sizes past
// BLAS's 32-bit index range.
void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K, bool trans_a,
            bool trans_b, bool accumulate);

// How matmul (and matmul_half) cut a product over the threads, by its shape alone: below 2^24 multiply-adds
// one call; above, C's rows (M >= N) or columns in `blocks` blocks of `block` (a multiple of 64; the last ragged).
struct MatmulSplit {
  bool split = false, by_rows = true;
  int64_t block = 0, blocks = 1;
};
MatmulSplit matmul_split(int64_t M, int64_t N, int64_t K);
// Throws std::invalid_argument, naming `op` and the sizes, for negative sizes or sizes past BLAS's 32-bit range.
void check_matmul_sizes(const char* op, int64_t M, int64_t N, int64_t K);

// Scalar reference: plain loops, each dot product summed in double and rounded once.
void matmul_reference(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K,
                      bool trans_a, bool trans_b, bool accumulate);

}  // namespace ds::cpu
