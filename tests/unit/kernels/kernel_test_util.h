// Helpers for the kernel tests: a fixed PRNG (splitmix64, so inputs are the same on every
// platform), random fills, values stored as fp32/bf16/fp16 bytes, the fast-vs-reference comparison atol + rtol·|ref| that prints the
// worst error it saw, and central differences for gradient checks.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "amp/storage.h"
#include "cpu/convert.h"

namespace ds::test {

struct Rng {
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi).
  float uniform(float lo, float hi) {
    const float u = static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
    return lo + (hi - lo) * u;
  }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
};

// values in storage s's bytes (rounded to nearest even by the reference conversion).
inline std::vector<std::byte> stored(amp::Storage s, const std::vector<float>& values) {
  std::vector<std::byte> out(values.size() * amp::storage_bytes(s));
  cpu::from_float_reference(s, values.data(), out.data(), values.size());
  return out;
}

// The storage combinations the optimizer loops take: parameters, gradients, state.
struct StorageCombo {
  amp::Storage param, grad, state;
};
constexpr StorageCombo kStorageCombos[] = {{amp::Storage::F32, amp::Storage::F32, amp::Storage::F32},
                                           {amp::Storage::F32, amp::Storage::F32, amp::Storage::BF16},
                                           {amp::Storage::BF16, amp::Storage::BF16, amp::Storage::F32},
                                           {amp::Storage::BF16, amp::Storage::BF16, amp::Storage::BF16}};

inline std::vector<float> random_vec(Rng& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(n);
  for (auto& x : v) x = rng.uniform(lo, hi);
  return v;
}

// Checks |got - ref| <= atol + rtol·|ref| elementwise; prints the worst error (relative to the
// allowed bound) under `what`. NaNs must match NaNs.
inline void check_close(const std::string& what, const float* got, const float* ref, size_t n, double atol,
                        double rtol) {
  double worst_ratio = 0.0, worst_abs = 0.0;
  size_t worst_i = 0, bad = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(ref[i]) || std::isnan(got[i])) {
      if (std::isnan(ref[i]) != std::isnan(got[i])) ++bad;
      continue;
    }
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    const double bound = atol + rtol * std::fabs(static_cast<double>(ref[i]));
    if (err > bound) ++bad;
    if (err / bound > worst_ratio) {
      worst_ratio = err / bound;
      worst_abs = err;
      worst_i = i;
    }
  }
  std::printf("  %-48s n=%-8zu worst |err|=%.3g at %zu (%.2f of bound)\n", what.c_str(), n, worst_abs,
              worst_i, worst_ratio);
  INFO(what << ": worst |err| " << worst_abs << " at " << worst_i << " (got " << (n ? got[worst_i] : 0)
            << ", ref " << (n ? ref[worst_i] : 0) << ")");
  CHECK(bad == 0);
}

// The gradient of f() with respect to every element of `v` by central differences: (f(v + h) −
// f(v − h)) / (the two values' actual distance, after rounding to float), f read with v changed in
// place and restored.
inline std::vector<float> central_differences(std::vector<float>& v, const std::function<double()>& f,
                                              float h = 1e-2f) {
  std::vector<float> g(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const float v0 = v[i];
    v[i] = v0 + h;
    const double up = f();
    const float above = v[i];
    v[i] = v0 - h;
    const double down = f();
    const float below = v[i];
    v[i] = v0;
    g[i] = static_cast<float>((up - down) / (static_cast<double>(above) - below));
  }
  return g;
}

inline bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](float x, float y) {
           uint32_t ux, uy;
           std::memcpy(&ux, &x, 4);
           std::memcpy(&uy, &y, 4);
           return ux == uy;
         });
}

}  // namespace ds::test
