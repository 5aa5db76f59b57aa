// The element-wise optimizers' common part (elementwise.h).
#include "optim/elementwise.h"

#include "optim/optimizers.h"

namespace ds::optim {

ElementwiseOptimizer::ElementwiseOptimizer(const char* name, size_t n, amp::Storage storage,
                                           const std::vector<std::string>& state_names, bool fuses)
    : name_(name), n_(n), storage_(storage), fuses_(fuses), names_(state_names) {
  buffers_.reserve(names_.size());
  for (size_t i = 0; i < names_.size(); ++i) buffers_.emplace_back(n, storage);
}

void ElementwiseOptimizer::step(std::span<const Segment> segments, const std::vector<TensorRange>&, double lr,
                                int64_t step) {
  check_step_args(name_, segments, n_, step, fuses_);
  update(segments, state(), lr, step);
}

void ElementwiseOptimizer::step_with_state(std::span<const Segment> segments, std::span<const StateView> state,
                                           double lr, int64_t step) {
  check_state_args(name_, segments, state, this->state(), step, fuses_);
  update(segments, state, lr, step);
}

void ElementwiseOptimizer::hold_state(bool held) {
  for (StateBuffer& b : buffers_) b.hold(held);
}

std::vector<StateView> ElementwiseOptimizer::state() {
  std::vector<StateView> views;
  views.reserve(buffers_.size());
  for (size_t i = 0; i < buffers_.size(); ++i) views.push_back(buffers_[i].view(names_[i]));
  return views;
}

}  // namespace ds::optim
