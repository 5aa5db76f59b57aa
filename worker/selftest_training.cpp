// compare_training (selftest_training.h).
#include "selftest_training.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "device_model.h"
#include "optim/optimizers.h"
#include "plugin/plugin.h"

namespace ds {

TrainingComparison compare_training(const std::string& plugin, const std::string& model_json, int64_t vocab,
                                    int64_t micro_batch, int steps, const ds_backend* device) {
  const auto on_cpu = Plugin::load(plugin, model_json);
  const auto on_device = Plugin::load(plugin, model_json, device);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> initial(static_cast<size_t>(DeviceModel::count_parameters(*on_cpu)));
  for (float& x : initial) x = normal(rng);
  // LayerNorm weights near 1 (every parameter random otherwise: no gradient is trivially 0).
  size_t at = 0;
  for (const LayerInfo& l : on_cpu->layers())
    for (const ParamInfo& p : l.params) {
      if (!p.tied_to.empty()) continue;
      if (p.init == DS_INIT_ONES)
        for (int64_t k = 0; k < p.numel(); ++k) initial[at + static_cast<size_t>(k)] += 1.0f;
      at += static_cast<size_t>(p.numel());
    }
  const ds_dataset_info info = on_cpu->dataset_info();
  const size_t tokens = static_cast<size_t>(micro_batch * shape_numel(info.input_shape));
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  std::vector<std::vector<int32_t>> inputs(2, std::vector<int32_t>(tokens)), targets = inputs;
  for (auto* set : {&inputs, &targets})
    for (auto& batch : *set)
      for (int32_t& t : batch) t = token(rng);

  DeviceModel cpu(*on_cpu, micro_batch, initial), dev(*on_device, micro_batch, initial);
  TrainingComparison out;
  const float lr = 3e-3f, beta1 = 0.9f, beta2 = 0.999f, wd = 0.01f;
  for (int step = 1; step <= steps; ++step) {
    const auto& in = inputs[static_cast<size_t>(step % 2)];
    const auto& tg = targets[static_cast<size_t>(step % 2)];
    out.cpu_losses.push_back(cpu.forward_backward(in, tg));
    out.device_losses.push_back(dev.forward_backward(in, tg));
    const double cpu_loss = out.cpu_losses.back(), dev_loss = out.device_losses.back();
    const double err = std::fabs(dev_loss - cpu_loss) / std::max(std::fabs(cpu_loss), 1e-30);
    out.worst_loss_error = std::max(out.worst_loss_error, std::isnan(err) ? INFINITY : err);
    const std::vector<float> g_cpu = cpu.gradients(), g_dev = dev.gradients();
    double scale = 0;
    for (float g : g_cpu) scale = std::max(scale, static_cast<double>(std::fabs(g)));
    scale = std::max(scale, 1e-30);
    size_t offset = 0, tensor = 0;
    out.grad_errors.resize(static_cast<size_t>(DeviceModel::count_tensors(*on_cpu)));
    for (const LayerInfo& l : on_cpu->layers())
      for (const ParamInfo& p : l.params) {
        if (!p.tied_to.empty()) continue;
        double worst = 0;
        for (int64_t k = 0; k < p.numel(); ++k) {
          const size_t i = offset + static_cast<size_t>(k);
          const double d = std::fabs(static_cast<double>(g_dev[i]) - g_cpu[i]);
          worst = std::max(worst, std::isnan(d) ? INFINITY : d);
        }
        auto& [name, error] = out.grad_errors[tensor++];
        name = l.name + "." + p.name;
        error = std::max(error, worst / scale);
        out.worst_grad_error = std::max(out.worst_grad_error, error);
        offset += static_cast<size_t>(p.numel());
      }
    const float bc1 = optim::bias_correction(beta1, step), bc2 = optim::bias_correction(beta2, step);
    const cpu::AdamArgs args{beta1, beta2, 1e-8f, wd, -lr / bc1, 1.0f / std::sqrt(bc2), -lr * wd};
    cpu.adam_step(args, true);
    dev.load_state(cpu);  // the next step from the same state
  }
  std::stable_sort(out.grad_errors.begin(), out.grad_errors.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

}  // namespace ds
