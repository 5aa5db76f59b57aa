// The CPU backend: plugin/ds_backend.h's ops on kernels/cpu (the fast paths), done on return.
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "backend/backend.h"
#include "cpu/activation.h"
#include "cpu/attention.h"
#include "cpu/bias.h"
#include "cpu/cross_entropy.h"
#include "cpu/elementwise.h"
#include "cpu/embedding.h"
#include "cpu/gelu.h"
#include "cpu/layernorm.h"
#include "cpu/matmul.h"
#include "cpu/matmul_half.h"
#include "cpu/vocab_parallel.h"

namespace ds::backend {
namespace {

thread_local std::string cpu_error;

// Runs f, turning an exception into DS_ERROR (DS_OUT_OF_MEMORY for bad_alloc) and its message.
template <class F>
ds_status guarded(F&& f) noexcept {
  try {
    f();
    return DS_OK;
  } catch (const std::bad_alloc&) {
    cpu_error = "out of memory";
    return DS_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    cpu_error = e.what();
  } catch (...) {
    cpu_error = "unknown exception";
  }
  return DS_ERROR;
}

const char* last_error(void*) { return cpu_error.empty() ? "(no message)" : cpu_error.c_str(); }

ds_status alloc(void*, size_t bytes, void** out) {
  *out = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);  // never 0 bytes
  if (*out == nullptr) {
    cpu_error = "cannot allocate " + std::to_string(bytes) + " bytes";
    return DS_OUT_OF_MEMORY;
  }
  return DS_OK;
}
void release(void*, void* p) { std::free(p); }
ds_status copy(void*, void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return DS_OK;
}

ds_status matmul(void*, const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, int32_t ta,
                 int32_t tb, int32_t acc) {
  return guarded([&] { cpu::matmul(a, b, c, m, n, k, ta != 0, tb != 0, acc != 0); });
}
template <amp::Half type>
ds_status half_matmul(void*, const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, int32_t ta,
                      int32_t tb, int32_t acc) {
  return guarded([&] { cpu::matmul_half(type, a, b, c, m, n, k, ta != 0, tb != 0, acc != 0); });
}
ds_status bias_fill(void*, float* y, const float* bias, int64_t rows, int64_t cols) {
  return guarded([&] { cpu::bias_fill(y, bias, rows, cols); });
}
ds_status bias_add(void*, float* y, const float* bias, int64_t rows, int64_t cols) {
  return guarded([&] { cpu::bias_add(y, bias, rows, cols); });
}
ds_status bias_grad(void*, const float* dy, float* dbias, int64_t rows, int64_t cols) {
  return guarded([&] { cpu::bias_grad(dy, dbias, rows, cols); });
}
ds_status add_into(void*, float* y, const float* x, int64_t n) {
  return guarded([&] { cpu::add_into(y, x, n); });
}
ds_status add(void*, const float* a, const float* b, float* out, int64_t n) {
  return guarded([&] { cpu::add(a, b, out, n); });
}
ds_status layernorm_forward(void*, const float* x, const float* gamma, const float* beta, float* y, float* stats,
                            int64_t rows, int64_t dim, float eps) {
  return guarded([&] { cpu::layernorm_forward(x, gamma, beta, y, stats, rows, dim, eps); });
}
ds_status layernorm_backward(void*, const float* x, const float* gamma, const float* stats, const float* dy, float* dx,
                             float* dgamma, float* dbeta, int64_t rows, int64_t dim) {
  return guarded([&] { cpu::layernorm_backward(x, gamma, stats, dy, dx, dgamma, dbeta, rows, dim); });
}
ds_status gelu_forward(void*, const float* x, float* y, int64_t n) {
  return guarded([&] { cpu::gelu_forward(x, y, n); });
}
ds_status gelu_backward(void*, const float* x, const float* dy, float* dx, int64_t n) {
  return guarded([&] { cpu::gelu_backward(x, dy, dx, n); });
}
ds_status relu_forward(void*, const float* x, float* y, int64_t n) {
  return guarded([&] { cpu::relu_forward(x, y, n); });
}
ds_status relu_backward(void*, const float* x, const float* dy, float* dx, int64_t n) {
  return guarded([&] { cpu::relu_backward(x, dy, dx, n); });
}
ds_status attention_forward(void*, const float* qkv, float* out, float* stats, int64_t B, int64_t T, int64_t H,
                            int64_t D) {
  return guarded([&] { cpu::attention_forward(qkv, out, stats, B, T, H, D); });
}
ds_status attention_backward(void*, const float* qkv, const float* stats, const float* dout, float* dqkv, int64_t B,
                             int64_t T, int64_t H, int64_t D) {
  return guarded([&] { cpu::attention_backward(qkv, stats, dout, dqkv, B, T, H, D); });
}
ds_status attention_backward_with_out(void* ctx, const float* qkv, const float*, const float* stats, const float* dout,
                                      float* dqkv, int64_t B, int64_t T, int64_t H, int64_t D) {
  return attention_backward(ctx, qkv, stats, dout, dqkv, B, T, H, D);  // Δ from its rows of P, as before
}
ds_status embedding_forward(void*, const int32_t* tokens, const float* wte, const float* wpe, float* out, int64_t B,
                            int64_t T, int64_t C, int64_t vocab) {
  return guarded([&] { cpu::embedding_forward(tokens, wte, wpe, out, B, T, C, vocab); });
}
ds_status embedding_backward(void*, const int32_t* tokens, const float* dout, float* dwte, float* dwpe, int64_t B,
                             int64_t T, int64_t C, int64_t vocab) {
  return guarded([&] { cpu::embedding_backward(tokens, dout, dwte, dwpe, B, T, C, vocab); });
}
ds_status cross_entropy_forward(void*, const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
                                float* stats, float* loss) {
  return guarded([&] { loss[0] = cpu::cross_entropy_forward(logits, labels, rows, classes, stats); });
}
ds_status cross_entropy_backward(void*, const float* logits, const int32_t* labels, const float* stats,
                                 const float* dloss, int64_t rows, int64_t classes, float* dlogits) {
  return guarded([&] { cpu::cross_entropy_backward(logits, labels, stats, dloss[0], rows, classes, dlogits); });
}

ds_status embedding_rows_forward(void*, const int32_t* tokens, const float* wte_rows, float* out, int64_t n, int64_t C,
                                 int64_t first, int64_t rows, int64_t vocab) {
  return guarded([&] { cpu::embedding_rows_forward(tokens, wte_rows, out, n, C, first, rows, vocab); });
}
ds_status embedding_rows_backward(void*, const int32_t* tokens, const float* dout, float* dwte_rows, int64_t n,
                                  int64_t C, int64_t first, int64_t rows, int64_t vocab) {
  return guarded([&] { cpu::embedding_rows_backward(tokens, dout, dwte_rows, n, C, first, rows, vocab); });
}
ds_status cross_entropy_shard_max(void*, const float* logits, const int32_t* labels, int64_t n, int64_t classes,
                                  int64_t first, int64_t vocab, float* stats) {
  return guarded([&] { cpu::cross_entropy_shard_max(logits, labels, n, classes, first, vocab, stats); });
}
ds_status cross_entropy_shard_sumexp(void*, const float* logits, int64_t n, int64_t classes, float* stats) {
  return guarded([&] { cpu::cross_entropy_shard_sumexp(logits, n, classes, stats); });
}
ds_status cross_entropy_shard_loss(void*, const float* stats, int64_t n, float* loss) {
  return guarded([&] { loss[0] = cpu::cross_entropy_shard_loss(stats, n); });
}
ds_status cross_entropy_shard_backward(void*, const float* logits, const int32_t* labels, const float* stats,
                                       const float* dloss, int64_t n, int64_t classes, int64_t first, float* dlogits) {
  return guarded([&] { cpu::cross_entropy_shard_backward(logits, labels, stats, dloss[0], n, classes, first, dlogits); });
}

// The table with `products` as its matmul op.
constexpr ds_backend table(decltype(ds_backend::matmul) products) {
  return {
    DS_BACKEND_VERSION, "cpu", DS_DEVICE_CPU, nullptr, last_error, alloc, release, copy, products, bias_fill, bias_add,
    bias_grad, add_into, add, layernorm_forward, layernorm_backward, gelu_forward, gelu_backward, relu_forward,
    relu_backward, attention_forward, attention_backward, embedding_forward, embedding_backward,
    cross_entropy_forward, cross_entropy_backward, embedding_rows_forward, embedding_rows_backward,
    cross_entropy_shard_max, cross_entropy_shard_sumexp, cross_entropy_shard_loss, cross_entropy_shard_backward,
    attention_backward_with_out,
  };
}
constexpr ds_backend kCpu = table(matmul), kCpuBf16 = table(half_matmul<amp::Half::BF16>),
                     kCpuFp16 = table(half_matmul<amp::Half::F16>);

}  // namespace

const ds_backend* cpu(std::optional<amp::Half> products) {
  if (!products) return &kCpu;
  return *products == amp::Half::BF16 ? &kCpuBf16 : &kCpuFp16;
}

}  // namespace ds::backend
