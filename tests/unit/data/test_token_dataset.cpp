// The token dataset: non-overlapping windows, the target shifted by one, int32 batches, and the
// errors for an index out of range or a split too short for one sample.
#include <doctest/doctest.h>

#include <numeric>
#include <stdexcept>

#include "core/errors.h"
#include "data/token_dataset.h"
#include "data_test_util.h"

using ds::TokenDataset;
using ds::test::error_of;

namespace {

// 0, 1, …, n-1.
std::vector<uint16_t> iota_tokens(size_t n) {
  std::vector<uint16_t> t(n);
  std::iota(t.begin(), t.end(), uint16_t{0});
  return t;
}

ds_tensor batch_tensor(std::vector<int32_t>& data, int64_t n, int64_t seq_len) {
  ds_tensor t{};
  t.data = data.data();
  t.dtype = DS_I32;
  t.shape.ndim = 2;
  t.shape.dims[0] = n;
  t.shape.dims[1] = seq_len;
  return t;
}

}  // namespace

TEST_CASE("token dataset: samples are non-overlapping windows with the target shifted by one") {
  TokenDataset ds(iota_tokens(11), 3, "train");  // (11 - 1) / 3 = 3 samples
  const ds_dataset_info info = ds.info();
  CHECK(info.num_samples == 3);
  CHECK(info.input_dtype == DS_I32);
  CHECK(info.target_dtype == DS_I32);
  CHECK(info.input_shape.ndim == 1);
  CHECK(info.input_shape.dims[0] == 3);
  CHECK(info.target_shape.ndim == 1);
  CHECK(info.target_shape.dims[0] == 3);

  std::vector<int32_t> in(9), out(9);
  ds_tensor input = batch_tensor(in, 3, 3), target = batch_tensor(out, 3, 3);
  const int64_t indices[] = {2, 0, 1};
  ds.get_batch(indices, 3, input, target);
  CHECK(in == std::vector<int32_t>{6, 7, 8, 0, 1, 2, 3, 4, 5});
  CHECK(out == std::vector<int32_t>{7, 8, 9, 1, 2, 3, 4, 5, 6});
}

TEST_CASE("token dataset: token ids above 32767 stay positive") {
  TokenDataset ds({65535, 40000, 1}, 2, "train");
  std::vector<int32_t> in(2), out(2);
  ds_tensor input = batch_tensor(in, 1, 2), target = batch_tensor(out, 1, 2);
  const int64_t zero = 0;
  ds.get_batch(&zero, 1, input, target);
  CHECK(in == std::vector<int32_t>{65535, 40000});
  CHECK(out == std::vector<int32_t>{40000, 1});
}

TEST_CASE("token dataset: an index out of range throws") {
  TokenDataset ds(iota_tokens(7), 3, "validation");  // 2 samples
  std::vector<int32_t> in(3), out(3);
  ds_tensor input = batch_tensor(in, 1, 3), target = batch_tensor(out, 1, 3);
  for (int64_t bad : {int64_t{-1}, int64_t{2}}) {
    CAPTURE(bad);
    CHECK(error_of<std::out_of_range>([&] { ds.get_batch(&bad, 1, input, target); }) ==
          "token dataset (validation): sample " + std::to_string(bad) + " is outside [0, 2)");
  }
  const int64_t ok = 1;
  ds_tensor wrong = batch_tensor(in, 1, 2);
  CHECK_THROWS_AS(ds.get_batch(&ok, 1, wrong, target), std::invalid_argument);
}

TEST_CASE("token dataset: a split shorter than seq_len + 1 tokens is a config error") {
  CHECK(TokenDataset(iota_tokens(4), 3, "train").info().num_samples == 1);
  CHECK(error_of<ds::ConfigError>([] { TokenDataset(iota_tokens(3), 3, "validation"); })
            .starts_with("data: the validation split has 3 tokens, fewer than seq_len + 1 = 4 for one sample"));
  CHECK(error_of<ds::ConfigError>([] { TokenDataset({}, 8, "validation"); })
            .starts_with("data: the validation split has 0 tokens"));
  CHECK(error_of<ds::ConfigError>([] { TokenDataset(iota_tokens(10), 0, "train"); }) ==
        "seq_len: 0 is not a positive number of tokens");
}
