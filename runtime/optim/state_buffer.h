// The optimizers' state buffers (fp32 or bf16 elements, zeroed), and the check that a segment's
// storages are ones the SGD and LAMB loops take (fp32 or bf16; Adam's also reads fp16 gradients).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "amp/storage.h"
#include "optim/optimizer.h"

namespace ds::optim {

inline void check_not_fp16(amp::Storage params, amp::Storage grads) {
  if (params == amp::Storage::F16 || grads == amp::Storage::F16)
    throw std::invalid_argument("optimizer: fp16 parameters, gradients or state are not supported");
}

// An element-wise optimizer's segments: step(segment, its part of each of the `state` buffers, in order) for
// each segment, in order (each buffer holds the segments' elements one after another); fp16 parameters or
// gradients are refused.
template <class Step>
void each_segment(std::span<const Segment> segments, std::span<const StateView> state, Step&& step) {
  std::vector<std::byte*> parts(state.size());
  size_t k = 0;  // the segment's first element in the state
  for (const Segment& s : segments) {
    check_not_fp16(s.param_type, s.grad_type);
    for (size_t i = 0; i < state.size(); ++i)
      parts[i] = static_cast<std::byte*>(state[i].data) + k * amp::storage_bytes(state[i].storage);
    step(s, std::span<std::byte* const>(parts));
    k += s.size;
  }
}

// n zeroed elements of `storage` (fp32 or bf16). They come from calloc: a large buffer's pages are the
// kernel's zero pages until written, so a state that a device holds (freed before the host writes it)
// never takes the host's memory.
class StateBuffer {
 public:
  StateBuffer(size_t n, amp::Storage storage) : storage_(storage), size_(n) {
    if (storage == amp::Storage::F16) throw std::invalid_argument("optimizer: fp16 state is not supported");
    hold(true);
  }
  template <class T>
  T* as() {
    return reinterpret_cast<T*>(bytes_.get());
  }
  amp::Storage storage() const { return storage_; }
  size_t size() const { return size_; }
  StateView view(std::string name) { return StateView{std::move(name), storage_, bytes_.get(), size_}; }
  // Frees the elements (a device holds the state: Optimizer::hold_state), or makes them again, zeroed.
  void hold(bool held) {
    if (!held) bytes_.reset();
    else if (!this->held()) {
      bytes_.reset(static_cast<std::byte*>(std::calloc(std::max<size_t>(size_ * amp::storage_bytes(storage_), 1), 1)));
      if (!bytes_) throw std::bad_alloc();
    }
  }
  bool held() const { return bytes_ != nullptr; }

 private:
  struct Free {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  amp::Storage storage_;
  size_t size_;
  std::unique_ptr<std::byte[], Free> bytes_;
};

}  // namespace ds::optim
