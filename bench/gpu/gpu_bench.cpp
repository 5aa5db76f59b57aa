// bench/gpu's side "ours": times kernels/cuda's launchers on this machine's GPU (CUDA events) and the
// bound they are held to; prints one JSON line. See bench/gpu/run.py.
//   gpu_bench adam --params N --steps S
// adam: one fused AdamW step over N fp32 parameters (reads p, g, m, v; writes p, m, v: 28 bytes per
// parameter), against a device-to-device copy of 14·N bytes (the same 28·N bytes moved).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "cuda/launch.h"

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "gpu_bench: %s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}

// Mean milliseconds of `steps` runs of `body` after 3 untimed ones, by CUDA events on the default stream.
double mean_ms(int steps, const std::function<void()>& body) {
  for (int i = 0; i < 3; ++i) body();
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  check(cudaEventRecord(start, nullptr), "cudaEventRecord");
  for (int i = 0; i < steps; ++i) body();
  check(cudaEventRecord(stop, nullptr), "cudaEventRecord");
  check(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / steps;
}

int adam(long long params, int steps) {
  const size_t n = static_cast<size_t>(params), bytes = n * sizeof(float);
  float *p, *g, *m, *v;
  void *copy_src, *copy_dst;
  for (float** a : {&p, &g, &m, &v}) check(cudaMalloc(a, bytes), "cudaMalloc");
  check(cudaMalloc(&copy_src, 14 * n), "cudaMalloc");
  check(cudaMalloc(&copy_dst, 14 * n), "cudaMalloc");
  check(cudaMemset(p, 0x3c, bytes), "cudaMemset");  // 0x3c3c3c3c: about 0.0115, a normal float
  check(cudaMemset(g, 0x3b, bytes), "cudaMemset");
  check(cudaMemset(m, 0, bytes), "cudaMemset");
  check(cudaMemset(v, 0, bytes), "cudaMemset");
  check(cudaMemset(copy_src, 1, 14 * n), "cudaMemset");
  const ds::optim::AdamArgs args{0.9f, 0.999f, 1e-8f, 0.01f, -1e-3f / 0.1f, 1.0f / std::sqrt(0.001f), -1e-5f};
  const double copy_ms = mean_ms(steps, [&] { check(cudaMemcpyAsync(copy_dst, copy_src, 14 * n, cudaMemcpyDeviceToDevice, nullptr), "cudaMemcpyAsync"); });
  const double adam_ms = mean_ms(steps, [&] { ds::cuda::adam_step(p, g, m, v, params, args, true, nullptr); });
  check(cudaDeviceSynchronize(), "the AdamW steps");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const double moved = 28.0 * static_cast<double>(n);
  std::printf("{\"side\": \"ours\", \"bench\": \"adam\", \"device\": \"%s\", \"params\": %lld, \"steps\": %d, "
              "\"adam_ms\": %.4f, \"adam_gb_per_s\": %.1f, \"copy_ms\": %.4f, \"copy_gb_per_s\": %.1f}\n",
              prop.name, params, steps, adam_ms, moved / adam_ms / 1e6, copy_ms, moved / copy_ms / 1e6);
  for (void* a : {static_cast<void*>(p), static_cast<void*>(g), static_cast<void*>(m), static_cast<void*>(v), copy_src, copy_dst})
    cudaFree(a);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  long long params = 124'000'000;
  int steps = 20;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--params")) params = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    else argc = 0;  // an unknown option: the usage below
  }
  if (argc < 2 || std::strcmp(argv[1], "adam") != 0 || params <= 0 || steps <= 0) {
    std::fprintf(stderr, "usage: gpu_bench adam [--params N] [--steps S]\n");
    return 2;
  }
  return adam(params, steps);
}
