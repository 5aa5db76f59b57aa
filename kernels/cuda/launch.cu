// The launchers of launch.h, compiled by nvcc (kernels/cuda/CMakeLists.txt: sm_80 and sm_90, every
// warning and every register spill an error).
#include "cuda/launch.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/adam.cuh"
#include "cuda/attention.cuh"
#include "cuda/convert.cuh"
#include "cuda/cross_entropy.cuh"
#include "cuda/elementwise.cuh"
#include "cuda/flash_attention.cuh"
#include "cuda/gelu.cuh"
#include "cuda/lamb.cuh"
#include "cuda/launch_shape.h"
#include "cuda/layernorm.cuh"
#include "cuda/norm.cuh"
#include "cuda/one_state.cuh"
#include "cuda/sgd.cuh"
#include "cuda/vocab_parallel.cuh"

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

bool host_pin(void* p, size_t bytes, std::string& why) {
  const cudaError_t status = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
  if (status == cudaSuccess) return true;
  cudaGetLastError();  // not sticky: the context stays usable
  why = std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
  return false;
}

void host_unpin(void* p) { check(cudaHostUnregister(p), "cudaHostUnregister"); }

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
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // (not sticky: cleared, the device goes on)
    throw OutOfMemory("cuda: cudaMalloc of " + std::to_string(bytes) + " bytes: cudaErrorMemoryAllocation: out of memory");
  }
  check(e, "cudaMalloc");
  return p;
}

void device_free(void* p) { check(cudaFree(p), "cudaFree"); }

void copy_to_device(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
}

void copy_rows_on_device(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows,
                         void* stream) {
  if (row_bytes == 0 || rows == 0) return;
  check(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDeviceToDevice,
                          static_cast<cudaStream_t>(stream)),
        "cudaMemcpy2DAsync on the device");
}

void copy_on_device(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)),
        "cudaMemcpyAsync on the device");
}

void zero_on_device(void* dst, size_t bytes, void* stream) {
  if (bytes == 0) return;
  check(cudaMemsetAsync(dst, 0, bytes, static_cast<cudaStream_t>(stream)), "cudaMemsetAsync");
}

void synchronize() { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

void* stream_create() {
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  return stream;
}

void stream_destroy(void* stream) {
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize");
  check(cudaStreamDestroy(static_cast<cudaStream_t>(stream)), "cudaStreamDestroy");
}

void* event_create() {
  cudaEvent_t event = nullptr;
  check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  return event;
}

void event_destroy(void* event) { check(cudaEventDestroy(static_cast<cudaEvent_t>(event)), "cudaEventDestroy"); }

void event_record(void* event, void* stream) {
  check(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)), "cudaEventRecord");
}

void stream_wait_event(void* stream, void* event) {
  check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0),
        "cudaStreamWaitEvent");
}

void event_synchronize(void* event) {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(event)), "cudaEventSynchronize");
}

void copy_to_host_async(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream)),
        "cudaMemcpyAsync to the host");
}

void copy_to_device_async(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)),
        "cudaMemcpyAsync to the device");
}

void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* stats, int64_t rows,
                       int64_t dim, float eps, void* stream) {
  if (rows <= 0 || dim <= 0) return;
  layernorm_forward_kernel<<<static_cast<unsigned>(rows), row_threads(dim), 0, static_cast<cudaStream_t>(stream)>>>(
      x, gamma, beta, y, stats, dim, eps);
  check(cudaGetLastError(), "layernorm_forward launch");
}

void layernorm_backward(const float* x, const float* gamma, const float* stats, const float* dy, float* dx,
                        float* dgamma, float* dbeta, float* partial, int64_t rows, int64_t dim, void* stream) {
  if (rows <= 0 || dim <= 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  layernorm_backward_dx_kernel<<<static_cast<unsigned>(rows), row_threads(dim), 0, s>>>(x, gamma, stats, dy, dx, dim);
  check(cudaGetLastError(), "layernorm_backward (dx) launch");
  const unsigned chunks = ln_param_chunks(rows);
  layernorm_backward_partials_kernel<<<dim3(ln_param_blocks(dim), chunks), dim3(kLnParamColumns, kLnParamLanes), 0,
                                       s>>>(x, stats, dy, partial, rows, dim);
  check(cudaGetLastError(), "layernorm_backward (dgamma, dbeta partials) launch");
  layernorm_backward_totals_kernel<<<column_blocks(dim), kColumnThreads, 0, s>>>(partial, dgamma, dbeta, chunks, dim);
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

void attention_rows_to_heads(const float* rows, int64_t row_stride, float* heads, int64_t B, int64_t T, int64_t H,
                             int64_t D, void* stream) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0) return;
  rows_to_heads_kernel<<<element_blocks(B * T * H * D), kElementThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      rows, row_stride, heads, B, T, H, D);
  check(cudaGetLastError(), "attention rows_to_heads launch");
}

void attention_heads_to_rows(const float* heads, float* rows, int64_t row_stride, int64_t B, int64_t T, int64_t H,
                             int64_t D, void* stream) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0) return;
  heads_to_rows_kernel<<<element_blocks(B * T * H * D), kElementThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      heads, rows, row_stride, B, T, H, D);
  check(cudaGetLastError(), "attention heads_to_rows launch");
}

void attention_softmax_rows(float* scores, float* stats, int64_t heads, QueryChunk chunk, uint16_t* out16,
                            amp::Half type, void* stream) {
  if (heads <= 0 || chunk.rows <= 0) return;
  softmax_rows_kernel<<<static_cast<unsigned>(heads * chunk.rows), row_threads(chunk.width()), 0,
                        static_cast<cudaStream_t>(stream)>>>(scores, stats, chunk, out16, type);
  check(cudaGetLastError(), "attention softmax_rows launch");
}

void attention_probs_from_stats(float* scores, const float* stats, int64_t heads, QueryChunk chunk, uint16_t* out16,
                                amp::Half type, void* stream) {
  if (heads <= 0 || chunk.rows <= 0) return;
  probs_from_stats_kernel<<<static_cast<unsigned>(heads * chunk.rows), row_threads(chunk.width()), 0,
                            static_cast<cudaStream_t>(stream)>>>(scores, stats, chunk, out16, type);
  check(cudaGetLastError(), "attention probs_from_stats launch");
}

void attention_softmax_backward(const float* probs, float* dprobs, int64_t heads, QueryChunk chunk, uint16_t* out16,
                                amp::Half type, void* stream) {
  if (heads <= 0 || chunk.rows <= 0) return;
  softmax_backward_kernel<<<static_cast<unsigned>(heads * chunk.rows), row_threads(chunk.width()), 0,
                            static_cast<cudaStream_t>(stream)>>>(probs, dprobs, chunk, out16, type);
  check(cudaGetLastError(), "attention softmax_backward launch");
}

namespace {

// Shared memory above 48 KiB needs the kernel's opt-in.
template <class Kernel>
void allow_shared(Kernel kernel, unsigned bytes, const char* what) {
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), what);
}

}  // namespace

void flash_attention_forward(const float* qkv, float* out, float* stats, int64_t B, int64_t T, int64_t H, int64_t D,
                             amp::Half products, void* stream) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0) return;
  with_flash_types(products, D, [&](auto half, auto tiles) {
    constexpr int DT = decltype(tiles)::value;
    const auto kernel = flash_forward_kernel<decltype(half)::value, DT>;
    allow_shared(kernel, flash_forward_shared_bytes(DT), "flash attention forward: shared memory");
    kernel<<<dim3(flash_tiles(T), static_cast<unsigned>(B * H)), kFlashThreads, flash_forward_shared_bytes(DT),
             static_cast<cudaStream_t>(stream)>>>(qkv, out, stats, T, H, D, 1.0f / std::sqrt(static_cast<float>(D)));
  });
  check(cudaGetLastError(), "flash attention forward launch");
}

void flash_attention_delta(const float* out, const float* dout, float* delta, int64_t B, int64_t T, int64_t H,
                           int64_t D, void* stream) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0) return;
  const int64_t rows = B * T * H;
  flash_delta_kernel<<<flash_delta_blocks(rows), kFlashThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      out, dout, delta, T, H, D, rows);
  check(cudaGetLastError(), "flash attention backward (delta) launch");
}

void flash_attention_backward_dq(const float* qkv, const float* stats, const float* dout, const float* delta,
                                 float* dqkv, int64_t B, int64_t T, int64_t H, int64_t D, amp::Half products,
                                 void* stream) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0) return;
  with_flash_types(products, D, [&](auto half, auto tiles) {
    constexpr int DT = decltype(tiles)::value;
    const auto kernel = flash_backward_dq_kernel<decltype(half)::value, DT>;
    allow_shared(kernel, flash_dq_shared_bytes(DT), "flash attention backward (dq): shared memory");
    kernel<<<dim3(flash_tiles(T), static_cast<unsigned>(B * H)), kFlashThreads, flash_dq_shared_bytes(DT),
             static_cast<cudaStream_t>(stream)>>>(qkv, stats, dout, delta, dqkv, T, H, D,
                                                  1.0f / std::sqrt(static_cast<float>(D)));
  });
  check(cudaGetLastError(), "flash attention backward (dq) launch");
}

void flash_attention_backward_dkdv(const float* qkv, const float* stats, const float* dout, const float* delta,
                                   float* dqkv, int64_t B, int64_t T, int64_t H, int64_t D, amp::Half products,
                                   void* stream) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0) return;
  with_flash_types(products, D, [&](auto half, auto tiles) {
    constexpr int DT = decltype(tiles)::value;
    const auto kernel = flash_backward_dkdv_kernel<decltype(half)::value, DT>;
    allow_shared(kernel, flash_dkdv_shared_bytes(DT), "flash attention backward (dk, dv): shared memory");
    kernel<<<dim3(flash_tiles(T), static_cast<unsigned>(B * H), kFlashDkdvSplits<DT>), kFlashThreads,
             flash_dkdv_shared_bytes(DT),
             static_cast<cudaStream_t>(stream)>>>(qkv, stats, dout, delta, dqkv, T, H, D,
                                                  1.0f / std::sqrt(static_cast<float>(D)));
  });
  check(cudaGetLastError(), "flash attention backward (dk, dv) launch");
}

void bias_add(float* y, const float* bias, int64_t rows, int64_t cols, void* stream) {
  if (rows <= 0 || cols <= 0) return;
  bias_add_kernel<<<element_blocks(rows * cols), kElementThreads, 0, static_cast<cudaStream_t>(stream)>>>(y, bias, rows,
                                                                                                          cols);
  check(cudaGetLastError(), "bias_add launch");
}

void bias_fill(float* y, const float* bias, int64_t rows, int64_t cols, void* stream) {
  if (rows <= 0 || cols <= 0) return;
  bias_fill_kernel<<<element_blocks(rows * cols), kElementThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      y, bias, rows, cols);
  check(cudaGetLastError(), "bias_fill launch");
}

void bias_grad(const float* dy, float* dbias, int64_t rows, int64_t cols, void* stream) {
  if (rows <= 0 || cols <= 0) return;
  bias_grad_kernel<<<column_blocks(cols), kColumnThreads, 0, static_cast<cudaStream_t>(stream)>>>(dy, dbias, rows, cols);
  check(cudaGetLastError(), "bias_grad launch");
}

void add_into(float* y, const float* x, int64_t n, void* stream) {
  if (n <= 0) return;
  add_into_kernel<<<element_blocks(n), kElementThreads, 0, static_cast<cudaStream_t>(stream)>>>(y, x, n);
  check(cudaGetLastError(), "add_into launch");
}

void relu_forward(const float* x, float* y, int64_t n, void* stream) {
  if (n <= 0) return;
  relu_forward_kernel<<<element_blocks(n), kElementThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, y, n);
  check(cudaGetLastError(), "relu_forward launch");
}

void relu_backward(const float* x, const float* dy, float* dx, int64_t n, void* stream) {
  if (n <= 0) return;
  relu_backward_kernel<<<element_blocks(n), kElementThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, dy, dx, n);
  check(cudaGetLastError(), "relu_backward launch");
}

void half_to_float(amp::Half type, const uint16_t* in, float* out, int64_t n, void* stream) {
  if (n <= 0) return;
  half_to_float_kernel<<<element_blocks(n), kElementThreads, 0, static_cast<cudaStream_t>(stream)>>>(type, in, out, n);
  check(cudaGetLastError(), "half_to_float launch");
}

void float_to_half_padded(amp::Half type, const float* in, int64_t rows, int64_t cols, uint16_t* out, int64_t out_rows,
                          int64_t out_cols, void* stream) {
  const int64_t n = out_rows * out_cols;
  if (n <= 0) return;
  float_to_half_padded_kernel<<<element_blocks(n), kElementThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      type, in, rows, cols, out, out_rows, out_cols);
  check(cudaGetLastError(), "float_to_half_padded launch");
}

void float_to_half(amp::Half type, const float* in, uint16_t* out, int64_t n, void* stream) {
  if (n <= 0) return;
  float_to_half_kernel<<<element_blocks(n), kElementThreads, 0, static_cast<cudaStream_t>(stream)>>>(type, in, out, n);
  check(cudaGetLastError(), "float_to_half launch");
}

void half_accumulate(amp::Half type, const float* in, uint16_t* out, int64_t n, void* stream) {
  if (n <= 0) return;
  half_accumulate_kernel<<<element_blocks(n), kElementThreads, 0, static_cast<cudaStream_t>(stream)>>>(type, in, out,
                                                                                                      n);
  check(cudaGetLastError(), "half_accumulate launch");
}

void round_to_half(amp::Half type, float* x, int64_t n, void* stream) {
  if (n <= 0) return;
  round_to_half_kernel<<<element_blocks(n), kElementThreads, 0, static_cast<cudaStream_t>(stream)>>>(type, x, n);
  check(cudaGetLastError(), "round_to_half launch");
}

void scale(float* x, int64_t n, double factor, void* stream) {
  if (n <= 0) return;
  scale_kernel<<<element_blocks(n), kElementThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, n, factor);
  check(cudaGetLastError(), "scale launch");
}

void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe, float* out, int64_t B, int64_t T,
                       int64_t C, int64_t vocab, void* stream) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  embedding_forward_kernel<<<element_blocks(B * T * C), kElementThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      tokens, wte, wpe, out, B * T, T, C, vocab);
  check(cudaGetLastError(), "embedding_forward launch");
}

void embedding_backward(const int32_t* tokens, const float* dout, float* dwte, float* dwpe, int64_t B, int64_t T,
                        int64_t C, int64_t vocab, void* stream) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  embedding_backward_wpe_kernel<<<column_blocks(T * C), kColumnThreads, 0, s>>>(dout, dwpe, B, T, C);
  check(cudaGetLastError(), "embedding_backward (dwpe) launch");
  embedding_backward_wte_kernel<<<dim3(column_blocks(C), embedding_token_groups(B * T)), kColumnThreads, 0, s>>>(
      tokens, dout, dwte, B * T, C, vocab);
  check(cudaGetLastError(), "embedding_backward (dwte) launch");
}

void embedding_rows_forward(const int32_t* tokens, const float* wte_rows, float* out, int64_t n, int64_t C,
                            int64_t first, int64_t rows, int64_t vocab, void* stream) {
  if (n <= 0 || C <= 0) return;
  embedding_rows_forward_kernel<<<element_blocks(n * C), kElementThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      tokens, wte_rows, out, n, C, first, rows, vocab);
  check(cudaGetLastError(), "embedding_rows_forward launch");
}

void embedding_rows_backward(const int32_t* tokens, const float* dout, float* dwte_rows, int64_t n, int64_t C,
                             int64_t first, int64_t rows, void* stream) {
  if (n <= 0 || C <= 0) return;
  embedding_rows_backward_kernel<<<dim3(column_blocks(C), embedding_token_groups(n)), kColumnThreads, 0,
                                   static_cast<cudaStream_t>(stream)>>>(
      tokens, dout, dwte_rows, n, C, first, rows);
  check(cudaGetLastError(), "embedding_rows_backward launch");
}

void cross_entropy_shard_max(const float* logits, const int32_t* labels, int64_t n, int64_t classes, int64_t first,
                             int64_t vocab, float* stats, void* stream) {
  if (n <= 0) return;
  cross_entropy_shard_max_kernel<<<column_blocks(n), kColumnThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      logits, labels, n, classes, first, vocab, stats);
  check(cudaGetLastError(), "cross_entropy_shard_max launch");
}

void cross_entropy_shard_sumexp(const float* logits, int64_t n, int64_t classes, float* stats, void* stream) {
  if (n <= 0) return;
  cross_entropy_shard_sumexp_kernel<<<column_blocks(n), kColumnThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      logits, n, classes, stats);
  check(cudaGetLastError(), "cross_entropy_shard_sumexp launch");
}

void cross_entropy_shard_loss(const float* stats, int64_t n, float* loss, void* stream) {
  cross_entropy_shard_loss_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(stats, n, loss);
  check(cudaGetLastError(), "cross_entropy_shard_loss launch");
}

void cross_entropy_shard_backward(const float* logits, const int32_t* labels, const float* stats, const float* dloss,
                                  int64_t n, int64_t classes, int64_t first, float* dlogits, void* stream) {
  if (n <= 0 || classes <= 0) return;
  cross_entropy_shard_backward_kernel<<<element_blocks(n * classes), kElementThreads, 0,
                                        static_cast<cudaStream_t>(stream)>>>(logits, labels, stats, dloss, n, classes,
                                                                             first, dlogits);
  check(cudaGetLastError(), "cross_entropy_shard_backward launch");
}

void sum_squares(const float* x, int64_t n, double* total, double* partial, void* stream) {
  if (n <= 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  const unsigned blocks = sum_squares_blocks(n);
  sum_squares_partial_kernel<<<blocks, kReduceThreads, 0, s>>>(x, n, partial);
  check(cudaGetLastError(), "sum_squares (partials) launch");
  sum_partials_kernel<<<1, kReduceThreads, 0, s>>>(partial, blocks, total);
  check(cudaGetLastError(), "sum_squares (total) launch");
}

void find_nonfinite(const float* x, int64_t n, int32_t* flag, void* stream) {
  if (n <= 0) return;
  nonfinite_kernel<<<element_blocks(n), kElementThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, n, flag);
  check(cudaGetLastError(), "find_nonfinite launch");
}

void adam_step(float* p, const float* g, float* m, float* v, int64_t n, const cpu::AdamArgs& args, bool decoupled,
               void* stream) {
  if (n <= 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (decoupled) adam_kernel<true><<<element_blocks(n), kElementThreads, 0, s>>>(p, g, m, v, n, args);
  else adam_kernel<false><<<element_blocks(n), kElementThreads, 0, s>>>(p, g, m, v, n, args);
  check(cudaGetLastError(), "adam_step launch");
}

void adam_steps(const AdamSegment* segments, size_t count, const cpu::AdamArgs& args, bool decoupled,
                const void* table, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const auto t = locate_table(segments, count, table);
  if (t.count == 0) return;
  if (decoupled) adam_multi_kernel<true><<<t.count, kElementThreads, 0, s>>>(t.segments, t.blocks, args);
  else adam_multi_kernel<false><<<t.count, kElementThreads, 0, s>>>(t.segments, t.blocks, args);
  check(cudaGetLastError(), "adam_steps launch");
}

void round_copies(amp::Half type, const RoundSegment* segments, size_t count, const void* table, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const auto t = locate_table(segments, count, table);
  if (t.count == 0) return;
  round_multi_kernel<<<t.count, kElementThreads, 0, s>>>(type, t.segments, t.blocks);
  check(cudaGetLastError(), "round_copies launch");
}

void move_multi(MoveKind kind, amp::Half type, const MoveSegment* segments, size_t count, const void* table,
                void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const auto t = locate_table(segments, count, table);
  if (t.count == 0) return;
  switch (kind) {
    case MoveKind::copy: move_multi_kernel<MoveKind::copy><<<t.count, kElementThreads, 0, s>>>(type, t.segments, t.blocks); break;
    case MoveKind::narrow: move_multi_kernel<MoveKind::narrow><<<t.count, kElementThreads, 0, s>>>(type, t.segments, t.blocks); break;
    case MoveKind::widen: move_multi_kernel<MoveKind::widen><<<t.count, kElementThreads, 0, s>>>(type, t.segments, t.blocks); break;
  }
  check(cudaGetLastError(), "move_multi launch");
}

void scale_multi(const ScaleSegment* segments, size_t count, double factor, const void* table, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const auto t = locate_table(segments, count, table);
  if (t.count == 0) return;
  scale_multi_kernel<<<t.count, kElementThreads, 0, s>>>(t.segments, t.blocks, factor);
  check(cudaGetLastError(), "scale_multi launch");
}

void sum_squares_multi(const SquaresSegment* segments, size_t count, double* total, const void* table, double* partial,
                       void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const auto t = locate_table(segments, count, table);
  if (t.count == 0) return;
  sum_squares_multi_kernel<<<t.count, kReduceThreads, 0, s>>>(t.segments, t.blocks, partial);
  check(cudaGetLastError(), "sum_squares_multi (partials) launch");
  sum_partials_kernel<<<1, kReduceThreads, 0, s>>>(partial, t.count, total);
  check(cudaGetLastError(), "sum_squares_multi (total) launch");
}

void sgd_step(float* p, const float* g, float* buf, int64_t n, const cpu::SgdArgs& args, void* stream) {
  if (n <= 0) return;
  with_sgd_kind(args, [&](auto momentum, auto nesterov, auto first) {
    sgd_kernel<decltype(momentum)::value, decltype(nesterov)::value, decltype(first)::value>
        <<<element_blocks(n), kElementThreads, 0, static_cast<cudaStream_t>(stream)>>>(p, g, buf, n, args);
  });
  check(cudaGetLastError(), "sgd_step launch");
}

void sgd_steps(const SgdSegment* segments, size_t count, const cpu::SgdArgs& args, const void* table, void* stream) {
  const auto t = locate_table(segments, count, table);
  if (t.count == 0) return;
  with_sgd_kind(args, [&](auto momentum, auto nesterov, auto first) {
    sgd_multi_kernel<decltype(momentum)::value, decltype(nesterov)::value, decltype(first)::value>
        <<<t.count, kElementThreads, 0, static_cast<cudaStream_t>(stream)>>>(t.segments, t.blocks, args);
  });
  check(cudaGetLastError(), "sgd_steps launch");
}

namespace {

template <class Update>
void one_state_steps(const OneStateSegment* segments, size_t count, Update update, const void* table, void* stream,
                     const char* what) {
  const auto t = locate_table(segments, count, table);
  if (t.count == 0) return;
  one_state_multi_kernel<<<t.count, kElementThreads, 0, static_cast<cudaStream_t>(stream)>>>(t.segments, t.blocks,
                                                                                             update);
  check(cudaGetLastError(), what);
}

}  // namespace

void lion_steps(const OneStateSegment* segments, size_t count, const cpu::LionArgs& args, const void* table,
                void* stream) {
  one_state_steps(segments, count, LionUpdate{args}, table, stream, "lion_steps launch");
}

void adagrad_steps(const OneStateSegment* segments, size_t count, const cpu::AdagradArgs& args, const void* table,
                   void* stream) {
  one_state_steps(segments, count, AdagradUpdate{args}, table, stream, "adagrad_steps launch");
}

void rmsprop_steps(const OneStateSegment* segments, size_t count, const cpu::RmspropArgs& args, const void* table,
                   void* stream) {
  if (args.momentum > 0.0f || args.centered) throw std::invalid_argument("rmsprop_steps: one state only");
  one_state_steps(segments, count, RmspropUpdate{args}, table, stream, "rmsprop_steps launch");
}

void lamb_moments(const LambSegment* segments, size_t count, const cpu::LambArgs& args, double* sums,
                  const void* table, double* partial, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const auto t = locate_table(segments, count, table);
  if (count == 0) return;
  if (t.count > 0) lamb_moments_kernel<<<t.count, kReduceThreads, 0, s>>>(t.segments, t.blocks, args, partial);
  check(cudaGetLastError(), "lamb_moments launch");
  lamb_sums_kernel<<<static_cast<unsigned>(count), kReduceThreads, 0, s>>>(t.segments, partial, sums);
  check(cudaGetLastError(), "lamb_moments (sums) launch");
}

void lamb_apply(const LambSegment* segments, size_t count, const cpu::LambArgs& args, const float* scales,
                const void* table, void* stream) {
  const auto t = locate_table(segments, count, table);
  if (t.count == 0) return;
  lamb_apply_kernel<<<t.count, kElementThreads, 0, static_cast<cudaStream_t>(stream)>>>(t.segments, t.blocks, args,
                                                                                      scales);
  check(cudaGetLastError(), "lamb_apply launch");
}

}  // namespace ds::cuda
