// Bias over rows, as in a Linear layer: forward y[rows,cols] += bias[cols]; backward
// dbias[cols] += Σ_rows dy[rows,cols] (ACCUMULATED, matching the plugin ABI's grad_params rule).
// Row-major, contiguous. Deterministic: fixed summation order (rows in order, per column).
#pragma once
#include <cstdint>

namespace ds::cpu {

// y[r,c] += bias[c], in place.
void bias_add(float* y, const float* bias, int64_t rows, int64_t cols);
void bias_add_reference(float* y, const float* bias, int64_t rows, int64_t cols);

// y[r,c] = bias[c]: the bias written first, so a Linear's product can accumulate onto it
// (matmul with accumulate = true) instead of zeroing y and adding the bias in a second pass.
void bias_fill(float* y, const float* bias, int64_t rows, int64_t cols);

// dbias[c] += Σ_r dy[r,c]. The fast path streams dy row by row (contiguous, vectorised) into fp32
// column accumulators; the reference walks each column in double.
void bias_grad(const float* dy, float* dbias, int64_t rows, int64_t cols);
void bias_grad_reference(const float* dy, float* dbias, int64_t rows, int64_t cols);

}  // namespace ds::cpu
