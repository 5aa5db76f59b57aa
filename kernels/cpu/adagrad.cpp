// Adagrad's loop (adagrad.h): a template over the arrays' element types, compiled per x86-64 level, split over
// the threads in contiguous ranges.
#include "cpu/adagrad.h"

#include <cmath>

#include "cpu/elements.h"
#include "cpu/parallel.h"
#include "cpu/simd.h"

namespace ds::cpu {
namespace {

template <class P, class G, class S>
DS_KERNEL_CLONES void adagrad_range(P* __restrict p, const G* __restrict g, S* __restrict sum, size_t n,
                                    AdagradArgs a) {
  for (size_t i = 0; i < n; ++i) {
    float param = load(p[i]), s = load(sum[i]);
    adagrad_element(param, load(g[i]), s, a);
    store(sum[i], s);
    store(p[i], param);
  }
}

}  // namespace

void adagrad_step(void* params, amp::Storage param_type, const void* grads, amp::Storage grad_type, void* sum,
                  amp::Storage state_type, size_t n, const AdagradArgs& args) {
  with_elements(param_type, grad_type, state_type, [&]<class P, class G, class S>(P*, G*, S*) {
    parallel_for(static_cast<int64_t>(n), kMinElementsPerThread, [&](int64_t begin, int64_t end) {
      const auto at = static_cast<size_t>(begin);
      adagrad_range(static_cast<P*>(params) + at, static_cast<const G*>(grads) + at, static_cast<S*>(sum) + at,
                    static_cast<size_t>(end - begin), args);
    });
  });
}

void adagrad_step_reference(void* params, amp::Storage param_type, const void* grads, amp::Storage grad_type,
                            void* sum, amp::Storage state_type, size_t n, const AdagradArgs& a) {
  with_elements(param_type, grad_type, state_type, [&]<class P, class G, class S>(P*, G*, S*) {
    P* p = static_cast<P*>(params);
    const G* g = static_cast<const G*>(grads);
    S* s = static_cast<S*>(sum);
    for (size_t i = 0; i < n; ++i) {
      const float param = load(p[i]), d = load(g[i]) + a.weight_decay * param;
      const float total = (a.first ? a.initial : load(s[i])) + d * d;
      store(s[i], total);
      store(p[i], param - a.clr * (d / (std::sqrt(total) + a.eps)));
    }
  });
}

}  // namespace ds::cpu
