// The optimizers' state buffers (fp32 or bf16 elements, zeroed), and the check that a segment's
// storages are ones the SGD and LAMB loops take (fp32 or bf16; Adam's also reads fp16 gradients).
#pragma once
#include <cstddef>
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

// n zeroed elements of `storage` (fp32 or bf16).
class StateBuffer {
 public:
  StateBuffer(size_t n, amp::Storage storage) : storage_(storage), size_(n), bytes_(n * amp::storage_bytes(storage)) {
    if (storage == amp::Storage::F16) throw std::invalid_argument("optimizer: fp16 state is not supported");
  }
  template <class T>
  T* as() {
    return reinterpret_cast<T*>(bytes_.data());
  }
  amp::Storage storage() const { return storage_; }
  size_t size() const { return size_; }
  StateView view(std::string name) { return StateView{std::move(name), storage_, held() ? bytes_.data() : nullptr, size_}; }
  // Frees the elements (a device holds the state: Optimizer::hold_state), or makes them again, zeroed.
  void hold(bool held) {
    if (!held) std::vector<std::byte>().swap(bytes_);
    else if (!this->held()) bytes_.assign(size_ * amp::storage_bytes(storage_), std::byte{0});
  }
  bool held() const { return bytes_.size() == size_ * amp::storage_bytes(storage_); }

 private:
  amp::Storage storage_;
  size_t size_;
  std::vector<std::byte> bytes_;
};

}  // namespace ds::optim
