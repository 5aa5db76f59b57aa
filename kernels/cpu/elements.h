// Typed elements for loops written once over fp32, bf16 and fp16 storage (the optimizer kernels):
// load() widens an element to fp32 exactly, store() rounds fp32 into it (to nearest, ties to even; the
// conversions of amp/half.h), and with_element() runs a generic lambda for the element type a storage
// names.
#pragma once
#include <cstdint>

#include "amp/half.h"
#include "amp/storage.h"

namespace ds::cpu {

struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

inline float load(float x) { return x; }
inline float load(Bf16 x) { return amp::bf16_to_float(x.bits); }
inline float load(F16 x) { return amp::fp16_to_float(x.bits); }
inline void store(float& to, float x) { to = x; }
inline void store(Bf16& to, float x) { to.bits = amp::bf16_from_float(x); }
inline void store(F16& to, float x) { to.bits = amp::fp16_from_float(x); }

// f(static_cast<T*>(nullptr)) with T the element type of `s`: float, Bf16 or F16.
template <class F>
decltype(auto) with_element(amp::Storage s, F&& f) {
  if (s == amp::Storage::BF16) return f(static_cast<Bf16*>(nullptr));
  if (s == amp::Storage::F16) return f(static_cast<F16*>(nullptr));
  return f(static_cast<float*>(nullptr));
}

// f(P*, G*, S*) (null pointers) for the element types of a loop's parameters, gradients and state.
template <class F>
decltype(auto) with_elements(amp::Storage params, amp::Storage grads, amp::Storage state, F&& f) {
  return with_element(params, [&]<class P>(P* p) {
    return with_element(grads, [&]<class G>(G* g) { return with_element(state, [&]<class S>(S* s) { return f(p, g, s); }); });
  });
}

}  // namespace ds::cpu
