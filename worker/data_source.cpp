// The config's `data` block as the engine's datasets (see data_source.h).
#include "data_source.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/errors.h"

namespace ds {

TrainingData load_training_data(const DsConfig& config, const Plugin& plugin) {
  TrainingData out;
  const ds_dataset_info model = plugin.dataset_info();
  if (config.data.empty()) return out;
  if (model.num_samples > 0)
    throw ConfigError(fmt::format("data: the model {} brings its own dataset ({} samples); remove the data block",
                                  plugin.name(), model.num_samples));
  if (model.input_dtype != DS_I32 || model.input_shape.ndim != 1)
    throw ConfigError(fmt::format("data: the model {} does not take token ids [seq_len] as input, so it cannot "
                                  "train on a text or token corpus", plugin.name()));
  const int64_t seq_len = model.input_shape.dims[0];
  const int64_t micro_batch = config.train_micro_batch_size_per_gpu;
  const ds_shape logits = plugin.predictions_shape(ds_shape{2, {1, seq_len}});
  out.vocab = logits.ndim == 3 ? logits.dims[2] : 0;
  out.eval = parse_eval_config(config.data);
  Corpus corpus = load_corpus(config.data);
  out.description = corpus.describe();
  out.tokenizer = corpus.tokenizer;
  if (out.vocab > 0) {
    if (corpus.vocab > out.vocab)
      throw ConfigError(fmt::format("data.path: the corpus's vocabulary ({}{}) is larger than the model's ({}, "
                                    "model.vocab_size)", corpus.vocab, corpus.vocab == 256 ? ", byte-level" : "",
                                    out.vocab));
    uint16_t largest = 0;
    for (const auto* split : {&corpus.train, &corpus.val})
      if (!split->empty()) largest = std::max(largest, *std::max_element(split->begin(), split->end()));
    if (largest >= out.vocab)
      throw ConfigError(fmt::format("data.path: token id {} is not below the model's vocabulary size {} "
                                    "(model.vocab_size)", largest, out.vocab));
  }
  out.train = std::make_unique<TokenDataset>(std::move(corpus.train), seq_len, "train");
  if (!corpus.val.empty()) out.val = std::make_unique<TokenDataset>(std::move(corpus.val), seq_len, "validation");
  const int64_t per_pass = micro_batch * config.world_size;  // evaluate() takes whole micro-batches on every rank
  if (out.val && std::min(out.val->info().num_samples, out.eval.max_samples) < per_pass)
    throw ConfigError(fmt::format("data: validation uses {} windows (of {} in the split, data.eval_samples {}), fewer "
                                  "than one micro-batch on each rank ({} x {} ranks); raise data.val_fraction or "
                                  "data.eval_samples, or set data.val_fraction to 0 for no validation",
                                  std::min(out.val->info().num_samples, out.eval.max_samples),
                                  out.val->info().num_samples, out.eval.max_samples, micro_batch, config.world_size));
  out.tokens_per_sample = seq_len;
  return out;
}

}  // namespace ds
