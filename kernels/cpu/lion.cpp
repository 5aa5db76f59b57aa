// Lion's loop (lion.h): a template over the arrays' element types, compiled per x86-64 level, split over the
// threads in contiguous ranges.
#include "cpu/lion.h"

#include <cmath>

#include "cpu/elements.h"
#include "cpu/parallel.h"
#include "cpu/simd.h"

namespace ds::cpu {
namespace {

template <class P, class G, class S>
DS_KERNEL_CLONES void lion_range(P* __restrict p, const G* __restrict g, S* __restrict m, size_t n, LionArgs a) {
  for (size_t i = 0; i < n; ++i) {
    float param = load(p[i]), mi = load(m[i]);
    lion_element(param, load(g[i]), mi, a);
    store(m[i], mi);
    store(p[i], param);
  }
}

}  // namespace

void lion_step(void* params, amp::Storage param_type, const void* grads, amp::Storage grad_type, void* exp_avg,
               amp::Storage state_type, size_t n, const LionArgs& args) {
  with_elements(param_type, grad_type, state_type, [&]<class P, class G, class S>(P*, G*, S*) {
    parallel_for(static_cast<int64_t>(n), kMinElementsPerThread, [&](int64_t begin, int64_t end) {
      const auto at = static_cast<size_t>(begin);
      lion_range(static_cast<P*>(params) + at, static_cast<const G*>(grads) + at, static_cast<S*>(exp_avg) + at,
                 static_cast<size_t>(end - begin), args);
    });
  });
}

void lion_step_reference(void* params, amp::Storage param_type, const void* grads, amp::Storage grad_type,
                         void* exp_avg, amp::Storage state_type, size_t n, const LionArgs& a) {
  with_elements(param_type, grad_type, state_type, [&]<class P, class G, class S>(P*, G*, S*) {
    P* p = static_cast<P*>(params);
    const G* g = static_cast<const G*>(grads);
    S* m = static_cast<S*>(exp_avg);
    for (size_t i = 0; i < n; ++i) {
      const float grad = load(g[i]), momentum = load(m[i]);
      const float c = a.beta1 * momentum + a.one_minus_beta1 * grad;
      const float sign = c > 0.0f ? 1.0f : c < 0.0f ? -1.0f : std::isnan(c) ? c : 0.0f;
      store(p[i], load(p[i]) * a.after_decay - a.lr * sign);
      store(m[i], a.beta2 * momentum + a.one_minus_beta2 * grad);
    }
  });
}

}  // namespace ds::cpu
