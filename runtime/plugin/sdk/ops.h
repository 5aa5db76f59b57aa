// The compute backend's ops for plugin code (part of the plugin SDK; included by ds_plugin_sdk.h):
// ds::sdk::Ops wraps plugin/ds_backend.h's table, throws on an op's failure (with the backend's
// message, which the SDK turns into the call's DS_ERROR), and hands out temporaries that go back
// when they leave scope. Layers get it as `f.ops` / `b.ops`; pointers are the tensors' own (device
// memory of the backend). Formulas and conventions: ds_backend.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "plugin/ds_backend.h"

namespace ds::sdk {

class Ops {
 public:
  Ops() = default;
  explicit Ops(const ds_backend* b) : b_(b) {}

  bool valid() const { return b_ != nullptr; }
  ds_device_type device() const { return backend().device; }
  const char* name() const { return backend().name; }

  // n elements of T on the device, uninitialised, returned to the backend when it goes out of scope.
  template <class T>
  class Temp {
   public:
    Temp(const Ops& ops, int64_t n) : ops_(ops) {
      void* p = nullptr;
      ops.check(ops.backend().alloc(ops.ctx(), static_cast<size_t>(n < 0 ? 0 : n) * sizeof(T), &p), "alloc");
      p_ = static_cast<T*>(p);
    }
    ~Temp() { ops_.backend().free(ops_.ctx(), p_); }
    Temp(const Temp&) = delete;
    Temp& operator=(const Temp&) = delete;
    T* get() const { return p_; }

   private:
    const Ops& ops_;
    T* p_ = nullptr;
  };
  Temp<float> temp(int64_t n) const { return Temp<float>(*this, n); }

  void copy(void* dst, const void* src, size_t bytes) const { check(backend().copy(ctx(), dst, src, bytes), "copy"); }
  // c[m, n] (+)= op(a)[m, k] · op(b)[k, n]
  void matmul(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b,
              bool accumulate) const {
    check(backend().matmul(ctx(), a, b, c, m, n, k, trans_a, trans_b, accumulate), "matmul");
  }
  void bias_fill(float* y, const float* bias, int64_t rows, int64_t cols) const {
    check(backend().bias_fill(ctx(), y, bias, rows, cols), "bias_fill");
  }
  void bias_add(float* y, const float* bias, int64_t rows, int64_t cols) const {
    check(backend().bias_add(ctx(), y, bias, rows, cols), "bias_add");
  }
  void bias_grad(const float* dy, float* dbias, int64_t rows, int64_t cols) const {
    check(backend().bias_grad(ctx(), dy, dbias, rows, cols), "bias_grad");
  }
  void add_into(float* y, const float* x, int64_t n) const { check(backend().add_into(ctx(), y, x, n), "add_into"); }
  void add(const float* a, const float* b, float* out, int64_t n) const {
    check(backend().add(ctx(), a, b, out, n), "add");
  }
  void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* stats, int64_t rows,
                         int64_t dim, float eps) const {
    check(backend().layernorm_forward(ctx(), x, gamma, beta, y, stats, rows, dim, eps), "layernorm_forward");
  }
  void layernorm_backward(const float* x, const float* gamma, const float* stats, const float* dy, float* dx,
                          float* dgamma, float* dbeta, int64_t rows, int64_t dim) const {
    check(backend().layernorm_backward(ctx(), x, gamma, stats, dy, dx, dgamma, dbeta, rows, dim), "layernorm_backward");
  }
  void gelu_forward(const float* x, float* y, int64_t n) const { check(backend().gelu_forward(ctx(), x, y, n), "gelu_forward"); }
  void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) const {
    check(backend().gelu_backward(ctx(), x, dy, dx, n), "gelu_backward");
  }
  void relu_forward(const float* x, float* y, int64_t n) const { check(backend().relu_forward(ctx(), x, y, n), "relu_forward"); }
  void relu_backward(const float* x, const float* dy, float* dx, int64_t n) const {
    check(backend().relu_backward(ctx(), x, dy, dx, n), "relu_backward");
  }
  void attention_forward(const float* qkv, float* out, float* stats, int64_t B, int64_t T, int64_t H, int64_t D) const {
    check(backend().attention_forward(ctx(), qkv, out, stats, B, T, H, D), "attention_forward");
  }
  void attention_backward(const float* qkv, const float* stats, const float* dout, float* dqkv, int64_t B, int64_t T,
                          int64_t H, int64_t D) const {
    check(backend().attention_backward(ctx(), qkv, stats, dout, dqkv, B, T, H, D), "attention_backward");
  }
  // With the forward's `out` besides, which a fused GPU kernel forms Δ from (backend version 3; an older
  // engine's table is called without it).
  void attention_backward(const float* qkv, const float* out, const float* stats, const float* dout, float* dqkv,
                          int64_t B, int64_t T, int64_t H, int64_t D) const {
    if (backend().version < 3) return attention_backward(qkv, stats, dout, dqkv, B, T, H, D);
    check(backend().attention_backward_with_out(ctx(), qkv, out, stats, dout, dqkv, B, T, H, D), "attention_backward");
  }
  void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe, float* out, int64_t B, int64_t T,
                         int64_t C, int64_t vocab) const {
    check(backend().embedding_forward(ctx(), tokens, wte, wpe, out, B, T, C, vocab), "embedding_forward");
  }
  void embedding_backward(const int32_t* tokens, const float* dout, float* dwte, float* dwpe, int64_t B, int64_t T,
                          int64_t C, int64_t vocab) const {
    check(backend().embedding_backward(ctx(), tokens, dout, dwte, dwpe, B, T, C, vocab), "embedding_backward");
  }
  void cross_entropy_forward(const float* logits, const int32_t* labels, int64_t rows, int64_t classes, float* stats,
                             float* loss) const {
    check(backend().cross_entropy_forward(ctx(), logits, labels, rows, classes, stats, loss), "cross_entropy_forward");
  }
  void cross_entropy_backward(const float* logits, const int32_t* labels, const float* stats, const float* dloss,
                              int64_t rows, int64_t classes, float* dlogits) const {
    check(backend().cross_entropy_backward(ctx(), logits, labels, stats, dloss, rows, classes, dlogits),
          "cross_entropy_backward");
  }
  // Vocabulary-parallel embedding and cross-entropy (ds_backend.h, since version 2).
  void embedding_rows_forward(const int32_t* tokens, const float* wte_rows, float* out, int64_t n, int64_t C,
                              int64_t first, int64_t rows, int64_t vocab) const {
    check(since(2).embedding_rows_forward(ctx(), tokens, wte_rows, out, n, C, first, rows, vocab), "embedding_rows_forward");
  }
  void embedding_rows_backward(const int32_t* tokens, const float* dout, float* dwte_rows, int64_t n, int64_t C,
                               int64_t first, int64_t rows, int64_t vocab) const {
    check(since(2).embedding_rows_backward(ctx(), tokens, dout, dwte_rows, n, C, first, rows, vocab),
          "embedding_rows_backward");
  }
  void cross_entropy_shard_max(const float* logits, const int32_t* labels, int64_t n, int64_t classes, int64_t first,
                               int64_t vocab, float* stats) const {
    check(since(2).cross_entropy_shard_max(ctx(), logits, labels, n, classes, first, vocab, stats),
          "cross_entropy_shard_max");
  }
  void cross_entropy_shard_sumexp(const float* logits, int64_t n, int64_t classes, float* stats) const {
    check(since(2).cross_entropy_shard_sumexp(ctx(), logits, n, classes, stats), "cross_entropy_shard_sumexp");
  }
  void cross_entropy_shard_loss(const float* stats, int64_t n, float* loss) const {
    check(since(2).cross_entropy_shard_loss(ctx(), stats, n, loss), "cross_entropy_shard_loss");
  }
  void cross_entropy_shard_backward(const float* logits, const int32_t* labels, const float* stats, const float* dloss,
                                    int64_t n, int64_t classes, int64_t first, float* dlogits) const {
    check(since(2).cross_entropy_shard_backward(ctx(), logits, labels, stats, dloss, n, classes, first, dlogits),
          "cross_entropy_shard_backward");
  }


 private:
  const ds_backend& backend() const {
    if (b_ == nullptr) throw std::logic_error("no compute backend (the model was created without one)");
    return *b_;
  }
  // The table, when it has the ops of `version` (an older engine's table lacks them).
  const ds_backend& since(uint32_t version) const {
    const ds_backend& b = backend();
    if (b.version < version)
      throw std::runtime_error(std::string("the ") + (b.name ? b.name : "") + " backend is version " +
                               std::to_string(b.version) + ", this op needs version " + std::to_string(version));
    return b;
  }
  void* ctx() const { return b_->ctx; }
  void check(ds_status st, const char* op) const {
    if (st == DS_OK) return;
    const char* msg = b_->last_error ? b_->last_error(b_->ctx) : nullptr;  // names the kernel that failed
    if (msg && msg[0]) throw std::runtime_error(msg);
    throw std::runtime_error(std::string(b_->name ? b_->name : "backend") + " " + op + " failed (no message)");
  }
  const ds_backend* b_ = nullptr;
};

}  // namespace ds::sdk
