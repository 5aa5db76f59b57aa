// Elementwise activations. ReLU: y = max(x, 0), with NaN propagated (like PyTorch) so a
// non-finite activation still reaches the loss; its derivative at x = 0 is taken as 0.
// Contiguous buffers of n elements; y may alias x, dx may alias dy (in place is fine).
#pragma once
#include <cstdint>

namespace ds::cpu {

// y[i] = x[i] > 0 ? x[i] : 0 (NaN stays NaN).
void relu_forward(const float* x, float* y, int64_t n);
void relu_forward_reference(const float* x, float* y, int64_t n);

// dx[i] = x[i] > 0 ? dy[i] : 0, from the layer's INPUT x. Overwrites dx.
void relu_backward(const float* x, const float* dy, float* dx, int64_t n);
void relu_backward_reference(const float* x, const float* dy, float* dx, int64_t n);

}  // namespace ds::cpu
