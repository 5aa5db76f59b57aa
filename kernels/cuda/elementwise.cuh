// The small layers between the big kernels, on the GPU (formulas: kernels/cpu/bias.h,
// elementwise.h, activation.h, embedding.h): bias forward and backward, the residual addition, ReLU,
// and the token + position embedding forward and backward. Every sum runs in the CPU fast path's order (rows, then
// positions, in order, fp32), so results are the CPU's bits. Written in the CUDA subset: nvcc compiles
// it, the SIMT emulator runs it in the unit tests.
#pragma once
#include <math.h>

#include <cstdint>

#include "simt/cuda_subset.h"

namespace ds::cuda {

// Element i of a grid-stride loop over n: `for (i = first; i < n; i += stride)`.
DS_DEVICE inline int64_t grid_first() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
DS_DEVICE inline int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// y[r, c] += bias[c] over y[rows, cols]; any grid and block.
DS_KERNEL void bias_add_kernel(float* y, const float* bias, int64_t rows, int64_t cols) {
  for (int64_t i = grid_first(); i < rows * cols; i += grid_stride()) y[i] += bias[i % cols];
}

// y[r, c] = bias[c] over y[rows, cols]; any grid and block.
DS_KERNEL void bias_fill_kernel(float* y, const float* bias, int64_t rows, int64_t cols) {
  for (int64_t i = grid_first(); i < rows * cols; i += grid_stride()) y[i] = bias[i % cols];
}

// dbias[c] += Σ_r dy[r, c], the rows in order: one thread per column (consecutive threads read
// consecutive columns); any grid and block covering cols.
DS_KERNEL void bias_grad_kernel(const float* dy, float* dbias, int64_t rows, int64_t cols) {
  const int64_t c = grid_first();
  if (c >= cols) return;
  float sum = 0.0f;
  for (int64_t r = 0; r < rows; ++r) sum += dy[r * cols + c];
  dbias[c] += sum;
}

// y[i] += x[i] for i < n; any grid and block.
DS_KERNEL void add_into_kernel(float* y, const float* x, int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) y[i] += x[i];
}

// y[i] = relu(x[i]) (NaN passes through, as on the CPU) and dx[i] = x[i] > 0 ? dy[i] : 0; any grid and block.
DS_KERNEL void relu_forward_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) y[i] = x[i] <= 0.0f ? 0.0f : x[i];
}
DS_KERNEL void relu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

// out[b, t, c] = wte[tokens[b, t], c] + wpe[t, c] over out[B·T, C]; a token outside [0, vocab)
// gives its row NaN (the device cannot throw; the CPU kernel does). Any grid and block.
DS_KERNEL void embedding_forward_kernel(const int32_t* tokens, const float* wte, const float* wpe, float* out,
                                        int64_t positions, int64_t T, int64_t C, int64_t vocab) {
  for (int64_t i = grid_first(); i < positions * C; i += grid_stride()) {
    const int64_t p = i / C, c = i % C;
    const int32_t token = tokens[p];
    out[i] = token >= 0 && token < vocab ? wte[token * C + c] + wpe[(p % T) * C + c] : NAN;
  }
}

// dwpe[t, c] += dout[b, t, c] for b in order: one thread per (t, c); any grid and block covering T·C.
DS_KERNEL void embedding_backward_wpe_kernel(const float* dout, float* dwpe, int64_t B, int64_t T, int64_t C) {
  const int64_t i = grid_first();
  if (i >= T * C) return;
  float sum = dwpe[i];
  for (int64_t b = 0; b < B; ++b) sum += dout[b * T * C + i];
  dwpe[i] = sum;
}

// dwte[tokens[p], c] += dout[p, c] for the positions p in order (tokens that repeat add up in position
// order, as on the CPU); tokens outside [0, vocab) are skipped (forward made their rows NaN). Thread
// (c, g): column c (grid x) and token group g (grid y of G, embedding_token_groups): the positions
// whose token % G == g. A token's positions all fall in one group, so its sums keep the CPU's order
// and bits, while C·G threads run instead of C (one per column walked all 8192 positions of GPT-2's
// batch one dependent read-modify-write at a time). Any grid x covering C, any grid y.
DS_KERNEL void embedding_backward_wte_kernel(const int32_t* tokens, const float* dout, float* dwte, int64_t positions,
                                             int64_t C, int64_t vocab) {
  const int64_t c = grid_first(), group = blockIdx.y, groups = gridDim.y;
  if (c >= C) return;
  for (int64_t p = 0; p < positions; ++p) {
    const int32_t token = tokens[p];
    if (token >= 0 && token < vocab && token % groups == group) dwte[token * C + c] += dout[p * C + c];
  }
}

}  // namespace ds::cuda
