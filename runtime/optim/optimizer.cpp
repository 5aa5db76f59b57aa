// make_optimizer and the helpers the optimizer families share.
#include <cmath>
#include <stdexcept>
#include <variant>

#include <fmt/format.h>

#include "optim/optimizers.h"

namespace ds {

void Optimizer::set_betas(double, double) { throw std::logic_error("optimizer has no betas"); }

void Optimizer::hold_state(bool) { throw std::logic_error("optimizer: its state stays on the host"); }

void Optimizer::step_with_state(std::span<const Segment>, std::span<const StateView>, double, int64_t) {
  throw std::logic_error("optimizer: only element-wise optimizers step with the caller's state");
}

std::span<float> StateView::f32() const {
  if (storage != amp::Storage::F32) throw std::logic_error(fmt::format("optimizer state {} is not fp32", name));
  return {static_cast<float*>(data), size};
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, size_t n, NormReducer reduce_norms,
                                          ProcessGroup* group, amp::Storage state) {
  if (const auto* adam = std::get_if<AdamParams>(&config.params)) return optim::make_adam(*adam, n, state);
  if (const auto* sgd = std::get_if<SgdParams>(&config.params)) return optim::make_sgd(*sgd, n, state);
  if (const auto* lion = std::get_if<LionParams>(&config.params)) return optim::make_lion(*lion, n, state);
  if (const auto* adagrad = std::get_if<AdagradParams>(&config.params)) return optim::make_adagrad(*adagrad, n, state);
  if (const auto* rmsprop = std::get_if<RmspropParams>(&config.params)) return optim::make_rmsprop(*rmsprop, n, state);
  if (const auto* lamb = std::get_if<LambParams>(&config.params))
    return optim::make_lamb(*lamb, n, std::move(reduce_norms), state);
  if (state != amp::Storage::F32)
    throw std::invalid_argument(fmt::format("make_optimizer: {} keeps its state in fp32", optimizer_type_name(config.type)));
  if (const auto* muon = std::get_if<MuonParams>(&config.params)) return optim::make_muon(*muon, config.lr, n);
  if (group == nullptr)
    throw std::invalid_argument(fmt::format("make_optimizer: {} needs the process group", optimizer_type_name(config.type)));
  if (const auto* a = std::get_if<OneBitAdamParams>(&config.params)) return optim::make_onebit_adam(*a, n, *group);
  if (const auto* z = std::get_if<ZeroOneAdamParams>(&config.params)) return optim::make_zero_one_adam(*z, n, *group);
  return optim::make_onebit_lamb(std::get<OneBitLambParams>(config.params), n, *group);
}

}  // namespace ds

namespace ds::optim {

float bias_correction(float beta, int64_t step) {
  return static_cast<float>(1.0 - std::pow(static_cast<double>(beta), static_cast<double>(step)));
}

void check_state_args(const char* name, std::span<const Segment> segments, std::span<const StateView> state,
                      std::span<const StateView> own, int64_t step, bool fuses) {
  size_t n = 0;
  for (const Segment& s : segments) n += s.size;
  check_step_args(name, segments, n, step, fuses);
  if (state.size() != own.size())
    throw std::invalid_argument(fmt::format("{}: {} state buffers given, it keeps {}", name, state.size(), own.size()));
  for (size_t k = 0; k < state.size(); ++k)
    if (state[k].size != n || state[k].storage != own[k].storage)
      throw std::invalid_argument(fmt::format("{}: state buffer {} ({}) does not hold the {} elements in its storage",
                                              name, k, state[k].name, n));
}

size_t check_step_args(const char* name, std::span<const Segment> segments, size_t expected, int64_t step,
                       bool fuses) {
  size_t n = 0;
  for (const Segment& s : segments) {
    n += s.size;
    if (!fuses && (s.grad_scale != 1.0 || s.param_copy != nullptr))
      throw std::invalid_argument(fmt::format("{}: does not scale gradients or copy parameters as it steps", name));
  }
  if (n != expected) throw std::invalid_argument(fmt::format("{}: step over {} elements, made for {}", name, n, expected));
  if (step < 1) throw std::invalid_argument(fmt::format("{}: step {} < 1", name, step));
  return n;
}

}  // namespace ds::optim
