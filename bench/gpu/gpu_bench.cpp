// bench/gpu's side "ours": times kernels/cuda's launchers on this machine's GPU (CUDA events) and the
// bound they are held to; prints one JSON line. See bench/gpu/run.py.
//   gpu_bench adam --params N --steps S
//   gpu_bench gemm --size N --steps S
//   gpu_bench linears --batch B --seq T --embd C --steps S
//   gpu_bench attention --batch B --seq T --heads H --head_dim D --steps S
//   gpu_bench rowsums --batch B --seq T --embd C --vocab V --steps S
//   gpu_bench gpt|gpt_bf16|gpt_fp16 --batch B --seq T --layers L --heads H --embd C --vocab V --steps S
//   gpu_bench nccl --bytes N --steps S [--ranks R]
// adam: one fused AdamW step over N fp32 parameters (reads p, g, m, v; writes p, m, v: 28 bytes per
// parameter), against a device-to-device copy of 14·N bytes (the same 28·N bytes moved).
// gemm: an N x N x N bf16 product (fp32 accumulation, bf16 out) through kernels/cuda/gemm.h: TFLOP/s.
// linears: GPT-2's four linear layers' forward products in fp32 as the CUDA backend runs them, out[B·T, n] +=
// x[B·T, k] · w[n, k]ᵀ (accumulated onto the bias already in out): c_attn (n 3C, k C), attn.c_proj (C, C), c_fc
// (4C, C), mlp.c_proj (C, 4C); ms and TFLOP/s of each.
// attention: kernels/cuda's causal attention (attention.cpp) forward, and forward + backward, on qkv[B, T, 3, H, D],
// with fp32 products (GEMMs), and with bf16 ones through the fused kernel (flash_attention.cuh) and through the GEMMs.
// rowsums: the two backward ops that sum over GPT-2's B·T rows: LayerNorm's (dx, dgamma, dbeta over [B·T, C]) and
// the token + position embedding's (dwte [V, C] from B·T uniform random tokens, dwpe [T, C]); ms of each.
// gpt: training steps of the gpt plugin on the CUDA backend (worker/device_model.h: the plugin's layers
// through the backend's ops, then AdamW), fp32: tokens/s and the model's TFLOP/s (nanoGPT's count,
// 6·Ψ + 12·L·T·C FLOPs per token; without attention's recomputed product). gpt_bf16, gpt_fp16: the
// same with the backend's 16-bit products (set_half_matmuls: matmuls and attention), as torch.autocast's.
// nccl: runtime/comm's NCCL group (nccl_group.h) over R GPUs (default: every visible one), one thread rank
// per GPU: all-reduce, reduce-scatter, all-gather and broadcast of N-byte fp32 buffers (nccl-tests' sizes: the
// whole buffer; a reduce-scatter's input, an all-gather's output), S calls issued back to back, then waited for;
// the slowest rank's mean time per call; algbw = N / time, busbw = algbw × 2(R−1)/R (all-reduce), (R−1)/R
// (reduce-scatter, all-gather) or 1 (broadcast), as nccl-tests define them.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "comm/nccl_group.h"
#include "comm/store.h"
#include "cuda/gemm.h"
#include "cuda/launch.h"
#include "cuda/launch_shape.h"
#include "device_model.h"
#include "optim/optimizers.h"
#include "plugin/plugin.h"

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
  const ds::cpu::AdamArgs args{0.9f, 0.999f, 1e-8f, 0.01f, -1e-3f / 0.1f, 1.0f / std::sqrt(0.001f), -1e-5f};
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

int gemm(long long size, int steps) {
  const size_t n = static_cast<size_t>(size), bytes = n * n * 2;
  void *a, *b, *c;
  for (void** p : {&a, &b, &c}) check(cudaMalloc(p, bytes), "cudaMalloc");
  check(cudaMemset(a, 0x3c, bytes), "cudaMemset");  // bf16 0x3c3c: about 0.0115
  check(cudaMemset(b, 0x3c, bytes), "cudaMemset");
  const auto bf16 = ds::cuda::GemmType::BF16;
  const double ms = mean_ms(steps, [&] {
    ds::cuda::gemm(a, b, c, size, size, size, false, false, bf16, bf16, 1.0f, 0.0f, 1, 0, 0, 0, nullptr);
  });
  check(cudaDeviceSynchronize(), "the products");
  std::printf("{\"side\": \"ours\", \"bench\": \"gemm\", \"size\": %lld, \"ms\": %.4f, \"tflops\": %.1f}\n", size, ms,
              2.0 * static_cast<double>(n * n * n) / ms / 1e9);
  for (void* p : {a, b, c}) cudaFree(p);
  return 0;
}

int linears(long long rows, long long C, int steps) {
  struct Shape { const char* name; long long n, k; };
  const Shape shapes[] = {{"c_attn", 3 * C, C}, {"attn_c_proj", C, C}, {"c_fc", 4 * C, C}, {"mlp_c_proj", C, 4 * C}};
  float *x, *w, *out;
  check(cudaMalloc(&x, static_cast<size_t>(rows * 4 * C) * 4), "cudaMalloc");
  check(cudaMalloc(&w, static_cast<size_t>(4 * C * C) * 4), "cudaMalloc");
  check(cudaMalloc(&out, static_cast<size_t>(rows * 4 * C) * 4), "cudaMalloc");
  check(cudaMemset(x, 0x3c, static_cast<size_t>(rows * 4 * C) * 4), "cudaMemset");  // about 0.0115
  check(cudaMemset(w, 0x3b, static_cast<size_t>(4 * C * C) * 4), "cudaMemset");     // about 0.0029
  check(cudaMemset(out, 0, static_cast<size_t>(rows * 4 * C) * 4), "cudaMemset");
  const auto f32 = ds::cuda::GemmType::F32;
  std::string fields;
  for (const Shape& s : shapes) {
    const double ms = mean_ms(steps, [&] { ds::cuda::gemm(x, w, out, rows, s.n, s.k, false, true, f32, f32, 1.0f, 1.0f, 1, 0, 0, 0, nullptr); });
    fields += ", \"" + std::string(s.name) + "_ms\": " + std::to_string(ms) + ", \"" + s.name +
              "_tflops\": " + std::to_string(2.0 * static_cast<double>(rows * s.n * s.k) / ms / 1e9);
  }
  check(cudaDeviceSynchronize(), "the products");
  std::printf("{\"side\": \"ours\", \"bench\": \"linears\", \"rows\": %lld, \"embd\": %lld%s}\n", rows, C, fields.c_str());
  for (float* p : {x, w, out}) cudaFree(p);
  return 0;
}

int row_sums(long long B, long long T, long long C, long long V, int steps) {
  const size_t rows = static_cast<size_t>(B * T), n = rows * static_cast<size_t>(C);
  float *x, *dy, *dx, *gamma, *dgamma, *dbeta, *stats, *partial, *dwte, *dwpe;
  int32_t* tokens;
  const size_t partial_floats = static_cast<size_t>(ds::cuda::ln_param_partial_floats(B * T, C));
  for (auto [p, floats] : {std::pair{&x, n}, {&dy, n}, {&dx, n}, {&gamma, size_t(C)}, {&dgamma, size_t(C)},
                           {&dbeta, size_t(C)}, {&stats, 2 * rows}, {&partial, partial_floats},
                           {&dwte, static_cast<size_t>(V * C)}, {&dwpe, static_cast<size_t>(T * C)}}) {
    check(cudaMalloc(p, floats * 4), "cudaMalloc");
    check(cudaMemset(*p, 0x3c, floats * 4), "cudaMemset");  // about 0.0115: finite values throughout
  }
  check(cudaMalloc(&tokens, rows * 4), "cudaMalloc");
  std::mt19937 rng(1);
  std::vector<int32_t> host_tokens(rows);
  for (auto& t : host_tokens) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
  check(cudaMemcpy(tokens, host_tokens.data(), rows * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  const double layernorm_ms = mean_ms(steps, [&] {
    ds::cuda::layernorm_backward(x, gamma, stats, dy, dx, dgamma, dbeta, partial, B * T, C, nullptr);
  });
  const double embedding_ms = mean_ms(steps, [&] { ds::cuda::embedding_backward(tokens, dy, dwte, dwpe, B, T, C, V, nullptr); });
  check(cudaDeviceSynchronize(), "the row sums");
  std::printf("{\"side\": \"ours\", \"bench\": \"rowsums\", \"rows\": %zu, \"embd\": %lld, \"vocab\": %lld, "
              "\"layernorm_backward_ms\": %f, \"embedding_backward_ms\": %f}\n",
              rows, C, V, layernorm_ms, embedding_ms);
  for (float* p : {x, dy, dx, gamma, dgamma, dbeta, stats, partial, dwte, dwpe}) cudaFree(p);
  cudaFree(tokens);
  return 0;
}

int attention(long long B, long long T, long long H, long long D, int steps) {
  const size_t n = static_cast<size_t>(B * T * H * D), rows = static_cast<size_t>(B * H * T);
  float *qkv, *out, *stats, *dout, *dqkv, *workspace;
  check(cudaMalloc(&qkv, 3 * n * 4), "cudaMalloc");
  check(cudaMalloc(&dqkv, 3 * n * 4), "cudaMalloc");
  check(cudaMalloc(&out, n * 4), "cudaMalloc");
  check(cudaMalloc(&dout, n * 4), "cudaMalloc");
  check(cudaMalloc(&stats, 2 * rows * 4), "cudaMalloc");
  using ds::cuda::AttentionKernel;
  const auto gemm_floats = ds::cuda::attention_workspace_floats(B, T, H, D, ds::amp::Half::BF16, AttentionKernel::gemm);
  check(cudaMalloc(&workspace, static_cast<size_t>(gemm_floats) * 4), "cudaMalloc");  // the largest of the three
  check(cudaMemset(qkv, 0x3c, 3 * n * 4), "cudaMemset");
  check(cudaMemset(dout, 0x3b, n * 4), "cudaMemset");
  struct Variant {
    std::optional<ds::amp::Half> products;
    AttentionKernel kernel;
  };
  // fp32 products (GEMMs), bf16 products through the fused kernel, bf16 products through the GEMMs
  const Variant variants[3] = {{std::nullopt, AttentionKernel::gemm},
                               {ds::amp::Half::BF16, AttentionKernel::fused},
                               {ds::amp::Half::BF16, AttentionKernel::gemm}};
  double forward_ms[3], both_ms[3];
  for (int i = 0; i < 3; ++i) {
    const Variant v = variants[i];
    if (v.kernel == AttentionKernel::fused && (D > ds::cuda::kFlashMaxHeadDim || B * H > ds::cuda::kFlashMaxHeads)) {
      forward_ms[i] = both_ms[i] = NAN;  // beyond the fused kernel's reach
      continue;
    }
    forward_ms[i] = mean_ms(steps, [&] {
      ds::cuda::attention_forward(qkv, out, stats, workspace, B, T, H, D, nullptr, v.products, v.kernel);
    });
    both_ms[i] = mean_ms(steps, [&] {
      ds::cuda::attention_forward(qkv, out, stats, workspace, B, T, H, D, nullptr, v.products, v.kernel);
      ds::cuda::attention_backward(qkv, out, stats, dout, dqkv, workspace, B, T, H, D, nullptr, v.products, v.kernel);
    });
  }
  check(cudaDeviceSynchronize(), "the attention passes");
  const auto ms = [](double v) { return std::isnan(v) ? std::string("null") : std::to_string(v); };
  std::printf("{\"side\": \"ours\", \"bench\": \"attention\", \"shape\": [%lld, %lld, %lld, %lld], \"forward_ms\": %s, "
              "\"forward_backward_ms\": %s, \"bf16_forward_ms\": %s, \"bf16_forward_backward_ms\": %s, "
              "\"bf16_gemm_forward_ms\": %s, \"bf16_gemm_forward_backward_ms\": %s}\n",
              B, T, H, D, ms(forward_ms[0]).c_str(), ms(both_ms[0]).c_str(), ms(forward_ms[1]).c_str(),
              ms(both_ms[1]).c_str(), ms(forward_ms[2]).c_str(), ms(both_ms[2]).c_str());
  for (float* p : {qkv, out, stats, dout, dqkv, workspace}) cudaFree(p);
  return 0;
}

int gpt(const std::string& bench, long long B, long long T, long long layers, long long heads, long long embd,
        long long vocab, int steps) {
  const std::string config = "{\"n_layer\": " + std::to_string(layers) + ", \"n_head\": " + std::to_string(heads) +
                             ", \"n_embd\": " + std::to_string(embd) + ", \"seq_len\": " + std::to_string(T) +
                             ", \"vocab_size\": " + std::to_string(vocab) + "}";
  ds::backend::Cuda cuda(0);
  cuda.set_half_matmuls(bench == "gpt_bf16"   ? std::optional(ds::amp::Half::BF16)
                        : bench == "gpt_fp16" ? std::optional(ds::amp::Half::F16)
                                              : std::nullopt);
  const auto plugin = ds::Plugin::load("gpt", config, cuda.table());
  const long long n = ds::DeviceModel::count_parameters(*plugin);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> initial(static_cast<size_t>(n));
  for (float& x : initial) x = normal(rng);
  ds::DeviceModel model(*plugin, B, initial);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> input(static_cast<size_t>(B * T)), target(input.size());
  for (auto* v : {&input, &target})
    for (int32_t& t : *v) t = token(rng);
  float loss = 0;
  auto step = [&](int i) {
    loss = model.forward_backward(input, target);
    const float lr = 3e-4f, bc1 = ds::optim::bias_correction(0.9f, i), bc2 = ds::optim::bias_correction(0.999f, i);
    model.adam_step({0.9f, 0.999f, 1e-8f, 0.1f, -lr / bc1, 1.0f / std::sqrt(bc2), -lr * 0.1f}, true);
  };
  for (int i = 1; i <= 3; ++i) step(i);
  model.synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 4; i < 4 + steps; ++i) step(i);
  model.synchronize();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / steps;
  const double adam_ms = mean_ms(steps, [&] { model.adam_step({0.9f, 0.999f, 1e-8f, 0.1f, -3e-4f, 1.0f, -3e-5f}, true); });
  const double tokens = static_cast<double>(B * T);
  const double flops = 6.0 * static_cast<double>(n) + 12.0 * static_cast<double>(layers * T * embd);
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("{\"side\": \"ours\", \"bench\": \"%s\", \"device\": \"%s\", \"params\": %lld, \"batch\": %lld, "
              "\"seq\": %lld, \"step_ms\": %.2f, \"adam_ms\": %.2f, \"tokens_per_s\": %.0f, \"model_tflops\": %.2f, "
              "\"loss\": %.4f}\n",
              bench.c_str(), prop.name, n, B, T, ms, adam_ms, tokens / ms * 1e3, flops * tokens / ms / 1e9,
              loss);
  return 0;
}

// One rank of the NCCL bench: each collective's mean seconds per call into seconds[collective].
void nccl_rank(std::shared_ptr<ds::Store> store, int rank, int ranks, size_t bytes, int steps, double* seconds) {
  ds::cuda::set_device(rank);
  auto group = ds::make_nccl_group(ds::real_nccl_api(), std::move(store), rank, ranks, "bench",
                                   std::chrono::seconds(300), rank);
  const size_t count = bytes / 4, share = count / static_cast<size_t>(ranks);
  void *a, *b;
  check(cudaMalloc(&a, bytes), "cudaMalloc");
  check(cudaMalloc(&b, bytes), "cudaMalloc");
  check(cudaMemset(a, 0, bytes), "cudaMemset");
  const std::function<std::unique_ptr<ds::Work>()> calls[] = {
      [&] { return group->allreduce_async(a, count, ds::DataType::F32, ds::ReduceOp::Sum); },
      [&] { return group->reduce_scatter_async(a, b, share, ds::DataType::F32, ds::ReduceOp::Sum); },
      [&] { return group->allgather_async(a, b, share, ds::DataType::F32); },
      [&] { return group->broadcast_async(a, count, ds::DataType::F32, 0); },
  };
  for (size_t c = 0; c < 4; ++c) {
    for (int i = 0; i < 3; ++i) calls[c]()->wait();
    group->barrier();
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::unique_ptr<ds::Work>> works;
    for (int i = 0; i < steps; ++i) works.push_back(calls[c]());
    for (auto& w : works) w->wait();
    seconds[c] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps;
  }
  check(cudaFree(a), "cudaFree");
  check(cudaFree(b), "cudaFree");
}

int nccl(long long bytes, int steps, int ranks) {
  if (ranks == 0) ranks = ds::cuda::device_count();
  std::vector<std::vector<double>> seconds(static_cast<size_t>(ranks), std::vector<double>(4, 0.0));
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  auto store = ds::make_memory_store();
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        nccl_rank(store, r, ranks, static_cast<size_t>(bytes), steps, seconds[static_cast<size_t>(r)].data());
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r)
    if (!errors[static_cast<size_t>(r)].empty()) {
      std::fprintf(stderr, "gpu_bench: rank %d: %s\n", r, errors[static_cast<size_t>(r)].c_str());
      return 1;
    }
  const char* names[] = {"allreduce", "reduce_scatter", "allgather", "broadcast"};
  const double n = ranks, factors[] = {2 * (n - 1) / n, (n - 1) / n, (n - 1) / n, 1.0};
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  // A reduce-scatter's input and an all-gather's output: R equal shares of the buffer (its whole when R divides it).
  const double shared = 4.0 * static_cast<double>(static_cast<size_t>(bytes) / 4 / static_cast<size_t>(ranks)) * n,
               moved[] = {static_cast<double>(bytes / 4 * 4), shared, shared, static_cast<double>(bytes / 4 * 4)};
  std::string fields;
  for (size_t c = 0; c < 4; ++c) {
    double slowest = 0.0;
    for (const auto& rank : seconds) slowest = std::max(slowest, rank[c]);
    const double algbw = moved[c] / slowest / 1e9;
    fields += ", \"" + std::string(names[c]) + "_us\": " + std::to_string(slowest * 1e6) + ", \"" + names[c] +
              "_busbw\": " + std::to_string(algbw * factors[c]);
  }
  std::printf("{\"side\": \"ours\", \"bench\": \"nccl\", \"device\": \"%s\", \"ranks\": %d, \"bytes\": %lld%s}\n",
              prop.name, ranks, bytes, fields.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  long long params = 124'000'000, size = 8192, batch = 8, seq = 1024, heads = 12, head_dim = 64, layers = 12,
            embd = 768, vocab = 50257, bytes = 256LL << 20, ranks = 0;
  int steps = 20;
  bool ok = argc >= 2;
  for (int i = 2; i + 1 < argc && ok; i += 2) {
    const std::string option = argv[i];
    const long long value = std::atoll(argv[i + 1]);
    if (option == "--params") params = value;
    else if (option == "--steps") steps = static_cast<int>(value);
    else if (option == "--size") size = value;
    else if (option == "--batch") batch = value;
    else if (option == "--seq") seq = value;
    else if (option == "--heads") heads = value;
    else if (option == "--head_dim") head_dim = value;
    else if (option == "--layers") layers = value;
    else if (option == "--embd") embd = value;
    else if (option == "--vocab") vocab = value;
    else if (option == "--bytes") bytes = value;
    else if (option == "--ranks") ranks = value;
    else ok = false;
    ok = ok && value > 0;
  }
  const std::string bench = argc >= 2 ? argv[1] : "";
  if (ok && steps > 0) try {
      if (bench == "adam") return adam(params, steps);
      if (bench == "gemm") return gemm(size, steps);
      if (bench == "linears") return linears(batch * seq, embd, steps);
      if (bench == "attention") return attention(batch, seq, heads, head_dim, steps);
      if (bench == "rowsums") return row_sums(batch, seq, embd, vocab, steps);
      if (bench == "gpt" || bench == "gpt_bf16" || bench == "gpt_fp16")
        return gpt(bench, batch, seq, layers, heads, embd, vocab, steps);
      if (bench == "nccl") return nccl(bytes, steps, static_cast<int>(ranks));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpu_bench: %s\n", e.what());
      return 1;
    }
  std::fprintf(stderr, "usage: gpu_bench adam [--params N] [--steps S]\n"
                       "       gpu_bench gemm [--size N] [--steps S]\n"
                       "       gpu_bench linears [--batch B] [--seq T] [--embd C] [--steps S]\n"
                       "       gpu_bench attention [--batch B] [--seq T] [--heads H] [--head_dim D] [--steps S]\n"
                       "       gpu_bench rowsums [--batch B] [--seq T] [--embd C] [--vocab V] [--steps S]\n"
                       "       gpu_bench gpt|gpt_bf16|gpt_fp16 [--batch B] [--seq T] [--layers L] [--heads H] [--embd C] "
                       "[--vocab V] [--steps S]\n"
                       "       gpu_bench nccl [--bytes N] [--steps S] [--ranks R]\n");
  return 2;
}
