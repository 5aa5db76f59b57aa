// The element-wise optimizers' common part (Adam/AdamW, Adagrad, RMSprop, SGD, Lion): named state buffers
// of [n] elements each; step() over its own buffers and step_with_state() over the caller's (ZeRO-Infinity's
// sub-groups), both checked and handed to update() in state() order; hold_state() frees and remakes the
// buffers (a device holds the state).
#pragma once
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "amp/storage.h"
#include "optim/optimizer.h"
#include "optim/state_buffer.h"

namespace ds::optim {

class ElementwiseOptimizer : public Optimizer {
 public:
  void step(std::span<const Segment> segments, const std::vector<TensorRange>& tensors, double lr,
            int64_t step) final;
  bool elementwise() const final { return true; }
  bool fuses_mixed_precision() const final { return fuses_; }
  void step_with_state(std::span<const Segment> segments, std::span<const StateView> state, double lr,
                       int64_t step) final;
  void hold_state(bool held) final;
  std::vector<StateView> state() final;

 protected:
  // `name` names the optimizer in errors; a buffer per name, in that order, of `storage`; `fuses`: the
  // segments may ask to scale their gradients and copy their parameters (fuses_mixed_precision).
  ElementwiseOptimizer(const char* name, size_t n, amp::Storage storage, const std::vector<std::string>& state_names,
                       bool fuses = false);
  amp::Storage state_storage() const { return storage_; }
  // One update of the segments (`n` elements in all) at lr, update number `step`, with `state` in state()
  // order: the optimizer's own buffers or the caller's.
  virtual void update(std::span<const Segment> segments, std::span<const StateView> state, double lr,
                      int64_t step) const = 0;

 private:
  const char* name_;
  size_t n_;
  amp::Storage storage_;
  bool fuses_;
  std::vector<std::string> names_;
  std::vector<StateBuffer> buffers_;  // per name: [n]
};

}  // namespace ds::optim
