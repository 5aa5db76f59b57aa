// Helpers for ds_optim tests: relative comparison, one-line optimizer configs, state values.
#pragma once
#include <cmath>
#include <vector>

#include <doctest/doctest.h>

#include "amp/storage.h"
#include "config/ds_config.h"
#include "cpu/convert.h"
#include "optim/optimizer.h"

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

// A state buffer's elements in fp32, whatever its storage.
inline std::vector<float> values(const StateView& v) {
  std::vector<float> out(v.size);
  cpu::to_float(v.storage, v.data, out.data(), v.size);
  return out;
}

}  // namespace ds::test
