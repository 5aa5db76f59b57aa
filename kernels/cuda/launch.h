// Host-side launchers of kernels/cuda's kernels, on a CUDA stream given as void* (cudaStream_t;
// nullptr = the default stream), so that callers need no CUDA header, and the device memory they
// work on. Three implementations, one linked into a program: launch.cu (nvcc, when the toolkit is
// present: ds_kernels_cuda), no_cuda.cpp (without it: every function throws std::runtime_error("...
// built without CUDA")), and launch_emulated.cpp (ds_kernels_cuda_emulated: the same kernels on the
// CPU SIMT emulator, device memory being host memory, for tests). Pointers are device memory.
// Errors are std::runtime_error carrying the CUDA error's name and text.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "amp/half.h"
#include "cpu/adam_element.h"
#include "cuda/query_chunk.h"
#include "cuda/segments.h"
#include "cpu/lamb_element.h"
#include "cpu/rmsprop_element.h"
#include "cpu/adagrad_element.h"
#include "cpu/lion_element.h"
#include "cpu/sgd_element.h"

namespace ds::cuda {

// True when this build has the CUDA kernels (launch.cu or the emulated ones), false with the stub.
bool built_with_cuda();
// True for the emulated launchers (launch_emulated.cpp): one "device", the CPU.
bool emulated();
// The CUDA devices this process sees; throws naming CUDA's error when it cannot tell (no driver,
// a driver too old for the toolkit) or when built without CUDA.
int device_count();
void set_device(int device);
std::string device_name(int device);  // "NVIDIA H100 80GB HBM3 (sm_90, 81559 MiB)"

// Device memory (cudaMalloc, cudaFree, cudaMemcpy) and waiting for the device, whose asynchronous
// errors (a kernel's fault) surface here. device_alloc throws OutOfMemory when the device has no room
// (cudaErrorMemoryAllocation, which it clears so that later launches do not report it; emulated: past
// DS_CUDA_EMULATED_MEMORY bytes, the emulated device's size, unlimited when unset): the caller may free
// what it caches and try again.
struct OutOfMemory : std::runtime_error {
  using std::runtime_error::runtime_error;
};
void* device_alloc(size_t bytes);
void device_free(void* p);
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void copy_on_device(void* dst, const void* src, size_t bytes, void* stream);  // asynchronous on `stream`
// `rows` rows of row_bytes each from src (rows src_pitch bytes apart) to dst (dst_pitch apart); asynchronous.
void copy_rows_on_device(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows,
                         void* stream);
void zero_on_device(void* dst, size_t bytes, void* stream);                    // dst[bytes] = 0, asynchronous
void synchronize();
// Streams beside the default stream (cudaStreamNonBlocking: no implicit ordering with it) and events
// that order them. A copy to the host on such a stream overlaps the default stream's ops when dst is
// pinned. Emulated: the default stream's ops run at once; a copy stream's copies are queued and run
// when an event recorded after them is waited for (event_synchronize, or the default stream waiting
// for it, stream_wait_event(nullptr, e)) or at synchronize(), reading their source then, and each copy's
// destination holds NaN bytes (0xff) until it has run. So a host read of a copy's destination before
// waiting, or a later op that overwrites its source without waiting for it, shows in the results; the
// same for copies to the device (an op reading the destination too early sees NaNs).
void* stream_create();
void stream_destroy(void* stream);  // waits for its copies
void* event_create();
void event_destroy(void* event);
void event_record(void* event, void* stream);        // marks the work issued on `stream` so far
void stream_wait_event(void* stream, void* event);   // later work on `stream` waits for that work
void event_synchronize(void* event);                 // the host waits for it
void copy_to_host_async(void* dst, const void* src, size_t bytes, void* stream);
void copy_to_device_async(void* dst, const void* src, size_t bytes, void* stream);
// Page-locks host memory [p, p + bytes) (cudaHostRegister), so copies to and from it run at the bus's
// speed; host_unpin(p) before it is freed. False, with CUDA's error in `why`, when the system refuses
// (too much memory locked, a range that overlaps one pinned already): the memory stays usable, its
// copies slower. Emulated: the ranges are recorded and checked as CUDA checks them.
bool host_pin(void* p, size_t bytes, std::string& why);
void host_unpin(void* p);  // throws for a pointer host_pin did not pin

// LayerNorm forward (kernels/cpu/layernorm.h): y[rows, dim], stats[rows, 2] from x[rows, dim],
// gamma[dim], beta[dim]; one block per row.
void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* stats, int64_t rows,
                       int64_t dim, float eps, void* stream);

// LayerNorm backward: dx[rows, dim] (overwritten), dgamma[dim] and dbeta[dim] (accumulated) from x,
// gamma, the forward's stats and dy; `partial` [ln_param_partial_floats(rows, dim)] device scratch.
void layernorm_backward(const float* x, const float* gamma, const float* stats, const float* dy, float* dx,
                        float* dgamma, float* dbeta, float* partial, int64_t rows, int64_t dim, void* stream);

// Softmax cross-entropy (kernels/cpu/cross_entropy.h): stats[rows, 2] and each row's loss
// row_loss[rows] (NaN for a label outside [0, classes); the mean is the caller's), then
// dlogits[rows, classes] from the stats and g (scaled by g / rows).
void cross_entropy_forward(const float* logits, const int32_t* labels, int64_t rows, int64_t classes, float* stats,
                           float* row_loss, void* stream);
void cross_entropy_backward(const float* logits, const int32_t* labels, const float* stats, float g, int64_t rows,
                            int64_t classes, float* dlogits, void* stream);

// GELU (kernels/cpu/gelu.h): y[n] from x[n], and dx[n] from x[n] and dy[n]; in place allowed.
void gelu_forward(const float* x, float* y, int64_t n, void* stream);
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, void* stream);

// Causal self-attention (kernels/cpu/attention.h's formulas and layouts), attention.cpp: the
// products are batched GEMMs (gemm.h: QKᵀ, PV forward; QKᵀ again, PᵀdO, dO·Vᵀ, dS·K, dSᵀ·Q backward)
// over the heads in groups of attention_chunk_heads and the queries in chunks of attention_query_rows
// (query_chunk.h: each chunk against its causal prefix of keys only), with the softmax rows between them.
//   forward:  out[B, T, H, D] and stats[B, H, T, 2] from qkv[B, T, 3, H, D]
//   backward: dqkv[B, T, 3, H, D] (overwritten) from qkv, the forward's out and stats and dout[B, T, H, D]
//             (out: the fused kernel's Δ = rowsum(dout∘out); the GEMM form reads it not and takes nullptr)
// Both need `workspace`: attention_workspace_floats(B, T, H, D, products) floats of device memory.
// `products` bf16 or fp16: every product's operands (Q, K, V, dO, P and dS) are rounded to that type
// and multiplied on the tensor cores with fp32 accumulation, as a 16-bit flash attention does; the
// softmax and its backward stay fp32. None: fp32 products.
// A query chunk's scores for one head, the most of any chunk (attention_query_rows(T) rows, or T where
// fewer, by all T keys), and the heads per group whose chunk scores fit 256 MiB (at least one).
inline int64_t attention_block_per_head(int64_t T) {
  const int64_t rows = attention_query_rows(T);
  return (rows < T ? rows : T) * T;
}
inline int64_t attention_chunk_heads(int64_t B, int64_t T, int64_t H) {
  const int64_t heads = B * H, fit = (int64_t{1} << 26) / (T > 0 ? attention_block_per_head(T) : 1);
  return fit < 1 ? 1 : fit > heads ? heads : fit;
}
//
// With 16-bit products and D ≤ kFlashMaxHeadDim (128), a fused kernel (flash attention,
// flash_attention.cuh) does the same products on the tensor cores without the T×T scores in memory;
// its workspace is Δ [B·H, T]. DS_CUDA_ATTENTION=fused chooses it where it applies; the default
// (=gemm) keeps the GEMMs, which measured faster on an H100; `kernel` chooses for one call.
enum class AttentionKernel { gemm, fused };
AttentionKernel attention_kernel(int64_t B, int64_t H, int64_t D, std::optional<amp::Half> products);
inline int64_t attention_workspace_floats(int64_t B, int64_t T, int64_t H, int64_t D,
                                          std::optional<amp::Half> products = std::nullopt,
                                          std::optional<AttentionKernel> kernel = std::nullopt) {
  if (kernel.value_or(attention_kernel(B, H, D, products)) == AttentionKernel::fused) return B * H * T;
  const int64_t n = B * T * H * D, block = attention_chunk_heads(B, T, H) * attention_block_per_head(T);
  return 7 * n + 2 * block + (products ? 2 * n + (block + 1) / 2 : 0);  // 16-bit Q, K, V, dO and one block
}
// `group_heads`: the GEMM form's heads per group, 1..attention_chunk_heads (0: that; fewer only to test
// the groups at shapes whose heads all fit one).
void attention_forward(const float* qkv, float* out, float* stats, float* workspace, int64_t B, int64_t T, int64_t H,
                       int64_t D, void* stream, std::optional<amp::Half> products = std::nullopt,
                       std::optional<AttentionKernel> kernel = std::nullopt, int64_t group_heads = 0);
void attention_backward(const float* qkv, const float* out, const float* stats, const float* dout, float* dqkv,
                        float* workspace,
                        int64_t B, int64_t T, int64_t H, int64_t D, void* stream,
                        std::optional<amp::Half> products = std::nullopt,
                        std::optional<AttentionKernel> kernel = std::nullopt, int64_t group_heads = 0);
// The fused kernels (flash_attention.cuh), for attention.cpp: D ≤ 128, B·H ≤ 65535.
void flash_attention_forward(const float* qkv, float* out, float* stats, int64_t B, int64_t T, int64_t H, int64_t D,
                             amp::Half products, void* stream);
void flash_attention_delta(const float* out, const float* dout, float* delta, int64_t B, int64_t T, int64_t H,
                           int64_t D, void* stream);
void flash_attention_backward_dq(const float* qkv, const float* stats, const float* dout, const float* delta,
                                 float* dqkv, int64_t B, int64_t T, int64_t H, int64_t D, amp::Half products,
                                 void* stream);
void flash_attention_backward_dkdv(const float* qkv, const float* stats, const float* dout, const float* delta,
                                   float* dqkv, int64_t B, int64_t T, int64_t H, int64_t D, amp::Half products,
                                   void* stream);
// Its parts (attention.cuh), for attention.cpp: `rows` holds one matrix per head [heads·T, T].
void attention_rows_to_heads(const float* rows, int64_t row_stride, float* heads, int64_t B, int64_t T, int64_t H,
                             int64_t D, void* stream);
void attention_heads_to_rows(const float* heads, float* rows, int64_t row_stride, int64_t B, int64_t T, int64_t H,
                             int64_t D, void* stream);
// Over one query chunk's scores [heads, chunk.rows, chunk.width()] (query_chunk.h), stats [heads·T, 2].
// With out16 (not nullptr) the rows' results also go there in 16 bits of `type` (softmax_rows' P and
// softmax_backward's dS only there; probs_from_stats' P to both).
void attention_softmax_rows(float* scores, float* stats, int64_t heads, QueryChunk chunk, uint16_t* out16,
                            amp::Half type, void* stream);
void attention_probs_from_stats(float* scores, const float* stats, int64_t heads, QueryChunk chunk, uint16_t* out16,
                                amp::Half type, void* stream);
void attention_softmax_backward(const float* probs, float* dprobs, int64_t heads, QueryChunk chunk, uint16_t* out16,
                                amp::Half type, void* stream);

// Bias and residual (kernels/cpu/bias.h, elementwise.h): y[rows, cols] += bias[cols] (or = bias[cols]);
// dbias[cols] += Σ_r dy[r, cols] (rows in order); y[n] += x[n]. The CPU fast paths' bits.
void bias_add(float* y, const float* bias, int64_t rows, int64_t cols, void* stream);
void bias_fill(float* y, const float* bias, int64_t rows, int64_t cols, void* stream);  // y[r, c] = bias[c]
void bias_grad(const float* dy, float* dbias, int64_t rows, int64_t cols, void* stream);
void add_into(float* y, const float* x, int64_t n, void* stream);

// ReLU (kernels/cpu/activation.h): y[n] from x[n]; dx[n] from x[n] and dy[n]. The CPU's bits.
void relu_forward(const float* x, float* y, int64_t n, void* stream);
void relu_backward(const float* x, const float* dy, float* dx, int64_t n, void* stream);

// fp32 ⇄ 16-bit storage (runtime/amp/half.h), with the CPU's bits (an fp16 NaN's payload aside):
// out[n] = float(in[n]); out[n] = half(in[n]); out[i] = half(float(out[i]) + in[i]). And the
// unscale x[i] = float(x[i]·factor) with the product in double, as amp::scale.
void half_to_float(amp::Half type, const uint16_t* in, float* out, int64_t n, void* stream);
void float_to_half(amp::Half type, const float* in, uint16_t* out, int64_t n, void* stream);
// in[rows, cols] to out[out_rows, out_cols] in 16 bits, zeros in the margin (out_rows >= rows, out_cols >= cols).
void float_to_half_padded(amp::Half type, const float* in, int64_t rows, int64_t cols, uint16_t* out, int64_t out_rows,
                          int64_t out_cols, void* stream);
void half_accumulate(amp::Half type, const float* in, uint16_t* out, int64_t n, void* stream);
void round_to_half(amp::Half type, float* x, int64_t n, void* stream);
void scale(float* x, int64_t n, double factor, void* stream);

// Token + position embedding (kernels/cpu/embedding.h): out[B, T, C] from tokens[B, T], wte[vocab, C],
// wpe[T, C] (a token outside [0, vocab) gives its row NaN); backward accumulates dwte and dwpe in
// the CPU fast path's order (its bits).
void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe, float* out, int64_t B, int64_t T,
                       int64_t C, int64_t vocab, void* stream);
void embedding_backward(const int32_t* tokens, const float* dout, float* dwte, float* dwpe, int64_t B, int64_t T,
                        int64_t C, int64_t vocab, void* stream);

// Vocabulary-parallel embedding and cross-entropy (kernels/cpu/vocab_parallel.h, stats [3, n]); the
// backward's dloss is on the device.
void embedding_rows_forward(const int32_t* tokens, const float* wte_rows, float* out, int64_t n, int64_t C,
                            int64_t first, int64_t rows, int64_t vocab, void* stream);
void embedding_rows_backward(const int32_t* tokens, const float* dout, float* dwte_rows, int64_t n, int64_t C,
                             int64_t first, int64_t rows, void* stream);
void cross_entropy_shard_max(const float* logits, const int32_t* labels, int64_t n, int64_t classes, int64_t first,
                             int64_t vocab, float* stats, void* stream);
void cross_entropy_shard_sumexp(const float* logits, int64_t n, int64_t classes, float* stats, void* stream);
void cross_entropy_shard_loss(const float* stats, int64_t n, float* loss, void* stream);
void cross_entropy_shard_backward(const float* logits, const int32_t* labels, const float* stats, const float* dloss,
                                  int64_t n, int64_t classes, int64_t first, float* dlogits, void* stream);

// total[0] += Σ x[i]² over x[n], in double; partial is scratch of kSumSquaresBlocks doubles
// (launch_shape.h). All three in device memory.
void sum_squares(const float* x, int64_t n, double* total, double* partial, void* stream);
// flag[0] = 1 when some x[i] is inf or NaN, left as it is otherwise (device int32).
void find_nonfinite(const float* x, int64_t n, int32_t* flag, void* stream);

// One Adam (decoupled = false) or AdamW step over fp32 p, m, v [n] from g [n], in place.
void adam_step(float* p, const float* g, float* m, float* v, int64_t n, const cpu::AdamArgs& args, bool decoupled,
               void* stream);
// The same step over the tensors segments[0, count) in one launch (segments.h; the segments in host
// memory): `table` holds segment_table(segments, count) in device memory, uploaded before the launch.
void adam_steps(const AdamSegment* segments, size_t count, const cpu::AdamArgs& args, bool decoupled,
                const void* table, void* stream);

// Multi-tensor forms of round_to_half, the copies and conversions, scale and sum_squares (segments.h; the segments in host memory), one launch
// each (two for the sum), `table` as adam_steps'; the sum's `partial` is device scratch of a double per
// block (segment_block_count).
void round_copies(amp::Half type, const RoundSegment* segments, size_t count, const void* table, void* stream);
void move_multi(MoveKind kind, amp::Half type, const MoveSegment* segments, size_t count, const void* table,
                void* stream);  // (type: narrow's and widen's)
void scale_multi(const ScaleSegment* segments, size_t count, double factor, const void* table, void* stream);
void sum_squares_multi(const SquaresSegment* segments, size_t count, double* total, const void* table, double* partial,
                       void* stream);

// One SGD step (sgd.cuh) over fp32 p [n] from g [n], in place; buf [n] is the momentum buffer (unused,
// may be null, when args.momentum is 0).
void sgd_step(float* p, const float* g, float* buf, int64_t n, const cpu::SgdArgs& args, void* stream);
// The same step over the tensors segments[0, count) in one launch, `table` as adam_steps'.
void sgd_steps(const SgdSegment* segments, size_t count, const cpu::SgdArgs& args, const void* table, void* stream);

// One Lion, Adagrad or RMSprop step (one_state.cuh; each segment's s: Lion's momentum, Adagrad's sum,
// RMSprop's square_avg; RMSprop without momentum, not centered) over the tensors segments[0, count) in one
// launch, `table` as adam_steps'.
void lion_steps(const OneStateSegment* segments, size_t count, const cpu::LionArgs& args, const void* table,
                void* stream);
void adagrad_steps(const OneStateSegment* segments, size_t count, const cpu::AdagradArgs& args, const void* table,
                   void* stream);
void rmsprop_steps(const OneStateSegment* segments, size_t count, const cpu::RmspropArgs& args, const void* table,
                   void* stream);

// LAMB over the tensors segments[0, count) (lamb.cuh; fp32 in place; `table` as adam_steps'; segments'
// first_block as segments.h says), around the host: lamb_moments updates each tensor's m, v from g and writes
// its Σp² to sums[2s] and Σu² to sums[2s + 1] (two launches; partial: scratch of 2 · segment_block_count
// doubles; both in device memory); the caller forms each tensor's scale = step size × trust ratio from them
// (optim::lamb_trust_ratio), and lamb_apply moves each p by −scales[s]·u (one launch; scales [count] in
// device memory).
void lamb_moments(const LambSegment* segments, size_t count, const cpu::LambArgs& args, double* sums,
                  const void* table, double* partial, void* stream);
void lamb_apply(const LambSegment* segments, size_t count, const cpu::LambArgs& args, const float* scales,
                const void* table, void* stream);

}  // namespace ds::cuda
