// Muon's orthogonalization (K. Jordan et al., "Muon: An optimizer for hidden layers", 2024; DeepSpeed's
// zeropower_via_newtonschulz5): for x = U·S·Vᵀ, an approximation of U·Vᵀ by 5 steps of the quintic Newton–Schulz
// iteration X ← a·X + (b·A + c·A²)·X with A = X·Xᵀ, from X = x / (‖x‖_F + 1e-7), on the wide orientation (x
// transposed first when rows > cols, so that A is the smaller Gram matrix), with (a, b, c) = (3.4445, −4.7750,
// 2.0315). Each singular value σ of the normalized x becomes q⁵(σ), q(s) = a·s + b·s³ + c·s⁵: about 0.7 to 1.2 for
// σ above 1e-3, not exactly 1 (the coefficients trade that for speed). fp32 throughout (DeepSpeed iterates in
// bf16, or fp16 in its "gram" order): the products through matmul (matmul.h), so the same input gives the same
// bits on every rank.
#pragma once
#include <cstdint>

namespace ds::cpu {

constexpr int kNewtonSchulzSteps = 5;
constexpr float kNewtonSchulzA = 3.4445f, kNewtonSchulzB = -4.7750f, kNewtonSchulzC = 2.0315f;

// out[rows, cols] from x[rows, cols] (row-major; they may not overlap). An all-zero x gives zeros.
void newton_schulz(const float* x, float* out, int64_t rows, int64_t cols);

}  // namespace ds::cpu
