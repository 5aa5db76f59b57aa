// The launchers of launch.h, compiled by nvcc (kernels/cuda/CMakeLists.txt: sm_80 and sm_90, every
// warning and every register spill an error).
#include "cuda/launch.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "cuda/adam.cuh"
#include "cuda/attention.cuh"
#include "cuda/cross_entropy.cuh"
#include "cuda/gelu.cuh"
#include "cuda/launch_shape.h"
#include "cuda/layernorm.cuh"

namespace ds::cuda {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("cuda: ") + what + ": " + cudaGetErrorName(status) + ": " +
                             cudaGetErrorString(status));
}

}  // namespace

bool built_with_cuda() { return true; }

bool emulated() { return false; }

int device_count() {
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  return count;
}

void set_device(int device) { check(cudaSetDevice(device), "cudaSetDevice"); }

std::string device_name(int device) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
         std::to_string(prop.totalGlobalMem >> 20) + " MiB)";
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}

void device_free(void* p) { check(cudaFree(p), "cudaFree"); }

void copy_to_device(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
}

void synchronize() { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* stats, int64_t rows,
                       int64_t dim, float eps, void* stream) {
  if (rows <= 0 || dim <= 0) return;
  layernorm_forward_kernel<<<static_cast<unsigned>(rows), row_threads(dim), 0, static_cast<cudaStream_t>(stream)>>>(
      x, gamma, beta, y, stats, dim, eps);
  check(cudaGetLastError(), "layernorm_forward launch");
}

void layernorm_backward(const float* x, const float* gamma, const float* stats, const float* dy, float* dx,
                        float* dgamma, float* dbeta, int64_t rows, int64_t dim, void* stream) {
  if (rows <= 0 || dim <= 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  layernorm_backward_dx_kernel<<<static_cast<unsigned>(rows), row_threads(dim), 0, s>>>(x, gamma, stats, dy, dx, dim);
  check(cudaGetLastError(), "layernorm_backward (dx) launch");
  layernorm_backward_params_kernel<<<column_blocks(dim), kColumnThreads, 0, s>>>(x, stats, dy, dgamma,
                                                                                            dbeta, rows, dim);
  check(cudaGetLastError(), "layernorm_backward (dgamma, dbeta) launch");
}

void cross_entropy_forward(const float* logits, const int32_t* labels, int64_t rows, int64_t classes, float* stats,
                           float* row_loss, void* stream) {
  if (rows <= 0 || classes <= 0) return;
  cross_entropy_forward_kernel<<<static_cast<unsigned>(rows), row_threads(classes), 0,
                                 static_cast<cudaStream_t>(stream)>>>(logits, labels, classes, stats, row_loss);
  check(cudaGetLastError(), "cross_entropy_forward launch");
}

void cross_entropy_backward(const float* logits, const int32_t* labels, const float* stats, float g, int64_t rows,
                            int64_t classes, float* dlogits, void* stream) {
  if (rows <= 0 || classes <= 0) return;
  cross_entropy_backward_kernel<<<static_cast<unsigned>(rows), row_threads(classes), 0,
                                  static_cast<cudaStream_t>(stream)>>>(logits, labels, stats,
                                                                        g / static_cast<float>(rows), classes, dlogits);
  check(cudaGetLastError(), "cross_entropy_backward launch");
}

void gelu_forward(const float* x, float* y, int64_t n, void* stream) {
  if (n <= 0) return;
  gelu_forward_kernel<<<element_blocks(n), kElementThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, y, n);
  check(cudaGetLastError(), "gelu_forward launch");
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, void* stream) {
  if (n <= 0) return;
  gelu_backward_kernel<<<element_blocks(n), kElementThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, dy, dx, n);
  check(cudaGetLastError(), "gelu_backward launch");
}

void attention_forward(const float* qkv, float* out, float* stats, int64_t B, int64_t T, int64_t H, int64_t D,
                       void* stream) {
  const size_t shared = attention_shared_bytes(T, false);
  if (B <= 0 || T <= 0 || H <= 0) return;
  const auto rows = static_cast<unsigned>(B * H * T);
  attention_forward_kernel<<<rows, kAttentionThreads, shared, static_cast<cudaStream_t>(stream)>>>(
      qkv, out, stats, T, H, D, 1.0f / sqrtf(static_cast<float>(D)));
  check(cudaGetLastError(), "attention_forward launch");
}

void attention_backward(const float* qkv, const float* stats, const float* dout, float* dqkv, float* rowdot,
                        int64_t B, int64_t T, int64_t H, int64_t D, void* stream) {
  const size_t shared = attention_shared_bytes(T, true);
  if (B <= 0 || T <= 0 || H <= 0) return;
  const auto rows = static_cast<unsigned>(B * H * T);
  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  auto s = static_cast<cudaStream_t>(stream);
  attention_backward_dq_kernel<<<rows, kAttentionThreads, shared, s>>>(qkv, stats, dout, dqkv, rowdot, T, H, D, scale);
  check(cudaGetLastError(), "attention_backward (dq) launch");
  attention_backward_dkv_kernel<<<rows, kAttentionThreads, shared, s>>>(qkv, stats, dout, rowdot, dqkv, T, H, D, scale);
  check(cudaGetLastError(), "attention_backward (dk, dv) launch");
}

void adam_step(float* p, const float* g, float* m, float* v, int64_t n, const optim::AdamArgs& args, bool decoupled,
               void* stream) {
  if (n <= 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (decoupled) adam_kernel<true><<<element_blocks(n), kElementThreads, 0, s>>>(p, g, m, v, n, args);
  else adam_kernel<false><<<element_blocks(n), kElementThreads, 0, s>>>(p, g, m, v, n, args);
  check(cudaGetLastError(), "adam_step launch");
}

}  // namespace ds::cuda
