// GELU with the tanh approximation, GPT-2's activation ("gelu_new", PyTorch's
// gelu(approximate='tanh')):
//   y = 0.5·x·(1 + tanh(u)),   u = √(2/π)·(x + 0.044715·x³)
//   dy/dx = 0.5·(1 + tanh(u)) + 0.5·x·(1 − tanh²(u))·√(2/π)·(1 + 3·0.044715·x²)
// The fast path uses the exact identity 0.5·(1 + tanh(u)) = σ(2u) = 1/(1 + e^(−2u)): one fp32 exp
// instead of tanh (glibc's tanhf is ~5x slower than expf here), and no cancellation in 1 + tanh(u)
// for negative x. The reference evaluates the formula above literally, in double.
// Contiguous buffers of n elements; y may alias x, dx may alias dy (in place is fine).
// NaN propagates; gelu(+inf) = +inf, gelu(−inf) = NaN (as PyTorch: −inf·0).
#pragma once
#include <cstdint>

namespace ds::cpu {

// y[i] = gelu(x[i]).
void gelu_forward(const float* x, float* y, int64_t n);
void gelu_forward_reference(const float* x, float* y, int64_t n);

// dx[i] = dy[i]·gelu'(x[i]), from the layer's INPUT x. Overwrites dx.
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n);
void gelu_backward_reference(const float* x, const float* dy, float* dx, int64_t n);

}  // namespace ds::cpu
