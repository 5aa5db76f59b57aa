// LayerNorm on the GPU (the formulas and the fp32/double reference: kernels/cpu/layernorm.h).
// Forward, one block per row: the mean, then the variance about it (two passes, as the CPU kernel),
// each a block_sum in fp32 with a fixed order; y = (x − μ)·ρ·gamma + beta, stats[row] = {μ, ρ}.
// Backward: dx one block per row; dgamma and dbeta in tiles of columns and chunks of rows, then the chunks' sums.
// Written in the CUDA subset: nvcc compiles it, and the SIMT emulator runs it in the unit tests.
#pragma once
#include <cstdint>

#include "cuda/block_reduce.cuh"

namespace ds::cuda {

// grid.x = rows, block.x = a multiple of 32 (at most 1024); x, y [rows, dim], gamma, beta [dim],
// stats [rows, 2].
DS_KERNEL void layernorm_forward_kernel(const float* x, const float* gamma, const float* beta, float* y,
                                        float* stats, int64_t dim, float eps) {
  DS_SHARED(float, scratch, 32);
  const int64_t row = blockIdx.x;
  const float* xr = x + row * dim;
  float* yr = y + row * dim;
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) sum += xr[c];
  const float mean = block_sum(sum, scratch) / static_cast<float>(dim);
  float squares = 0.0f;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    const float d = xr[c] - mean;
    squares += d * d;
  }
  const float rstd = 1.0f / sqrtf(block_sum(squares, scratch) / static_cast<float>(dim) + eps);
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) yr[c] = (xr[c] - mean) * rstd * gamma[c] + beta[c];
  if (threadIdx.x == 0) {
    stats[2 * row] = mean;
    stats[2 * row + 1] = rstd;
  }
}

// dx for one row per block (overwritten): with g = dy·gamma and x̂ = (x − μ)·ρ from the forward's
// stats, dx = ρ·(g − mean(g) − x̂·mean(g·x̂)), the two means block sums. grid.x = rows, block.x a
// multiple of 32.
DS_KERNEL void layernorm_backward_dx_kernel(const float* x, const float* gamma, const float* stats, const float* dy,
                                            float* dx, int64_t dim) {
  DS_SHARED(float, scratch, 32);
  const int64_t row = blockIdx.x;
  const float *xr = x + row * dim, *dyr = dy + row * dim;
  const float mean = stats[2 * row], rstd = stats[2 * row + 1];
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    const float g = dyr[c] * gamma[c];
    sum_g += g;
    sum_gx += g * ((xr[c] - mean) * rstd);
  }
  const float mean_g = block_sum(sum_g, scratch) / static_cast<float>(dim);
  const float mean_gx = block_sum(sum_gx, scratch) / static_cast<float>(dim);
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    const float xhat = (xr[c] - mean) * rstd;
    dx[row * dim + c] = rstd * (dyr[c] * gamma[c] - mean_g - xhat * mean_gx);
  }
}

// dgamma[c] += Σ_r dy[r,c]·x̂[r,c] and dbeta[c] += Σ_r dy[r,c] (accumulated, the plugin ABI's rule), in
// two kernels whose order of additions is fixed, so the result does not depend on the order threads or
// blocks run in:
//   partials: block (x, y) of kLnParamColumns x kLnParamLanes threads takes columns [32x, 32x + 32) of
//             the y-th of gridDim.y consecutive row ranges (chunks); lane l sums the range's rows l,
//             l + kLnParamLanes, ... in order (a warp reads consecutive columns of a row), the lanes' sums
//             are added in lane order into partial[0][y][c] (dgamma's) and partial[1][y][c] (dbeta's);
//   totals:   one thread per column adds the chunks' partials in chunk order into dgamma and dbeta.
// Grids: (ln_param_blocks(dim), ln_param_chunks(rows)) and column_blocks(dim) (launch_shape.h). (One thread
// per column down all the rows, the first form, took 3.8 ms at GPT-2's 8192 x 768 on an H100; one block
// per 32 columns down all the rows, the second, 0.23 ms: 24 blocks, too few loads in flight.)
constexpr unsigned kLnParamColumns = 32, kLnParamLanes = 16;
DS_KERNEL void layernorm_backward_partials_kernel(const float* x, const float* stats, const float* dy, float* partial,
                                                  int64_t rows, int64_t dim) {
  DS_SHARED(float, sums, 2 * kLnParamLanes * kLnParamColumns);  // [2][lane][column]
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kLnParamColumns + threadIdx.x;
  const int64_t chunk = blockIdx.y, chunks = gridDim.y, per_chunk = (rows + chunks - 1) / chunks;
  const int64_t begin = chunk * per_chunk, end = begin + per_chunk < rows ? begin + per_chunk : rows;
  float sum_gamma = 0.0f, sum_beta = 0.0f;
  if (c < dim)
    for (int64_t r = begin + threadIdx.y; r < end; r += kLnParamLanes) {
      const float d = dy[r * dim + c];
      sum_gamma += d * ((x[r * dim + c] - stats[2 * r]) * stats[2 * r + 1]);
      sum_beta += d;
    }
  sums[threadIdx.y * kLnParamColumns + threadIdx.x] = sum_gamma;
  sums[(kLnParamLanes + threadIdx.y) * kLnParamColumns + threadIdx.x] = sum_beta;
  __syncthreads();
  if (threadIdx.y != 0 || c >= dim) return;
  float total_gamma = 0.0f, total_beta = 0.0f;
  for (unsigned lane = 0; lane < kLnParamLanes; ++lane) {
    total_gamma += sums[lane * kLnParamColumns + threadIdx.x];
    total_beta += sums[(kLnParamLanes + lane) * kLnParamColumns + threadIdx.x];
  }
  partial[chunk * dim + c] = total_gamma;
  partial[(chunks + chunk) * dim + c] = total_beta;
}

// partial [2, chunks, dim] from the kernel above; any grid and block covering dim.
DS_KERNEL void layernorm_backward_totals_kernel(const float* partial, float* dgamma, float* dbeta, int64_t chunks,
                                                int64_t dim) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= dim) return;
  float total_gamma = 0.0f, total_beta = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) {
    total_gamma += partial[k * dim + c];
    total_beta += partial[(chunks + k) * dim + c];
  }
  dgamma[c] += total_gamma;
  dbeta[c] += total_beta;
}

}  // namespace ds::cuda
