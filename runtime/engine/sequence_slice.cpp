// Cutting samples into sequence chunks and joining chunks back (sequence_slice.h).
#include "engine/sequence_slice.h"

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/errors.h"

namespace ds {
namespace {

int64_t inner_elements(const ds_shape& sample) {  // elements per position: the dimensions after the first
  int64_t n = 1;
  for (int d = 1; d < sample.ndim; ++d) n *= sample.dims[d];
  return n;
}

ds_shape cut(const ds_shape& sample, int ranks, const char* what) {
  if (sample.ndim < 1 || sample.dims[0] % ranks != 0)
    throw ConfigError(fmt::format("sequence_parallel_size: {} ranks cannot split the samples' {} of shape [{}]: the "
                                  "first dimension (the sequence) must be a multiple of {}",
                                  ranks, what, fmt::join(sample.dims, sample.dims + sample.ndim, ", "), ranks));
  ds_shape part = sample;
  part.dims[0] /= ranks;
  return part;
}

size_t dtype_bytes(ds_dtype dtype) { return dtype == DS_BF16 || dtype == DS_F16 ? 2 : 4; }

}  // namespace

SequenceSlice::SequenceSlice(Dataset& whole, int rank, int ranks)
    : whole_(whole), rank_(rank), ranks_(ranks), whole_info_(whole.info()), part_(whole_info_) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    throw std::invalid_argument(fmt::format("SequenceSlice: rank {} of {}", rank, ranks));
  part_.input_shape = cut(whole_info_.input_shape, ranks, "input");
  part_.target_shape = cut(whole_info_.target_shape, ranks, "target");
}

void SequenceSlice::get_batch(const int64_t* indices, int64_t n, ds_tensor& input, ds_tensor& target) {
  auto whole_tensor = [n](std::vector<std::byte>& buffer, ds_dtype dtype, const ds_shape& sample) {
    ds_shape shape{sample.ndim + 1, {n}};
    int64_t count = n;
    for (int d = 0; d < sample.ndim; ++d) count *= shape.dims[d + 1] = sample.dims[d];
    buffer.resize(static_cast<size_t>(count) * dtype_bytes(dtype));
    return ds_tensor{buffer.data(), dtype, shape, DS_DEVICE_CPU};
  };
  ds_tensor in = whole_tensor(input_, whole_info_.input_dtype, whole_info_.input_shape);
  ds_tensor tg = whole_tensor(target_, whole_info_.target_dtype, whole_info_.target_shape);
  whole_.get_batch(indices, n, in, tg);
  cut_input(in.data, input.data, n);
  take_sequence_chunk(tg.data, target.data, n, whole_info_.target_shape.dims[0],
                      inner_elements(whole_info_.target_shape), dtype_bytes(whole_info_.target_dtype), rank_, ranks_);
}

void SequenceSlice::cut_input(const void* whole, void* part, int64_t n) const {
  take_sequence_chunk(whole, part, n, whole_info_.input_shape.dims[0], inner_elements(whole_info_.input_shape),
                      dtype_bytes(whole_info_.input_dtype), rank_, ranks_);
}

void take_sequence_chunk(const void* whole, void* part, int64_t n, int64_t L, int64_t inner, size_t elem, int rank,
                         int ranks) {
  const size_t row = static_cast<size_t>(L * inner) * elem, chunk = row / static_cast<size_t>(ranks);
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(static_cast<std::byte*>(part) + static_cast<size_t>(i) * chunk,
                static_cast<const std::byte*>(whole) + static_cast<size_t>(i) * row + static_cast<size_t>(rank) * chunk,
                chunk);
}

void join_sequence_chunks(const void* chunks, void* whole, int64_t n, int64_t L, int64_t inner, size_t elem, int ranks) {
  const size_t row = static_cast<size_t>(L * inner) * elem, chunk = row / static_cast<size_t>(ranks);
  for (int r = 0; r < ranks; ++r)
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(static_cast<std::byte*>(whole) + static_cast<size_t>(i) * row + static_cast<size_t>(r) * chunk,
                  static_cast<const std::byte*>(chunks) + (static_cast<size_t>(r) * static_cast<size_t>(n) +
                                                           static_cast<size_t>(i)) * chunk,
                  chunk);
}

}  // namespace ds
