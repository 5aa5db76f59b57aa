// Next-token samples from a token stream: sample i is the window tokens[i*seq_len, i*seq_len + seq_len + 1);
// its input is the first seq_len tokens and its target the last seq_len (the input shifted by one).
// Windows do not overlap: num_samples = (N - 1) / seq_len, which must be at least 1.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace ds {

class TokenDataset : public Dataset {
 public:
  // Takes the tokens (e.g. std::move(corpus.train)); `split` names them in errors ("train",
  // "validation"). Throws ConfigError when seq_len < 1 or there are fewer than seq_len + 1 tokens.
  TokenDataset(std::vector<uint16_t> tokens, int64_t seq_len, std::string split);

  // num_samples; input and target: DS_I32 [seq_len].
  ds_dataset_info info() const override;
  // input and target: DS_I32 [n, seq_len].
  void get_batch(const int64_t* indices, int64_t n, ds_tensor& input, ds_tensor& target) override;

 private:
  std::vector<uint16_t> tokens_;
  int64_t seq_len_;  // tokens per sample
  int64_t num_samples_;
  std::string split_;
};

}  // namespace ds
