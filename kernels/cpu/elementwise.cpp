// elementwise: residual additions (see elementwise.h), vectorised and split over the kernel threads.
#include "cpu/elementwise.h"

#include "cpu/parallel.h"
#include "cpu/simd.h"

namespace ds::cpu {
namespace {

DS_KERNEL_CLONES void add_range(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace

void add_into(float* y, const float* x, int64_t n) { add(y, x, y, n); }

void add(const float* a, const float* b, float* out, int64_t n) {
  parallel_for(n, 2 * kMinElementsPerThread,  // an add is cheaper than most
               [&](int64_t begin, int64_t end) { add_range(a + begin, b + begin, out + begin, end - begin); });
}

}  // namespace ds::cpu
