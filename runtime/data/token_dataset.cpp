// Next-token windows over a token stream (see token_dataset.h).
#include "data/token_dataset.h"

#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "core/errors.h"

namespace ds {
namespace {

// A caller-allocated batch tensor must be DS_I32 [n, seq_len].
void check_batch_tensor(const ds_tensor& t, const char* name, int64_t n, int64_t seq_len) {
  if (t.dtype != DS_I32 || t.shape.ndim != 2 || t.shape.dims[0] != n || t.shape.dims[1] != seq_len)
    throw std::invalid_argument(fmt::format("token dataset: the {} tensor is not int32 [{}, {}]", name, n, seq_len));
}

}  // namespace

TokenDataset::TokenDataset(std::vector<uint16_t> tokens, int64_t seq_len, std::string split)
    : tokens_(std::move(tokens)), seq_len_(seq_len), num_samples_(0), split_(std::move(split)) {
  if (seq_len < 1) throw ConfigError(fmt::format("seq_len: {} is not a positive number of tokens", seq_len));
  const auto n = static_cast<int64_t>(tokens_.size());
  num_samples_ = n > 0 ? (n - 1) / seq_len : 0;
  if (num_samples_ < 1)
    throw ConfigError(fmt::format("data: the {} split has {} tokens, fewer than seq_len + 1 = {} for one sample "
                                  "(more data, a larger data.val_fraction or a shorter seq_len)",
                                  split_, n, seq_len + 1));
}

ds_dataset_info TokenDataset::info() const {
  ds_dataset_info info{};
  info.num_samples = num_samples_;
  info.input_dtype = DS_I32;
  info.input_shape.ndim = 1;
  info.input_shape.dims[0] = seq_len_;
  info.target_dtype = DS_I32;
  info.target_shape = info.input_shape;
  return info;
}

void TokenDataset::get_batch(const int64_t* indices, int64_t n, ds_tensor& input, ds_tensor& target) {
  check_batch_tensor(input, "input", n, seq_len_);
  check_batch_tensor(target, "target", n, seq_len_);
  auto* in = static_cast<int32_t*>(input.data);
  auto* out = static_cast<int32_t*>(target.data);
  for (int64_t b = 0; b < n; ++b) {
    const int64_t i = indices[b];
    if (i < 0 || i >= num_samples_)
      throw std::out_of_range(
          fmt::format("token dataset ({}): sample {} is outside [0, {})", split_, i, num_samples_));
    const uint16_t* window = tokens_.data() + i * seq_len_;
    for (int64_t t = 0; t < seq_len_; ++t) {
      in[b * seq_len_ + t] = window[t];
      out[b * seq_len_ + t] = window[t + 1];
    }
  }
}

}  // namespace ds
