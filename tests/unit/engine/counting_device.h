// A test device: the emulated CUDA backend, counting the bytes copied to it and back (engine tests).
#pragma once
#include <cstddef>
#include <map>
#include <string>

#include "backend/backend.h"

namespace ds::test {

// The emulated device, counting the bytes copied to it and back, and those of them from and to pinned
// host memory.
class CountingDevice : public backend::Device {
 public:
  const ds_backend* table() const override { return cuda_.table(); }
  std::string describe() const override { return cuda_.describe(); }
  void* allocate(size_t bytes) override { return cuda_.allocate(bytes); }
  void release(void* p) override { cuda_.release(p); }
  void to_device(void* dst, const void* src, size_t bytes) override {
    uploaded += bytes;
    if (is_pinned(src, bytes)) uploaded_pinned += bytes;
    cuda_.to_device(dst, src, bytes);
  }
  void to_host(void* dst, const void* src, size_t bytes) override {
    downloaded += bytes;
    if (is_pinned(dst, bytes)) downloaded_pinned += bytes;
    cuda_.to_host(dst, src, bytes);
  }
  void to_host_async(void* dst, const void* src, size_t bytes) override {
    downloaded += bytes;
    downloaded_async += bytes;
    if (is_pinned(dst, bytes)) downloaded_pinned += bytes;
    cuda_.to_host_async(dst, src, bytes);
  }
  void to_device_async(void* dst, const void* src, size_t bytes) override {
    uploaded += bytes;
    uploaded_async += bytes;
    if (is_pinned(src, bytes)) uploaded_pinned += bytes;
    cuda_.to_device_async(dst, src, bytes);
  }
  void to_device_after(uint64_t ops, void* dst, const void* src, size_t bytes) override {
    uploaded += bytes;
    uploaded_after += bytes;
    if (is_pinned(src, bytes)) uploaded_pinned += bytes;
    cuda_.to_device_after(ops, dst, src, bytes);
  }
  uint64_t ops_issued() override { return cuda_.ops_issued(); }
  uint64_t uploads_issued() override { return cuda_.uploads_issued(); }
  uint64_t copies_issued() override { return cuda_.copies_issued(); }
  void wait_copies(uint64_t ticket) override { cuda_.wait_copies(ticket); }
  void ops_after_copies(uint64_t ticket) override {
    ++ordered_after_copies;
    cuda_.ops_after_copies(ticket);
  }
  bool pin_host(void* p, size_t bytes, std::string& why) override {
    if (refuse_pins) {
      why = "cudaErrorMemoryAllocation: out of memory";  // as a system that locks no more memory answers
      return false;
    }
    if (!cuda_.pin_host(p, bytes, why)) return false;
    pinned[p] = bytes;
    return true;
  }
  void unpin_host(void* p) override {
    cuda_.unpin_host(p);
    pinned.erase(p);
  }
  void zero(void* dst, size_t bytes) override {
    zeroed += bytes;
    cuda_.zero(dst, bytes);
  }
  void round_to(amp::Half type, float* x, size_t n) override { cuda_.round_to(type, x, n); }
  void widen(amp::Half type, const uint16_t* in, float* out, size_t n) override { cuda_.widen(type, in, out, n); }
  void narrow(amp::Half type, const float* in, uint16_t* out, size_t n) override { cuda_.narrow(type, in, out, n); }
  void set_half_matmuls(std::optional<ds::amp::Half> type) override { cuda_.set_half_matmuls(type); }
  void synchronize() override {
    ++synchronized;
    cuda_.synchronize();
  }
  void copy_within(void* dst, const void* src, size_t bytes) override { cuda_.copy_within(dst, src, bytes); }
  void accumulate(float* y, const float* x, size_t n) override { cuda_.accumulate(y, x, n); }
  void rescale(float* x, size_t n, double factor) override {
    ++rescale_calls;
    cuda_.rescale(x, n, factor);
  }
  void copy_all(std::span<const Move> moves) override {
    ++move_calls;
    cuda_.copy_all(moves);
  }
  void narrow_all(amp::Half type, std::span<const Move> moves) override {
    ++move_calls;
    cuda_.narrow_all(type, moves);
  }
  void widen_all(amp::Half type, std::span<const Move> moves) override {
    ++move_calls;
    cuda_.widen_all(type, moves);
  }
  void rescale_all(std::span<const Values> tensors, double factor) override {
    ++rescale_calls;
    cuda_.rescale_all(tensors, factor);
  }
  void add_sum_squares(const float* x, size_t n, double* total) override { cuda_.add_sum_squares(x, n, total); }
  void round_into(amp::Half type, std::span<const RoundTensor> tensors) override { cuda_.round_into(type, tensors); }
  void add_sums_of_squares(std::span<const Floats> tensors, double* total) override {
    cuda_.add_sums_of_squares(tensors, total);
  }
  void adam_step(float* p, const float* g, float* m, float* v, size_t n, const cpu::AdamArgs& args,
                 bool decoupled) override {
    ++adam_calls;
    cuda_.adam_step(p, g, m, v, n, args, decoupled);
  }
  void adam_steps(std::span<const AdamTensor> tensors, const cpu::AdamArgs& args, bool decoupled) override {
    ++adam_calls;
    cuda_.adam_steps(tensors, args, decoupled);
  }
  void sgd_step(float* p, const float* g, float* buf, size_t n, const cpu::SgdArgs& args) override {
    ++sgd_calls;
    cuda_.sgd_step(p, g, buf, n, args);
  }
  void sgd_steps(std::span<const SgdTensor> tensors, const cpu::SgdArgs& args) override {
    ++sgd_calls;
    cuda_.sgd_steps(tensors, args);
  }
  void lion_steps(std::span<const OneStateTensor> tensors, const cpu::LionArgs& args) override {
    ++lion_calls;
    cuda_.lion_steps(tensors, args);
  }
  void adagrad_steps(std::span<const OneStateTensor> tensors, const cpu::AdagradArgs& args) override {
    ++adagrad_calls;
    cuda_.adagrad_steps(tensors, args);
  }
  void rmsprop_steps(std::span<const OneStateTensor> tensors, const cpu::RmspropArgs& args) override {
    ++rmsprop_calls;
    cuda_.rmsprop_steps(tensors, args);
  }
  void lamb_moments(std::span<const LambTensor> tensors, const cpu::LambArgs& args, double* sums) override {
    ++lamb_calls;
    cuda_.lamb_moments(tensors, args, sums);
  }
  void lamb_apply(std::span<const LambTensor> tensors, const cpu::LambArgs& args, std::span<const float> scales) override {
    ++lamb_calls;
    cuda_.lamb_apply(tensors, args, scales);
  }
  size_t uploaded = 0, downloaded = 0, uploaded_pinned = 0, downloaded_pinned = 0;
  size_t synchronized = 0;  // synchronize() calls
  // ops_after_copies() calls (the layers' backward calls, once their parameters stay on the device)
  size_t ordered_after_copies = 0;
  size_t uploaded_async = 0, downloaded_async = 0;  // of those: on the copy stream
  size_t adam_calls = 0;  // adam_step and adam_steps calls (each one launch on a GPU)
  size_t rescale_calls = 0;  // rescale and rescale_all calls (likewise)
  size_t sgd_calls = 0;      // sgd_step and sgd_steps calls (likewise)
  size_t lion_calls = 0;     // lion_steps calls (likewise)
  size_t adagrad_calls = 0;  // adagrad_steps calls (likewise)
  size_t rmsprop_calls = 0;  // rmsprop_steps calls (likewise)
  size_t lamb_calls = 0;     // lamb_moments and lamb_apply calls (each a launch or two)
  size_t move_calls = 0;     // copy_all, narrow_all and widen_all calls (likewise)
  size_t zeroed = 0;         // bytes zero() wrote
  size_t uploaded_after = 0;                         // on the upload stream (to_device_after)
  std::map<const void*, size_t> pinned;  // start → bytes
  bool refuse_pins = false;              // pin_host refuses everything

 private:
  bool is_pinned(const void* p, size_t bytes) const {
    const auto* start = static_cast<const std::byte*>(p);
    for (const auto& [q, n] : pinned)
      if (start >= static_cast<const std::byte*>(q) && start + bytes <= static_cast<const std::byte*>(q) + n) return true;
    return false;
  }

  backend::Cuda cuda_{0};
};

}  // namespace ds::test
