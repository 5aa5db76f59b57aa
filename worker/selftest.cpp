// The CUDA kernels against the CPU references on one device (see selftest.h).
#include "selftest.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "amp/half.h"
#include "backend/backend.h"
#include "amp/storage.h"
#include "cpu/activation.h"
#include "cpu/attention.h"
#include "cpu/bias.h"
#include "cpu/convert.h"
#include "cpu/cross_entropy.h"
#include "cpu/elementwise.h"
#include "cpu/embedding.h"
#include "cpu/gelu.h"
#include "cpu/layernorm.h"
#include "cpu/matmul.h"
#include "cpu/sgd_lamb.h"
#include "cuda/gemm.h"
#include "cuda/launch.h"
#include "cuda/launch_shape.h"
#include "comm/nccl_group.h"
#include "optim/optimizers.h"
#include "device_array.h"
#include "selftest_multi.h"
#include "selftest_nccl.h"
#include "selftest_training.h"

namespace ds {
namespace {

// The training check's bound: every step's loss, and its gradients (relative to the largest), within
// this relative error of the CPU's from the same state (an H100 measured 1.2e-6 on the gradients).
constexpr double kTrainingBound = 1e-5;

// One check's outcome: the worst element's error and its share of the bound atol + rtol·|ref| (at
// most 1 passes), or for a bit-for-bit check the elements that differ (none passes).
struct Check {
  std::string kernel, shape;
  bool bits = false;
  double worst_error = 0, worst_share = 0;
  size_t differing = 0;
  double seconds = 0;
  std::string error;  // a CUDA error that stopped the check
  std::string note;   // what else the check measured, for the report
  bool passed() const { return error.empty() && worst_share <= 1.0 && differing == 0; }
};

void compare(Check& c, std::span<const float> got, std::span<const float> ref, double atol, double rtol) {
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    const double share = std::isnan(err) ? INFINITY : err / (atol + rtol * std::fabs(ref[i]));
    c.worst_error = std::max(c.worst_error, std::isnan(err) ? INFINITY : err);
    c.worst_share = std::max(c.worst_share, share);
  }
}

// As compare, against a bound of each element's own.
void compare_bounded(Check& c, std::span<const float> got, std::span<const float> ref, std::span<const double> bound) {
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    const double share = std::isnan(err) ? INFINITY : err == 0 ? 0.0 : err / bound[i];
    c.worst_error = std::max(c.worst_error, std::isnan(err) ? INFINITY : err);
    c.worst_share = std::max(c.worst_share, share);
  }
}

std::vector<float> random_floats(std::mt19937& rng, size_t n, float mean, float sd) {
  std::normal_distribution<float> normal(mean, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

void layernorm_forward(Check& c, int64_t rows, int64_t dim, std::mt19937& rng) {
  const auto x = random_floats(rng, rows * dim, 3.0f, 2.0f), gamma = random_floats(rng, dim, 1.0f, 0.1f),
             beta = random_floats(rng, dim, 0.0f, 0.1f);
  std::vector<float> ref(x.size()), ref_stats(2 * rows);
  cpu::layernorm_forward_reference(x.data(), gamma.data(), beta.data(), ref.data(), ref_stats.data(), rows, dim, 1e-5f);
  DeviceArray<float> dx(x), dgamma(gamma), dbeta(beta), dy(ref), dstats(ref_stats);
  cuda::layernorm_forward(dx.get(), dgamma.get(), dbeta.get(), dy.get(), dstats.get(), rows, dim, 1e-5f, nullptr);
  compare(c, dy.to_host(), ref, 2e-5, 2e-5);
  compare(c, dstats.to_host(), ref_stats, 1e-5, 1e-5);
}

void layernorm_backward(Check& c, int64_t rows, int64_t dim, std::mt19937& rng) {
  const auto x = random_floats(rng, rows * dim, 2.0f, 1.0f), gamma = random_floats(rng, dim, 1.0f, 0.2f),
             dy = random_floats(rng, rows * dim, 0.0f, 1.0f);
  std::vector<float> y(x.size()), stats(2 * rows);
  const std::vector<float> beta(dim, 0.0f);
  cpu::layernorm_forward_reference(x.data(), gamma.data(), beta.data(), y.data(), stats.data(), rows, dim, 1e-5f);
  std::vector<float> ref_dx(x.size()), ref_dgamma(dim, 0.5f), ref_dbeta(dim, -0.5f);  // accumulated onto
  DeviceArray<float> d_x(x), d_gamma(gamma), d_stats(stats), d_dy(dy), d_dx(ref_dx), d_dgamma(ref_dgamma),
      d_dbeta(ref_dbeta), d_partial(std::vector<float>(cuda::ln_param_partial_floats(rows, dim), NAN));  // each written
  cpu::layernorm_backward_reference(x.data(), gamma.data(), stats.data(), dy.data(), ref_dx.data(), ref_dgamma.data(),
                                    ref_dbeta.data(), rows, dim);
  cuda::layernorm_backward(d_x.get(), d_gamma.get(), d_stats.get(), d_dy.get(), d_dx.get(), d_dgamma.get(),
                           d_dbeta.get(), d_partial.get(), rows, dim, nullptr);
  compare(c, d_dx.to_host(), ref_dx, 1e-5, 1e-4);
  compare(c, d_dgamma.to_host(), ref_dgamma, 1e-5, 1e-5);
  compare(c, d_dbeta.to_host(), ref_dbeta, 1e-5, 1e-5);
}

void cross_entropy(Check& c, int64_t rows, int64_t classes, std::mt19937& rng) {
  auto logits = random_floats(rng, rows * classes, 0.0f, 3.0f);
  logits[0] += 1000.0f;  // a large logit: the max is kept apart from the sum
  std::vector<int32_t> labels(rows);
  for (int64_t r = 0; r < rows; ++r) labels[r] = static_cast<int32_t>((r * 7) % classes);
  std::vector<float> ref_stats(2 * rows), ref_d(logits.size());
  const float ref_loss = cpu::cross_entropy_forward_reference(logits.data(), labels.data(), rows, classes, ref_stats.data());
  cpu::cross_entropy_backward_reference(logits.data(), labels.data(), ref_stats.data(), 2.0f, rows, classes, ref_d.data());
  DeviceArray<float> d_logits(logits), d_stats(ref_stats), d_loss(std::vector<float>(static_cast<size_t>(rows))), d_d(ref_d);
  DeviceArray<int32_t> d_labels(labels);
  cuda::cross_entropy_forward(d_logits.get(), d_labels.get(), rows, classes, d_stats.get(), d_loss.get(), nullptr);
  const std::vector<float> row_loss = d_loss.to_host();
  double mean = 0;
  for (float l : row_loss) mean += l;
  const std::vector<float> got_loss{static_cast<float>(mean / static_cast<double>(rows))};
  compare(c, got_loss, std::vector<float>{ref_loss}, 1e-5, 1e-5);
  compare(c, d_stats.to_host(), ref_stats, 1e-5, 1e-6);
  cuda::cross_entropy_backward(d_logits.get(), d_labels.get(), d_stats.get(), 2.0f, rows, classes, d_d.get(), nullptr);
  compare(c, d_d.to_host(), ref_d, 1e-6, 1e-5);
}

void gelu(Check& c, size_t n, std::mt19937& rng) {
  std::vector<float> x;
  for (int i = -1200; i < 1200; ++i) x.push_back(0.01f * static_cast<float>(i) + 0.003f);
  for (float v : {0.0f, -0.0f, 1e-30f, -50.0f, 50.0f, 1e20f, -1e20f}) x.push_back(v);
  const auto more = random_floats(rng, n > x.size() ? n - x.size() : 0, 0.0f, 4.0f);
  x.insert(x.end(), more.begin(), more.end());
  const auto dy = random_floats(rng, x.size(), 0.0f, 1.0f);
  const auto len = static_cast<int64_t>(x.size());
  std::vector<float> ref_y(x.size()), ref_dx(x.size());
  cpu::gelu_forward_reference(x.data(), ref_y.data(), len);
  cpu::gelu_backward_reference(x.data(), dy.data(), ref_dx.data(), len);
  DeviceArray<float> d_x(x), d_y(ref_y), d_dy(dy), d_dx(ref_dx);
  cuda::gelu_forward(d_x.get(), d_y.get(), len, nullptr);
  cuda::gelu_backward(d_x.get(), d_dy.get(), d_dx.get(), len, nullptr);
  compare(c, d_y.to_host(), ref_y, 1e-7, 1e-5);
  compare(c, d_dx.to_host(), ref_dx, 1e-7, 1e-5);
}

// The largest |x| of a tensor.
double largest(std::span<const float> x) {
  double top = 0.0;
  for (float v : x) top = std::max(top, std::fabs(static_cast<double>(v)));
  return top;
}

// 16-bit products: each output and gradient within 8 roundings of its tensor's largest (a few roundings
// of Q, K, V, dO, P and dS, each 2^-9 relative in bf16 and 2^-12 in fp16: bounds 2^-6 and 2^-9; the
// unit tests see 3.4e-3 and 1.9e-3 in bf16). `kernel`: the fused kernel or the GEMMs (16-bit only).
void attention(Check& c, int64_t B, int64_t T, int64_t H, int64_t D, int64_t group_heads,
               std::optional<amp::Half> products, cuda::AttentionKernel kernel, std::mt19937& rng) {
  const auto rows = static_cast<size_t>(B * H * T), n = static_cast<size_t>(B * T * H * D);
  const auto qkv = random_floats(rng, 3 * n, 0.0f, 1.5f), dout = random_floats(rng, n, 0.0f, 1.0f);
  std::vector<float> ref_out(n), ref_stats(2 * rows), ref_dqkv(3 * n);
  cpu::attention_forward_reference(qkv.data(), ref_out.data(), ref_stats.data(), B, T, H, D);
  cpu::attention_backward_reference(qkv.data(), ref_stats.data(), dout.data(), ref_dqkv.data(), B, T, H, D);
  DeviceArray<float> d_qkv(qkv), d_out(ref_out), d_stats(ref_stats), d_dout(dout), d_dqkv(ref_dqkv),
      d_workspace(
          std::vector<float>(static_cast<size_t>(cuda::attention_workspace_floats(B, T, H, D, products, kernel)), NAN));
  cuda::attention_forward(d_qkv.get(), d_out.get(), d_stats.get(), d_workspace.get(), B, T, H, D, nullptr, products,
                          kernel, group_heads);
  cuda::attention_backward(d_qkv.get(), d_out.get(), d_stats.get(), d_dout.get(), d_dqkv.get(), d_workspace.get(), B,
                           T, H, D, nullptr, products, kernel, group_heads);
  if (products) {
    const double bound = *products == amp::Half::BF16 ? 0x1p-6 : 0x1p-9;
    compare(c, d_out.to_host(), ref_out, bound * largest(ref_out), 0.0);
    compare(c, d_dqkv.to_host(), ref_dqkv, bound * largest(ref_dqkv), 0.0);
    return;
  }
  compare(c, d_out.to_host(), ref_out, 1e-5, 1e-5);
  compare(c, d_stats.to_host(), ref_stats, 1e-5, 1e-5);
  compare(c, d_dqkv.to_host(), ref_dqkv, 2e-5, 1e-4);
}

// A GEMM operand's bytes as the device holds them: fp32, or 16-bit patterns (`values` rounded to 16
// bits in place first, so that the reference multiplies what the device does).
std::vector<unsigned char> gemm_bytes(cuda::GemmType type, std::vector<float>& values) {
  std::vector<unsigned char> bytes(values.size() * (type == cuda::GemmType::F32 ? 4 : 2));
  for (size_t i = 0; i < values.size(); ++i) {
    if (type == cuda::GemmType::F32) {
      std::memcpy(&bytes[4 * i], &values[i], 4);
    } else {
      const uint16_t bits = amp::half_from_float(cuda::half_type(type), values[i]);
      values[i] = amp::half_to_float(cuda::half_type(type), bits);
      std::memcpy(&bytes[2 * i], &bits, 2);
    }
  }
  return bytes;
}

std::vector<float> gemm_values(cuda::GemmType type, const std::vector<unsigned char>& bytes) {
  std::vector<float> values(bytes.size() / (type == cuda::GemmType::F32 ? 4 : 2));
  for (size_t i = 0; i < values.size(); ++i) {
    if (type == cuda::GemmType::F32) {
      std::memcpy(&values[i], &bytes[4 * i], 4);
    } else {
      uint16_t bits;
      std::memcpy(&bits, &bytes[2 * i], 2);
      values[i] = amp::half_to_float(cuda::half_type(type), bits);
    }
  }
  return values;
}

struct GemmCase {
  int64_t batch, m, n, k;
  bool trans_a, trans_b;
  cuda::GemmType ab, c;
  float alpha, beta;
  bool shared_b;  // stride_b 0: one b for every batch entry
};

// c = alpha·op(a)·op(b) + beta·c against matmul_reference per batch entry. Each element's bound:
// (k + 4)·2^-24 of |alpha|·Σ|a||b| + |beta·c| (fp32 accumulation in any order, k roundings, and those
// of alpha, beta and the output; TF32 would be ~2^-11), plus one 16-bit ulp, 2^-7·|ref| in bf16 and
// 2^-10·|ref| in fp16, for a 16-bit c.
// With beta 0, c starts as NaN, which the GEMM must not read.
void gemm(Check& check, const GemmCase& g, std::mt19937& rng) {
  const int64_t a_size = g.m * g.k, b_size = g.k * g.n, c_size = g.m * g.n;
  const auto entries = static_cast<size_t>(g.batch);
  std::vector<float> a = random_floats(rng, entries * a_size, 0.0f, 1.0f),
                     b = random_floats(rng, (g.shared_b ? 1 : entries) * b_size, 0.0f, 1.0f),
                     c = g.beta == 0.0f ? std::vector<float>(entries * c_size, NAN)
                                        : random_floats(rng, entries * c_size, 0.0f, 1.0f);
  DeviceArray<unsigned char> d_a(gemm_bytes(g.ab, a)), d_b(gemm_bytes(g.ab, b)), d_c(gemm_bytes(g.c, c));
  cuda::gemm(d_a.get(), d_b.get(), d_c.get(), g.m, g.n, g.k, g.trans_a, g.trans_b, g.ab, g.c, g.alpha, g.beta, g.batch,
             a_size, g.shared_b ? 0 : b_size, c_size, nullptr);
  const std::vector<float> got = gemm_values(g.c, d_c.to_host());
  std::vector<float> ref(got.size()), product(static_cast<size_t>(c_size)), scale(product.size()), abs_a(a), abs_b(b);
  std::vector<double> bound(got.size());
  for (float& x : abs_a) x = std::fabs(x);
  for (float& x : abs_b) x = std::fabs(x);
  const double rounding = static_cast<double>(g.k + 4) * 0x1p-24, out_rtol = g.c == cuda::GemmType::BF16  ? 0x1p-7
                                                                                        : g.c == cuda::GemmType::F16 ? 0x1p-10
                                                                                                                    : 0.0;
  for (int64_t entry = 0; entry < g.batch; ++entry) {
    const int64_t a_at = entry * a_size, b_at = g.shared_b ? 0 : entry * b_size;
    cpu::matmul_reference(a.data() + a_at, b.data() + b_at, product.data(), g.m, g.n, g.k, g.trans_a, g.trans_b, false);
    cpu::matmul(abs_a.data() + a_at, abs_b.data() + b_at, scale.data(), g.m, g.n, g.k, g.trans_a, g.trans_b, false);
    for (size_t i = 0; i < product.size(); ++i) {
      const size_t at = static_cast<size_t>(entry * c_size) + i;
      const double old = g.beta == 0.0f ? 0.0 : static_cast<double>(g.beta) * c[at];
      ref[at] = static_cast<float>(g.alpha * static_cast<double>(product[i]) + old);
      bound[at] = rounding * (std::fabs(g.alpha) * scale[i] + std::fabs(old)) + out_rtol * std::fabs(ref[at]);
    }
  }
  compare_bounded(check, got, ref, bound);
}

// The CUDA backend's matmul op with 16-bit products (16-bit training's, set_half_matmuls), accumulating into
// c: against the reference product of the inputs rounded to 16 bits, within the gemm rows' fp32 bound. At
// shapes whose rows are not 16-byte aligned the op pads its operands (cuda_backend.cpp).
void half_matmul(Check& check, int device, amp::Half type, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b,
                 std::mt19937& rng) {
  backend::Cuda cuda(device);
  cuda.set_half_matmuls(type);
  const ds_backend& ops = *cuda.table();
  std::vector<float> a = random_floats(rng, m * k, 0.0f, 1.0f), b = random_floats(rng, k * n, 0.0f, 1.0f),
                     c = random_floats(rng, m * n, 0.0f, 1.0f);
  DeviceArray<float> d_a(a), d_b(b), d_c(c);
  if (ops.matmul(ops.ctx, d_a.get(), d_b.get(), d_c.get(), m, n, k, trans_a, trans_b, 1) != DS_OK)
    throw std::runtime_error(ops.last_error(ops.ctx));
  const std::vector<float> got = d_c.to_host();
  const amp::Storage storage = type == amp::Half::BF16 ? amp::Storage::BF16 : amp::Storage::F16;
  cpu::round_to(storage, a.data(), a.size());
  cpu::round_to(storage, b.data(), b.size());
  std::vector<float> ref = c, scale(c.size()), abs_a(a), abs_b(b);
  for (float& x : abs_a) x = std::fabs(x);
  for (float& x : abs_b) x = std::fabs(x);
  cpu::matmul_reference(a.data(), b.data(), ref.data(), m, n, k, trans_a, trans_b, true);
  cpu::matmul(abs_a.data(), abs_b.data(), scale.data(), m, n, k, trans_a, trans_b, false);
  std::vector<double> bound(ref.size());
  for (size_t i = 0; i < ref.size(); ++i)
    bound[i] = static_cast<double>(k + 4) * 0x1p-24 * (static_cast<double>(scale[i]) + std::fabs(c[i]));
  compare_bounded(check, got, ref, bound);
}

size_t differing(const std::vector<float>& got, const float* want) {
  size_t d = 0;
  for (size_t i = 0; i < got.size(); ++i) d += got[i] != want[i];
  return d;
}

// Bias forward and backward and the residual add against the CPU fast paths, bit for bit.
void bias_and_residual(Check& c, int64_t rows, int64_t cols, std::mt19937& rng) {
  const size_t n = static_cast<size_t>(rows * cols);
  const auto y0 = random_floats(rng, n, 0.0f, 1.0f), bias = random_floats(rng, cols, 0.0f, 1.0f),
             x = random_floats(rng, n, 0.0f, 1.0f), dbias0 = random_floats(rng, cols, 0.0f, 1.0f);
  DeviceArray<float> d_y(y0), d_bias(bias), d_x(x), d_dy(y0), d_dbias(dbias0);
  auto y = y0, dbias = dbias0;
  cpu::bias_add(y.data(), bias.data(), rows, cols);
  cpu::add_into(y.data(), x.data(), rows * cols);
  cpu::bias_grad(y0.data(), dbias.data(), rows, cols);
  cuda::bias_add(d_y.get(), d_bias.get(), rows, cols, nullptr);
  cuda::add_into(d_y.get(), d_x.get(), rows * cols, nullptr);
  cuda::bias_grad(d_dy.get(), d_dbias.get(), rows, cols, nullptr);
  c.differing = differing(d_y.to_host(), y.data()) + differing(d_dbias.to_host(), dbias.data());
}

// Embedding forward and backward (tokens repeating) against the CPU fast path, bit for bit.
void embedding(Check& c, int64_t B, int64_t T, int64_t C, int64_t vocab, std::mt19937& rng) {
  std::vector<int32_t> tokens(static_cast<size_t>(B * T));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7919) % static_cast<size_t>(vocab / 2 + 1));
  const auto wte = random_floats(rng, vocab * C, 0.0f, 1.0f), wpe = random_floats(rng, T * C, 0.0f, 1.0f),
             dout = random_floats(rng, B * T * C, 0.0f, 1.0f);
  auto dwte = random_floats(rng, vocab * C, 0.0f, 1.0f), dwpe = random_floats(rng, T * C, 0.0f, 1.0f);
  std::vector<float> out(static_cast<size_t>(B * T * C));
  DeviceArray<int32_t> d_tokens(tokens);
  DeviceArray<float> d_wte(wte), d_wpe(wpe), d_dout(dout), d_dwte(dwte), d_dwpe(dwpe), d_out(out);
  cpu::embedding_forward(tokens.data(), wte.data(), wpe.data(), out.data(), B, T, C, vocab);
  cpu::embedding_backward(tokens.data(), dout.data(), dwte.data(), dwpe.data(), B, T, C, vocab);
  cuda::embedding_forward(d_tokens.get(), d_wte.get(), d_wpe.get(), d_out.get(), B, T, C, vocab, nullptr);
  cuda::embedding_backward(d_tokens.get(), d_dout.get(), d_dwte.get(), d_dwpe.get(), B, T, C, vocab, nullptr);
  c.differing = differing(d_out.to_host(), out.data()) + differing(d_dwte.to_host(), dwte.data()) +
                differing(d_dwpe.to_host(), dwpe.data());
}

// Inputs for 16-bit rounding: ties, each format's range edges, denormals, ±0, ±inf, NaN, then random
// magnitudes over 1e-13..1e13.
std::vector<float> conversion_inputs(std::mt19937& rng, size_t n) {
  std::vector<float> x{0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, 6e-8f, 3e-8f, 1e-40f, 3.4e38f, 1.00390625f,
                       1.01171875f, 1.0009765625f, 2049.0f, INFINITY, -INFINITY, NAN};
  std::uniform_real_distribution<float> exponent(-30.0f, 30.0f), sign(-1.0f, 1.0f);
  while (x.size() < n) x.push_back(std::copysign(std::exp(exponent(rng)), sign(rng)));
  return x;
}

// The elements whose bits differ, two NaNs counting as equal: a NaN's payload may differ (a GPU's
// arithmetic on a NaN gives the canonical NaN, x86 keeps the operand's; an H200 showed it in the
// bf16 accumulation).
size_t bits_differing(const std::vector<float>& got, const std::vector<float>& want) {
  size_t d = 0;
  for (size_t i = 0; i < got.size(); ++i)
    d += std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && !(std::isnan(got[i]) && std::isnan(want[i]));
  return d;
}
size_t bits_differing(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want, amp::Half type) {
  const auto is_nan = [type](uint16_t bits) { return std::isnan(amp::half_to_float(type, bits)); };
  size_t d = 0;
  for (size_t i = 0; i < got.size(); ++i) d += got[i] != want[i] && !(is_nan(got[i]) && is_nan(want[i]));
  return d;
}

// fp32 → 16 bits, back, accumulation into 16 bits and rounding in place against kernels/cpu, bit for bit.
void conversions(Check& c, amp::Half type, size_t n, std::mt19937& rng) {
  const auto x = conversion_inputs(rng, n), add = random_floats(rng, n, 0.0f, 1.0f);
  std::vector<uint16_t> half(n);
  std::vector<float> back(n);
  cpu::from_float(type, x.data(), half.data(), n);
  cpu::to_float(type, half.data(), back.data(), n);
  DeviceArray<float> d_x(x), d_back(back), d_add(add);
  DeviceArray<uint16_t> d_half(half), d_from_cpu(half);
  const auto len = static_cast<int64_t>(n);
  cuda::float_to_half(type, d_x.get(), d_half.get(), len, nullptr);
  cuda::half_to_float(type, d_from_cpu.get(), d_back.get(), len, nullptr);
  c.differing = bits_differing(d_half.to_host(), half, type) + bits_differing(d_back.to_host(), back);
  cpu::accumulate(type, add.data(), half.data(), n);
  cuda::half_accumulate(type, d_add.get(), d_from_cpu.get(), len, nullptr);
  c.differing += bits_differing(d_from_cpu.to_host(), half, type);
  std::vector<float> rounded = x;
  cpu::round_to(type == amp::Half::BF16 ? amp::Storage::BF16 : amp::Storage::F16, rounded.data(), n);
  cuda::round_to_half(type, d_x.get(), len, nullptr);
  c.differing += bits_differing(d_x.to_host(), rounded);
}

// ReLU forward and backward and the unscale against the CPU, bit for bit (NaN passes through ReLU).
void relu_and_scale(Check& c, size_t n, std::mt19937& rng) {
  const auto x = conversion_inputs(rng, n), dy = random_floats(rng, n, 0.0f, 1.0f);
  std::vector<float> y(n), dx(n), scaled = x;
  cpu::relu_forward(x.data(), y.data(), static_cast<int64_t>(n));
  cpu::relu_backward(x.data(), dy.data(), dx.data(), static_cast<int64_t>(n));
  cpu::scale(amp::Storage::F32, scaled.data(), n, 3.0 / 65536.0);
  DeviceArray<float> d_x(x), d_dy(dy), d_y(y), d_dx(dx), d_scaled(x);
  cuda::relu_forward(d_x.get(), d_y.get(), static_cast<int64_t>(n), nullptr);
  cuda::relu_backward(d_x.get(), d_dy.get(), d_dx.get(), static_cast<int64_t>(n), nullptr);
  cuda::scale(d_scaled.get(), static_cast<int64_t>(n), 3.0 / 65536.0, nullptr);
  c.differing = bits_differing(d_y.to_host(), y) + bits_differing(d_dx.to_host(), dx) +
                bits_differing(d_scaled.to_host(), scaled);
}

// Σ x² (added onto 0.25) against the CPU's double sum: within 1e-12 relative.
void sum_squares(Check& c, size_t n, std::mt19937& rng) {
  auto x = random_floats(rng, n, 0.0f, 1.0f);
  x[n / 2] = 3e19f;  // its square is beyond fp32's range
  const double want = cpu::sum_squares(amp::Storage::F32, x.data(), n, 0.25);
  DeviceArray<float> d_x(x);
  DeviceArray<double> d_total(std::vector<double>{0.25}), d_partial(std::vector<double>(cuda::kSumSquaresBlocks, 0.0));
  cuda::sum_squares(d_x.get(), static_cast<int64_t>(n), d_total.get(), d_partial.get(), nullptr);
  const double got = d_total.to_host()[0];
  c.worst_error = std::fabs(got - want);
  c.worst_share = std::isnan(got) ? INFINITY : c.worst_error / (1e-12 * want);
}

// The overflow check on clean data, an inf at the end and a NaN at the start: the wrong answers.
void nonfinite(Check& c, size_t n, std::mt19937& rng) {
  const auto clean = random_floats(rng, n, 0.0f, 1.0f);
  size_t wrong = 0;
  for (auto [at, value, want] : {std::tuple<size_t, float, int32_t>{0, 1.0f, 0}, {n - 1, INFINITY, 1}, {0, NAN, 1}}) {
    auto x = clean;
    if (want) x[at] = value;
    DeviceArray<float> d_x(x);
    DeviceArray<int32_t> d_flag(std::vector<int32_t>{0});
    cuda::find_nonfinite(d_x.get(), static_cast<int64_t>(n), d_flag.get(), nullptr);
    wrong += d_flag.to_host()[0] != want;
  }
  c.differing = wrong;
}

// Three steps against the CPU optimizer: the parameters and both moments bit for bit.
void adam(Check& c, size_t n, bool decoupled, std::mt19937& rng) {
  std::vector<float> p = random_floats(rng, n, 0.0f, 1.0f), cpu_p = p;
  AdamParams params;
  params.weight_decay = 0.01;
  params.adam_w_mode = decoupled;
  auto cpu_adam = optim::make_adam(params, n, amp::Storage::F32);
  const std::vector<float> zeros(n, 0.0f);
  DeviceArray<float> d_p(p), d_m(zeros), d_v(zeros);
  for (int64_t step = 1; step <= 3; ++step) {
    const std::vector<float> g = random_floats(rng, n, 0.0f, 1.0f);
    const double lr = 1e-3;
    Segment segment{cpu_p.data(), g.data(), n};
    cpu_adam->step(std::span<const Segment>(&segment, 1), {}, lr, step);
    const float beta1 = 0.9f, beta2 = 0.999f, lr_f = static_cast<float>(lr), wd = 0.01f;
    const float bc1 = optim::bias_correction(beta1, step), bc2 = optim::bias_correction(beta2, step);
    const cpu::AdamArgs args{beta1, beta2, 1e-8f, wd, -lr_f / bc1, 1.0f / std::sqrt(bc2), -lr_f * wd};
    DeviceArray<float> d_g(g);
    cuda::adam_step(d_p.get(), d_g.get(), d_m.get(), d_v.get(), static_cast<int64_t>(n), args, decoupled, nullptr);
    cuda::synchronize();
  }
  const auto state = cpu_adam->state();
  const std::vector<float> got_p = d_p.to_host();
  for (size_t i = 0; i < n; ++i) c.worst_error = std::max<double>(c.worst_error, std::fabs(got_p[i] - cpu_p[i]));
  c.differing = differing(got_p, cpu_p.data()) + differing(d_m.to_host(), static_cast<const float*>(state[0].data)) +
                differing(d_v.to_host(), static_cast<const float*>(state[1].data));
}

// Three SGD steps (the first starting the momentum buffer) against the CPU loop: parameters and buffer bit
// for bit.
void sgd(Check& c, size_t n, float momentum, bool nesterov, std::mt19937& rng) {
  std::vector<float> p = random_floats(rng, n, 0.0f, 1.0f), cpu_p = p, cpu_buf(n, 0.0f);
  DeviceArray<float> d_p(p), d_buf(cpu_buf);
  for (int step = 1; step <= 3; ++step) {
    const std::vector<float> g = random_floats(rng, n, 0.0f, 1.0f);
    const cpu::SgdArgs args{0.05f, 0.01f, momentum, 0.75f, nesterov, step == 1};
    cpu::sgd_step(cpu_p.data(), amp::Storage::F32, g.data(), amp::Storage::F32, cpu_buf.data(), amp::Storage::F32, n,
                  args);
    DeviceArray<float> d_g(g);
    cuda::sgd_step(d_p.get(), d_g.get(), d_buf.get(), static_cast<int64_t>(n), args, nullptr);
    cuda::synchronize();
  }
  const std::vector<float> got_p = d_p.to_host();
  for (size_t i = 0; i < n; ++i) c.worst_error = std::max<double>(c.worst_error, std::fabs(got_p[i] - cpu_p[i]));
  c.differing = differing(got_p, cpu_p.data()) + differing(d_buf.to_host(), cpu_buf.data());
}

// Three steps of an optimizer with one state buffer (Lion, Adagrad, plain RMSprop) over `sizes` tensors (all in
// each launch, as the device step runs it) against the CPU optimizer: parameters and state bit for bit.
// launch(segments, count, table, step) runs update number `step` at lr 1e-3 on the device. A fifth of the
// gradients are 0 at the first step, where the state starts at 0: Lion only decays those parameters (sign 0);
// Adagrad's sum there is its initial value; RMSprop's square_avg only their weight decay's square.
template <class Launch>
void one_state(Check& c, const std::vector<size_t>& sizes, std::mt19937& rng,
               std::unique_ptr<Optimizer> (*make)(size_t n), Launch launch) {
  size_t n = 0;
  for (size_t size : sizes) n += size;
  std::vector<float> p = random_floats(rng, n, -1.0f, 1.0f), cpu_p = p;
  auto cpu_opt = make(n);
  DeviceArray<float> d_p(p), d_s(std::vector<float>(n, 0.0f)), d_g(std::vector<float>(n, 0.0f));
  std::vector<cuda::OneStateSegment> segments;
  size_t at = 0;
  for (size_t size : sizes) {
    segments.push_back({d_p.get() + at, d_g.get() + at, d_s.get() + at, static_cast<int64_t>(size)});
    at += size;
  }
  DeviceArray<std::byte> d_table(cuda::segment_table(segments.data(), segments.size()));
  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<float> g = random_floats(rng, n, -1.0f, 1.0f);
    if (step == 1)
      for (size_t i = 0; i < n; i += 5) g[i] = 0.0f;
    Segment segment{cpu_p.data(), g.data(), n};
    cpu_opt->step(std::span<const Segment>(&segment, 1), {}, 1e-3, step);
    cuda::copy_to_device(d_g.get(), g.data(), n * sizeof(float));
    launch(segments.data(), segments.size(), d_table.get(), step);
    cuda::synchronize();
  }
  const std::vector<float> got_p = d_p.to_host();
  for (size_t i = 0; i < n; ++i) c.worst_error = std::max<double>(c.worst_error, std::fabs(got_p[i] - cpu_p[i]));
  c.differing = differing(got_p, cpu_p.data()) +
                differing(d_s.to_host(), static_cast<const float*>(cpu_opt->state()[0].data));
}

constexpr LionParams kSelftestLion{0.9, 0.99, 0.1};
constexpr AdagradParams kSelftestAdagrad{0.01, 0.1, 0.5, 1e-10};  // lr_decay, weight decay, initial value, eps
constexpr RmspropParams kSelftestRmsprop{0.9, 1e-8, 0.1, 0.0, false};  // alpha, eps, weight decay (the device's: plain)

void lion(Check& c, const std::vector<size_t>& sizes, std::mt19937& rng) {
  one_state(c, sizes, rng, [](size_t n) { return optim::make_lion(kSelftestLion, n, amp::Storage::F32); },
            [](const cuda::OneStateSegment* s, size_t count, const void* table, int64_t) {
              cuda::lion_steps(s, count, optim::lion_args(kSelftestLion, 1e-3), table, nullptr);
            });
}

void adagrad(Check& c, const std::vector<size_t>& sizes, std::mt19937& rng) {
  one_state(c, sizes, rng, [](size_t n) { return optim::make_adagrad(kSelftestAdagrad, n, amp::Storage::F32); },
            [](const cuda::OneStateSegment* s, size_t count, const void* table, int64_t step) {
              cuda::adagrad_steps(s, count, optim::adagrad_args(kSelftestAdagrad, 1e-3, step), table, nullptr);
            });
}

void rmsprop(Check& c, const std::vector<size_t>& sizes, std::mt19937& rng) {
  one_state(c, sizes, rng, [](size_t n) { return optim::make_rmsprop(kSelftestRmsprop, n, amp::Storage::F32); },
            [](const cuda::OneStateSegment* s, size_t count, const void* table, int64_t step) {
              cuda::rmsprop_steps(s, count, optim::rmsprop_args(kSelftestRmsprop, 1e-3, step), table, nullptr);
            });
}

// Three steps of LAMB over `sizes` tensors (all in each launch) against the CPU optimizer: the moments bit for bit, the
// parameters bit for bit but for a last bit where a trust ratio's sums, added in another order, rounded
// to its neighbour (the note counts them).
void lamb(Check& c, const std::vector<size_t>& sizes, std::mt19937& rng) {
  std::vector<TensorRange> tensors;
  size_t n = 0;
  for (size_t size : sizes) {
    tensors.push_back({n, size});
    n += size;
  }
  std::vector<float> p = random_floats(rng, n, 0.0f, 1.0f), cpu_p = p;
  LambParams params;
  params.weight_decay = 0.01;
  auto cpu_lamb = optim::make_lamb(params, n, nullptr, amp::Storage::F32);
  const cpu::LambArgs args = optim::lamb_args(params);
  const std::vector<float> zeros(n, 0.0f);
  DeviceArray<float> d_p(p), d_m(zeros), d_v(zeros), d_g(zeros);
  std::vector<cuda::LambSegment> segments;  // every tensor in each launch, as the device step runs it
  for (const TensorRange& t : tensors) {
    const size_t at = t.offset;
    segments.push_back({d_p.get() + at, d_g.get() + at, d_m.get() + at, d_v.get() + at, static_cast<int64_t>(t.size), 0});
  }
  cuda::set_first_blocks(segments.data(), segments.size());
  const std::vector<std::byte> table = cuda::segment_table(segments.data(), segments.size());
  DeviceArray<std::byte> d_table(table);
  DeviceArray<double> d_partial(
      std::vector<double>(2 * cuda::segment_block_count(segments.data(), segments.size()), 0.0));
  DeviceArray<double> d_sums(std::vector<double>(2 * tensors.size(), 0.0));
  for (int64_t step = 1; step <= 3; ++step) {
    const std::vector<float> g = random_floats(rng, n, 0.0f, 1.0f);
    const double lr = 1e-2;
    Segment segment{cpu_p.data(), g.data(), n};
    cpu_lamb->step(std::span<const Segment>(&segment, 1), tensors, lr, step);
    cuda::copy_to_device(d_g.get(), g.data(), n * sizeof(float));
    cuda::lamb_moments(segments.data(), segments.size(), args, d_sums.get(), d_table.get(), d_partial.get(), nullptr);
    const std::vector<double> sums = d_sums.to_host();
    std::vector<float> scales;
    for (size_t t = 0; t < tensors.size(); ++t)
      scales.push_back(optim::lamb_step_size(params, lr, step) *
                       optim::lamb_trust_ratio(params, sums[2 * t], sums[2 * t + 1]));
    DeviceArray<float> d_scales(scales);
    cuda::lamb_apply(segments.data(), segments.size(), args, d_scales.get(), d_table.get(), nullptr);
    cuda::synchronize();
  }
  const auto state = cpu_lamb->state();
  const std::vector<float> got_p = d_p.to_host();
  size_t last_bit = 0;
  for (size_t i = 0; i < n; ++i) {
    c.worst_error = std::max<double>(c.worst_error, std::fabs(got_p[i] - cpu_p[i]));
    if (got_p[i] == cpu_p[i]) continue;
    if (std::nextafter(got_p[i], cpu_p[i]) == cpu_p[i]) ++last_bit;
    else ++c.differing;
  }
  c.differing += differing(d_m.to_host(), static_cast<const float*>(state[0].data)) +
                 differing(d_v.to_host(), static_cast<const float*>(state[1].data));
  c.note = fmt::format("{} of {} parameters differ in their last bit", last_bit, n);
}

// The checks, each with its shape.
std::vector<std::pair<Check, std::function<void(Check&, std::mt19937&)>>> checks(int device, const SelftestNccl& nccl) {
  std::vector<std::pair<Check, std::function<void(Check&, std::mt19937&)>>> all;
  auto add = [&](std::string kernel, std::string shape, std::function<void(Check&, std::mt19937&)> run,
                 bool bits = false) {
    Check c;
    c.kernel = std::move(kernel);
    c.shape = std::move(shape);
    c.bits = bits;
    all.emplace_back(std::move(c), std::move(run));
  };
  for (auto [rows, dim] : {std::pair<int64_t, int64_t>{1, 1}, {3, 31}, {5, 769}, {33, 1024}, {4, 4097}})
    add("layernorm_forward", fmt::format("{} x {}", rows, dim),
        [=](Check& c, std::mt19937& rng) { layernorm_forward(c, rows, dim, rng); });
  for (auto [rows, dim] : {std::pair<int64_t, int64_t>{1, 1}, {5, 33}, {7, 300}, {16, 1027}, {1000, 768}})
    add("layernorm_backward", fmt::format("{} x {}", rows, dim),
        [=](Check& c, std::mt19937& rng) { layernorm_backward(c, rows, dim, rng); });
  for (int64_t classes : {1, 10, 33, 1000, 50257})
    add("cross_entropy", fmt::format("4 x {}", classes),
        [=](Check& c, std::mt19937& rng) { cross_entropy(c, 4, classes, rng); });
  for (size_t n : {size_t{2407}, size_t{100'003}})
    add("gelu", fmt::format("{}", n), [=](Check& c, std::mt19937& rng) { gelu(c, n, rng); });
  struct AttentionShape {
    int64_t B, T, H, D;
    int64_t group_heads = 0;  // the GEMM form's heads per group (0: as many as fit its score block)
    std::string name() const {
      const std::string shape = fmt::format("{}x{}x{}x{}", B, T, H, D);
      return group_heads ? fmt::format("{}, heads in groups of {}", shape, group_heads) : shape;
    }
  };
  std::vector<AttentionShape> attention_shapes{{1, 1, 1, 1}, {2, 37, 3, 16}, {2, 37, 3, 16, 4}};
  if (!cuda::emulated()) {  // seconds to minutes on the emulator
    attention_shapes.push_back({1, 1024, 2, 64});     // GPT-2's context
    attention_shapes.push_back({1, 4096, 5, 8, 4});   // 16 query chunks; a second, partial group of heads
    attention_shapes.push_back({2, 300, 3, 40});      // the fused kernel: a partial tile, D padded to 48
    attention_shapes.push_back({1, 200, 2, 80});      // D padded to 96: its dK/dV columns in two blocks
    attention_shapes.push_back({2, 1024, 4, 128});    // D = 128 (GPT-3's, Llama's heads)
  }
  for (const auto s : attention_shapes)
    add("attention", s.name(), [=](Check& c, std::mt19937& rng) {
      attention(c, s.B, s.T, s.H, s.D, s.group_heads, std::nullopt, cuda::AttentionKernel::gemm, rng);
    });
  // 16-bit training's products, through the fused kernel (flash attention) and through the GEMMs
  for (const auto type : {amp::Half::BF16, amp::Half::F16})
    for (const auto kernel : {cuda::AttentionKernel::fused, cuda::AttentionKernel::gemm})
      for (const auto s : attention_shapes)
        if (s.T > 1 && !(s.group_heads && kernel == cuda::AttentionKernel::fused))  // (the fused kernel has no groups)
          add(fmt::format("attention_{}{}", type == amp::Half::BF16 ? "bf16" : "fp16",
                          kernel == cuda::AttentionKernel::gemm ? "_gemm" : ""),
              s.name(), [=](Check& c, std::mt19937& rng) {
                attention(c, s.B, s.T, s.H, s.D, s.group_heads, type, kernel, rng);
              });
  // The backend's 16-bit matmul op: every transpose at sizes of no aligned row, and GPT-2's LM head's three
  // products (vocabulary 50257: its forward, its input's gradient and its weight's) at 64 tokens of 96.
  for (const auto type : {amp::Half::BF16, amp::Half::F16}) {
    struct Product {
      int64_t m, n, k;
      bool trans_a, trans_b;
    };
    std::vector<Product> products;
    for (bool trans_a : {false, true})
      for (bool trans_b : {false, true}) products.push_back({5, 7, 33, trans_a, trans_b});
    if (!cuda::emulated())
      for (const Product p : {Product{64, 50257, 96, false, true}, {64, 96, 50257, false, false},
                              {50257, 96, 64, true, false}})
        products.push_back(p);
    for (const Product p : products)
      add(type == amp::Half::BF16 ? "matmul_bf16" : "matmul_fp16",
          fmt::format("{}x{}x{}{}{} +=", p.m, p.n, p.k, p.trans_a ? " A^T" : "", p.trans_b ? " B^T" : ""),
          [=](Check& c, std::mt19937& rng) { half_matmul(c, device, type, p.m, p.n, p.k, p.trans_a, p.trans_b, rng); });
  }
  // GEMMs: every transpose at odd sizes, batches (one with a b shared by every entry, one whose odd
  // strides leave bf16 entries 2-byte aligned), k 0, and the shape of GPT-2's MLP down-projection
  // forward (tokens x hidden x 4·hidden).
  const auto F32 = cuda::GemmType::F32, BF16 = cuda::GemmType::BF16, F16 = cuda::GemmType::F16;
  std::vector<std::pair<std::string, GemmCase>> gemms;
  for (auto [kernel, type] : {std::pair{"gemm", F32}, {"gemm_bf16", BF16}, {"gemm_fp16", F16}}) {
    gemms.push_back({kernel, {1, 1, 1, 1, false, false, type, type, 1.0f, 0.0f, false}});
    for (bool trans_a : {false, true})
      for (bool trans_b : {false, true})
        gemms.push_back({kernel, {1, 17, 33, 65, trans_a, trans_b, type, type, 1.25f, -0.5f, false}});
    gemms.push_back({kernel, {3, 64, 48, 80, false, type != F32, type, type, 0.5f, 2.0f, type == F32}});
  }
  gemms.push_back({"gemm", {3, 17, 33, 0, false, false, F32, F32, 1.0f, -0.5f, false}});  // k 0: beta·c
  if (!cuda::emulated())  // seconds of scalar loops on the emulator
    gemms.push_back({"gemm_bf16", {1, 1024, 768, 3072, false, true, BF16, BF16, 1.0f, 0.0f, false}});
  gemms.push_back({"gemm_bf16_f32", {3, 17, 33, 65, true, false, BF16, F32, 1.0f, 0.5f, false}});  // 2-byte aligned
  gemms.push_back({"gemm_bf16_f32", {3, 64, 48, 80, true, false, BF16, F32, 1.0f, 0.0f, true}});
  gemms.push_back({"gemm_fp16_f32", {3, 17, 33, 65, true, false, F16, F32, 1.0f, 0.5f, false}});  // fp16 training's products
  gemms.push_back({"gemm_fp16_f32", {3, 64, 48, 80, false, true, F16, F32, 1.0f, 0.0f, true}});
  for (const auto& [kernel, g] : gemms)
    add(kernel, fmt::format("{}{}x{}x{} {}{}{}", g.batch > 1 ? fmt::format("{} x ", g.batch) : "", g.m, g.n, g.k,
                            g.trans_a ? 'T' : 'N', g.trans_b ? 'T' : 'N', g.shared_b ? ", b shared" : ""),
        [=](Check& c, std::mt19937& rng) { gemm(c, g, rng); });
  const int64_t big_rows = cuda::emulated() ? 33 : 1024;  // GPT-2's 1024 tokens x 768 on a GPU (seconds on the emulator)
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {7, 33}, {big_rows, 768}})
    add("bias+residual", fmt::format("{} x {}", rows, cols),
        [=](Check& c, std::mt19937& rng) { bias_and_residual(c, rows, cols, rng); }, true);
  add("embedding", "4x64x768, vocab 1001", [](Check& c, std::mt19937& rng) { embedding(c, 4, 64, 768, 1001, rng); },
      true);
  for (size_t n : {size_t{1}, cuda::emulated() ? size_t{70'001} : size_t{10'000'019}})
    add("sum_squares", fmt::format("{}", n), [=](Check& c, std::mt19937& rng) { sum_squares(c, n, rng); });
  add("relu+scale", "100003", [](Check& c, std::mt19937& rng) { relu_and_scale(c, 100'003, rng); }, true);
  for (auto type : {amp::Half::BF16, amp::Half::F16})
    add(type == amp::Half::BF16 ? "convert_bf16" : "convert_fp16", "100003 (3 ways)",
        [=](Check& c, std::mt19937& rng) { conversions(c, type, 100'003, rng); }, true);
  add("nonfinite", "100003, 3 cases", [](Check& c, std::mt19937& rng) { nonfinite(c, 100'003, rng); }, true);
  for (bool decoupled : {false, true})
    for (size_t n : {size_t{1037}, size_t{65'539}})
      add(decoupled ? "adamw" : "adam", fmt::format("{} x 3 steps", n),
          [=](Check& c, std::mt19937& rng) { adam(c, n, decoupled, rng); }, true);
  for (const auto& [momentum, nesterov] : {std::pair{0.0f, false}, std::pair{0.9f, false}, std::pair{0.9f, true}})
    add("sgd", fmt::format("65539 x 3, {} {}", nesterov ? "nesterov" : "momentum", momentum),
        [=](Check& c, std::mt19937& rng) { sgd(c, 65'539, momentum, nesterov, rng); }, true);
  add("lion_steps", "65539+1+4097 x 3 steps", [](Check& c, std::mt19937& rng) { lion(c, {65'539, 1, 4097}, rng); },
      true);
  add("adagrad_steps", "65539+1+4097 x 3 steps",
      [](Check& c, std::mt19937& rng) { adagrad(c, {65'539, 1, 4097}, rng); }, true);
  add("rmsprop_steps", "65539+1+4097 x 3 steps",
      [](Check& c, std::mt19937& rng) { rmsprop(c, {65'539, 1, 4097}, rng); }, true);
  const std::vector<size_t> lamb_tensors{65'539, 1, 4097};
  add("lamb", "65539+1+4097 x 3 steps", [=](Check& c, std::mt19937& rng) { lamb(c, lamb_tensors, rng); }, true);
  // The device step's multi-tensor launches, against the one-tensor launchers above (selftest_multi.h).
  for (MultiTensorOp op : {MultiTensorOp::adam, MultiTensorOp::adamw, MultiTensorOp::sgd, MultiTensorOp::scale,
                           MultiTensorOp::round_bf16, MultiTensorOp::round_fp16, MultiTensorOp::moves_bf16,
                           MultiTensorOp::moves_fp16})
    add(multi_tensor_name(op), multi_tensor_shape(),
        [=](Check& c, std::mt19937& rng) { c.differing = multi_tensor_differing(op, rng); }, true);
  add("sum_squares_multi", multi_tensor_shape(), [](Check& c, std::mt19937& rng) {
    c.worst_error = multi_tensor_sum_squares_error(rng);
    c.worst_share = c.worst_error / 1e-12;
  });
  // A GPT trained on this device and on the CPU: the gpt plugin's layers on the CUDA backend, then AdamW.
  const bool small = cuda::emulated();
  const std::string gpt = small ? R"({"n_layer": 2, "n_head": 2, "n_embd": 16, "seq_len": 8, "vocab_size": 29})"
                                : R"({"n_layer": 4, "n_head": 4, "n_embd": 256, "seq_len": 128, "vocab_size": 1000})";
  const int64_t vocab = small ? 29 : 1000, batch = small ? 2 : 4;
  const int steps = small ? 3 : 20;  // the emulator's launches are slow
  add("train gpt", fmt::format("{}, {} steps", small ? "2x16, 2x8 tokens" : "4x256, 4x128 tokens", steps),
      [=](Check& c, std::mt19937&) {
        backend::Cuda cuda(device);
        const TrainingComparison r = compare_training("gpt", gpt, vocab, batch, steps, cuda.table());
        c.worst_error = std::max(r.worst_loss_error, r.worst_grad_error);
        c.worst_share = std::max(r.worst_loss_error, r.worst_grad_error) / kTrainingBound;
        c.note = fmt::format("loss {:.4f} -> {:.4f} (CPU {:.4f} -> {:.4f}); worst gradients:",
                             r.device_losses.front(), r.device_losses.back(), r.cpu_losses.front(),
                             r.cpu_losses.back());
        for (size_t i = 0; i < std::min<size_t>(3, r.grad_errors.size()); ++i)
          c.note += fmt::format(" {} {:.2g}", r.grad_errors[i].first, r.grad_errors[i].second);
      });
  for (auto op : {NcclCollective::AllReduce, NcclCollective::ReduceScatter, NcclCollective::AllGather,
                  NcclCollective::Broadcast})
    for (auto type : {DataType::F32, DataType::F16, DataType::BF16})
      if (nccl.ranks > 0)
        add(fmt::format("nccl {}", collective_name(op)), fmt::format("{} ranks x 100003 {}", nccl.ranks, data_type_name(type)),
            [=](Check& c, std::mt19937&) { c.differing = nccl_check(nccl.api(), op, type, 100'003, nccl.ranks); }, true);
  return all;
}

}  // namespace

SelftestNccl machine_nccl() {
  SelftestNccl nccl;
  if (!nccl_built()) return nccl;
  nccl.api = []() -> const NcclApi& { return real_nccl_api(); };
  try {
    nccl.ranks = cuda::device_count();
  } catch (const std::exception&) {  // no usable GPU: run_selftest says so
  }
  return nccl;
}

int run_selftest(int device, const std::string& json_path, const SelftestNccl& nccl) {
  if (!cuda::built_with_cuda()) {
    std::fprintf(stderr, "dsworker --selftest: this dsworker was built without CUDA (no nvcc at build time, or "
                         "-DDS_CUDA=OFF): nothing to test\n");
    return 3;
  }
  int count = 0;
  try {
    count = cuda::device_count();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsworker --selftest: no usable GPU: %s\n", e.what());
    return 3;
  }
  if (count == 0) {
    std::fprintf(stderr, "dsworker --selftest: no GPU is visible (CUDA_VISIBLE_DEVICES=%s)\n",
                 std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "unset");
    return 3;
  }
  device %= count;
  std::string name;
  try {
    cuda::set_device(device);
    name = cuda::device_name(device);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsworker --selftest: device %d: %s\n", device, e.what());
    return 1;
  }
  std::ofstream json;
  if (!json_path.empty()) {
    json.open(json_path);
    if (!json) {
      std::fprintf(stderr, "dsworker --selftest: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  std::printf("dsworker --selftest: device %d of %d: %s\n", device, count, name.c_str());
  std::printf("%-20s %-26s %14s %10s %9s  %s\n", "kernel", "shape", "worst |error|", "of bound", "ms", "result");
  std::printf("(of bound: the worst element's share of atol + rtol*|ref| (GEMMs: of fp32 rounding relative to sum "
              "|a||b|), at most 1; bias, ReLU, conversions, embedding, Adam, SGD, Lion, Adagrad, LAMB (a parameter's last bit "
              "aside), NCCL: elements that differ, bit for bit; "
              "train: every step's loss and gradients within 1e-5 relative of the CPU's, from the same state)\n");
  std::mt19937 rng(2024);
  nlohmann::json report = {{"device", device}, {"device_name", name}, {"emulated", cuda::emulated()}, {"checks", nlohmann::json::array()}};
  int failed = 0;
  for (auto& [check, run] : checks(device, nccl)) {
    const auto start = std::chrono::steady_clock::now();
    try {
      run(check, rng);
    } catch (const std::exception& e) {
      check.error = e.what();
    }
    check.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    failed += !check.passed();
    const std::string bound = check.bits ? fmt::format("{} differ", check.differing) : fmt::format("{:.3f}", check.worst_share);
    std::printf("%-20s %-26s %14.3g %10s %9.1f  %s\n", check.kernel.c_str(), check.shape.c_str(), check.worst_error,
                bound.c_str(), check.seconds * 1e3,
                check.passed() ? "ok" : check.error.empty() ? "FAILED" : check.error.c_str());
    if (!check.note.empty()) std::printf("%-20s %s\n", "", check.note.c_str());
    nlohmann::json entry = {{"kernel", check.kernel}, {"shape", check.shape}, {"worst_error", check.worst_error},
                            {"seconds", check.seconds}, {"passed", check.passed()}, {"error", check.error}};
    if (!check.note.empty()) entry["note"] = check.note;
    if (check.bits) entry["differing_elements"] = check.differing;
    else entry["share_of_bound"] = check.worst_share;
    report["checks"].push_back(entry);
  }
  const size_t total = report["checks"].size();
  std::string missing = "dsworker's engine training on the GPU (ZeRO, mixed precision: scripts/gpu-check.sh runs "
                        "tests/integration/test_device.py for that)";
  if (nccl.ranks == 0) missing += "; NCCL (this build has no NCCL group)";
  report["passed"] = total - static_cast<size_t>(failed);
  report["failed"] = failed;
  report["not_checked"] = missing;
  std::printf("not checked yet: %s\n", missing.c_str());
  std::printf("dsworker --selftest: %zu of %zu checks passed%s\n", total - static_cast<size_t>(failed), total,
              cuda::emulated() ? " (on the emulator, not a GPU)" : "");
  if (json.is_open() && !(json << report.dump(1) << "\n")) {
    std::fprintf(stderr, "dsworker --selftest: cannot write %s\n", json_path.c_str());
    return 1;
  }
  return failed ? 1 : 0;
}

}  // namespace ds
