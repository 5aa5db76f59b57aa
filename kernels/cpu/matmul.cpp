// matmul: OpenBLAS fast path and the scalar reference (see matmul.h).
#include "cpu/matmul.h"

#include <cblas.h>

#include <climits>
#include <stdexcept>
#include <string>

namespace ds::cpu {
namespace {

void check_sizes(int64_t M, int64_t N, int64_t K) {
  for (int64_t v : {M, N, K})
    if (v < 0 || v > INT_MAX)
      throw std::invalid_argument("matmul: size " + std::to_string(v) + " (M=" + std::to_string(M) +
                                  " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                                  ") is outside [0, 2^31)");
}

}  // namespace

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K, bool trans_a,
            bool trans_b, bool accumulate) {
  check_sizes(M, N, K);
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum; BLAS implementations disagree on whether they touch C here
    if (!accumulate)
      for (int64_t i = 0; i < M * N; ++i) C[i] = 0.0f;
    return;
  }
  const int lda = static_cast<int>(trans_a ? M : K);
  const int ldb = static_cast<int>(trans_b ? K : N);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), 1.0f, A, lda, B, ldb,
              accumulate ? 1.0f : 0.0f, C, static_cast<int>(N));
}

void matmul_reference(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K,
                      bool trans_a, bool trans_b, bool accumulate) {
  check_sizes(M, N, K);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const float a = trans_a ? A[k * M + i] : A[i * K + k];
        const float b = trans_b ? B[j * K + k] : B[k * N + j];
        sum += static_cast<double>(a) * static_cast<double>(b);
      }
      float& c = C[i * N + j];
      c = accumulate ? static_cast<float>(static_cast<double>(c) + sum) : static_cast<float>(sum);
    }
  }
}

}  // namespace ds::cpu
