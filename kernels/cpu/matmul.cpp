// matmul: OpenBLAS fast path and the scalar reference (see matmul.h).
#include "cpu/matmul.h"

#include <cblas.h>

#include "cpu/parallel.h"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

namespace ds::cpu {
namespace {

// Products of at least this many multiply-adds are cut by matmul itself into blocks of C's longer
// side, one single-threaded sgemm each, spread over the threads. The blocks depend on the shape
// only, never on the thread count, so any number of threads gives the bits of one: OpenBLAS's
// kernels may sum a block's elements differently from the whole product's (they do on AMD Zen).
constexpr double kSplitMNK = 1 << 24;
constexpr int64_t kSplitAlign = 64;  // block sizes are multiples of this (of the kernels' unrolls)
constexpr int64_t kSplitBlocks = 16;  // at most this many blocks: the shared operand is packed per block

}  // namespace

MatmulSplit matmul_split(int64_t M, int64_t N, int64_t K) {
  MatmulSplit s;
  s.split = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K) >= kSplitMNK;
  s.by_rows = !s.split || M >= N;
  if (!s.split) return s;
  const int64_t side = s.by_rows ? M : N;
  const int64_t per_block = (side + kSplitBlocks - 1) / kSplitBlocks;
  s.block = (per_block + kSplitAlign - 1) / kSplitAlign * kSplitAlign;
  s.blocks = (side + s.block - 1) / s.block;
  return s;
}

void check_matmul_sizes(const char* op, int64_t M, int64_t N, int64_t K) {
  for (int64_t v : {M, N, K})
    if (v < 0 || v > INT_MAX)
      throw std::invalid_argument(std::string(op) + ": size " + std::to_string(v) + " (M=" + std::to_string(M) +
                                  " N=" + std::to_string(N) + " K=" + std::to_string(K) + ") is outside [0, 2^31)");
}

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K, bool trans_a,
            bool trans_b, bool accumulate) {
  check_matmul_sizes("matmul", M, N, K);
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum; BLAS implementations disagree on whether they touch C here
    if (!accumulate)
      for (int64_t i = 0; i < M * N; ++i) C[i] = 0.0f;
    return;
  }
  const int lda = static_cast<int>(trans_a ? M : K);
  const int ldb = static_cast<int>(trans_b ? K : N);
  const float beta = accumulate ? 1.0f : 0.0f;
  // C[rows r0..r1) or C[columns c0..c1), one sgemm each (single-threaded inside our OpenMP region;
  // outside one, OpenBLAS threads a small product itself unless it is tiny).
  auto rows = [&](int64_t r0, int64_t r1) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                static_cast<int>(r1 - r0), static_cast<int>(N), static_cast<int>(K), 1.0f,
                trans_a ? A + r0 : A + r0 * K, lda, B, ldb, beta, C + r0 * N, static_cast<int>(N));
  };
  auto columns = [&](int64_t c0, int64_t c1) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                static_cast<int>(M), static_cast<int>(c1 - c0), static_cast<int>(K), 1.0f, A, lda,
                trans_b ? B + c0 * K : B + c0, ldb, beta, C + c0, static_cast<int>(N));
  };
  const MatmulSplit split = matmul_split(M, N, K);
  if (!split.split) {
    rows(0, M);  // small products: OpenBLAS's own threading
    return;
  }
  // Large products: independent sgemms rather than OpenBLAS's threaded one, which synchronises its
  // threads with sched_yield loops that on a small machine cost more than packing the shared
  // operand once per block.
  const int64_t side = split.by_rows ? M : N;
  parallel_for(split.blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t lo = b * split.block, hi = std::min(side, lo + split.block);
      if (split.by_rows)
        rows(lo, hi);
      else
        columns(lo, hi);
    }
  });
}

void matmul_reference(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K,
                      bool trans_a, bool trans_b, bool accumulate) {
  check_matmul_sizes("matmul", M, N, K);
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
