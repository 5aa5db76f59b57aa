// An out-of-tree dsworker model plugin: a bigram language model (the next token's logits are a row
// of a learned [vocab, vocab] table, picked by the current token), trained on the token corpus of the
// config's `data` block. One layer that is also the loss: softmax cross-entropy over the sequence.
// It uses only the public SDK (ds_plugin_sdk.h, installed with dsrun); see README.md beside it.
#include <algorithm>
#include <cmath>
#include <vector>

#include "plugin/ds_plugin_sdk.h"

namespace {

struct Dims {
  int64_t vocab, seq_len;
};

// Input: token ids [n, seq_len]; parameter `table` [vocab, vocab]; output: the mean loss [1].
class Bigram : public ds::sdk::Layer {
 public:
  explicit Bigram(const Dims& d) : Layer("bigram"), d_(d) { add_param("table", {d.vocab, d.vocab}, DS_INIT_NORMAL, 0.0f, 0.02f); }

  ds::sdk::Shape output_shape(const ds::sdk::Shape&) const override { return {1}; }

  void forward(const ds::sdk::Forward& f) override {
    const float* table = f.param(0).f32();
    const int32_t* x = f.input.i32();
    const int32_t* y = f.batch.target.i32();
    const int64_t positions = f.input.numel();
    float* predictions = f.batch.predictions.empty() ? nullptr : f.batch.predictions.f32();
    double total = 0.0;
    for (int64_t t = 0; t < positions; ++t) {
      const float* row = table + x[t] * d_.vocab;
      const float top = *std::max_element(row, row + d_.vocab);
      double sum = 0.0;
      for (int64_t v = 0; v < d_.vocab; ++v) sum += std::exp(static_cast<double>(row[v] - top));
      total += std::log(sum) + top - row[y[t]];
      if (predictions) std::copy(row, row + d_.vocab, predictions + t * d_.vocab);
    }
    f.output.f32()[0] = static_cast<float>(total / static_cast<double>(positions));
  }

  // d loss / d row[v] = (softmax(row)[v] - [v == y]) / positions, scaled by the engine's grad_output.
  void backward(const ds::sdk::Backward& b) override {
    const float* table = b.param(0).f32();
    float* grad = b.grad_param(0).f32();
    const int32_t* x = b.input.i32();
    const int32_t* y = b.batch.target.i32();
    const int64_t positions = b.input.numel();
    const double scale = static_cast<double>(b.grad_output.f32()[0]) / static_cast<double>(positions);
    std::vector<double> p(static_cast<size_t>(d_.vocab));
    for (int64_t t = 0; t < positions; ++t) {
      const float* row = table + x[t] * d_.vocab;
      const float top = *std::max_element(row, row + d_.vocab);
      double sum = 0.0;
      for (int64_t v = 0; v < d_.vocab; ++v) sum += p[static_cast<size_t>(v)] = std::exp(static_cast<double>(row[v] - top));
      float* g = grad + x[t] * d_.vocab;
      for (int64_t v = 0; v < d_.vocab; ++v)
        g[v] += static_cast<float>(scale * (p[static_cast<size_t>(v)] / sum - (v == y[t] ? 1.0 : 0.0)));
    }
  }

 private:
  Dims d_;
};

class BigramModel : public ds::sdk::Model {
 public:
  explicit BigramModel(ds::sdk::Config& cfg)
      : d_{cfg.get_at_least<int64_t>("vocab_size", 256, 2), cfg.get_at_least<int64_t>("seq_len", 64, 1)} {
    add_layer<Bigram>(d_);
  }
  // No samples of its own: dsworker feeds windows of the config's data corpus.
  ds::sdk::DatasetInfo dataset_info() const override {
    return {0, DS_I32, ds::sdk::Shape{d_.seq_len}, DS_I32, ds::sdk::Shape{d_.seq_len}};
  }
  ds::sdk::Shape predictions_shape(const ds::sdk::Shape& input) const override {
    return {input[0], d_.seq_len, d_.vocab};  // logits, for validation and text generation
  }
  void get_batch(std::span<const int64_t>, const ds::sdk::Tensor&, const ds::sdk::Tensor&) override {}

 private:
  Dims d_;
};

}  // namespace

DS_PLUGIN(BigramModel, "bigram")
