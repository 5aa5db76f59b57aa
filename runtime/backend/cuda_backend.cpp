// The CUDA backend: plugin/ds_backend.h's ops on kernels/cuda's launchers and cuBLASLt GEMMs, on the
// device's default stream. Linked with ds_kernels_cuda (a GPU), ds_kernels_cuda_emulated (the SIMT
// emulator and the CPU GEMM, device memory being host memory: the unit tests) or the stub (every op
// fails with "built without CUDA").
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/segment_tables.h"
#include "core/format_bytes.h"
#include "cuda/gemm.h"
#include "cuda/launch.h"
#include "cuda/launch_shape.h"

namespace ds::backend {

// Multi-tensor tables kept on the device: a step uses a few per unit of layers (the 16-bit roundings) and a
// few in all (AdamW, the norm); more than this is a plan that changes its tensors.
constexpr size_t kSegmentTables = 256;

struct Cuda::State {
  int device = 0;
  ds_backend table{};
  std::string error;
  std::mutex mutex;                              // the cache; ops come from one thread at a time
  std::map<size_t, std::vector<void*>> free_blocks;  // bytes → cached device blocks not in use
  std::map<void*, size_t> used_blocks;               // block → bytes
  std::map<void*, size_t> buffers;                   // allocate()'s (the engine's buffers) → bytes
  // DS_CUDA_PROFILE=1: each op waits for the device before and after, and its wall time is summed by
  // op name; the table goes to stderr when the backend is destroyed. An op's first call is counted apart:
  // it pays one-time costs (cuBLASLt loading its kernels, a GEMM's plan, the allocation cache filling), which
  // the first GEMM of a run shows as hundreds of milliseconds.
  bool profile = false;
  struct OpTime {
    int64_t calls = 0;
    double first_seconds = 0, seconds = 0;  // the first call; the others
  };
  std::map<std::string, OpTime> op_times;
  std::optional<amp::Half> half_matmuls;             // set_half_matmuls: matmul and attention's products
  // " bf16" or " fp16" after a profiled op's name when its products are 16-bit.
  std::string products_suffix() const {
    return !half_matmuls ? "" : *half_matmuls == amp::Half::BF16 ? " bf16" : " fp16";
  }
  // A stream beside the ops' (made at its first copy) and one event per ticket of its copies not yet
  // known done (tickets done + 1 on).
  struct CopyStream {
    void* stream = nullptr;
    std::map<uint64_t, void*> events;
    uint64_t issued = 0, done = 0;
  };
  // to_host_async's and to_device_async's copies, after an event the ops record before each;
  // to_device_after's uploads on a stream of their own, so that a download queued on the first does
  // not hold them back. Their tickets carry kUploadTicket.
  CopyStream copies, uploads;
  void* ops_done = nullptr;
  std::map<uint64_t, void*> op_marks;  // ops_issued()'s events not yet used or passed
  uint64_t marks = 0;
  std::vector<void*> spare_events;
  void* take_event() {
    if (spare_events.empty()) return cuda::event_create();
    void* event = spare_events.back();
    spare_events.pop_back();
    return event;
  }
  float* ones = nullptr;                             // [ones_size] of 1.0f: bias_grad's GEMM operand
  int64_t ones_size = 0;

  // At least n ones on the device (grown as the cache's blocks are made: a full device frees the unused ones).
  const float* ones_of(int64_t n) {
    if (n > ones_size) {
      const std::vector<float> host(static_cast<size_t>(n), 1.0f);
      float* grown = nullptr;
      {
        std::lock_guard lock(mutex);
        grown = static_cast<float*>(new_block(host.size() * sizeof(float)));
      }
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
      p = new_block(bytes);
    }
    used_blocks[p] = bytes;
    return p;
  }
  // A new device allocation (under the mutex). When the device is full, the cached blocks not in use are
  // freed (cudaFree waits for the queued ops, which may still read them) and it is tried once more, as
  // PyTorch's allocator does: blocks of sizes no longer asked for (another sequence length, generation's
  // growing context) would otherwise hold the memory for good. Failing again, the error says what this
  // backend holds.
  void* new_block(size_t bytes) {
    try {
      return cuda::device_alloc(bytes);
    } catch (const cuda::OutOfMemory&) {
    }
    size_t released = 0;
    for (auto& [size, list] : free_blocks) {
      for (void* p : list) cuda::device_free(p);
      released += size * list.size();
    }
    free_blocks.clear();
    try {
      return cuda::device_alloc(bytes);
    } catch (const cuda::OutOfMemory& e) {
      size_t held = 0;
      for (const auto& [p, size] : used_blocks) held += size;
      for (const auto& [p, size] : buffers) held += size;
      held += static_cast<size_t>(ones_size) * sizeof(float);
      throw cuda::OutOfMemory(std::string(e.what()) + ": cuda:" + std::to_string(device) + " has no room for " +
                              format_bytes(bytes) + " more; this process's tensors and buffers there hold " +
                              format_bytes(held) + " (and " + format_bytes(released) +
                              " of cached blocks not in use were released first)");
    }
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
  // The multi-tensor launches' tables, in blocks of the cache above (freed with it); uploaded by a copy that
  // the default stream orders after the ops before it.
  SegmentTables tables{{[this](size_t bytes) { return take(bytes); }, [this](void* p) { give(p); },
                        [](void* dst, const void* src, size_t bytes) { cuda::copy_to_device(dst, src, bytes); }},
                       kSegmentTables};
};

namespace {

using State = Cuda::State;
State& state(void* ctx) { return *static_cast<State*>(ctx); }
constexpr void* kStream = nullptr;  // the device's default stream

template <class F>
ds_status guarded(void* ctx, const std::string& op, F&& f) noexcept {
  State& s = state(ctx);
  try {
    if (!s.profile) {
      f();
      return DS_OK;
    }
    cuda::synchronize();
    const auto start = std::chrono::steady_clock::now();
    f();
    cuda::synchronize();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    State::OpTime& t = s.op_times[op];
    (t.calls++ == 0 ? t.first_seconds : t.seconds) += seconds;
    return DS_OK;
  } catch (const cuda::OutOfMemory& e) {
    s.error = e.what();
    return DS_OUT_OF_MEMORY;
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
  Temp(Temp&& other) noexcept : s_(other.s_), p_(std::exchange(other.p_, nullptr)) {}
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
  return guarded(ctx, "alloc", [&] { *out = state(ctx).take(bytes); });
}
void release_temp(void* ctx, void* p) {
  try {
    state(ctx).give(p);
  } catch (...) {  // a map node's allocation: the block stays out of the cache, freed with the backend
  }
}
ds_status copy(void* ctx, void* dst, const void* src, size_t bytes) {
  return guarded(ctx, "copy", [&] { cuda::copy_on_device(dst, src, bytes, kStream); });
}

// A multiple of 8 elements: 16-bit rows that start 16 bytes apart, as cuBLASLt's fast kernels read them.
int64_t aligned(int64_t x) { return (x + 7) / 8 * 8; }

// The matmul op with 16-bit products: a and b rounded to 16 bits, fp32 accumulation, into fp32 c. A leading
// dimension that is not a multiple of 8 (GPT-2's vocabulary of 50257 makes three of them) sends cuBLASLt to
// slow kernels, so the product runs on operands padded with zeros to aligned rows (exact: the padding adds
// 0·0 terms) and, when c's rows are padded too, into an aligned temporary whose first m rows and n columns
// are c's.
void half_matmul(State& s, const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, bool ta, bool tb,
                 bool acc) {
  const amp::Half type = *s.half_matmuls;
  // Leading dimensions: a's is m when stored transposed, else k; b's is k when transposed, else n; c's is n.
  const int64_t mp = ta ? aligned(m) : m, kp = !ta || tb ? aligned(k) : k, np = aligned(n);
  // A stored operand [rows, cols] into a 16-bit temporary [padded_rows, padded_cols].
  auto convert = [&](const float* x, int64_t rows, int64_t cols, int64_t padded_rows, int64_t padded_cols) {
    Temp<uint16_t> x16(s, padded_rows * padded_cols);
    if (rows == padded_rows && cols == padded_cols) cuda::float_to_half(type, x, x16.get(), rows * cols, kStream);
    else cuda::float_to_half_padded(type, x, rows, cols, x16.get(), padded_rows, padded_cols, kStream);
    return x16;
  };
  const Temp<uint16_t> a16 = ta ? convert(a, k, m, kp, mp) : convert(a, m, k, mp, kp);
  const Temp<uint16_t> b16 = tb ? convert(b, n, k, np, kp) : convert(b, k, n, kp, np);
  const cuda::GemmType ab = cuda::gemm_type(type), f32 = cuda::GemmType::F32;
  if (mp == m && np == n) {
    cuda::gemm(a16.get(), b16.get(), c, m, n, kp, ta, tb, ab, f32, 1.0f, acc ? 1.0f : 0.0f, 1, 0, 0, 0, kStream);
    return;
  }
  const Temp<float> padded(s, mp * np);  // c's values in its first m rows and n columns
  const size_t row = static_cast<size_t>(n) * sizeof(float), padded_row = static_cast<size_t>(np) * sizeof(float);
  if (acc) cuda::copy_rows_on_device(padded.get(), padded_row, c, row, row, static_cast<size_t>(m), kStream);
  cuda::gemm(a16.get(), b16.get(), padded.get(), mp, np, kp, ta, tb, ab, f32, 1.0f, acc ? 1.0f : 0.0f, 1, 0, 0, 0,
             kStream);
  cuda::copy_rows_on_device(c, row, padded.get(), padded_row, row, static_cast<size_t>(m), kStream);
}

ds_status matmul(void* ctx, const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, int32_t ta,
                 int32_t tb, int32_t acc) {
  // Profiled by shape: "matmul 8192x2304x768 B^T +=" (m x n x k, which operand is transposed, accumulated).
  const std::string op = !state(ctx).profile ? std::string("matmul")
                                             : "matmul " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                                                   std::to_string(k) + (ta ? " A^T" : "") + (tb ? " B^T" : "") +
                                                   (acc ? " +=" : "");
  State& s = state(ctx);
  return guarded(ctx, op + s.products_suffix(), [&] {
    if (!s.half_matmuls) {
      cuda::gemm(a, b, c, m, n, k, ta != 0, tb != 0, cuda::GemmType::F32, cuda::GemmType::F32, 1.0f,
                 acc ? 1.0f : 0.0f, 1, 0, 0, 0, kStream);
      return;
    }
    half_matmul(s, a, b, c, m, n, k, ta != 0, tb != 0, acc != 0);
  });
}
ds_status bias_fill(void* ctx, float* y, const float* bias, int64_t rows, int64_t cols) {
  return guarded(ctx, "bias_fill", [&] { cuda::bias_fill(y, bias, rows, cols, kStream); });
}
ds_status bias_add(void* ctx, float* y, const float* bias, int64_t rows, int64_t cols) {
  return guarded(ctx, "bias_add", [&] { cuda::bias_add(y, bias, rows, cols, kStream); });
}
// dbias[1, cols] += ones[1, rows] · dy[rows, cols]: a GEMM reads dy at the memory's speed, where the
// column kernel (cuda::bias_grad, the CPU's bits) runs one thread per column down the rows.
ds_status bias_grad(void* ctx, const float* dy, float* dbias, int64_t rows, int64_t cols) {
  return guarded(ctx, "bias_grad", [&] {
    cuda::gemm(state(ctx).ones_of(rows), dy, dbias, 1, cols, rows, false, false, cuda::GemmType::F32,
               cuda::GemmType::F32, 1.0f, 1.0f, 1, 0, 0, 0, kStream);
  });
}
ds_status add_into(void* ctx, float* y, const float* x, int64_t n) {
  return guarded(ctx, "add_into", [&] { cuda::add_into(y, x, n, kStream); });
}
ds_status add(void* ctx, const float* a, const float* b, float* out, int64_t n) {
  return guarded(ctx, "add", [&] {  // out = a, then out += b: a + b in the CPU's order
    if (out != a) cuda::copy_on_device(out, a, static_cast<size_t>(n) * sizeof(float), kStream);
    cuda::add_into(out, b, n, kStream);
  });
}
ds_status layernorm_forward(void* ctx, const float* x, const float* gamma, const float* beta, float* y, float* stats,
                            int64_t rows, int64_t dim, float eps) {
  return guarded(ctx, "layernorm_forward", [&] { cuda::layernorm_forward(x, gamma, beta, y, stats, rows, dim, eps, kStream); });
}
ds_status layernorm_backward(void* ctx, const float* x, const float* gamma, const float* stats, const float* dy,
                             float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t dim) {
  return guarded(ctx, "layernorm_backward", [&] {
    const Temp<float> partial(state(ctx), cuda::ln_param_partial_floats(rows, dim));
    cuda::layernorm_backward(x, gamma, stats, dy, dx, dgamma, dbeta, partial.get(), rows, dim, kStream);
  });
}
ds_status gelu_forward(void* ctx, const float* x, float* y, int64_t n) {
  return guarded(ctx, "gelu_forward", [&] { cuda::gelu_forward(x, y, n, kStream); });
}
ds_status gelu_backward(void* ctx, const float* x, const float* dy, float* dx, int64_t n) {
  return guarded(ctx, "gelu_backward", [&] { cuda::gelu_backward(x, dy, dx, n, kStream); });
}
ds_status relu_forward(void* ctx, const float* x, float* y, int64_t n) {
  return guarded(ctx, "relu_forward", [&] { cuda::relu_forward(x, y, n, kStream); });
}
ds_status relu_backward(void* ctx, const float* x, const float* dy, float* dx, int64_t n) {
  return guarded(ctx, "relu_backward", [&] { cuda::relu_backward(x, dy, dx, n, kStream); });
}
ds_status attention_forward(void* ctx, const float* qkv, float* out, float* stats, int64_t B, int64_t T, int64_t H,
                            int64_t D) {
  State& s = state(ctx);
  return guarded(ctx, "attention_forward" + s.products_suffix(), [&] {
    const Temp<float> ws(s, cuda::attention_workspace_floats(B, T, H, D, s.half_matmuls));
    cuda::attention_forward(qkv, out, stats, ws.get(), B, T, H, D, kStream, s.half_matmuls);
  });
}
ds_status attention_backward_with_out(void* ctx, const float* qkv, const float* out, const float* stats,
                                      const float* dout, float* dqkv, int64_t B, int64_t T, int64_t H, int64_t D) {
  State& s = state(ctx);
  return guarded(ctx, "attention_backward" + s.products_suffix(), [&] {
    const Temp<float> ws(s, cuda::attention_workspace_floats(B, T, H, D, s.half_matmuls));
    cuda::attention_backward(qkv, out, stats, dout, dqkv, ws.get(), B, T, H, D, kStream, s.half_matmuls);
  });
}
// The op without the forward's output (a plugin of backend version 2, or one that did not keep it): where the
// fused kernel runs, which forms Δ from that output, the forward runs again into temporaries.
ds_status attention_backward(void* ctx, const float* qkv, const float* stats, const float* dout, float* dqkv,
                             int64_t B, int64_t T, int64_t H, int64_t D) {
  State& s = state(ctx);
  return guarded(ctx, "attention_backward" + s.products_suffix(), [&] {
    const Temp<float> ws(s, cuda::attention_workspace_floats(B, T, H, D, s.half_matmuls));
    std::optional<Temp<float>> out, stats_again;
    if (B > 0 && T > 0 && H > 0 && D > 0 &&
        cuda::attention_kernel(B, H, D, s.half_matmuls) == cuda::AttentionKernel::fused) {
      out.emplace(s, B * T * H * D);
      stats_again.emplace(s, 2 * B * H * T);
      cuda::attention_forward(qkv, out->get(), stats_again->get(), ws.get(), B, T, H, D, kStream, s.half_matmuls);
    }
    cuda::attention_backward(qkv, out ? out->get() : nullptr, stats, dout, dqkv, ws.get(), B, T, H, D, kStream,
                             s.half_matmuls);
  });
}
ds_status embedding_forward(void* ctx, const int32_t* tokens, const float* wte, const float* wpe, float* out,
                            int64_t B, int64_t T, int64_t C, int64_t vocab) {
  return guarded(ctx, "embedding_forward", [&] { cuda::embedding_forward(tokens, wte, wpe, out, B, T, C, vocab, kStream); });
}
ds_status embedding_backward(void* ctx, const int32_t* tokens, const float* dout, float* dwte, float* dwpe, int64_t B,
                             int64_t T, int64_t C, int64_t vocab) {
  return guarded(ctx, "embedding_backward", [&] { cuda::embedding_backward(tokens, dout, dwte, dwpe, B, T, C, vocab, kStream); });
}
// The rows' losses come to the host and are averaged there in double, in row order (the CPU's sum);
// the mean goes back to loss[0]. One small copy each way per micro-batch.
ds_status cross_entropy_forward(void* ctx, const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
                                float* stats, float* loss) {
  return guarded(ctx, "cross_entropy_forward", [&] {
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
  return guarded(ctx, "cross_entropy_backward", [&] {
    float g = 0.0f;
    cuda::copy_to_host(&g, dloss, sizeof g);
    cuda::cross_entropy_backward(logits, labels, stats, g, rows, classes, dlogits, kStream);
  });
}

ds_status embedding_rows_forward(void* ctx, const int32_t* tokens, const float* wte_rows, float* out, int64_t n,
                                 int64_t C, int64_t first, int64_t rows, int64_t vocab) {
  return guarded(ctx, "embedding_rows_forward",
                 [&] { cuda::embedding_rows_forward(tokens, wte_rows, out, n, C, first, rows, vocab, kStream); });
}
ds_status embedding_rows_backward(void* ctx, const int32_t* tokens, const float* dout, float* dwte_rows, int64_t n,
                                  int64_t C, int64_t first, int64_t rows, int64_t) {
  return guarded(ctx, "embedding_rows_backward",
                 [&] { cuda::embedding_rows_backward(tokens, dout, dwte_rows, n, C, first, rows, kStream); });
}
ds_status cross_entropy_shard_max(void* ctx, const float* logits, const int32_t* labels, int64_t n, int64_t classes,
                                  int64_t first, int64_t vocab, float* stats) {
  return guarded(ctx, "cross_entropy_shard_max",
                 [&] { cuda::cross_entropy_shard_max(logits, labels, n, classes, first, vocab, stats, kStream); });
}
ds_status cross_entropy_shard_sumexp(void* ctx, const float* logits, int64_t n, int64_t classes, float* stats) {
  return guarded(ctx, "cross_entropy_shard_sumexp",
                 [&] { cuda::cross_entropy_shard_sumexp(logits, n, classes, stats, kStream); });
}
ds_status cross_entropy_shard_loss(void* ctx, const float* stats, int64_t n, float* loss) {
  return guarded(ctx, "cross_entropy_shard_loss", [&] { cuda::cross_entropy_shard_loss(stats, n, loss, kStream); });
}
ds_status cross_entropy_shard_backward(void* ctx, const float* logits, const int32_t* labels, const float* stats,
                                       const float* dloss, int64_t n, int64_t classes, int64_t first, float* dlogits) {
  return guarded(ctx, "cross_entropy_shard_backward", [&] {
    cuda::cross_entropy_shard_backward(logits, labels, stats, dloss, n, classes, first, dlogits, kStream);
  });
}

}  // namespace

Cuda::Cuda(int device) : state_(std::make_unique<State>()) {
  cuda::set_device(device);
  state_->device = device;
  const char* profile = std::getenv("DS_CUDA_PROFILE");
  state_->profile = profile != nullptr && profile[0] != '\0' && std::strcmp(profile, "0") != 0;
  state_->table = ds_backend{
      DS_BACKEND_VERSION, "cuda", DS_DEVICE_CUDA, state_.get(), last_error, alloc, release_temp, copy, matmul, bias_fill,
      bias_add, bias_grad, add_into, add, layernorm_forward, layernorm_backward, gelu_forward, gelu_backward,
      relu_forward, relu_backward, attention_forward, attention_backward, embedding_forward, embedding_backward,
      cross_entropy_forward, cross_entropy_backward,
      embedding_rows_forward, embedding_rows_backward, cross_entropy_shard_max, cross_entropy_shard_sumexp,
      cross_entropy_shard_loss, cross_entropy_shard_backward, attention_backward_with_out,
  };
}

Cuda::~Cuda() {
  try {
    cuda::synchronize();
  } catch (...) {  // a kernel's fault already reported; free what we can
  }
  if (state_->profile) {
    std::vector<std::pair<std::string, State::OpTime>> rows(state_->op_times.begin(), state_->op_times.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    double total = 0, first_total = 0;
    for (const auto& row : rows) total += row.second.seconds, first_total += row.second.first_seconds;
    std::fprintf(stderr, "cuda backend op times (DS_CUDA_PROFILE, each op waited for): %.1f ms in all after each op's "
                 "first call (the first calls: %.1f ms)\n", total * 1e3, first_total * 1e3);
    for (const auto& [op, t] : rows)
      std::fprintf(stderr, "  %-36s %8lld calls %10.2f ms %5.1f%%   first call %8.2f ms\n", op.c_str(),
                   static_cast<long long>(t.calls), t.seconds * 1e3, total > 0 ? 100.0 * t.seconds / total : 0.0,
                   t.first_seconds * 1e3);
  }
  try {  // (after the synchronize: its copies are done)
    for (State::CopyStream* c : {&state_->copies, &state_->uploads}) {
      if (c->stream != nullptr) cuda::stream_destroy(c->stream);
      for (auto& [ticket, event] : c->events) cuda::event_destroy(event);
    }
    if (state_->ops_done != nullptr) cuda::event_destroy(state_->ops_done);
    for (auto& [mark, event] : state_->op_marks) cuda::event_destroy(event);
    for (void* event : state_->spare_events) cuda::event_destroy(event);
  } catch (...) {
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

std::string Cuda::describe() const { return cuda::device_name(state_->device); }

void* Cuda::allocate(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  std::lock_guard lock(state_->mutex);
  void* p = state_->new_block(bytes);
  state_->buffers[p] = bytes;
  return p;
}

void Cuda::release(void* p) {
  {
    std::lock_guard lock(state_->mutex);
    state_->buffers.erase(p);
  }
  cuda::device_free(p);
}

void Cuda::to_device(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) cuda::copy_to_device(dst, src, bytes);
}

void Cuda::to_host(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) cuda::copy_to_host(dst, src, bytes);
}

void Cuda::zero(void* dst, size_t bytes) {
  if (bytes > 0) cuda::zero_on_device(dst, bytes, kStream);
}

namespace {

constexpr uint64_t kUploadTicket = uint64_t{1} << 63;  // an upload stream's ticket

void* stream_of(State::CopyStream& c) {
  if (c.stream == nullptr) c.stream = cuda::stream_create();
  return c.stream;
}

// The copy stream, waiting for the ops issued so far.
void* copy_stream_after_ops(State& s) {
  if (s.ops_done == nullptr) s.ops_done = cuda::event_create();
  cuda::event_record(s.ops_done, kStream);
  cuda::stream_wait_event(stream_of(s.copies), s.ops_done);
  return s.copies.stream;
}

uint64_t issue_ticket(State& s, State::CopyStream& c) {
  if (c.stream == nullptr) return 0;
  void* event = s.take_event();
  cuda::event_record(event, c.stream);
  c.events[++c.issued] = event;
  return c.issued;
}

// The ticket's stream and number, or nullptr for a ticket known done (0, or one before c.done).
State::CopyStream* ticket_stream(State& s, uint64_t& ticket) {
  State::CopyStream* c = &s.copies;
  if (ticket & kUploadTicket) {
    c = &s.uploads;
    ticket &= ~kUploadTicket;
  }
  return ticket <= c->done || c->events.count(ticket) == 0 ? nullptr : c;
}

}  // namespace

void Cuda::to_host_async(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) cuda::copy_to_host_async(dst, src, bytes, copy_stream_after_ops(*state_));
}

void Cuda::to_device_async(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) cuda::copy_to_device_async(dst, src, bytes, copy_stream_after_ops(*state_));
}

uint64_t Cuda::ops_issued() {
  State& s = *state_;
  void* event = s.take_event();
  cuda::event_record(event, kStream);
  s.op_marks[++s.marks] = event;
  return s.marks;
}

// The upload waits for the first mark at or after `ops` that is still kept (a later one waits for more:
// still correct), and the marks before it are passed; with none, for every op so far.
void Cuda::to_device_after(uint64_t ops, void* dst, const void* src, size_t bytes) {
  State& s = *state_;
  void* stream = stream_of(s.uploads);
  if (ops > 0) {
    const auto at = s.op_marks.lower_bound(ops);
    if (at != s.op_marks.end()) {
      cuda::stream_wait_event(stream, at->second);
      for (auto it = s.op_marks.begin(); it != at;) {
        s.spare_events.push_back(it->second);
        it = s.op_marks.erase(it);
      }
    } else {
      if (s.ops_done == nullptr) s.ops_done = cuda::event_create();
      cuda::event_record(s.ops_done, kStream);
      cuda::stream_wait_event(stream, s.ops_done);
    }
  }
  if (bytes > 0) cuda::copy_to_device_async(dst, src, bytes, stream);
}

uint64_t Cuda::copies_issued() { return issue_ticket(*state_, state_->copies); }

uint64_t Cuda::uploads_issued() {
  const uint64_t ticket = issue_ticket(*state_, state_->uploads);
  return ticket == 0 ? 0 : ticket | kUploadTicket;
}

void Cuda::wait_copies(uint64_t ticket) {
  State& s = *state_;
  State::CopyStream* c = ticket_stream(s, ticket);
  if (c == nullptr) return;
  cuda::event_synchronize(c->events.at(ticket));
  // A stream runs in order: its earlier tickets are done too.
  for (auto it = c->events.begin(); it != c->events.end() && it->first <= ticket;) {
    s.spare_events.push_back(it->second);
    it = c->events.erase(it);
  }
  c->done = ticket;
}

void Cuda::ops_after_copies(uint64_t ticket) {
  State::CopyStream* c = ticket_stream(*state_, ticket);
  if (c != nullptr) cuda::stream_wait_event(kStream, c->events.at(ticket));
}

bool Cuda::pin_host(void* p, size_t bytes, std::string& why) { return cuda::host_pin(p, bytes, why); }

void Cuda::unpin_host(void* p) { cuda::host_unpin(p); }

void Cuda::set_half_matmuls(std::optional<amp::Half> type) { state_->half_matmuls = type; }

void Cuda::round_to(amp::Half type, float* x, size_t n) {
  cuda::round_to_half(type, x, static_cast<int64_t>(n), kStream);
}

void Cuda::widen(amp::Half type, const uint16_t* in, float* out, size_t n) {
  cuda::half_to_float(type, in, out, static_cast<int64_t>(n), kStream);
}

void Cuda::narrow(amp::Half type, const float* in, uint16_t* out, size_t n) {
  cuda::float_to_half(type, in, out, static_cast<int64_t>(n), kStream);
}

void Cuda::copy_within(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) cuda::copy_on_device(dst, src, bytes, kStream);
}

void Cuda::accumulate(float* y, const float* x, size_t n) { cuda::add_into(y, x, static_cast<int64_t>(n), kStream); }

void Cuda::rescale(float* x, size_t n, double factor) { cuda::scale(x, static_cast<int64_t>(n), factor, kStream); }

void Cuda::add_sum_squares(const float* x, size_t n, double* total) {
  const Temp<double> partial(*state_, cuda::kSumSquaresBlocks);  // back in the cache: later users follow on the stream
  cuda::sum_squares(x, static_cast<int64_t>(n), total, partial.get(), kStream);
}

void Cuda::adam_step(float* p, const float* g, float* m, float* v, size_t n, const cpu::AdamArgs& args,
                     bool decoupled) {
  cuda::adam_step(p, g, m, v, static_cast<int64_t>(n), args, decoupled, kStream);
}

void Cuda::round_into(amp::Half type, std::span<const RoundTensor> tensors) {
  std::vector<cuda::RoundSegment> segments;
  segments.reserve(tensors.size());
  for (const RoundTensor& t : tensors) segments.push_back({t.dst, t.src, static_cast<int64_t>(t.n)});
  cuda::round_copies(type, segments.data(), segments.size(), state_->tables.find(segments.data(), segments.size()),
                     kStream);
}

namespace {

void move_all(State& s, cuda::MoveKind kind, amp::Half type, std::span<const Device::Move> moves) {
  std::vector<cuda::MoveSegment> segments;
  segments.reserve(moves.size());
  for (const Device::Move& m : moves) segments.push_back({m.dst, m.src, static_cast<int64_t>(m.n)});
  cuda::move_multi(kind, type, segments.data(), segments.size(), s.tables.find(segments.data(), segments.size()),
                   kStream);
}

}  // namespace

void Cuda::copy_all(std::span<const Move> moves) { move_all(*state_, cuda::MoveKind::copy, amp::Half::BF16, moves); }
void Cuda::narrow_all(amp::Half type, std::span<const Move> moves) {
  move_all(*state_, cuda::MoveKind::narrow, type, moves);
}
void Cuda::widen_all(amp::Half type, std::span<const Move> moves) {
  move_all(*state_, cuda::MoveKind::widen, type, moves);
}

void Cuda::rescale_all(std::span<const Values> tensors, double factor) {
  std::vector<cuda::ScaleSegment> segments;
  segments.reserve(tensors.size());
  for (const Values& t : tensors) segments.push_back({t.x, static_cast<int64_t>(t.n)});
  cuda::scale_multi(segments.data(), segments.size(), factor, state_->tables.find(segments.data(), segments.size()),
                    kStream);
}

void Cuda::add_sums_of_squares(std::span<const Floats> tensors, double* total) {
  std::vector<cuda::SquaresSegment> segments;
  segments.reserve(tensors.size());
  for (const Floats& t : tensors) segments.push_back({t.x, static_cast<int64_t>(t.n)});
  const Temp<double> partial(*state_, static_cast<int64_t>(cuda::segment_block_count(segments.data(), segments.size())));
  cuda::sum_squares_multi(segments.data(), segments.size(), total, state_->tables.find(segments.data(), segments.size()),
                          partial.get(), kStream);
}

void Cuda::adam_steps(std::span<const AdamTensor> tensors, const cpu::AdamArgs& args, bool decoupled) {
  std::vector<cuda::AdamSegment> segments;
  segments.reserve(tensors.size());
  for (const AdamTensor& t : tensors) segments.push_back({t.p, t.g, t.m, t.v, static_cast<int64_t>(t.n)});
  cuda::adam_steps(segments.data(), segments.size(), args, decoupled,
                   state_->tables.find(segments.data(), segments.size()), kStream);
}

void Cuda::sgd_steps(std::span<const SgdTensor> tensors, const cpu::SgdArgs& args) {
  std::vector<cuda::SgdSegment> segments;
  segments.reserve(tensors.size());
  for (const SgdTensor& t : tensors) segments.push_back({t.p, t.g, t.buf, static_cast<int64_t>(t.n)});
  cuda::sgd_steps(segments.data(), segments.size(), args, state_->tables.find(segments.data(), segments.size()),
                  kStream);
}

namespace {

std::vector<cuda::OneStateSegment> one_state_segments(std::span<const Device::OneStateTensor> tensors) {
  std::vector<cuda::OneStateSegment> segments;
  segments.reserve(tensors.size());
  for (const Device::OneStateTensor& t : tensors) segments.push_back({t.p, t.g, t.s, static_cast<int64_t>(t.n)});
  return segments;
}

}  // namespace

void Cuda::lion_steps(std::span<const OneStateTensor> tensors, const cpu::LionArgs& args) {
  const auto segments = one_state_segments(tensors);
  cuda::lion_steps(segments.data(), segments.size(), args, state_->tables.find(segments.data(), segments.size()),
                   kStream);
}

void Cuda::adagrad_steps(std::span<const OneStateTensor> tensors, const cpu::AdagradArgs& args) {
  const auto segments = one_state_segments(tensors);
  cuda::adagrad_steps(segments.data(), segments.size(), args, state_->tables.find(segments.data(), segments.size()),
                      kStream);
}

void Cuda::rmsprop_steps(std::span<const OneStateTensor> tensors, const cpu::RmspropArgs& args) {
  const auto segments = one_state_segments(tensors);
  cuda::rmsprop_steps(segments.data(), segments.size(), args, state_->tables.find(segments.data(), segments.size()),
                      kStream);
}

size_t Cuda::table_uploads() const { return state_->tables.uploads(); }

void Cuda::sgd_step(float* p, const float* g, float* buf, size_t n, const cpu::SgdArgs& args) {
  cuda::sgd_step(p, g, buf, static_cast<int64_t>(n), args, kStream);
}

namespace {

// The tensors as the LAMB kernels' segments, each with its first block's index among the launch's.
std::vector<cuda::LambSegment> lamb_segments(std::span<const Device::LambTensor> tensors) {
  std::vector<cuda::LambSegment> segments;
  segments.reserve(tensors.size());
  for (const Device::LambTensor& t : tensors) segments.push_back({t.p, t.g, t.m, t.v, static_cast<int64_t>(t.n), 0});
  cuda::set_first_blocks(segments.data(), segments.size());
  return segments;
}

}  // namespace

void Cuda::lamb_moments(std::span<const LambTensor> tensors, const cpu::LambArgs& args, double* sums) {
  const std::vector<cuda::LambSegment> segments = lamb_segments(tensors);
  const Temp<double> partial(*state_, 2 * static_cast<int64_t>(cuda::segment_block_count(segments.data(), segments.size())));
  cuda::lamb_moments(segments.data(), segments.size(), args, sums, state_->tables.find(segments.data(), segments.size()),
                     partial.get(), kStream);
}

// The scales go up ordered after the queued ops (the host has just waited for the moments' sums anyway).
void Cuda::lamb_apply(std::span<const LambTensor> tensors, const cpu::LambArgs& args, std::span<const float> scales) {
  if (scales.size() != tensors.size()) throw std::logic_error("Cuda::lamb_apply: a scale per tensor");
  const std::vector<cuda::LambSegment> segments = lamb_segments(tensors);
  const Temp<float> device_scales(*state_, static_cast<int64_t>(scales.size()));
  if (!scales.empty()) cuda::copy_to_device(device_scales.get(), scales.data(), scales.size_bytes());
  cuda::lamb_apply(segments.data(), segments.size(), args, device_scales.get(),
                   state_->tables.find(segments.data(), segments.size()), kStream);
}

}  // namespace ds::backend
