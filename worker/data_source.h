// dsworker's training and validation data: token windows from the config's `data` block (corpus.h),
// checked against the model, or nothing when the model brings its own dataset.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "config/ds_config.h"
#include "data/corpus.h"
#include "data/token_dataset.h"
#include "plugin/plugin.h"

namespace ds {

struct TrainingData {
  std::unique_ptr<TokenDataset> train;  // null: the plugin's own dataset
  std::unique_ptr<TokenDataset> val;    // null: no validation (no data block, or data.val_fraction 0)
  EvalConfig eval;
  int64_t tokens_per_sample = 0;        // seq_len for token data, 0 otherwise
  int64_t vocab = 0;                    // the model's vocabulary (its logits' last dimension)
  std::string description;              // Corpus::describe(), empty without a data block
  std::shared_ptr<const BpeTokenizer> tokenizer;  // data.tokenizer: sample prompts and output go through it
};

// Reads `config.data` when it has keys. Errors (ConfigError, naming the key and value): a data block
// for a model with its own data, a model whose input is not token ids [seq_len], a corpus whose
// vocabulary or largest token id does not fit the model's vocab_size, too few training or validation
// tokens (validation needs a micro-batch of windows on every rank).
TrainingData load_training_data(const DsConfig& config, const Plugin& plugin);

}  // namespace ds
