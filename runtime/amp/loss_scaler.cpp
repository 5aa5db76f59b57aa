// DeepSpeed's ZeRO dynamic loss scaler (see loss_scaler.h).
#include "amp/loss_scaler.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace ds::amp {

LossScaler::LossScaler(const LossScalerConfig& config)
    : config_(config), scale_(config.initial_scale), hysteresis_left_(config.hysteresis) {}

ScaleUpdate LossScaler::update(bool overflow) {
  ScaleUpdate u{overflow, scale_, scale_};
  if (config_.dynamic) {
    if (overflow) {
      if (config_.hysteresis == 1 || hysteresis_left_ == 1) {
        if (scale_ == config_.min_scale)
          throw std::runtime_error(fmt::format(
              "fp16: a gradient overflowed at the minimum loss scale {} (fp16.min_loss_scale); the loss scale "
              "cannot decrease further. Lower the learning rate, use bf16, or lower min_loss_scale",
              scale_));
        scale_ = std::max(scale_ / 2.0, config_.min_scale);
      } else {
        --hysteresis_left_;
      }
      last_overflow_ = iteration_;
    } else {
      if (config_.consecutive_hysteresis) hysteresis_left_ = config_.hysteresis;
      if ((iteration_ - last_overflow_) % config_.window == 0) {
        hysteresis_left_ = config_.hysteresis;
        scale_ *= 2.0;
      }
    }
  }
  ++iteration_;
  u.after = scale_;
  return u;
}

void LossScaler::restore(const State& s) {
  scale_ = s.scale;
  iteration_ = s.iteration;
  last_overflow_ = s.last_overflow;
  hysteresis_left_ = s.hysteresis_left;
}

}  // namespace ds::amp
