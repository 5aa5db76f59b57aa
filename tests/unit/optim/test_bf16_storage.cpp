// bf16 parameters, gradients and state (bf16_master_weights_and_grads, bf16_optimizer_states):
// the update is the fp32 update of the widened values, rounded once where it is stored. Oracle:
// the fp32 optimizer run on the same values, its results rounded to bf16 after each step.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "amp/half.h"
#include "amp/storage.h"
#include "cpu/convert.h"
#include "optim/optimizer.h"
#include "optim_test_util.h"

using namespace ds;
using ds::test::values;

namespace {

constexpr size_t kN = 300;
const std::vector<TensorRange> kTensors = {{0, 100}, {100, 150}, {250, 50}};

std::unique_ptr<Optimizer> make(OptimizerType type, amp::Storage state) {
  if (type == OptimizerType::Adam) {
    AdamParams a;
    a.weight_decay = 0.01;
    return make_optimizer(test::optimizer_config(type, 0.01, a), kN, {}, nullptr, state);
  }
  if (type == OptimizerType::SGD) {
    SgdParams s;
    s.momentum = 0.9;
    s.weight_decay = 0.01;
    return make_optimizer(test::optimizer_config(type, 0.05, s), kN, {}, nullptr, state);
  }
  if (type == OptimizerType::Adagrad) {
    AdagradParams a;
    a.weight_decay = 0.01;
    return make_optimizer(test::optimizer_config(type, 0.01, a), kN, {}, nullptr, state);
  }
  if (type == OptimizerType::RMSprop) {  // every state buffer: square_avg, momentum_buffer, grad_avg
    RmspropParams r;
    r.weight_decay = 0.01;
    r.momentum = 0.9;
    r.centered = true;
    return make_optimizer(test::optimizer_config(type, 0.01, r), kN, {}, nullptr, state);
  }
  if (type == OptimizerType::Lion) {
    LionParams l;
    l.weight_decay = 0.01;
    return make_optimizer(test::optimizer_config(type, 0.01, l), kN, {}, nullptr, state);
  }
  LambParams l;
  l.weight_decay = 0.01;
  return make_optimizer(test::optimizer_config(type, 0.01, l), kN, {}, nullptr, state);
}

std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  cpu::from_float(amp::Storage::BF16, x.data(), out.data(), x.size());
  return out;
}

std::vector<float> widen(const std::vector<uint16_t>& x) {
  std::vector<float> out(x.size());
  cpu::to_float(amp::Storage::BF16, x.data(), out.data(), x.size());
  return out;
}

// Parameters in [-1, 1) and gradients of step t, varied enough that rounding matters.
std::vector<float> initial_params() {
  std::vector<float> p(kN);
  for (size_t i = 0; i < kN; ++i) p[i] = static_cast<float>((i * 37 % 200) / 100.0 - 1.0 + 1e-3 * i);
  return p;
}

std::vector<float> grads_at(int t) {
  std::vector<float> g(kN);
  for (size_t i = 0; i < kN; ++i) g[i] = static_cast<float>(0.01 * (static_cast<double>((i * 13 + t * 7) % 29) - 14.0));
  return g;
}

std::string name(OptimizerType type) {
  switch (type) {
    case OptimizerType::Adam: return "AdamW";
    case OptimizerType::Adagrad: return "Adagrad";
    case OptimizerType::RMSprop: return "RMSprop";
    case OptimizerType::SGD: return "SGD";
    case OptimizerType::Lion: return "Lion";
    default: return "Lamb";
  }
}

}  // namespace

TEST_CASE("bf16 storage: bf16 parameters and gradients with fp32 state are the fp32 step, rounded") {
  for (OptimizerType type : {OptimizerType::Adam, OptimizerType::Adagrad, OptimizerType::RMSprop, OptimizerType::SGD,
                              OptimizerType::Lion, OptimizerType::Lamb}) {
    CAPTURE(name(type));
    auto low = make(type, amp::Storage::F32), reference = make(type, amp::Storage::F32);
    std::vector<uint16_t> p16 = to_bf16(initial_params());
    std::vector<float> p32 = widen(p16);
    for (int t = 1; t <= 4; ++t) {
      const std::vector<uint16_t> g16 = to_bf16(grads_at(t));
      const std::vector<float> g32 = widen(g16);
      const Segment segment{p16.data(), g16.data(), kN, amp::Storage::BF16, amp::Storage::BF16};
      low->step(std::span(&segment, 1), kTensors, 0.01, t);
      reference->step(p32.data(), g32.data(), kN, kTensors, 0.01, t);
      cpu::round_to(amp::Storage::BF16, p32.data(), kN);
      CHECK(widen(p16) == p32);
      for (size_t k = 0; k < low->state().size(); ++k) CHECK(values(low->state()[k]) == values(reference->state()[k]));
    }
    CHECK(widen(p16) != widen(to_bf16(initial_params())));  // the steps moved the parameters
  }
}

// Adam, Adagrad, RMSprop, SGD and Lion use each new state value before rounding it, so the oracle rounds its fp32 state
// after the step. Lamb recomputes its update from the stored (rounded) moments, which moves it by about 2^-8
// relative: its parameters are compared to within two bf16 ulps.
TEST_CASE("bf16 storage: bf16 optimizer states are the fp32 state rounded after every step") {
  for (OptimizerType type : {OptimizerType::Adam, OptimizerType::Adagrad, OptimizerType::RMSprop, OptimizerType::SGD,
                              OptimizerType::Lion, OptimizerType::Lamb}) {
    CAPTURE(name(type));
    auto low = make(type, amp::Storage::BF16), reference = make(type, amp::Storage::F32);
    for (const StateView& v : low->state()) {
      CHECK(v.storage == amp::Storage::BF16);
      CHECK(v.size == kN);
    }
    std::vector<uint16_t> p16 = to_bf16(initial_params());
    std::vector<float> p32 = widen(p16);
    for (int t = 1; t <= 4; ++t) {
      CAPTURE(t);
      const std::vector<float> g = grads_at(t);
      const Segment segment{p16.data(), g.data(), kN, amp::Storage::BF16, amp::Storage::F32};  // fp32 gradients
      low->step(std::span(&segment, 1), kTensors, 0.01, t);
      reference->step(p32.data(), g.data(), kN, kTensors, 0.01, t);
      cpu::round_to(amp::Storage::BF16, p32.data(), kN);
      for (const StateView& v : reference->state()) cpu::round_to(amp::Storage::BF16, v.f32().data(), v.size);
      if (type == OptimizerType::Lamb) {
        const std::vector<float> low_p = widen(p16);
        for (size_t i = 0; i < kN; ++i)  // two bf16 ulps: 2·2^-7 of the binade's start
          CHECK(std::abs(low_p[i] - p32[i]) <= 0x1p-6 * std::max(std::abs(low_p[i]), std::abs(p32[i])));
        continue;
      }
      CHECK(widen(p16) == p32);
      for (size_t k = 0; k < low->state().size(); ++k) CHECK(values(low->state()[k]) == values(reference->state()[k]));
    }
  }
}

TEST_CASE("bf16 storage: the 1-bit optimizers keep fp32 state") {
  OneBitAdamParams a;
  CHECK_THROWS_WITH_AS(make_optimizer(test::optimizer_config(OptimizerType::OneBitAdam, 0.01, a), kN, {}, nullptr,
                                      amp::Storage::BF16),
                       doctest::Contains("keeps its state in fp32"), std::invalid_argument);
}

TEST_CASE("bf16 storage: fp16 parameters, gradients or state are refused") {
  CHECK_THROWS_AS(make(OptimizerType::Adam, amp::Storage::F16), std::invalid_argument);
  std::vector<uint16_t> p(kN), g(kN);
  const Segment fp16{p.data(), g.data(), kN, amp::Storage::F16, amp::Storage::BF16};
  CHECK_THROWS_AS(make(OptimizerType::SGD, amp::Storage::F32)->step(std::span(&fp16, 1), {}, 0.01, 1),
                  std::invalid_argument);
}
