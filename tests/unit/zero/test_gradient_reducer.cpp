// ZeRO's gradient reducer on 2 thread ranks, stages 0-2, two micro-batches: the averaged sums each
// rank owns after finish(), and fresh(), which tells the device engine when a unit's gradients still
// hold zeros (so it zeroes them on the device instead of uploading them).
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "comm/thread_ranks.h"
#include "zero/gradient_reducer.h"
#include "zero/layout.h"

using namespace ds;
using namespace ds::zero;

namespace {

const std::vector<size_t> kLayers{5, 7, 3};  // one unit per layer (unit_elems 1)

// What rank r adds for element k in micro-batch m.
float addend(int rank, size_t k, int micro) { return static_cast<float>((rank + 1) * (micro + 1)) + 0.5f * static_cast<float>(k); }

}  // namespace

TEST_CASE("gradient reducer: stages 0-2 average two micro-batches over two ranks; fresh() until a unit is added into") {
  for (int stage : {0, 1, 2}) {
    CAPTURE(stage);
    run_ranks(2, [stage](ProcessGroup& g) {
      const Policy policy = Policy::for_stage(stage);
      const int world = policy.optimizer_state ? g.size() : 1, rank = policy.optimizer_state ? g.rank() : 0;
      const PartitionLayout l(kLayers, 1, false, world, rank);
      GradientReducer reducer(l, g, policy, Averaging{}, false);
      for (int step = 0; step < 2; ++step) {
        reducer.begin_step();
        for (int micro = 0; micro < 2; ++micro) {
          for (size_t unit = l.units().size(); unit-- > 0;) {  // backward: last unit first
            const Unit& u = l.units()[unit];
            // Stages 0-1 accumulate into one buffer for the whole step; stage 2 hands out a zeroed bucket.
            CHECK(reducer.fresh(unit) == (micro == 0 || policy.gradients));
            auto* grads = static_cast<float*>(reducer.unit_grads(unit));
            if (reducer.fresh(unit))
              for (size_t k = 0; k < u.size; ++k) CHECK(grads[k] == 0.0f);
            for (size_t k = 0; k < u.size; ++k) grads[k] += addend(g.rank(), u.begin + k, micro);
            reducer.unit_done(unit, micro == 1);
          }
        }
        reducer.finish();
        for (const Unit& u : l.units()) {  // this rank's share of the mean over ranks of both micro-batches
          const auto* owned = static_cast<const float*>(reducer.owned_grads(u));
          const size_t first = policy.optimizer_state ? static_cast<size_t>(rank) * u.chunk : 0;
          for (size_t k = 0; k < u.chunk; ++k) {
            const size_t at = first + k;  // within the unit
            float want = 0.0f;
            if (at < u.size)
              for (int r = 0; r < g.size(); ++r)
                for (int m = 0; m < 2; ++m) want += addend(r, u.begin + at, m) / static_cast<float>(g.size());
            CHECK(owned[k] == doctest::Approx(want));
          }
        }
      }
    });
  }
}
