// Internal to ds_optim: one factory per optimizer family, and the bias-correction term they share.
#pragma once
#include "cpu/adagrad_element.h"
#include "cpu/lamb_element.h"
#include "cpu/lion_element.h"
#include "cpu/rmsprop_element.h"
#include "optim/optimizer.h"

namespace ds::optim {

std::unique_ptr<Optimizer> make_adam(const AdamParams& params, size_t n, amp::Storage state);
std::unique_ptr<Optimizer> make_sgd(const SgdParams& params, size_t n, amp::Storage state);
std::unique_ptr<Optimizer> make_adagrad(const AdagradParams& params, size_t n, amp::Storage state);
std::unique_ptr<Optimizer> make_rmsprop(const RmspropParams& params, size_t n, amp::Storage state);
std::unique_ptr<Optimizer> make_lion(const LionParams& params, size_t n, amp::Storage state);
std::unique_ptr<Optimizer> make_muon(const MuonParams& params, double muon_lr, size_t n);
std::unique_ptr<Optimizer> make_lamb(const LambParams& params, size_t n, NormReducer reduce_norms, amp::Storage state);
std::unique_ptr<Optimizer> make_onebit_adam(const OneBitAdamParams& params, size_t n, ProcessGroup& group);
std::unique_ptr<Optimizer> make_zero_one_adam(const ZeroOneAdamParams& params, size_t n, ProcessGroup& group);
std::unique_ptr<Optimizer> make_onebit_lamb(const OneBitLambParams& params, size_t n, ProcessGroup& group);

// 1 - beta^step for the fp32 beta the element loop uses, as DeepSpeed's FusedAdam/FusedLamb host
// code computes it (so the fp32 rounding of 1 - beta cancels in the bias-corrected moments).
float bias_correction(float beta, int64_t step);

// LAMB's numbers per step and tensor (lamb.cpp; the GPU's self-test steps its kernels with them): the
// element arguments; the step size, lr·sqrt(1−β2^t)/(1−β1^t) in fp32 (lr without bias correction); the
// trust ratio ‖p‖/‖u‖ from Σp² and Σu², clamped to [min_coeff, max_coeff] (1 if either norm is 0).
cpu::LambArgs lamb_args(const LambParams& params);
// Adam's element arguments for update number `step` at lr (adam.cpp; Muon's Adam group steps with them too).
cpu::AdamArgs adam_args(const AdamParams& params, double lr, int64_t step);
// Lion's element arguments at lr (lion.cpp; the GPU's self-test steps its kernel with them).
cpu::LionArgs lion_args(const LionParams& params, double lr);
// Adagrad's element arguments for update number `step` at lr (adagrad.cpp; likewise).
cpu::AdagradArgs adagrad_args(const AdagradParams& params, double lr, int64_t step);
// RMSprop's element arguments for update number `step` at lr (rmsprop.cpp; likewise).
cpu::RmspropArgs rmsprop_args(const RmspropParams& params, double lr, int64_t step);
float lamb_step_size(const LambParams& params, double lr, int64_t step);
float lamb_trust_ratio(const LambParams& params, double p_sq, double u_sq);

// The state() entry of an fp32 buffer.
inline StateView f32_state(std::string name, std::vector<float>& buffer) {
  return StateView{std::move(name), amp::Storage::F32, buffer.data(), buffer.size()};
}

// Throws std::invalid_argument unless `state` matches the optimizer's own buffers `own` in count and
// storage and holds as many elements as the segments (step_with_state), or step < 1.
void check_state_args(const char* name, std::span<const Segment> segments, std::span<const StateView> state,
                      std::span<const StateView> own, int64_t step, bool fuses = false);

// The segments' total size; throws std::invalid_argument unless it matches the size the optimizer
// was made for and step >= 1, and unless the optimizer `fuses` when a segment asks it to scale its
// gradients or copy its parameters.
size_t check_step_args(const char* name, std::span<const Segment> segments, size_t expected, int64_t step,
                       bool fuses = false);

}  // namespace ds::optim
