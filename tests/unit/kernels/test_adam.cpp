// The fused Adam/AdamW kernel (cpu/adam.h): bit for bit the separate passes it replaces (16-bit
// gradients widened and scaled, the fp32 update, the parameters rounded into their 16-bit copy), the
// threaded loop (fp32 or double scaling, fp16 through blocks) bit for bit its scalar reference at 1-3
// threads and odd sizes, and the storages it refuses.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "amp/half.h"
#include "cpu/adam.h"
#include "cpu/parallel.h"
#include "kernel_test_util.h"

namespace {

using ds::amp::Storage;
using ds::test::Rng;

ds::cpu::AdamArgs args_at(int64_t step, float wd) {
  const float beta1 = 0.9f, beta2 = 0.999f, lr = 1e-2f;
  const auto bc = [&](float beta) { return static_cast<float>(1.0 - std::pow(static_cast<double>(beta), step)); };
  return {beta1, beta2, 1e-8f, wd, -lr / bc(beta1), 1.0f / std::sqrt(bc(beta2)), -lr * wd};
}

uint16_t to_half(Storage s, float x) { return s == Storage::F16 ? ds::amp::fp16_from_float(x) : ds::amp::bf16_from_float(x); }
float from_half(Storage s, uint16_t b) { return s == Storage::F16 ? ds::amp::fp16_to_float(b) : ds::amp::bf16_to_float(b); }

// Raw storage for n elements of `s`, filled from values (rounded where 16-bit).
std::vector<std::byte> stored(Storage s, const std::vector<float>& values) {
  std::vector<std::byte> out(values.size() * (s == Storage::F32 ? 4 : 2));
  for (size_t i = 0; i < values.size(); ++i) {
    if (s == Storage::F32) std::memcpy(out.data() + 4 * i, &values[i], 4);
    else {
      const uint16_t b = to_half(s, values[i]);
      std::memcpy(out.data() + 2 * i, &b, 2);
    }
  }
  return out;
}

struct Run {
  std::vector<std::byte> params, grads, m, v, copy;
};

Run make_run(Rng& rng, size_t n, Storage param, Storage grad, Storage state, bool copy) {
  Run r;
  r.params = stored(param, ds::test::random_vec(rng, n));
  r.grads = stored(grad, ds::test::random_vec(rng, n, -100.0f, 100.0f));  // loss-scaled
  r.m = stored(state, ds::test::random_vec(rng, n, -0.1f, 0.1f));
  r.v = stored(state, ds::test::random_vec(rng, n, 0.0f, 0.01f));
  if (copy) r.copy.assign(n * 2, std::byte{0xff});
  return r;
}

ds::cpu::AdamArrays arrays_of(Run& r, size_t n, Storage param, Storage grad, Storage state, Storage copy, double scale) {
  ds::cpu::AdamArrays a{r.params.data(), r.grads.data(), r.m.data(), r.v.data(), n};
  a.param_type = param;
  a.grad_type = grad;
  a.state_type = state;
  a.grad_scale = scale;
  if (!r.copy.empty()) {
    a.param_copy = r.copy.data();
    a.copy_type = copy;
  }
  return a;
}

}  // namespace

TEST_CASE("fused Adam gives the bits of the separate passes it replaces") {
  // The engine's mixed-precision step without fusion: 16-bit gradients widened into fp32 and multiplied by
  // the factor (in double), Adam on the fp32 master, the master rounded into the 16-bit parameters.
  Rng rng(5);
  const size_t n = 1037;
  const double scale = 1.0 / 1024.0 * 0.37;  // 1/loss scale × a clip coefficient
  for (Storage half : {Storage::BF16, Storage::F16})
    for (Storage state : {Storage::F32, Storage::BF16})
      for (bool decoupled : {false, true}) {
        CAPTURE(static_cast<int>(half));
        CAPTURE(static_cast<int>(state));
        CAPTURE(decoupled);
        Run fused = make_run(rng, n, Storage::F32, half, state, true);
        Run separate = fused;
        const auto args = args_at(3, 0.01f);
        ds::cpu::adam_step(arrays_of(fused, n, Storage::F32, half, state, half, scale), args, decoupled);

        std::vector<float> g32(n);
        for (size_t i = 0; i < n; ++i) {
          uint16_t b;
          std::memcpy(&b, separate.grads.data() + 2 * i, 2);
          g32[i] = static_cast<float>(from_half(half, b) * scale);
        }
        ds::cpu::AdamArrays plain{separate.params.data(), g32.data(), separate.m.data(), separate.v.data(), n};
        plain.state_type = state;
        ds::cpu::adam_step_reference(plain, args, decoupled);
        std::vector<std::byte> copy(n * 2);
        for (size_t i = 0; i < n; ++i) {
          float p;
          std::memcpy(&p, separate.params.data() + 4 * i, 4);
          const uint16_t b = to_half(half, p);
          std::memcpy(copy.data() + 2 * i, &b, 2);
        }
        CHECK(fused.params == separate.params);
        CHECK(fused.m == separate.m);
        CHECK(fused.v == separate.v);
        CHECK(fused.copy == copy);
      }
}

TEST_CASE("Adam's threaded loop gives its scalar reference's bits at any thread count") {
  // Every storage combination the optimizers use, at sizes below and across the threads' split.
  const int saved = ds::cpu::threads();
  Rng rng(6);
  struct Combo {
    Storage param, grad, state;
    bool copy;
    double scale;
  };
  const Combo combos[] = {{Storage::F32, Storage::F32, Storage::F32, false, 1.0},
                          {Storage::F32, Storage::F32, Storage::BF16, false, 1.0},
                          {Storage::BF16, Storage::BF16, Storage::F32, false, 1.0},
                          {Storage::BF16, Storage::BF16, Storage::BF16, false, 0.5},
                          {Storage::F32, Storage::BF16, Storage::F32, true, 1.0 / 3.0},
                          {Storage::F32, Storage::F16, Storage::F32, true, 1.0 / 65536.0},
                          {Storage::F32, Storage::F16, Storage::BF16, true, 0.37 / 1024.0}};
  for (const Combo& c : combos)
    for (size_t n : {size_t{1}, size_t{31}, size_t{70001}})
      for (bool decoupled : {false, true}) {
        CAPTURE(n);
        CAPTURE(decoupled);
        CAPTURE(static_cast<int>(c.param));
        CAPTURE(static_cast<int>(c.grad));
        CAPTURE(static_cast<int>(c.state));
        const Run start = make_run(rng, n, c.param, c.grad, c.state, c.copy);
        const auto args = args_at(2, 0.1f);
        Run ref = start;
        ds::cpu::adam_step_reference(arrays_of(ref, n, c.param, c.grad, c.state, c.grad, c.scale), args, decoupled);
        for (int threads : {1, 2, 3}) {
          ds::cpu::set_threads(threads);
          Run got = start;
          ds::cpu::adam_step(arrays_of(got, n, c.param, c.grad, c.state, c.grad, c.scale), args, decoupled);
          CHECK(got.params == ref.params);
          CHECK(got.m == ref.m);
          CHECK(got.v == ref.v);
          CHECK(got.copy == ref.copy);
          CHECK(got.params != start.params);  // it did update
        }
      }
  ds::cpu::set_threads(saved);
}

TEST_CASE("Adam refuses fp16 parameters or moments and an fp32 copy, before writing") {
  Rng rng(7);
  Run r = make_run(rng, 8, Storage::F32, Storage::F32, Storage::F32, true);
  const Run before = r;
  const auto args = args_at(1, 0.0f);
  auto a = arrays_of(r, 8, Storage::F32, Storage::F32, Storage::F32, Storage::F32, 1.0);
  CHECK_THROWS_WITH_AS(ds::cpu::adam_step(a, args, true), "adam_step: the parameter copy cannot be fp32",
                       std::invalid_argument);
  a = arrays_of(r, 8, Storage::F16, Storage::F32, Storage::F32, Storage::BF16, 1.0);
  CHECK_THROWS_WITH_AS(ds::cpu::adam_step(a, args, true), "adam_step: parameters cannot be fp16", std::invalid_argument);
  a = arrays_of(r, 8, Storage::F32, Storage::F32, Storage::F16, Storage::BF16, 1.0);
  CHECK_THROWS_WITH_AS(ds::cpu::adam_step(a, args, true), "adam_step: moments cannot be fp16", std::invalid_argument);
  CHECK(r.params == before.params);
  CHECK(r.copy == before.copy);
}
