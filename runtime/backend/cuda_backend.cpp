// The CUDA backend: plugin/ds_backend.h's ops on kernels/cuda's launchers and cuBLASLt GEMMs, on the
// device's default stream. Linked with ds_kernels_cuda (a GPU), ds_kernels_cuda_emulated (the SIMT
// emulator and the CPU GEMM, device memory being host memory: the unit tests) or the stub (every op
// fails with "built without CUDA").
#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cuda/gemm.h"
#include "cuda/launch.h"

namespace ds::backend {

struct Cuda::State {
  int device = 0;
  ds_backend table{};
  std::string error;
  std::mutex mutex;                              // the cache; ops come from one thread at a time
  std::map<size_t, std::vector<void*>> free_blocks;  // bytes → cached device blocks not in use
  std::map<void*, size_t> used_blocks;               // block → bytes
  float* ones = nullptr;                             // [ones_size] of 1.0f: bias_grad's GEMM operand
  int64_t ones_size = 0;

  // At least n ones on the device.
  const float* ones_of(int64_t n) {
    if (n > ones_size) {
      const std::vector<float> host(static_cast<size_t>(n), 1.0f);
      float* grown = static_cast<float*>(cuda::device_alloc(host.size() * sizeof(float)));
      cuda::copy_to_device(grown, host.data(), host.size() * sizeof(float));
      if (ones != nullptr) cuda::device_free(ones);
      ones = grown;
      ones_size = n;
    }
    return ones;
  }

  void* take(size_t bytes) {
    bytes = (bytes + 255) / 256 * 256 + 256;  // never 0 bytes
    std::lock_guard lock(mutex);
    auto& list = free_blocks[bytes];
    void* p = nullptr;
    if (!list.empty()) {
      p = list.back();
      list.pop_back();
    } else {
      p = cuda::device_alloc(bytes);
    }
    used_blocks[p] = bytes;
    return p;
  }
  // The block goes back to the cache: the ops that used it are ahead of any later user's on the one
  // stream, so it can be handed out again at once.
  void give(void* p) {
    if (p == nullptr) return;
    std::lock_guard lock(mutex);
    const auto it = used_blocks.find(p);
    if (it == used_blocks.end()) return;
    free_blocks[it->second].push_back(p);
    used_blocks.erase(it);
  }
};

namespace {

using State = Cuda::State;
State& state(void* ctx) { return *static_cast<State*>(ctx); }
constexpr void* kStream = nullptr;  // the device's default stream

template <class F>
ds_status guarded(void* ctx, F&& f) noexcept {
  State& s = state(ctx);
  try {
    f();
    return DS_OK;
  } catch (const std::bad_alloc&) {
    s.error = "out of memory";
    return DS_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    s.error = e.what();
  } catch (...) {
    s.error = "unknown exception";
  }
  return DS_ERROR;
}

// A temporary device buffer of n elements, back in the cache when it goes out of scope.
template <class T>
class Temp {
 public:
  Temp(State& s, int64_t n) : s_(s), p_(static_cast<T*>(s.take(static_cast<size_t>(n) * sizeof(T)))) {}
  ~Temp() { s_.give(p_); }
  Temp(const Temp&) = delete;
  Temp& operator=(const Temp&) = delete;
  T* get() const { return p_; }

 private:
  State& s_;
  T* p_;
};

const char* last_error(void* ctx) {
  const std::string& e = state(ctx).error;
  return e.empty() ? "(no message)" : e.c_str();
}
ds_status alloc(void* ctx, size_t bytes, void** out) {
  return guarded(ctx, [&] { *out = state(ctx).take(bytes); });
}
void release(void* ctx, void* p) {
  try {
    state(ctx).give(p);
  } catch (...) {  // a map node's allocation: the block stays out of the cache, freed with the backend
  }
}
ds_status copy(void* ctx, void* dst, const void* src, size_t bytes) {
  return guarded(ctx, [&] { cuda::copy_on_device(dst, src, bytes, kStream); });
}

ds_status matmul(void* ctx, const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, int32_t ta,
                 int32_t tb, int32_t acc) {
  return guarded(ctx, [&] {
    cuda::gemm(a, b, c, m, n, k, ta != 0, tb != 0, cuda::GemmType::F32, cuda::GemmType::F32, 1.0f, acc ? 1.0f : 0.0f,
               1, 0, 0, 0, kStream);
  });
}
ds_status bias_fill(void* ctx, float* y, const float* bias, int64_t rows, int64_t cols) {
  return guarded(ctx, [&] { cuda::bias_fill(y, bias, rows, cols, kStream); });
}
ds_status bias_add(void* ctx, float* y, const float* bias, int64_t rows, int64_t cols) {
  return guarded(ctx, [&] { cuda::bias_add(y, bias, rows, cols, kStream); });
}
// dbias[1, cols] += ones[1, rows] · dy[rows, cols]: a GEMM reads dy at the memory's speed, where the
// column kernel (cuda::bias_grad, the CPU's bits) runs one thread per column down the rows.
ds_status bias_grad(void* ctx, const float* dy, float* dbias, int64_t rows, int64_t cols) {
  return guarded(ctx, [&] {
    cuda::gemm(state(ctx).ones_of(rows), dy, dbias, 1, cols, rows, false, false, cuda::GemmType::F32,
               cuda::GemmType::F32, 1.0f, 1.0f, 1, 0, 0, 0, kStream);
  });
}
ds_status add_into(void* ctx, float* y, const float* x, int64_t n) {
  return guarded(ctx, [&] { cuda::add_into(y, x, n, kStream); });
}
ds_status add(void* ctx, const float* a, const float* b, float* out, int64_t n) {
  return guarded(ctx, [&] {  // out = a, then out += b: a + b in the CPU's order
    if (out != a) cuda::copy_on_device(out, a, static_cast<size_t>(n) * sizeof(float), kStream);
    cuda::add_into(out, b, n, kStream);
  });
}
ds_status layernorm_forward(void* ctx, const float* x, const float* gamma, const float* beta, float* y, float* stats,
                            int64_t rows, int64_t dim, float eps) {
  return guarded(ctx, [&] { cuda::layernorm_forward(x, gamma, beta, y, stats, rows, dim, eps, kStream); });
}
ds_status layernorm_backward(void* ctx, const float* x, const float* gamma, const float* stats, const float* dy,
                             float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t dim) {
  return guarded(ctx, [&] { cuda::layernorm_backward(x, gamma, stats, dy, dx, dgamma, dbeta, rows, dim, kStream); });
}
ds_status gelu_forward(void* ctx, const float* x, float* y, int64_t n) {
  return guarded(ctx, [&] { cuda::gelu_forward(x, y, n, kStream); });
}
ds_status gelu_backward(void* ctx, const float* x, const float* dy, float* dx, int64_t n) {
  return guarded(ctx, [&] { cuda::gelu_backward(x, dy, dx, n, kStream); });
}
ds_status relu_forward(void* ctx, const float* x, float* y, int64_t n) {
  return guarded(ctx, [&] { cuda::relu_forward(x, y, n, kStream); });
}
ds_status relu_backward(void* ctx, const float* x, const float* dy, float* dx, int64_t n) {
  return guarded(ctx, [&] { cuda::relu_backward(x, dy, dx, n, kStream); });
}
ds_status attention_forward(void* ctx, const float* qkv, float* out, float* stats, int64_t B, int64_t T, int64_t H,
                            int64_t D) {
  return guarded(ctx, [&] {
    const Temp<float> ws(state(ctx), cuda::attention_workspace_floats(B, T, H, D));
    cuda::attention_forward(qkv, out, stats, ws.get(), B, T, H, D, kStream);
  });
}
ds_status attention_backward(void* ctx, const float* qkv, const float* stats, const float* dout, float* dqkv,
                             int64_t B, int64_t T, int64_t H, int64_t D) {
  return guarded(ctx, [&] {
    const Temp<float> ws(state(ctx), cuda::attention_workspace_floats(B, T, H, D));
    cuda::attention_backward(qkv, stats, dout, dqkv, ws.get(), B, T, H, D, kStream);
  });
}
ds_status embedding_forward(void* ctx, const int32_t* tokens, const float* wte, const float* wpe, float* out,
                            int64_t B, int64_t T, int64_t C, int64_t vocab) {
  return guarded(ctx, [&] { cuda::embedding_forward(tokens, wte, wpe, out, B, T, C, vocab, kStream); });
}
ds_status embedding_backward(void* ctx, const int32_t* tokens, const float* dout, float* dwte, float* dwpe, int64_t B,
                             int64_t T, int64_t C, int64_t vocab) {
  return guarded(ctx, [&] { cuda::embedding_backward(tokens, dout, dwte, dwpe, B, T, C, vocab, kStream); });
}
// The rows' losses come to the host and are averaged there in double, in row order (the CPU's sum);
// the mean goes back to loss[0]. One small copy each way per micro-batch.
ds_status cross_entropy_forward(void* ctx, const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
                                float* stats, float* loss) {
  return guarded(ctx, [&] {
    const Temp<float> row_loss(state(ctx), rows);
    cuda::cross_entropy_forward(logits, labels, rows, classes, stats, row_loss.get(), kStream);
    std::vector<float> host(static_cast<size_t>(rows));
    cuda::copy_to_host(host.data(), row_loss.get(), host.size() * sizeof(float));
    double sum = 0.0;
    for (float l : host) sum += l;
    const float mean = rows > 0 ? static_cast<float>(sum / static_cast<double>(rows)) : 0.0f;
    cuda::copy_to_device(loss, &mean, sizeof mean);
  });
}
ds_status cross_entropy_backward(void* ctx, const float* logits, const int32_t* labels, const float* stats,
                                 const float* dloss, int64_t rows, int64_t classes, float* dlogits) {
  return guarded(ctx, [&] {
    float g = 0.0f;
    cuda::copy_to_host(&g, dloss, sizeof g);
    cuda::cross_entropy_backward(logits, labels, stats, g, rows, classes, dlogits, kStream);
  });
}

}  // namespace

Cuda::Cuda(int device) : state_(std::make_unique<State>()) {
  cuda::set_device(device);
  state_->device = device;
  state_->table = ds_backend{
      DS_BACKEND_VERSION, "cuda", DS_DEVICE_CUDA, state_.get(), last_error, alloc, release, copy, matmul, bias_fill,
      bias_add, bias_grad, add_into, add, layernorm_forward, layernorm_backward, gelu_forward, gelu_backward,
      relu_forward, relu_backward, attention_forward, attention_backward, embedding_forward, embedding_backward,
      cross_entropy_forward, cross_entropy_backward,
  };
}

Cuda::~Cuda() {
  try {
    cuda::synchronize();
  } catch (...) {  // a kernel's fault already reported; free what we can
  }
  for (auto& [bytes, list] : state_->free_blocks)
    for (void* p : list) {
      try {
        cuda::device_free(p);
      } catch (...) {
      }
    }
  if (state_->ones != nullptr) {
    try {
      cuda::device_free(state_->ones);
    } catch (...) {
    }
  }
  for (auto& [p, bytes] : state_->used_blocks) {
    try {
      cuda::device_free(p);
    } catch (...) {
    }
  }
}

const ds_backend* Cuda::table() const { return &state_->table; }

void Cuda::synchronize() { cuda::synchronize(); }

}  // namespace ds::backend
