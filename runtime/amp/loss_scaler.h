// fp16 loss scaling, as DeepSpeed's ZeRO path does it (DynamicLossScaler, reference §3.3 (A)), for
// every ZeRO stage. The loss is multiplied by scale() before backward; after the gradients are
// reduced, one flag says whether any rank saw a non-finite value; update() is called once per
// optimizer step with that flag:
//   overflow:  the step is skipped (no optimizer or LR update; the step still counts); if the
//              hysteresis is used up (or was 1) the scale halves, not below min_scale — and if it
//              already is at min_scale, update() throws (training cannot go on); else one unit of
//              hysteresis is used and the scale stays;
//   clean:     with consecutive_hysteresis the hysteresis refills; after `window` clean steps since
//              the last overflow (or the start) the scale doubles and the hysteresis refills.
// Static scaling (loss_scale > 0): the scale never changes; overflow steps are still skipped.
// Unlike DeepSpeed, the gradients of a step are unscaled with the scale its backward used, also on
// a step where the scale then doubles (DeepSpeed unscales with the new scale, halving that step).
#pragma once
#include <cstdint>
#include <string>

namespace ds::amp {

struct LossScalerConfig {
  bool dynamic = true;
  double initial_scale = 65536.0;  // 2^initial_scale_power; the static scale when !dynamic
  int64_t window = 1000;           // loss_scale_window
  double min_scale = 1.0;          // min_loss_scale
  int64_t hysteresis = 2;
  bool consecutive_hysteresis = false;
};

// What update() did, for logs and metrics.
struct ScaleUpdate {
  bool skipped = false;
  double before = 0.0, after = 0.0;  // the scale
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig& config);
  double scale() const { return scale_; }
  // One optimizer step's outcome; throws std::runtime_error at the minimum scale (dynamic only).
  ScaleUpdate update(bool overflow);

  // The state a checkpoint keeps.
  struct State {
    double scale;
    int64_t iteration, last_overflow, hysteresis_left;
  };
  State state() const { return {scale_, iteration_, last_overflow_, hysteresis_left_}; }
  void restore(const State& s);

 private:
  LossScalerConfig config_;
  double scale_;
  int64_t iteration_ = 0;       // updates so far (DeepSpeed's cur_iter)
  int64_t last_overflow_ = -1;  // iteration of the last overflow
  int64_t hysteresis_left_;
};

}  // namespace ds::amp
