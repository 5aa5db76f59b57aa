// LayerNorm over the last dimension, as torch.nn.LayerNorm(dim, eps) (GPT-2: eps = 1e-5):
//   μ_r = (1/dim) Σ_c x[r,c],  σ²_r = (1/dim) Σ_c (x[r,c] − μ_r)²  (biased, as PyTorch)
//   ρ_r = 1/√(σ²_r + eps),  x̂[r,c] = (x[r,c] − μ_r)·ρ_r,  y[r,c] = x̂[r,c]·gamma[c] + beta[c]
// Backward, with g[r,c] = dy[r,c]·gamma[c]:
//   dx[r,c] = ρ_r·(g[r,c] − (1/dim) Σ_c' g[r,c'] − x̂[r,c]·(1/dim) Σ_c' g[r,c']·x̂[r,c'])  (OVERWRITTEN)
//   dgamma[c] += Σ_r dy[r,c]·x̂[r,c],  dbeta[c] += Σ_r dy[r,c]  (ACCUMULATED, the plugin ABI's rule)
// Forward saves stats[r] = {μ_r, ρ_r} (2·rows floats: the layer's workspace); backward reads them
// with x instead of recomputing. x, y, dy, dx are [rows, dim]; gamma, beta, dgamma, dbeta [dim];
// row-major, contiguous, fp32. The variance is two-pass (about the mean): no E[x²] − μ²
// cancellation for rows with a large common offset. The fast path forms x − μ with μ rounded to
// fp32 (as stored for backward), which moves x̂ by at most ½ulp(μ)·ρ: the size of the rounding
// already in x itself.
// Fast path: row sums in double (fixed lane order, vectorisable), elementwise work in fp32, and
// dgamma/dbeta summed over the rows in double and added once. Reference: double throughout.
// Deterministic: fixed summation order. NaN/inf in a row make that row's outputs NaN.
#pragma once
#include <cstdint>

namespace ds::cpu {

// y[rows, dim] and stats[rows, 2] from x[rows, dim], gamma[dim], beta[dim].
void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* stats,
                       int64_t rows, int64_t dim, float eps);
void layernorm_forward_reference(const float* x, const float* gamma, const float* beta, float* y,
                                 float* stats, int64_t rows, int64_t dim, float eps);

// dx[rows, dim] (overwritten), dgamma[dim] and dbeta[dim] (accumulated) from x, gamma, the stats
// written by forward, and dy[rows, dim].
void layernorm_backward(const float* x, const float* gamma, const float* stats, const float* dy, float* dx,
                        float* dgamma, float* dbeta, int64_t rows, int64_t dim);
void layernorm_backward_reference(const float* x, const float* gamma, const float* stats, const float* dy,
                                  float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t dim);

}  // namespace ds::cpu
