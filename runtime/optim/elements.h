// Element storage for the optimizer loops, which are written once for fp32 and bf16 elements (bf16
// master weights and gradients, bf16 optimizer states): load() widens an element to fp32, store()
// rounds fp32 into it (to nearest, ties to even), with_element() runs a generic lambda for the
// element type a Storage names, and StateBuffer holds one state buffer of either type.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/elements.h"
#include "amp/storage.h"
#include "optim/optimizer.h"

// Element loops are compiled for AVX-512 (x86-64-v4), AVX2 (x86-64-v3) and the baseline, and the loader
// picks one for the CPU it runs on (GCC's target_clones). ds_optim is built with -ffp-contract=off, so no
// clone fuses a multiply-add and all give the same bits.
// Not under ThreadSanitizer: the clones' ifunc resolvers run while the loader relocates, before its
// runtime is up, and crash there (SIGSEGV in the resolver of the first clone).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define DS_OPTIM_BULK __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DS_OPTIM_BULK
#endif

namespace ds::optim {

using cpu::Bf16;
using cpu::load;
using cpu::store;

// f(static_cast<T*>(nullptr)) with T the element type of `s`: float or Bf16.
template <class F>
void with_element(amp::Storage s, F&& f) {
  if (s == amp::Storage::F32) return f(static_cast<float*>(nullptr));
  if (s == amp::Storage::BF16) return f(static_cast<Bf16*>(nullptr));
  throw std::invalid_argument("optimizer: fp16 parameters, gradients or state are not supported");
}

// The same for two storages at once: f(P*, G*).
template <class F>
void with_elements(amp::Storage a, amp::Storage b, F&& f) {
  with_element(a, [&]<class A>(A* x) { with_element(b, [&]<class B>(B* y) { f(x, y); }); });
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
  StateView view(std::string name) { return StateView{std::move(name), storage_, bytes_.data(), size_}; }

 private:
  amp::Storage storage_;
  size_t size_;
  std::vector<std::byte> bytes_;
};

}  // namespace ds::optim
