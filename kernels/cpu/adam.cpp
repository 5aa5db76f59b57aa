// Adam / AdamW's fused loop (adam.h): one template over the arrays' element types, instantiated for
// each combination, compiled per x86-64 level, split over the threads in contiguous ranges.
#include "cpu/adam.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <string>

#include "cpu/convert.h"
#include "cpu/elements.h"
#include "cpu/parallel.h"
#include "cpu/simd.h"

namespace ds::cpu {
namespace {

struct NoCopy {};  // the element type of an absent parameter copy

// Scale is float when the factor is exactly an fp32 value (1 / loss scale without clipping, a power of
// two): the product of two fp32 values is exact in double, so rounding it to fp32 gives the fp32
// multiply's bits; that saves the widening to double (~20% of a step on one AVX2 core).
template <bool kDecoupled, class P, class G, class S, class C, class Scale>
DS_KERNEL_CLONES void adam_loop(P* __restrict p, const G* __restrict g, S* __restrict m, S* __restrict v,
                                C* __restrict copy, size_t n, Scale scale, AdamArgs a) {
  const bool scaled = scale != Scale{1};
  for (size_t i = 0; i < n; ++i) {
    float grad = load(g[i]);
    if (scaled) grad = static_cast<float>(grad * scale);
    float param = load(p[i]), mi = load(m[i]), vi = load(v[i]);
    adam_element<kDecoupled>(param, grad, mi, vi, a);
    store(m[i], mi);
    store(v[i], vi);
    store(p[i], param);
    if constexpr (!std::is_same_v<C, NoCopy>) store(copy[i], param);
  }
}

// fp16 is converted through fp32 blocks with the bulk conversions (F16C where the CPU has it): one
// element at a time it would be a library call each (GCC has no inline fp16 conversion without
// AVX512-FP16). The blocks stay in L1, so memory is still read and written once.
constexpr size_t kBlock = 256;

template <bool kDecoupled, class P, class G, class S, class C, class Scale>
void adam_range(P* p, const G* g, S* m, S* v, C* copy, size_t n, Scale scale, const AdamArgs& a) {
  constexpr bool kHalfGrads = std::is_same_v<G, F16>, kHalfCopy = std::is_same_v<C, F16>;
  if constexpr (!kHalfGrads && !kHalfCopy) {
    adam_loop<kDecoupled>(p, g, m, v, copy, n, scale, a);
  } else {
    float grads[kBlock], copies[kBlock];
    for (size_t i = 0; i < n; i += kBlock) {
      const size_t len = std::min(kBlock, n - i);
      if constexpr (kHalfGrads) to_float(amp::Half::F16, reinterpret_cast<const uint16_t*>(g + i), grads, len);
      auto* grad_at = [&] {
        if constexpr (kHalfGrads) return static_cast<const float*>(grads);
        else return g + i;
      }();
      auto* copy_at = [&] {
        if constexpr (kHalfCopy) return static_cast<float*>(copies);
        else return copy ? copy + i : nullptr;
      }();
      adam_loop<kDecoupled>(p + i, grad_at, m + i, v + i, copy_at, len, scale, a);
      if constexpr (kHalfCopy) from_float(amp::Half::F16, copies, reinterpret_cast<uint16_t*>(copy + i), len);
    }
  }
}

void check(const AdamArrays& x) {
  auto bad = [](const char* what, amp::Storage s) {
    const char* name = s == amp::Storage::F16 ? "fp16" : s == amp::Storage::BF16 ? "bf16" : "fp32";
    throw std::invalid_argument(std::string("adam_step: ") + what + " cannot be " + name);
  };
  if (x.param_type == amp::Storage::F16) bad("parameters", x.param_type);
  if (x.state_type == amp::Storage::F16) bad("moments", x.state_type);
  if (x.param_copy && x.copy_type == amp::Storage::F32) bad("the parameter copy", x.copy_type);
}

// f(p, g, m, v, copy) with the arrays typed (copy a NoCopy* when there is none).
template <class F>
void typed(const AdamArrays& x, F&& f) {
  with_elements(x.param_type, x.grad_type, x.state_type, [&]<class P, class G, class S>(P*, G*, S*) {
    auto run = [&]<class C>(C* copy) {
      f(static_cast<P*>(x.params), static_cast<const G*>(x.grads), static_cast<S*>(x.exp_avg),
        static_cast<S*>(x.exp_avg_sq), copy);
    };
    if (!x.param_copy) return run(static_cast<NoCopy*>(nullptr));
    with_element(x.copy_type, [&]<class C>(C*) { run(static_cast<C*>(x.param_copy)); });
  });
}

}  // namespace

void adam_step(const AdamArrays& arrays, const AdamArgs& args, bool decoupled) {
  check(arrays);
  const auto narrow = static_cast<float>(arrays.grad_scale);
  const bool exact = static_cast<double>(narrow) == arrays.grad_scale;
  typed(arrays, [&]<class P, class G, class S, class C>(P* p, const G* g, S* m, S* v, C* copy) {
    parallel_for(static_cast<int64_t>(arrays.n), kMinElementsPerThread, [&](int64_t begin, int64_t end) {
      const auto at = static_cast<size_t>(begin), len = static_cast<size_t>(end - begin);
      C* c = copy ? copy + at : nullptr;
      auto run = [&](auto scale) {
        if (decoupled) adam_range<true>(p + at, g + at, m + at, v + at, c, len, scale, args);
        else adam_range<false>(p + at, g + at, m + at, v + at, c, len, scale, args);
      };
      if (exact) run(narrow);
      else run(arrays.grad_scale);
    });
  });
}

void adam_step_reference(const AdamArrays& arrays, const AdamArgs& args, bool decoupled) {
  check(arrays);
  typed(arrays, [&]<class P, class G, class S, class C>(P* p, const G* g, S* m, S* v, C* copy) {
    for (size_t i = 0; i < arrays.n; ++i) {
      float grad = load(g[i]);
      if (arrays.grad_scale != 1.0) grad = static_cast<float>(static_cast<double>(grad) * arrays.grad_scale);
      float param = load(p[i]), mi = load(m[i]), vi = load(v[i]);
      if (decoupled) adam_element<true>(param, grad, mi, vi, args);
      else adam_element<false>(param, grad, mi, vi, args);
      store(m[i], mi);
      store(v[i], vi);
      store(p[i], param);
      if constexpr (!std::is_same_v<C, NoCopy>) store(copy[i], param);
    }
  });
}

}  // namespace ds::cpu
