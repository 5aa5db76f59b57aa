// gpt_trace: trains the real `gpt` plugin through the real Engine on one rank and writes down
// everything an outside reference (tests/integration/torch_gpt.py) needs to replay the run and
// compare: the initial fp32 parameters, the exact batches of every step, the gradients the optimizer
// receives at step 1 and the loss of every step. Used by tests/integration/test_gpt_torch.py.
//
//   gpt_trace --plugin libds_model_gpt.so --text FILE --out DIR [--model JSON] [--precision bf16] ...
//
// Data: the bytes of FILE as tokens (vocab 256), cut by TokenDataset into non-overlapping windows.
// Optimizer: AdamW (make_optimizer), or --optimizer's section of a ds_config.json; constant lr, no clipping;
// world size 1, GAS 1.
// DIR receives (all binaries little-endian, as x86 and ARM store them):
//   manifest.json  model config, optimizer, precision, slots (name, shape, offset into params.bin and
//                  grads.bin, or the slot a tied one is), per step: sample indices, loss, grad norm
//   params.bin     float32 [Ψ]: the initial parameters (the fp32 master copy), non-tied slots in order
//   grads.bin      float32 [Ψ]: step 1's averaged gradients as the optimizer gets them, same layout
//                  (a tied parameter's owner holds the sum of every use's gradient)
//   batches.bin    int32, per step: input [micro, seq_len] then target [micro, seq_len]
//   tokens.bin     uint16 [N]: the token stream
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "comm/process_group.h"
#include "comm/store.h"
#include "data/token_dataset.h"
#include "engine/engine.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "plugin/plugin.h"

namespace {

using ds::Segment;
using ds::TensorRange;

// Forwards to a Dataset, keeping a copy of every batch it hands out and the indices asked for.
class RecordingDataset : public ds::Dataset {
 public:
  explicit RecordingDataset(ds::Dataset& inner) : inner_(inner) {}
  ds_dataset_info info() const override { return inner_.info(); }
  void get_batch(const int64_t* indices, int64_t n, ds_tensor& input, ds_tensor& target) override {
    inner_.get_batch(indices, n, input, target);
    indices_.insert(indices_.end(), indices, indices + n);
    const auto* in = static_cast<const int32_t*>(input.data);
    const auto* tg = static_cast<const int32_t*>(target.data);
    const int64_t per = n * input.shape.dims[1];  // TokenDataset: DS_I32 [n, seq_len] both
    batches_.insert(batches_.end(), in, in + per);
    batches_.insert(batches_.end(), tg, tg + per);
  }
  std::vector<int64_t> take_indices() { return std::exchange(indices_, {}); }
  const std::vector<int32_t>& batches() const { return batches_; }

 private:
  ds::Dataset& inner_;
  std::vector<int64_t> indices_;
  std::vector<int32_t> batches_;
};

// Forwards to an Optimizer, keeping a copy of the gradients of its first step.
class RecordingOptimizer : public ds::Optimizer {
 public:
  RecordingOptimizer(std::unique_ptr<ds::Optimizer> inner, std::vector<float>& first_grads)
      : inner_(std::move(inner)), first_grads_(first_grads) {}
  void step(std::span<const Segment> segments, const std::vector<TensorRange>& tensors, double lr,
            int64_t step) override {
    if (step == 1)
      for (const Segment& s : segments) {  // fp32: the trace runs without bf16 master weights
        const auto* grads = static_cast<const float*>(s.grads);
        first_grads_.insert(first_grads_.end(), grads, grads + s.size);
      }
    inner_->step(segments, tensors, lr, step);
  }
  std::vector<ds::StateView> state() override { return inner_->state(); }
  void set_betas(double beta1, double beta2) override { inner_->set_betas(beta1, beta2); }

 private:
  std::unique_ptr<ds::Optimizer> inner_;
  std::vector<float>& first_grads_;
};

template <class T>
void write_binary(const std::string& path, const std::vector<T>& values) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(T)));
  if (!out) throw std::runtime_error("gpt_trace: cannot write " + path);
}

ds::amp::Storage storage(const std::string& name) {
  return name == "bf16" ? ds::amp::Storage::BF16 : ds::amp::Storage::F32;
}

}  // namespace

int main(int argc, char** argv) {
  std::string plugin_path, text_path, out_dir, model_json = "{}", precision = "fp32", grad_dtype;
  int steps = 10, stage = 0;
  int64_t micro = 4;
  uint64_t seed = 42;
  ds::AdamParams adam;
  adam.beta1 = 0.9, adam.beta2 = 0.95, adam.eps = 1e-8, adam.weight_decay = 0.1, adam.adam_w_mode = true;
  double lr = 1e-3;
  CLI::App app{"gpt_trace: train the gpt plugin on one rank and record what a reference needs", "gpt_trace"};
  app.add_option("--plugin", plugin_path, "Path to libds_model_gpt.so")->required();
  app.add_option("--text", text_path, "File whose bytes are the token stream")->required();
  app.add_option("--out", out_dir, "Output directory (must exist)")->required();
  app.add_option("--model", model_json, "The plugin's model block, JSON");
  app.add_option("--precision", precision, "fp32 or bf16")->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--grad-dtype", grad_dtype, "Gradient storage, fp32 or bf16 (default: DeepSpeed's: fp32 with "
                                             "bf16 at stage 0, else the precision)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--stage", stage, "ZeRO stage")->check(CLI::Range(0, 3));
  app.add_option("--steps", steps, "Optimizer steps")->check(CLI::PositiveNumber);
  app.add_option("--micro", micro, "Micro-batch size")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "Initialisation and data-order seed");
  app.add_option("--lr", lr, "Constant learning rate");
  app.add_option("--weight-decay", adam.weight_decay, "AdamW weight decay");
  app.add_option("--beta1", adam.beta1);
  app.add_option("--beta2", adam.beta2);
  app.add_option("--eps", adam.eps);
  std::string optimizer_json;
  app.add_option("--optimizer", optimizer_json,
                 "An optimizer section as in ds_config.json, JSON (instead of AdamW and the options above)");
  CLI11_PARSE(app, argc, argv);
  if (grad_dtype.empty()) grad_dtype = precision == "bf16" && stage == 0 ? "fp32" : precision;

  try {
    std::ifstream text(text_path, std::ios::binary);
    if (!text) throw std::runtime_error("gpt_trace: cannot read " + text_path);
    const std::string bytes((std::istreambuf_iterator<char>(text)), std::istreambuf_iterator<char>());
    std::vector<uint16_t> tokens;
    for (const unsigned char byte : bytes) tokens.push_back(byte);
    const nlohmann::json model = nlohmann::json::parse(model_json);
    ds::TokenDataset tokens_data(tokens, model.value("seq_len", int64_t{64}), "train");
    RecordingDataset data(tokens_data);

    auto plugin = ds::Plugin::load(plugin_path, model.dump());
    auto group = ds::make_gloo_group(ds::make_memory_store(), 0, 1, "dp", std::chrono::seconds(60));
    ds::EngineConfig e;
    e.micro_batch = micro;
    e.zero_stage = stage;
    e.precision = storage(precision);
    e.grad_storage = storage(grad_dtype);
    e.seed = seed;
    ds::OptimizerConfig opt;
    opt.type = ds::OptimizerType::AdamW;
    opt.lr = lr;
    opt.params = adam;
    nlohmann::json optimizer_record = {{"type", "AdamW"},
                                       {"lr", lr},
                                       {"betas", {adam.beta1, adam.beta2}},
                                       {"eps", adam.eps},
                                       {"weight_decay", adam.weight_decay}};
    if (!optimizer_json.empty()) {
      optimizer_record = nlohmann::json::parse(optimizer_json);
      opt = ds::parse_config({{"train_micro_batch_size_per_gpu", micro}, {"optimizer", optimizer_record}},
                              "--optimizer", 1)
                 .optimizer;
    }
    std::vector<float> grads;
    ds::Engine engine(
        e, *plugin, *group,
        [&](size_t n, ds::NormReducer r) {
          return std::make_unique<RecordingOptimizer>(ds::make_optimizer(opt, n, std::move(r)), grads);
        },
        ds::make_lr_schedule(std::nullopt, opt.lr), &data);

    // params.bin and grads.bin share one layout: non-tied slots back to back. At world size 1 that
    // is also the flat buffer the optimizer's segments cover (nothing padded); check it.
    nlohmann::json slots = nlohmann::json::array();
    size_t offset = 0;
    for (const ds::ParamSlot& s : engine.slots()) {
      nlohmann::json j = {{"name", s.name}, {"shape", std::vector<int64_t>(s.shape.dims, s.shape.dims + s.shape.ndim)}};
      if (s.owner >= 0) {
        j["tied_to"] = engine.slots()[static_cast<size_t>(s.owner)].name;
      } else {
        if (s.offset != offset) throw std::logic_error("gpt_trace: slot " + s.name + " is not where expected");
        j["offset"] = offset;
        offset += s.size;
      }
      slots.push_back(j);
    }
    const std::vector<float> initial = engine.gather_parameters();
    if (initial.size() != offset || engine.layout().full_size() != offset)
      throw std::logic_error("gpt_trace: the flat buffer is padded or holds something else");

    nlohmann::json step_log = nlohmann::json::array();
    for (int s = 0; s < steps; ++s) {
      const ds::StepStats stats = engine.step();
      step_log.push_back({{"indices", data.take_indices()}, {"loss", stats.loss}, {"grad_norm", stats.grad_norm}});
    }
    if (grads.size() != offset) throw std::logic_error("gpt_trace: the optimizer saw another number of gradients");

    const nlohmann::json manifest = {
        {"model", model},
        {"precision", precision},
        {"grad_dtype", grad_dtype},
        {"zero_stage", stage},
        {"micro_batch", micro},
        {"seed", seed},
        {"optimizer", optimizer_record},
        {"num_parameters", offset},
        {"slots", slots},
        {"steps", step_log},
    };
    write_binary(out_dir + "/params.bin", initial);
    write_binary(out_dir + "/grads.bin", grads);
    write_binary(out_dir + "/batches.bin", data.batches());
    write_binary(out_dir + "/tokens.bin", tokens);
    std::ofstream(out_dir + "/manifest.json") << manifest.dump(1) << "\n";
    std::printf("gpt_trace: %s, %d steps, loss %.6f -> %.6f, %zu parameters -> %s\n", precision.c_str(), steps,
                step_log.front()["loss"].get<double>(), step_log.back()["loss"].get<double>(), offset,
                out_dir.c_str());
    return 0;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "gpt_trace: error: %s\n", ex.what());
    return 1;
  }
}
