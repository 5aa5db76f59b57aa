// dsworker --selftest's training check: the same model trained step by step on a device's backend
// and on the CPU's, through DeviceModel (device_model.h): the plugin's layers on each backend's ops,
// then AdamW. Both start from the same parameters and see the same batches, and after every step the
// device takes the CPU's parameters and moments, so each step compares the two from one state. (Left
// to run apart, the two drift chaotically: Adam's first step moves every parameter by ±lr whatever its
// gradient's size, so a gradient near 0 whose sign the two roundings disagree on sends that parameter
// 2·lr apart; 20 steps of a small GPT at lr 3e-3 then differ by 1.5% in loss on an H100 although every
// gradient agrees to 1e-6.)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "plugin/ds_backend.h"

namespace ds {

struct TrainingComparison {
  std::vector<float> cpu_losses, device_losses;  // one per step
  double worst_loss_error = 0;   // max over steps |device − cpu| / |cpu|
  double worst_grad_error = 0;   // max over steps of max |device − cpu| over the gradients / max |cpu gradient|
  std::vector<std::pair<std::string, double>> grad_errors;  // the same per tensor (worst step), largest first
};

// Trains the token model `plugin` (a name or path; input and target int32 tokens in [0, vocab)) built
// from `model_json` for `steps` AdamW steps of one micro-batch each (lr 3e-3, two batches in turn), on
// `device` and on the CPU backend.
TrainingComparison compare_training(const std::string& plugin, const std::string& model_json, int64_t vocab,
                                    int64_t micro_batch, int steps, const ds_backend* device);

}  // namespace ds
