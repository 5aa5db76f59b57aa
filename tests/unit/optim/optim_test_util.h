// Helpers for ds_optim tests: relative comparison and one-line optimizer configs.
#pragma once
#include <cmath>

#include <doctest/doctest.h>

#include "config/ds_config.h"

namespace ds::test {

// |got − want| <= 1e-6·|want| (exact when want is 0).
inline void check_close(double got, double want, double rel = 1e-6) {
  CAPTURE(got);
  CAPTURE(want);
  CHECK(std::abs(got - want) <= rel * std::abs(want));
}

inline OptimizerConfig optimizer_config(OptimizerType type, double lr,
                                        decltype(OptimizerConfig::params) params) {
  OptimizerConfig c;
  c.type = type;
  c.lr = lr;
  c.params = params;
  return c;
}

}  // namespace ds::test
