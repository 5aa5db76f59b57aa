// SGD's and LAMB's loops (sgd_lamb.h): templates over the arrays' element types, compiled per x86-64
// level, split over the threads in contiguous ranges (LAMB's sums in fixed blocks).
#include "cpu/sgd_lamb.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/convert.h"
#include "cpu/elements.h"
#include "cpu/parallel.h"
#include "cpu/simd.h"

namespace ds::cpu {
namespace {

template <class T>
T* typed_at(void* base, size_t i) {
  return static_cast<T*>(base) + i;
}
template <class T>
const T* typed_at(const void* base, size_t i) {
  return static_cast<const T*>(base) + i;
}

template <class P, class G>
DS_KERNEL_CLONES void sgd_plain(P* __restrict p, const G* __restrict g, size_t n, SgdArgs a) {
  for (size_t i = 0; i < n; ++i) {
    float param = load(p[i]), unused = 0.0f;
    sgd_element<false, false, false>(param, load(g[i]), unused, a);
    store(p[i], param);
  }
}

template <bool kNesterov, bool kFirst, class P, class G, class S>
DS_KERNEL_CLONES void sgd_momentum(P* __restrict p, const G* __restrict g, S* __restrict buf, size_t n,
                                   SgdArgs a) {
  for (size_t i = 0; i < n; ++i) {
    float param = load(p[i]), b = kFirst ? 0.0f : load(buf[i]);
    sgd_element<true, kNesterov, kFirst>(param, load(g[i]), b, a);
    store(buf[i], b);
    store(p[i], param);
  }
}

template <class P, class G, class S>
void sgd_range(P* p, const G* g, S* buf, size_t n, const SgdArgs& a) {
  if (a.momentum == 0.0f) return sgd_plain(p, g, n, a);
  if (a.nesterov) {
    if (a.first) sgd_momentum<true, true>(p, g, buf, n, a);
    else sgd_momentum<true, false>(p, g, buf, n, a);
  } else {
    if (a.first) sgd_momentum<false, true>(p, g, buf, n, a);
    else sgd_momentum<false, false>(p, g, buf, n, a);
  }
}

// The moments' update over one range, and Σp², Σu² added in order into sums (u from the stored m and v,
// as lamb_apply recomputes it: identical bits).
template <class P, class G, class S>
DS_KERNEL_CLONES void lamb_moments_range(const P* __restrict p, const G* __restrict g, S* __restrict m,
                                         S* __restrict v, size_t n, LambArgs a, LambSums& sums) {
  double p_sq = sums.p_sq, u_sq = sums.u_sq;
  for (size_t i = 0; i < n; ++i) {
    float mi = load(m[i]), vi = load(v[i]);
    lamb_moments_element(load(g[i]), mi, vi, a);
    store(m[i], mi);
    store(v[i], vi);
    const float param = load(p[i]);
    const float u = lamb_update(param, load(m[i]), load(v[i]), a);
    p_sq += static_cast<double>(param) * param;
    u_sq += static_cast<double>(u) * u;
  }
  sums = {p_sq, u_sq};
}

template <class P, class S>
DS_KERNEL_CLONES void lamb_apply_range(P* __restrict p, const S* __restrict m, const S* __restrict v, size_t n,
                                       LambArgs a, float scale) {
  for (size_t i = 0; i < n; ++i) {
    const float param = load(p[i]);
    store(p[i], param - scale * lamb_update(param, load(m[i]), load(v[i]), a));
  }
}

}  // namespace

void sgd_step(void* params, amp::Storage param_type, const void* grads, amp::Storage grad_type, void* buf,
              amp::Storage state_type, size_t n, const SgdArgs& args) {
  with_elements(param_type, grad_type, state_type, [&]<class P, class G, class S>(P*, G*, S*) {
    parallel_for(static_cast<int64_t>(n), kMinElementsPerThread, [&](int64_t begin, int64_t end) {
      const auto at = static_cast<size_t>(begin);
      sgd_range(typed_at<P>(params, at), typed_at<G>(grads, at), buf ? typed_at<S>(buf, at) : nullptr,
                static_cast<size_t>(end - begin), args);
    });
  });
}

void sgd_step_reference(void* params, amp::Storage param_type, const void* grads, amp::Storage grad_type, void* buf,
                        amp::Storage state_type, size_t n, const SgdArgs& a) {
  with_elements(param_type, grad_type, state_type, [&]<class P, class G, class S>(P*, G*, S*) {
    P* p = typed_at<P>(params, 0);
    const G* g = typed_at<G>(grads, 0);
    for (size_t i = 0; i < n; ++i) {
      const float param = load(p[i]);
      float d = load(g[i]) + a.weight_decay * param;
      if (a.momentum != 0.0f) {
        S& b = typed_at<S>(buf, 0)[i];
        const float next = a.first ? d : a.momentum * load(b) + a.keep * d;
        store(b, next);
        d = a.nesterov ? d + a.momentum * next : next;
      }
      store(p[i], param - a.lr * d);
    }
  });
}

LambSums lamb_moments(const LambArrays& x, const LambArgs& args) {
  LambSums total;
  with_elements(x.param_type, x.grad_type, x.state_type, [&]<class P, class G, class S>(P*, G*, S*) {
    const size_t blocks = (x.n + kSumBlock - 1) / kSumBlock;
    std::vector<LambSums> partial(blocks);
    parallel_for(static_cast<int64_t>(blocks), 1, [&](int64_t begin, int64_t end) {
      for (auto b = static_cast<size_t>(begin); b < static_cast<size_t>(end); ++b) {
        const size_t at = b * kSumBlock;
        lamb_moments_range(typed_at<P>(x.params, at), typed_at<G>(x.grads, at), typed_at<S>(x.exp_avg, at),
                           typed_at<S>(x.exp_avg_sq, at), std::min(kSumBlock, x.n - at), args, partial[b]);
      }
    });
    for (const LambSums& s : partial) {
      total.p_sq += s.p_sq;
      total.u_sq += s.u_sq;
    }
  });
  return total;
}

void lamb_apply(const LambArrays& x, const LambArgs& args, float scale) {
  with_elements(x.param_type, x.grad_type, x.state_type, [&]<class P, class G, class S>(P*, G*, S*) {
    parallel_for(static_cast<int64_t>(x.n), kMinElementsPerThread, [&](int64_t begin, int64_t end) {
      const auto at = static_cast<size_t>(begin);
      lamb_apply_range(typed_at<P>(x.params, at), typed_at<S>(x.exp_avg, at), typed_at<S>(x.exp_avg_sq, at),
                       static_cast<size_t>(end - begin), args, scale);
    });
  });
}

LambSums lamb_moments_reference(const LambArrays& x, const LambArgs& a) {
  LambSums sums;
  with_elements(x.param_type, x.grad_type, x.state_type, [&]<class P, class G, class S>(P*, G*, S*) {
    const P* p = typed_at<P>(x.params, 0);
    const G* g = typed_at<G>(x.grads, 0);
    S *m = typed_at<S>(x.exp_avg, 0), *v = typed_at<S>(x.exp_avg_sq, 0);
    for (size_t i = 0; i < x.n; ++i) {
      float mi = load(m[i]), vi = load(v[i]);
      lamb_moments_element(load(g[i]), mi, vi, a);
      store(m[i], mi);
      store(v[i], vi);
      const float param = load(p[i]), u = lamb_update(param, load(m[i]), load(v[i]), a);
      sums.p_sq += static_cast<double>(param) * param;
      sums.u_sq += static_cast<double>(u) * u;
    }
  });
  return sums;
}

void lamb_apply_reference(const LambArrays& x, const LambArgs& a, float scale) {
  with_elements(x.param_type, x.grad_type, x.state_type, [&]<class P, class G, class S>(P*, G*, S*) {
    P* p = typed_at<P>(x.params, 0);
    const S *m = typed_at<S>(x.exp_avg, 0), *v = typed_at<S>(x.exp_avg_sq, 0);
    for (size_t i = 0; i < x.n; ++i) {
      const float param = load(p[i]);
      store(p[i], param - scale * lamb_update(param, load(m[i]), load(v[i]), a));
    }
  });
}

}  // namespace ds::cpu
