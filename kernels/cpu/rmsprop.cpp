// RMSprop's loop (rmsprop.h): a template over the arrays' element types, compiled per x86-64 level, split over
// the threads in contiguous ranges.
#include "cpu/rmsprop.h"

#include <cmath>

#include "cpu/elements.h"
#include "cpu/parallel.h"
#include "cpu/simd.h"

namespace ds::cpu {
namespace {

template <class P, class G, class S>
DS_KERNEL_CLONES void rmsprop_range(P* __restrict p, const G* __restrict g, S* __restrict square_avg,
                                    S* __restrict grad_avg, S* __restrict buf, size_t n, RmspropArgs a) {
  const bool momentum = a.momentum > 0.0f;
  for (size_t i = 0; i < n; ++i) {
    float param = load(p[i]), s = load(square_avg[i]);
    float mean = a.centered ? load(grad_avg[i]) : 0.0f, b = momentum ? load(buf[i]) : 0.0f;
    rmsprop_element(param, load(g[i]), s, mean, b, a);
    store(square_avg[i], s);
    if (a.centered) store(grad_avg[i], mean);
    if (momentum) store(buf[i], b);
    store(p[i], param);
  }
}

}  // namespace

void rmsprop_step(void* params, amp::Storage param_type, const void* grads, amp::Storage grad_type,
                  const RmspropState& state, amp::Storage state_type, size_t n, const RmspropArgs& args) {
  with_elements(param_type, grad_type, state_type, [&]<class P, class G, class S>(P*, G*, S*) {
    parallel_for(static_cast<int64_t>(n), kMinElementsPerThread, [&](int64_t begin, int64_t end) {
      const auto at = static_cast<size_t>(begin);
      auto part = [&](void* buffer) { return buffer ? static_cast<S*>(buffer) + at : nullptr; };
      rmsprop_range(static_cast<P*>(params) + at, static_cast<const G*>(grads) + at, part(state.square_avg),
                    part(state.grad_avg), part(state.momentum_buffer), static_cast<size_t>(end - begin), args);
    });
  });
}

void rmsprop_step_reference(void* params, amp::Storage param_type, const void* grads, amp::Storage grad_type,
                            const RmspropState& state, amp::Storage state_type, size_t n, const RmspropArgs& a) {
  with_elements(param_type, grad_type, state_type, [&]<class P, class G, class S>(P*, G*, S*) {
    P* p = static_cast<P*>(params);
    const G* g = static_cast<const G*>(grads);
    S *sq = static_cast<S*>(state.square_avg), *mean = static_cast<S*>(state.grad_avg),
      *buf = static_cast<S*>(state.momentum_buffer);
    for (size_t i = 0; i < n; ++i) {
      const float param = load(p[i]);
      const float d = a.weight_decay != 0.0f ? load(g[i]) + a.weight_decay * param : load(g[i]);
      const float s = (a.first ? 0.0f : load(sq[i])) * a.alpha + a.one_minus_alpha * d * d;
      store(sq[i], s);
      float v = std::sqrt(s) + a.eps;
      if (a.centered) {
        const float m0 = a.first ? 0.0f : load(mean[i]);
        const float m = a.one_minus_alpha < 0.5f ? m0 + a.one_minus_alpha * (d - m0)
                                                 : d - (d - m0) * (1.0f - a.one_minus_alpha);
        store(mean[i], m);
        v = std::sqrt(s - m * m) + a.eps;
      }
      if (a.momentum > 0.0f) {
        const float b = (a.first ? 0.0f : load(buf[i])) * a.momentum + d / v;
        store(buf[i], b);
        store(p[i], param - a.lr * b);
      } else {
        store(p[i], param - a.lr * d / v);
      }
    }
  });
}

}  // namespace ds::cpu
