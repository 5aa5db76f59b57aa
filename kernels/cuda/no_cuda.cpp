// The launchers of launch.h and gemm.h's gemm in a build without the CUDA toolkit: each says so.
#include <stdexcept>

#include "cuda/gemm.h"
#include "cuda/launch.h"

namespace ds::cuda {

bool built_with_cuda() { return false; }

bool emulated() { return false; }

int device_count() { throw std::runtime_error("cuda: device_count: dsrun was built without CUDA"); }

void set_device(int) { throw std::runtime_error("cuda: set_device: dsrun was built without CUDA"); }

std::string device_name(int) { throw std::runtime_error("cuda: device_name: dsrun was built without CUDA"); }

void* device_alloc(size_t) { throw std::runtime_error("cuda: device_alloc: dsrun was built without CUDA"); }

void device_free(void*) { throw std::runtime_error("cuda: device_free: dsrun was built without CUDA"); }

void copy_to_device(void*, const void*, size_t) {
  throw std::runtime_error("cuda: copy_to_device: dsrun was built without CUDA");
}

void copy_to_host(void*, const void*, size_t) { throw std::runtime_error("cuda: copy_to_host: dsrun was built without CUDA"); }

bool host_pin(void*, size_t, std::string&) { throw std::runtime_error("cuda: host_pin: dsrun was built without CUDA"); }

void host_unpin(void*) { throw std::runtime_error("cuda: host_unpin: dsrun was built without CUDA"); }

void copy_rows_on_device(void*, size_t, const void*, size_t, size_t, size_t, void*) {
  throw std::runtime_error("cuda: copy_rows_on_device: dsrun was built without CUDA");
}

void copy_on_device(void*, const void*, size_t, void*) {
  throw std::runtime_error("cuda: copy_on_device: dsrun was built without CUDA");
}

void zero_on_device(void*, size_t, void*) {
  throw std::runtime_error("cuda: zero_on_device: dsrun was built without CUDA");
}

void synchronize() { throw std::runtime_error("cuda: synchronize: dsrun was built without CUDA"); }

void* stream_create() { throw std::runtime_error("cuda: stream_create: dsrun was built without CUDA"); }

void stream_destroy(void*) { throw std::runtime_error("cuda: stream_destroy: dsrun was built without CUDA"); }

void* event_create() { throw std::runtime_error("cuda: event_create: dsrun was built without CUDA"); }

void event_destroy(void*) { throw std::runtime_error("cuda: event_destroy: dsrun was built without CUDA"); }

void event_record(void*, void*) { throw std::runtime_error("cuda: event_record: dsrun was built without CUDA"); }

void stream_wait_event(void*, void*) {
  throw std::runtime_error("cuda: stream_wait_event: dsrun was built without CUDA");
}

void event_synchronize(void*) { throw std::runtime_error("cuda: event_synchronize: dsrun was built without CUDA"); }

void copy_to_host_async(void*, const void*, size_t, void*) {
  throw std::runtime_error("cuda: copy_to_host_async: dsrun was built without CUDA");
}

void copy_to_device_async(void*, const void*, size_t, void*) {
  throw std::runtime_error("cuda: copy_to_device_async: dsrun was built without CUDA");
}

void layernorm_forward(const float*, const float*, const float*, float*, float*, int64_t, int64_t, float, void*) {
  throw std::runtime_error("cuda: layernorm_forward: dsrun was built without CUDA");
}

void layernorm_backward(const float*, const float*, const float*, const float*, float*, float*, float*, float*,
                        int64_t, int64_t, void*) {
  throw std::runtime_error("cuda: layernorm_backward: dsrun was built without CUDA");
}

void cross_entropy_forward(const float*, const int32_t*, int64_t, int64_t, float*, float*, void*) {
  throw std::runtime_error("cuda: cross_entropy_forward: dsrun was built without CUDA");
}

void cross_entropy_backward(const float*, const int32_t*, const float*, float, int64_t, int64_t, float*, void*) {
  throw std::runtime_error("cuda: cross_entropy_backward: dsrun was built without CUDA");
}

void gelu_forward(const float*, float*, int64_t, void*) {
  throw std::runtime_error("cuda: gelu_forward: dsrun was built without CUDA");
}

void gelu_backward(const float*, const float*, float*, int64_t, void*) {
  throw std::runtime_error("cuda: gelu_backward: dsrun was built without CUDA");
}

AttentionKernel attention_kernel(int64_t, int64_t, int64_t, std::optional<amp::Half>) { return AttentionKernel::gemm; }

void attention_forward(const float*, float*, float*, float*, int64_t, int64_t, int64_t, int64_t, void*,
                       std::optional<amp::Half>, std::optional<AttentionKernel>, int64_t) {
  throw std::runtime_error("cuda: attention_forward: dsrun was built without CUDA");
}

void attention_backward(const float*, const float*, const float*, const float*, float*, float*, int64_t, int64_t,
                        int64_t, int64_t, void*, std::optional<amp::Half>, std::optional<AttentionKernel>,
                        int64_t) {
  throw std::runtime_error("cuda: attention_backward: dsrun was built without CUDA");
}

void flash_attention_forward(const float*, float*, float*, int64_t, int64_t, int64_t, int64_t, amp::Half, void*) {
  throw std::runtime_error("cuda: flash_attention_forward: dsrun was built without CUDA");
}

void flash_attention_delta(const float*, const float*, float*, int64_t, int64_t, int64_t, int64_t, void*) {
  throw std::runtime_error("cuda: flash_attention_delta: dsrun was built without CUDA");
}

void flash_attention_backward_dq(const float*, const float*, const float*, const float*, float*, int64_t, int64_t,
                                 int64_t, int64_t, amp::Half, void*) {
  throw std::runtime_error("cuda: flash_attention_backward_dq: dsrun was built without CUDA");
}

void flash_attention_backward_dkdv(const float*, const float*, const float*, const float*, float*, int64_t, int64_t,
                                   int64_t, int64_t, amp::Half, void*) {
  throw std::runtime_error("cuda: flash_attention_backward_dkdv: dsrun was built without CUDA");
}

void bias_add(float*, const float*, int64_t, int64_t, void*) {
  throw std::runtime_error("cuda: bias_add: dsrun was built without CUDA");
}

void bias_grad(const float*, float*, int64_t, int64_t, void*) {
  throw std::runtime_error("cuda: bias_grad: dsrun was built without CUDA");
}

void bias_fill(float*, const float*, int64_t, int64_t, void*) {
  throw std::runtime_error("cuda: bias_fill: dsrun was built without CUDA");
}

void add_into(float*, const float*, int64_t, void*) {
  throw std::runtime_error("cuda: add_into: dsrun was built without CUDA");
}

void relu_forward(const float*, float*, int64_t, void*) {
  throw std::runtime_error("cuda: relu_forward: dsrun was built without CUDA");
}

void relu_backward(const float*, const float*, float*, int64_t, void*) {
  throw std::runtime_error("cuda: relu_backward: dsrun was built without CUDA");
}

void half_to_float(amp::Half, const uint16_t*, float*, int64_t, void*) {
  throw std::runtime_error("cuda: half_to_float: dsrun was built without CUDA");
}

void float_to_half_padded(amp::Half, const float*, int64_t, int64_t, uint16_t*, int64_t, int64_t, void*) {
  throw std::runtime_error("cuda: float_to_half_padded: dsrun was built without CUDA");
}

void float_to_half(amp::Half, const float*, uint16_t*, int64_t, void*) {
  throw std::runtime_error("cuda: float_to_half: dsrun was built without CUDA");
}

void half_accumulate(amp::Half, const float*, uint16_t*, int64_t, void*) {
  throw std::runtime_error("cuda: half_accumulate: dsrun was built without CUDA");
}

void round_to_half(amp::Half, float*, int64_t, void*) {
  throw std::runtime_error("cuda: round_to_half: dsrun was built without CUDA");
}

void scale(float*, int64_t, double, void*) { throw std::runtime_error("cuda: scale: dsrun was built without CUDA"); }

void embedding_forward(const int32_t*, const float*, const float*, float*, int64_t, int64_t, int64_t, int64_t, void*) {
  throw std::runtime_error("cuda: embedding_forward: dsrun was built without CUDA");
}

void embedding_backward(const int32_t*, const float*, float*, float*, int64_t, int64_t, int64_t, int64_t, void*) {
  throw std::runtime_error("cuda: embedding_backward: dsrun was built without CUDA");
}

void embedding_rows_forward(const int32_t*, const float*, float*, int64_t, int64_t, int64_t, int64_t, int64_t, void*) {
  throw std::runtime_error("cuda: embedding_rows_forward: dsrun was built without CUDA");
}

void embedding_rows_backward(const int32_t*, const float*, float*, int64_t, int64_t, int64_t, int64_t, void*) {
  throw std::runtime_error("cuda: embedding_rows_backward: dsrun was built without CUDA");
}

void cross_entropy_shard_max(const float*, const int32_t*, int64_t, int64_t, int64_t, int64_t, float*, void*) {
  throw std::runtime_error("cuda: cross_entropy_shard_max: dsrun was built without CUDA");
}

void cross_entropy_shard_sumexp(const float*, int64_t, int64_t, float*, void*) {
  throw std::runtime_error("cuda: cross_entropy_shard_sumexp: dsrun was built without CUDA");
}

void cross_entropy_shard_loss(const float*, int64_t, float*, void*) {
  throw std::runtime_error("cuda: cross_entropy_shard_loss: dsrun was built without CUDA");
}

void cross_entropy_shard_backward(const float*, const int32_t*, const float*, const float*, int64_t, int64_t, int64_t,
                                  float*, void*) {
  throw std::runtime_error("cuda: cross_entropy_shard_backward: dsrun was built without CUDA");
}

void sum_squares(const float*, int64_t, double*, double*, void*) {
  throw std::runtime_error("cuda: sum_squares: dsrun was built without CUDA");
}

void find_nonfinite(const float*, int64_t, int32_t*, void*) {
  throw std::runtime_error("cuda: find_nonfinite: dsrun was built without CUDA");
}

void adam_step(float*, const float*, float*, float*, int64_t, const cpu::AdamArgs&, bool, void*) {
  throw std::runtime_error("cuda: adam_step: dsrun was built without CUDA");
}

void adam_steps(const AdamSegment*, size_t, const cpu::AdamArgs&, bool, const void*, void*) {
  throw std::runtime_error("cuda: adam_steps: dsrun was built without CUDA");
}

void sgd_steps(const SgdSegment*, size_t, const cpu::SgdArgs&, const void*, void*) {
  throw std::runtime_error("cuda: sgd_steps: dsrun was built without CUDA");
}

void lion_steps(const OneStateSegment*, size_t, const cpu::LionArgs&, const void*, void*) {
  throw std::runtime_error("cuda: lion_steps: dsrun was built without CUDA");
}

void adagrad_steps(const OneStateSegment*, size_t, const cpu::AdagradArgs&, const void*, void*) {
  throw std::runtime_error("cuda: adagrad_steps: dsrun was built without CUDA");
}

void rmsprop_steps(const OneStateSegment*, size_t, const cpu::RmspropArgs&, const void*, void*) {
  throw std::runtime_error("cuda: rmsprop_steps: dsrun was built without CUDA");
}

void round_copies(amp::Half, const RoundSegment*, size_t, const void*, void*) {
  throw std::runtime_error("cuda: round_copies: dsrun was built without CUDA");
}

void move_multi(MoveKind, amp::Half, const MoveSegment*, size_t, const void*, void*) {
  throw std::runtime_error("cuda: move_multi: dsrun was built without CUDA");
}

void scale_multi(const ScaleSegment*, size_t, double, const void*, void*) {
  throw std::runtime_error("cuda: scale_multi: dsrun was built without CUDA");
}

void sum_squares_multi(const SquaresSegment*, size_t, double*, const void*, double*, void*) {
  throw std::runtime_error("cuda: sum_squares_multi: dsrun was built without CUDA");
}

void sgd_step(float*, const float*, float*, int64_t, const cpu::SgdArgs&, void*) {
  throw std::runtime_error("cuda: sgd_step: dsrun was built without CUDA");
}

void lamb_moments(const LambSegment*, size_t, const cpu::LambArgs&, double*, const void*, double*, void*) {
  throw std::runtime_error("cuda: lamb_moments: dsrun was built without CUDA");
}

void lamb_apply(const LambSegment*, size_t, const cpu::LambArgs&, const float*, const void*, void*) {
  throw std::runtime_error("cuda: lamb_apply: dsrun was built without CUDA");
}

void gemm(const void*, const void*, void*, int64_t, int64_t, int64_t, bool, bool, GemmType, GemmType, float, float,
          int64_t, int64_t, int64_t, int64_t, void*) {
  throw std::runtime_error("cuda: gemm: dsrun was built without CUDA");
}

}  // namespace ds::cuda
