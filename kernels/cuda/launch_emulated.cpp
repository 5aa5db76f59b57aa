// The launchers of launch.h on the CPU SIMT emulator (simt.h): the same kernels, grids and blocks as
// launch.cu, run synchronously (the stream is ignored), device memory being host memory. One
// "device", the CPU. For tests of code above the launchers (dsworker --selftest) on machines
// without a GPU.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "cuda/adam.cuh"
#include "cuda/attention.cuh"
#include "cuda/cross_entropy.cuh"
#include "cuda/gelu.cuh"
#include "cuda/launch.h"
#include "cuda/launch_shape.h"
#include "cuda/layernorm.cuh"
#include "simt/simt.h"

namespace ds::cuda {

bool built_with_cuda() { return true; }
bool emulated() { return true; }
int device_count() { return 1; }
void set_device(int) {}
std::string device_name(int) { return "emulated CUDA device (the CPU SIMT emulator)"; }

void* device_alloc(size_t bytes) {
  void* p = std::malloc(bytes ? bytes : 1);
  if (!p) throw std::bad_alloc();
  return p;
}
void device_free(void* p) { std::free(p); }
void copy_to_device(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void copy_to_host(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void synchronize() {}

void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* stats, int64_t rows,
                       int64_t dim, float eps, void*) {
  if (rows <= 0 || dim <= 0) return;
  simt::launch(static_cast<unsigned>(rows), row_threads(dim), {},
               [&] { layernorm_forward_kernel(x, gamma, beta, y, stats, dim, eps); });
}

void layernorm_backward(const float* x, const float* gamma, const float* stats, const float* dy, float* dx,
                        float* dgamma, float* dbeta, int64_t rows, int64_t dim, void*) {
  if (rows <= 0 || dim <= 0) return;
  simt::launch(static_cast<unsigned>(rows), row_threads(dim), {},
               [&] { layernorm_backward_dx_kernel(x, gamma, stats, dy, dx, dim); });
  simt::launch(column_blocks(dim), kColumnThreads, {},
               [&] { layernorm_backward_params_kernel(x, stats, dy, dgamma, dbeta, rows, dim); });
}

void cross_entropy_forward(const float* logits, const int32_t* labels, int64_t rows, int64_t classes, float* stats,
                           float* row_loss, void*) {
  if (rows <= 0 || classes <= 0) return;
  simt::launch(static_cast<unsigned>(rows), row_threads(classes), {},
               [&] { cross_entropy_forward_kernel(logits, labels, classes, stats, row_loss); });
}

void cross_entropy_backward(const float* logits, const int32_t* labels, const float* stats, float g, int64_t rows,
                            int64_t classes, float* dlogits, void*) {
  if (rows <= 0 || classes <= 0) return;
  const float scaled = g / static_cast<float>(rows);
  simt::launch(static_cast<unsigned>(rows), row_threads(classes), {},
               [&] { cross_entropy_backward_kernel(logits, labels, stats, scaled, classes, dlogits); });
}

void gelu_forward(const float* x, float* y, int64_t n, void*) {
  if (n <= 0) return;
  simt::launch(element_blocks(n), kElementThreads, {}, [&] { gelu_forward_kernel(x, y, n); });
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, void*) {
  if (n <= 0) return;
  simt::launch(element_blocks(n), kElementThreads, {}, [&] { gelu_backward_kernel(x, dy, dx, n); });
}

void attention_forward(const float* qkv, float* out, float* stats, int64_t B, int64_t T, int64_t H, int64_t D,
                       void*) {
  simt::LaunchOptions options;
  options.dynamic_shared_bytes = attention_shared_bytes(T, false);
  if (B <= 0 || T <= 0 || H <= 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  simt::launch(static_cast<unsigned>(B * H * T), kAttentionThreads, options,
               [&] { attention_forward_kernel(qkv, out, stats, T, H, D, scale); });
}

void attention_backward(const float* qkv, const float* stats, const float* dout, float* dqkv, float* rowdot,
                        int64_t B, int64_t T, int64_t H, int64_t D, void*) {
  simt::LaunchOptions options;
  options.dynamic_shared_bytes = attention_shared_bytes(T, true);
  if (B <= 0 || T <= 0 || H <= 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const auto rows = static_cast<unsigned>(B * H * T);
  simt::launch(rows, kAttentionThreads, options,
               [&] { attention_backward_dq_kernel(qkv, stats, dout, dqkv, rowdot, T, H, D, scale); });
  simt::launch(rows, kAttentionThreads, options,
               [&] { attention_backward_dkv_kernel(qkv, stats, dout, rowdot, dqkv, T, H, D, scale); });
}

void adam_step(float* p, const float* g, float* m, float* v, int64_t n, const optim::AdamArgs& args, bool decoupled,
               void*) {
  if (n <= 0) return;
  simt::launch(element_blocks(n), kElementThreads, {}, [&] {
    if (decoupled) adam_kernel<true>(p, g, m, v, n, args);
    else adam_kernel<false>(p, g, m, v, n, args);
  });
}

}  // namespace ds::cuda
