// The launchers of launch.h on the CPU SIMT emulator (simt.h): the same kernels, grids and blocks as
// launch.cu, run synchronously (the stream is ignored), device memory being host memory; copies to
// the host on a stream of stream_create() are queued until waited for (launch.h). One
// "device", the CPU. For tests of code above the launchers (dsworker --selftest) on machines
// without a GPU.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <set>
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
#include "cuda/launch.h"
#include "cuda/launch_shape.h"
#include "cuda/layernorm.cuh"
#include "cuda/norm.cuh"
#include "cuda/one_state.cuh"
#include "cuda/sgd.cuh"
#include "cuda/vocab_parallel.cuh"
#include "simt/simt.h"

namespace ds::cuda {

bool built_with_cuda() { return true; }
bool emulated() { return true; }
int device_count() { return 1; }
void set_device(int) {}
std::string device_name(int) { return "emulated CUDA device (the CPU SIMT emulator)"; }

namespace {
std::mutex pinned_mutex;
std::map<uintptr_t, size_t> pinned;    // first page → bytes: the pages host_pin locked
std::map<uintptr_t, uintptr_t> starts;  // the pointer host_pin was given → its first page
}  // namespace

// CUDA locks whole pages: the range is widened to the 4 KiB pages it touches, and one that shares a page
// with a range pinned already is refused.
bool host_pin(void* p, size_t bytes, std::string& why) {
  if (p == nullptr || bytes == 0) {
    why = "cudaErrorInvalidValue: invalid argument";
    return false;
  }
  constexpr uintptr_t kPage = 4096;
  const uintptr_t start = reinterpret_cast<uintptr_t>(p) / kPage * kPage;
  bytes = (reinterpret_cast<uintptr_t>(p) + bytes + kPage - 1) / kPage * kPage - start;
  std::lock_guard lock(pinned_mutex);
  const auto next = pinned.upper_bound(start);
  const bool overlaps_next = next != pinned.end() && next->first < start + bytes;
  const bool overlaps_previous = next != pinned.begin() && std::prev(next)->first + std::prev(next)->second > start;
  if (overlaps_next || overlaps_previous) {
    why = "cudaErrorHostMemoryAlreadyRegistered: part or all of the requested memory range is already mapped";
    return false;
  }
  pinned.emplace(start, bytes);
  starts.emplace(reinterpret_cast<uintptr_t>(p), start);
  return true;
}

void host_unpin(void* p) {
  std::lock_guard lock(pinned_mutex);
  const auto at = starts.find(reinterpret_cast<uintptr_t>(p));
  if (at == starts.end())
    throw std::runtime_error("cuda: cudaHostUnregister: cudaErrorHostMemoryNotRegistered: pointer does not "
                             "correspond to a registered memory region");
  pinned.erase(at->second);
  starts.erase(at);
}

namespace {
std::mutex allocated_mutex;
std::map<void*, size_t> allocated;  // device_alloc's blocks → bytes
size_t allocated_bytes = 0;

// DS_CUDA_EMULATED_MEMORY: the emulated device's bytes (none: unlimited).
std::optional<size_t> emulated_memory() {
  const char* v = std::getenv("DS_CUDA_EMULATED_MEMORY");
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  const unsigned long long bytes = std::strtoull(v, &end, 10);
  if (*end != '\0') throw std::runtime_error(std::string("DS_CUDA_EMULATED_MEMORY='") + v + "': expected a number of bytes");
  return static_cast<size_t>(bytes);
}
}  // namespace

void* device_alloc(size_t bytes) {
  std::lock_guard lock(allocated_mutex);
  const std::optional<size_t> memory = emulated_memory();
  if (memory && allocated_bytes + bytes > *memory)
    throw OutOfMemory("cuda: cudaMalloc of " + std::to_string(bytes) + " bytes: cudaErrorMemoryAllocation: out of "
                      "memory (the emulated device has " + std::to_string(*memory) + " bytes, " +
                      std::to_string(allocated_bytes) + " allocated)");
  void* p = std::malloc(bytes ? bytes : 1);
  if (!p) throw OutOfMemory("cuda: cudaMalloc of " + std::to_string(bytes) + " bytes: out of host memory (emulated)");
  allocated.emplace(p, bytes);
  allocated_bytes += bytes;
  return p;
}
// (memcpy's pointers must not be null even for 0 bytes; an empty host vector's data() may be)
void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void copy_on_device(void* dst, const void* src, size_t bytes, void*) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void copy_rows_on_device(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows,
                         void*) {
  for (size_t r = 0; r < rows && row_bytes > 0; ++r)
    std::memcpy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, row_bytes);
}
void zero_on_device(void* dst, size_t bytes, void*) {
  if (bytes) std::memset(dst, 0, bytes);
}
namespace {
// A stream beside the default one: copies queued until an event after them is waited for.
struct QueuedCopy {
  void* dst;
  const void* src;
  size_t bytes;
};
struct Stream {
  std::deque<QueuedCopy> queued;  // copies [done, issued) of the stream's order
  uint64_t issued = 0, done = 0;
};
// The work of `stream` (nullptr: the default stream, done at once) before copy `upto` of its order.
struct Event {
  Stream* stream = nullptr;
  uint64_t upto = 0;
};
std::mutex streams_mutex;  // the streams' queues (thread ranks each have their own)
std::set<Stream*> streams;

void run_copies(Stream& stream, uint64_t upto) {
  for (; stream.done < upto; ++stream.done) {
    const QueuedCopy c = stream.queued.front();
    stream.queued.pop_front();
    std::memcpy(c.dst, c.src, c.bytes);
  }
}
void run_event(const Event& event) {
  if (event.stream == nullptr) return;
  std::lock_guard lock(streams_mutex);
  run_copies(*event.stream, event.upto);
}
}  // namespace

void synchronize() {
  std::lock_guard lock(streams_mutex);
  for (Stream* s : streams) run_copies(*s, s->issued);
}

void device_free(void* p) {  // cudaFree waits for the device first
  synchronize();
  if (p == nullptr) return;
  {
    std::lock_guard lock(allocated_mutex);
    const auto at = allocated.find(p);
    if (at == allocated.end()) throw std::runtime_error("cuda: cudaFree: cudaErrorInvalidValue: not a device allocation");
    allocated_bytes -= at->second;
    allocated.erase(at);
  }
  std::free(p);
}

void* stream_create() {
  std::lock_guard lock(streams_mutex);
  auto* s = new Stream;
  streams.insert(s);
  return s;
}

void stream_destroy(void* stream) {
  auto* s = static_cast<Stream*>(stream);
  std::lock_guard lock(streams_mutex);
  run_copies(*s, s->issued);
  streams.erase(s);
  delete s;
}

void* event_create() { return new Event; }
void event_destroy(void* event) { delete static_cast<Event*>(event); }

void event_record(void* event, void* stream) {
  auto* s = static_cast<Stream*>(stream);
  std::lock_guard lock(streams_mutex);
  *static_cast<Event*>(event) = Event{s, s != nullptr ? s->issued : 0};
}

void stream_wait_event(void* stream, void* event) {
  const Event& e = *static_cast<Event*>(event);
  if (stream == nullptr || e.stream != stream) run_event(e);  // the same stream's order already waits
}

void event_synchronize(void* event) { run_event(*static_cast<Event*>(event)); }

void copy_to_host_async(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return;
  if (stream == nullptr) {
    std::memcpy(dst, src, bytes);
    return;
  }
  auto* s = static_cast<Stream*>(stream);
  std::memset(dst, 0xff, bytes);  // NaNs until the copy has run
  std::lock_guard lock(streams_mutex);
  s->queued.push_back({dst, src, bytes});
  ++s->issued;
}

// (device memory is host memory: the same queue)
void copy_to_device_async(void* dst, const void* src, size_t bytes, void* stream) {
  copy_to_host_async(dst, src, bytes, stream);
}

void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* stats, int64_t rows,
                       int64_t dim, float eps, void*) {
  if (rows <= 0 || dim <= 0) return;
  simt::launch(static_cast<unsigned>(rows), row_threads(dim), {},
               [&] { layernorm_forward_kernel(x, gamma, beta, y, stats, dim, eps); });
}

void layernorm_backward(const float* x, const float* gamma, const float* stats, const float* dy, float* dx,
                        float* dgamma, float* dbeta, float* partial, int64_t rows, int64_t dim, void*) {
  if (rows <= 0 || dim <= 0) return;
  simt::launch(static_cast<unsigned>(rows), row_threads(dim), {},
               [&] { layernorm_backward_dx_kernel(x, gamma, stats, dy, dx, dim); });
  const unsigned chunks = ln_param_chunks(rows);
  simt::launch(simt::dim3(ln_param_blocks(dim), chunks), simt::dim3(kLnParamColumns, kLnParamLanes), {},
               [&] { layernorm_backward_partials_kernel(x, stats, dy, partial, rows, dim); });
  simt::launch(column_blocks(dim), kColumnThreads, {},
               [&] { layernorm_backward_totals_kernel(partial, dgamma, dbeta, chunks, dim); });
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

void attention_rows_to_heads(const float* rows, int64_t row_stride, float* heads, int64_t B, int64_t T, int64_t H,
                             int64_t D, void*) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0) return;
  simt::launch(element_blocks(B * T * H * D), kElementThreads, {},
               [&] { rows_to_heads_kernel(rows, row_stride, heads, B, T, H, D); });
}

void attention_heads_to_rows(const float* heads, float* rows, int64_t row_stride, int64_t B, int64_t T, int64_t H,
                             int64_t D, void*) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0) return;
  simt::launch(element_blocks(B * T * H * D), kElementThreads, {},
               [&] { heads_to_rows_kernel(heads, rows, row_stride, B, T, H, D); });
}

void attention_softmax_rows(float* scores, float* stats, int64_t heads, QueryChunk chunk, uint16_t* out16,
                            amp::Half type, void*) {
  if (heads <= 0 || chunk.rows <= 0) return;
  simt::launch(static_cast<unsigned>(heads * chunk.rows), row_threads(chunk.width()), {},
               [&] { softmax_rows_kernel(scores, stats, chunk, out16, type); });
}

void attention_probs_from_stats(float* scores, const float* stats, int64_t heads, QueryChunk chunk, uint16_t* out16,
                                amp::Half type, void*) {
  if (heads <= 0 || chunk.rows <= 0) return;
  simt::launch(static_cast<unsigned>(heads * chunk.rows), row_threads(chunk.width()), {},
               [&] { probs_from_stats_kernel(scores, stats, chunk, out16, type); });
}

void attention_softmax_backward(const float* probs, float* dprobs, int64_t heads, QueryChunk chunk, uint16_t* out16,
                                amp::Half type, void*) {
  if (heads <= 0 || chunk.rows <= 0) return;
  simt::launch(static_cast<unsigned>(heads * chunk.rows), row_threads(chunk.width()), {},
               [&] { softmax_backward_kernel(probs, dprobs, chunk, out16, type); });
}

namespace {

simt::dim3 flash_grid(int64_t B, int64_t T, int64_t H, unsigned splits = 1) {
  return {flash_tiles(T), static_cast<unsigned>(B * H), splits};
}

}  // namespace

void flash_attention_forward(const float* qkv, float* out, float* stats, int64_t B, int64_t T, int64_t H, int64_t D,
                             amp::Half products, void*) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  with_flash_types(products, D, [&](auto half, auto tiles) {
    constexpr int DT = decltype(tiles)::value;
    simt::launch(flash_grid(B, T, H), kFlashThreads, {flash_forward_shared_bytes(DT)},
                 [&] { flash_forward_kernel<decltype(half)::value, DT>(qkv, out, stats, T, H, D, scale); });
  });
}

void flash_attention_delta(const float* out, const float* dout, float* delta, int64_t B, int64_t T, int64_t H,
                           int64_t D, void*) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0) return;
  const int64_t rows = B * T * H;
  simt::launch(flash_delta_blocks(rows), kFlashThreads, {}, [&] { flash_delta_kernel(out, dout, delta, T, H, D, rows); });
}

void flash_attention_backward_dq(const float* qkv, const float* stats, const float* dout, const float* delta,
                                 float* dqkv, int64_t B, int64_t T, int64_t H, int64_t D, amp::Half products, void*) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  with_flash_types(products, D, [&](auto half, auto tiles) {
    constexpr int DT = decltype(tiles)::value;
    simt::launch(flash_grid(B, T, H), kFlashThreads, {flash_dq_shared_bytes(DT)}, [&] {
      flash_backward_dq_kernel<decltype(half)::value, DT>(qkv, stats, dout, delta, dqkv, T, H, D, scale);
    });
  });
}

void flash_attention_backward_dkdv(const float* qkv, const float* stats, const float* dout, const float* delta,
                                   float* dqkv, int64_t B, int64_t T, int64_t H, int64_t D, amp::Half products,
                                   void*) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  with_flash_types(products, D, [&](auto half, auto tiles) {
    constexpr int DT = decltype(tiles)::value;
    simt::launch(flash_grid(B, T, H, kFlashDkdvSplits<DT>), kFlashThreads, {flash_dkdv_shared_bytes(DT)}, [&] {
      flash_backward_dkdv_kernel<decltype(half)::value, DT>(qkv, stats, dout, delta, dqkv, T, H, D, scale);
    });
  });
}

void bias_add(float* y, const float* bias, int64_t rows, int64_t cols, void*) {
  if (rows <= 0 || cols <= 0) return;
  simt::launch(element_blocks(rows * cols), kElementThreads, {}, [&] { bias_add_kernel(y, bias, rows, cols); });
}

void bias_fill(float* y, const float* bias, int64_t rows, int64_t cols, void*) {
  if (rows <= 0 || cols <= 0) return;
  simt::launch(element_blocks(rows * cols), kElementThreads, {}, [&] { bias_fill_kernel(y, bias, rows, cols); });
}

void bias_grad(const float* dy, float* dbias, int64_t rows, int64_t cols, void*) {
  if (rows <= 0 || cols <= 0) return;
  simt::launch(column_blocks(cols), kColumnThreads, {}, [&] { bias_grad_kernel(dy, dbias, rows, cols); });
}

void add_into(float* y, const float* x, int64_t n, void*) {
  if (n <= 0) return;
  simt::launch(element_blocks(n), kElementThreads, {}, [&] { add_into_kernel(y, x, n); });
}

void relu_forward(const float* x, float* y, int64_t n, void*) {
  if (n <= 0) return;
  simt::launch(element_blocks(n), kElementThreads, {}, [&] { relu_forward_kernel(x, y, n); });
}

void relu_backward(const float* x, const float* dy, float* dx, int64_t n, void*) {
  if (n <= 0) return;
  simt::launch(element_blocks(n), kElementThreads, {}, [&] { relu_backward_kernel(x, dy, dx, n); });
}

void half_to_float(amp::Half type, const uint16_t* in, float* out, int64_t n, void*) {
  if (n <= 0) return;
  simt::launch(element_blocks(n), kElementThreads, {}, [&] { half_to_float_kernel(type, in, out, n); });
}

void float_to_half_padded(amp::Half type, const float* in, int64_t rows, int64_t cols, uint16_t* out, int64_t out_rows,
                          int64_t out_cols, void*) {
  const int64_t n = out_rows * out_cols;
  if (n <= 0) return;
  simt::launch(element_blocks(n), kElementThreads, {},
               [&] { float_to_half_padded_kernel(type, in, rows, cols, out, out_rows, out_cols); });
}

void float_to_half(amp::Half type, const float* in, uint16_t* out, int64_t n, void*) {
  if (n <= 0) return;
  simt::launch(element_blocks(n), kElementThreads, {}, [&] { float_to_half_kernel(type, in, out, n); });
}

void half_accumulate(amp::Half type, const float* in, uint16_t* out, int64_t n, void*) {
  if (n <= 0) return;
  simt::launch(element_blocks(n), kElementThreads, {}, [&] { half_accumulate_kernel(type, in, out, n); });
}

void round_to_half(amp::Half type, float* x, int64_t n, void*) {
  if (n <= 0) return;
  simt::launch(element_blocks(n), kElementThreads, {}, [&] { round_to_half_kernel(type, x, n); });
}

void scale(float* x, int64_t n, double factor, void*) {
  if (n <= 0) return;
  simt::launch(element_blocks(n), kElementThreads, {}, [&] { scale_kernel(x, n, factor); });
}

void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe, float* out, int64_t B, int64_t T,
                       int64_t C, int64_t vocab, void*) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  simt::launch(element_blocks(B * T * C), kElementThreads, {},
               [&] { embedding_forward_kernel(tokens, wte, wpe, out, B * T, T, C, vocab); });
}

void embedding_backward(const int32_t* tokens, const float* dout, float* dwte, float* dwpe, int64_t B, int64_t T,
                        int64_t C, int64_t vocab, void*) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  simt::launch(column_blocks(T * C), kColumnThreads, {}, [&] { embedding_backward_wpe_kernel(dout, dwpe, B, T, C); });
  simt::launch(simt::dim3(column_blocks(C), embedding_token_groups(B * T)), kColumnThreads, {},
               [&] { embedding_backward_wte_kernel(tokens, dout, dwte, B * T, C, vocab); });
}

void embedding_rows_forward(const int32_t* tokens, const float* wte_rows, float* out, int64_t n, int64_t C,
                            int64_t first, int64_t rows, int64_t vocab, void*) {
  if (n <= 0 || C <= 0) return;
  simt::launch(element_blocks(n * C), kElementThreads, {},
               [&] { embedding_rows_forward_kernel(tokens, wte_rows, out, n, C, first, rows, vocab); });
}

void embedding_rows_backward(const int32_t* tokens, const float* dout, float* dwte_rows, int64_t n, int64_t C,
                             int64_t first, int64_t rows, void*) {
  if (n <= 0 || C <= 0) return;
  simt::launch(simt::dim3(column_blocks(C), embedding_token_groups(n)), kColumnThreads, {},
               [&] { embedding_rows_backward_kernel(tokens, dout, dwte_rows, n, C, first, rows); });
}

void cross_entropy_shard_max(const float* logits, const int32_t* labels, int64_t n, int64_t classes, int64_t first,
                             int64_t vocab, float* stats, void*) {
  if (n <= 0) return;
  simt::launch(column_blocks(n), kColumnThreads, {},
               [&] { cross_entropy_shard_max_kernel(logits, labels, n, classes, first, vocab, stats); });
}

void cross_entropy_shard_sumexp(const float* logits, int64_t n, int64_t classes, float* stats, void*) {
  if (n <= 0) return;
  simt::launch(column_blocks(n), kColumnThreads, {}, [&] { cross_entropy_shard_sumexp_kernel(logits, n, classes, stats); });
}

void cross_entropy_shard_loss(const float* stats, int64_t n, float* loss, void*) {
  simt::launch(1, 1, {}, [&] { cross_entropy_shard_loss_kernel(stats, n, loss); });
}

void cross_entropy_shard_backward(const float* logits, const int32_t* labels, const float* stats, const float* dloss,
                                  int64_t n, int64_t classes, int64_t first, float* dlogits, void*) {
  if (n <= 0 || classes <= 0) return;
  simt::launch(element_blocks(n * classes), kElementThreads, {},
               [&] { cross_entropy_shard_backward_kernel(logits, labels, stats, dloss, n, classes, first, dlogits); });
}

void sum_squares(const float* x, int64_t n, double* total, double* partial, void*) {
  if (n <= 0) return;
  const unsigned blocks = sum_squares_blocks(n);
  simt::launch(blocks, kReduceThreads, {}, [&] { sum_squares_partial_kernel(x, n, partial); });
  simt::launch(1, kReduceThreads, {}, [&] { sum_partials_kernel(partial, blocks, total); });
}

void find_nonfinite(const float* x, int64_t n, int32_t* flag, void*) {
  if (n <= 0) return;
  simt::launch(element_blocks(n), kElementThreads, {}, [&] { nonfinite_kernel(x, n, flag); });
}

void adam_step(float* p, const float* g, float* m, float* v, int64_t n, const cpu::AdamArgs& args, bool decoupled,
               void*) {
  if (n <= 0) return;
  simt::launch(element_blocks(n), kElementThreads, {}, [&] {
    if (decoupled) adam_kernel<true>(p, g, m, v, n, args);
    else adam_kernel<false>(p, g, m, v, n, args);
  });
}

void adam_steps(const AdamSegment* segments, size_t count, const cpu::AdamArgs& args, bool decoupled,
                const void* table, void*) {
  const auto t = locate_table(segments, count, table);
  if (t.count == 0) return;
  simt::launch(t.count, kElementThreads, {}, [&] {
    if (decoupled) adam_multi_kernel<true>(t.segments, t.blocks, args);
    else adam_multi_kernel<false>(t.segments, t.blocks, args);
  });
}

void round_copies(amp::Half type, const RoundSegment* segments, size_t count, const void* table, void*) {
  const auto t = locate_table(segments, count, table);
  if (t.count == 0) return;
  simt::launch(t.count, kElementThreads, {}, [&] { round_multi_kernel(type, t.segments, t.blocks); });
}

void move_multi(MoveKind kind, amp::Half type, const MoveSegment* segments, size_t count, const void* table, void*) {
  const auto t = locate_table(segments, count, table);
  if (t.count == 0) return;
  simt::launch(t.count, kElementThreads, {}, [&] {
    switch (kind) {
      case MoveKind::copy: move_multi_kernel<MoveKind::copy>(type, t.segments, t.blocks); break;
      case MoveKind::narrow: move_multi_kernel<MoveKind::narrow>(type, t.segments, t.blocks); break;
      case MoveKind::widen: move_multi_kernel<MoveKind::widen>(type, t.segments, t.blocks); break;
    }
  });
}

void scale_multi(const ScaleSegment* segments, size_t count, double factor, const void* table, void*) {
  const auto t = locate_table(segments, count, table);
  if (t.count == 0) return;
  simt::launch(t.count, kElementThreads, {}, [&] { scale_multi_kernel(t.segments, t.blocks, factor); });
}

void sum_squares_multi(const SquaresSegment* segments, size_t count, double* total, const void* table, double* partial,
                       void*) {
  const auto t = locate_table(segments, count, table);
  if (t.count == 0) return;
  simt::launch(t.count, kReduceThreads, {}, [&] { sum_squares_multi_kernel(t.segments, t.blocks, partial); });
  simt::launch(1, kReduceThreads, {}, [&] { sum_partials_kernel(partial, t.count, total); });
}

void sgd_step(float* p, const float* g, float* buf, int64_t n, const cpu::SgdArgs& args, void*) {
  if (n <= 0) return;
  with_sgd_kind(args, [&](auto momentum, auto nesterov, auto first) {
    simt::launch(element_blocks(n), kElementThreads, {}, [&] {
      sgd_kernel<decltype(momentum)::value, decltype(nesterov)::value, decltype(first)::value>(p, g, buf, n, args);
    });
  });
}

void sgd_steps(const SgdSegment* segments, size_t count, const cpu::SgdArgs& args, const void* table, void*) {
  const auto t = locate_table(segments, count, table);
  if (t.count == 0) return;
  with_sgd_kind(args, [&](auto momentum, auto nesterov, auto first) {
    simt::launch(t.count, kElementThreads, {}, [&] {
      sgd_multi_kernel<decltype(momentum)::value, decltype(nesterov)::value, decltype(first)::value>(t.segments,
                                                                                                    t.blocks, args);
    });
  });
}

namespace {

template <class Update>
void one_state_steps(const OneStateSegment* segments, size_t count, Update update, const void* table) {
  const auto t = locate_table(segments, count, table);
  if (t.count == 0) return;
  simt::launch(t.count, kElementThreads, {}, [&] { one_state_multi_kernel(t.segments, t.blocks, update); });
}

}  // namespace

void lion_steps(const OneStateSegment* segments, size_t count, const cpu::LionArgs& args, const void* table, void*) {
  one_state_steps(segments, count, LionUpdate{args}, table);
}

void adagrad_steps(const OneStateSegment* segments, size_t count, const cpu::AdagradArgs& args, const void* table,
                   void*) {
  one_state_steps(segments, count, AdagradUpdate{args}, table);
}

void rmsprop_steps(const OneStateSegment* segments, size_t count, const cpu::RmspropArgs& args, const void* table,
                   void*) {
  if (args.momentum > 0.0f || args.centered) throw std::invalid_argument("rmsprop_steps: one state only");
  one_state_steps(segments, count, RmspropUpdate{args}, table);
}

void lamb_moments(const LambSegment* segments, size_t count, const cpu::LambArgs& args, double* sums,
                  const void* table, double* partial, void*) {
  const auto t = locate_table(segments, count, table);
  if (count == 0) return;
  if (t.count > 0) simt::launch(t.count, kReduceThreads, {}, [&] { lamb_moments_kernel(t.segments, t.blocks, args, partial); });
  simt::launch(static_cast<unsigned>(count), kReduceThreads, {}, [&] { lamb_sums_kernel(t.segments, partial, sums); });
}

void lamb_apply(const LambSegment* segments, size_t count, const cpu::LambArgs& args, const float* scales,
                const void* table, void*) {
  const auto t = locate_table(segments, count, table);
  if (t.count == 0) return;
  simt::launch(t.count, kElementThreads, {}, [&] { lamb_apply_kernel(t.segments, t.blocks, args, scales); });
}

}  // namespace ds::cuda
