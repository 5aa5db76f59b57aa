// The `mlp` model plugin: the classic tutorial classifier on a synthetic, learnable dataset.
//
//   fc1: Linear(in_features → hidden) → relu → [fc2: Linear(hidden → hidden) → relu2 → ...]
//        → fc<layers+1>: Linear(hidden → classes) → loss: mean softmax cross-entropy
// With the defaults (layers = 1) the layers are exactly fc1, relu, fc2, loss. With layers = L > 1
// the ReLUs are named relu1..reluL. Linear weights are [out, in] (PyTorch's layout) and, like
// PyTorch's default init, weight and bias are uniform in ±1/√in (DS_INIT_UNIFORM).
//
// Config ("model" block, all optional): in_features 32, hidden 128, classes 10, layers 1,
// num_samples 1000, data_seed 1234, inject_nonfinite_grad_steps [] (at those batch->step values
// the last Linear's weight gradient gets +inf added to every element, so overflow handling can be
// tested from outside). Unknown keys are errors. A ~50M-parameter benchmark model:
// {"hidden": 4096, "layers": 4}.
//
// Dataset (sample i, deterministic from data_seed alone, any order, any subset):
//   x[i] ∈ [-1, 1)^in_features from splitmix64 keyed by (data_seed, i);
//   label[i] = argmax_c (T · x[i])_c for a fixed random "teacher" T [classes, in_features] from
//   data_seed; so labels are learnable (a linear model can reach ~0 loss), unlike random ones.
// Input f32 [n, in_features]; target i32 [n] (one scalar per sample).
// The layers compute through the backend's ops (plugin/sdk/ops.h), so the model runs on every
// backend; inject_nonfinite_grad_steps, which writes a gradient itself, on the CPU only.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "plugin/ds_plugin_sdk.h"

namespace {

using ds::sdk::Backward;
using ds::sdk::Forward;
using ds::sdk::Shape;

// splitmix64: fixed, portable (std:: distributions' output is implementation-defined).
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1) with 24 random bits (exact in fp32).
float uniform_pm1(uint64_t& state) {
  return static_cast<float>(splitmix64(state) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

// Throws unless `in` is [n, last]; `what` says what `last` is (for the message).
void require_2d(const Shape& in, int64_t last, const char* what) {
  if (in.ndim != 2 || in[1] != last)
    throw std::invalid_argument("input shape " + in.str() + ", expected [n, " + std::to_string(last) + "] (" + what +
                                " " + std::to_string(last) + ")");
}

class Linear : public ds::sdk::Layer {
 public:
  Linear(std::string name, int64_t in, int64_t out, std::set<int64_t> inject_steps = {})
      : Layer(std::move(name)), in_(in), out_(out), inject_(std::move(inject_steps)) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(in));
    add_param("weight", {out, in}, DS_INIT_UNIFORM, -bound, bound);
    add_param("bias", {out}, DS_INIT_UNIFORM, -bound, bound);
  }
  Shape output_shape(const Shape& in) const override {
    require_2d(in, in_, "in_features");
    return {in[0], out_};
  }
  void forward(const Forward& f) override {
    const int64_t n = f.input.dim(0);
    float* y = f.output.f32();
    f.ops.matmul(f.input.f32(), f.param(0).f32(), y, n, out_, in_, false, true, false);  // x·Wᵀ
    f.ops.bias_add(y, f.param(1).f32(), n, out_);
  }
  void backward(const Backward& b) override {
    const int64_t n = b.input.dim(0);
    const float* dy = b.grad_output.f32();
    if (!b.grad_input.empty())  // dx = dy·W
      b.ops.matmul(dy, b.param(0).f32(), b.grad_input.f32(), n, in_, out_, false, false, false);
    float* dW = b.grad_param(0).f32();
    b.ops.matmul(dy, b.input.f32(), dW, out_, in_, n, true, false, true);  // dW += dyᵀ·x
    b.ops.bias_grad(dy, b.grad_param(1).f32(), n, out_);                    // db += Σ dy
    if (inject_.count(b.batch.step)) {
      if (b.ops.device() != DS_DEVICE_CPU)
        throw std::invalid_argument("model.inject_nonfinite_grad_steps works on the CPU backend only");
      for (int64_t i = 0; i < out_ * in_; ++i) dW[i] += INFINITY;
    }
  }

 private:
  int64_t in_, out_;
  std::set<int64_t> inject_;
};

class Relu : public ds::sdk::Layer {
 public:
  using Layer::Layer;
  Shape output_shape(const Shape& in) const override { return in; }
  void forward(const Forward& f) override { f.ops.relu_forward(f.input.f32(), f.output.f32(), f.input.numel()); }
  void backward(const Backward& b) override {
    if (!b.grad_input.empty())
      b.ops.relu_backward(b.input.f32(), b.grad_output.f32(), b.grad_input.f32(), b.input.numel());
  }
};

// Mean softmax cross-entropy of logits [n, classes] against the batch's int32 targets [n].
// Workspace: per-row softmax stats [n, 2] floats from forward, for backward.
class CrossEntropyLoss : public ds::sdk::Layer {
 public:
  CrossEntropyLoss(std::string name, int64_t classes) : Layer(std::move(name)), classes_(classes) {}
  Shape output_shape(const Shape& in) const override {
    require_2d(in, classes_, "classes");
    return {1};
  }
  size_t workspace_bytes(const Shape& in) const override {
    output_shape(in);  // validates the input
    return 2 * static_cast<size_t>(in[0]) * sizeof(float);
  }
  void forward(const Forward& f) override {
    const int64_t n = f.input.dim(0);
    f.ops.cross_entropy_forward(f.input.f32(), labels(f.batch, n), n, classes_, stats(f.workspace), f.output.f32());
    if (!f.batch.predictions.empty())  // the logits
      f.ops.copy(f.batch.predictions.f32(), f.input.f32(), static_cast<size_t>(n * classes_) * sizeof(float));
  }
  void backward(const Backward& b) override {
    if (b.grad_input.empty()) return;
    const int64_t n = b.input.dim(0);
    b.ops.cross_entropy_backward(b.input.f32(), labels(b.batch, n), stats(b.workspace), b.grad_output.f32(), n,
                                    classes_, b.grad_input.f32());
  }

 private:
  static float* stats(void* workspace) {
    if (workspace == nullptr) throw std::invalid_argument("workspace is NULL");
    return static_cast<float*>(workspace);
  }
  static const int32_t* labels(const ds::sdk::Batch& batch, int64_t n) {
    const Shape& s = batch.target.shape();
    if (batch.target.empty()) throw std::invalid_argument("batch target is NULL");
    if (!(s == Shape{n} || s == Shape{n, 1}))
      throw std::invalid_argument("batch target shape " + s.str() + ", expected [" + std::to_string(n) + "]");
    return batch.target.i32();
  }
  int64_t classes_;
};

class Mlp : public ds::sdk::Model {
 public:
  explicit Mlp(ds::sdk::Config& cfg)
      : in_(cfg.get_at_least<int64_t>("in_features", 32, 1)),
        classes_(cfg.get_at_least<int64_t>("classes", 10, 2)),
        num_samples_(cfg.get_at_least<int64_t>("num_samples", 1000, 1)),
        seed_(cfg.get<uint64_t>("data_seed", 1234)) {
    const int64_t hidden = cfg.get_at_least<int64_t>("hidden", 128, 1);
    const int64_t blocks = cfg.get_at_least<int64_t>("layers", 1, 1);
    std::set<int64_t> inject;
    if (cfg.has("inject_nonfinite_grad_steps")) {
      const auto& v = cfg.json().at("inject_nonfinite_grad_steps");
      if (!v.is_array()) throw ds::sdk::ConfigError("model.inject_nonfinite_grad_steps: " + v.dump() + " is not a list");
      for (const auto& e : v) {
        if (!e.is_number_integer() || e.get<int64_t>() < 1)
          throw ds::sdk::ConfigError("model.inject_nonfinite_grad_steps: " + e.dump() + " is not a step (integer >= 1)");
        inject.insert(e.get<int64_t>());
      }
    }
    int64_t width = in_;
    for (int64_t i = 1; i <= blocks; ++i) {
      add_layer<Linear>("fc" + std::to_string(i), width, hidden);
      add_layer<Relu>(blocks == 1 ? std::string("relu") : "relu" + std::to_string(i));
      width = hidden;
    }
    add_layer<Linear>("fc" + std::to_string(blocks + 1), width, classes_, inject);
    add_layer<CrossEntropyLoss>("loss", classes_);

    uint64_t state = seed_ ^ 0x7EAC4E5ull;  // the teacher's own stream
    teacher_.resize(static_cast<size_t>(classes_ * in_));
    for (float& w : teacher_) w = uniform_pm1(state);
  }

  bool runs_on(ds_device_type) const override { return true; }  // only the backend's ops touch tensors
  ds::sdk::DatasetInfo dataset_info() const override { return {num_samples_, DS_F32, {in_}, DS_I32, {}}; }
  ds::sdk::Shape predictions_shape(const ds::sdk::Shape& input) const override { return {input[0], classes_}; }

  void get_batch(std::span<const int64_t> indices, const ds::sdk::Tensor& input, const ds::sdk::Tensor& target) override {
    float* x = input.f32();
    int32_t* y = target.i32();
    for (size_t r = 0; r < indices.size(); ++r) {
      float* xr = x + r * static_cast<size_t>(in_);
      uint64_t state = seed_ * 0xD1B54A32D192ED03ull + static_cast<uint64_t>(indices[r]);
      splitmix64(state);  // decorrelate neighbouring (seed, index) keys
      for (int64_t k = 0; k < in_; ++k) xr[k] = uniform_pm1(state);
      int32_t best = 0;
      double best_v = -INFINITY;
      for (int64_t c = 0; c < classes_; ++c) {
        double v = 0;
        for (int64_t k = 0; k < in_; ++k) v += static_cast<double>(teacher_[c * in_ + k]) * xr[k];
        if (v > best_v) best_v = v, best = static_cast<int32_t>(c);
      }
      y[r] = best;
    }
  }

 private:
  int64_t in_, classes_, num_samples_;
  uint64_t seed_;
  std::vector<float> teacher_;  // [classes, in_features]
};

}  // namespace

DS_PLUGIN(Mlp, "mlp")
