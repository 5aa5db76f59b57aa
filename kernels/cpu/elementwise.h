// elementwise: the residual additions between kernels, split over the kernel threads. Plain sums,
// one rounding each, so the result is the same at any thread count (the reference is `a + b`).
#pragma once
#include <cstdint>

namespace ds::cpu {

// y[i] += x[i] for i < n.
void add_into(float* y, const float* x, int64_t n);
// out[i] = a[i] + b[i] for i < n; out may alias a or b.
void add(const float* a, const float* b, float* out, int64_t n);

}  // namespace ds::cpu
