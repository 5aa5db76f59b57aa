// The 1-bit compressed all-reduce (see compressed_allreduce.h).
#include "comm/compressed_allreduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

namespace ds {

size_t compressed_padded_size(size_t n, int world) {
  const size_t p = static_cast<size_t>(world);
  const size_t unit = p * std::lcm(p, size_t{8});
  return (n + unit - 1) / unit * unit;
}

float compress_signs(std::span<const float> x, std::span<float> error, std::span<uint8_t> bits) {
  const size_t n = x.size();
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const float c = x[i] + error[i];
    error[i] = c;
    sum += static_cast<double>(c) * c;
  }
  const float scale = static_cast<float>(std::sqrt(sum) / std::sqrt(static_cast<double>(n)));
  std::fill(bits.begin(), bits.begin() + static_cast<std::ptrdiff_t>((n + 7) / 8), uint8_t{0});
  for (size_t i = 0; i < n; ++i) {
    const float c = error[i];
    const bool negative = c < 0.0f;  // 0, -0 and NaN count as +1, as torch's sign()+1 → bool
    error[i] = c - (negative ? -scale : scale);
    if (!negative) bits[i / 8] |= static_cast<uint8_t>(0x80u >> (i % 8));
  }
  return scale;
}

void expand_signs(std::span<const uint8_t> bits, float scale, std::span<float> out) {
  for (size_t i = 0; i < out.size(); ++i) out[i] = (bits[i / 8] & (0x80u >> (i % 8))) ? scale : -scale;
}

CompressedAllreduce::CompressedAllreduce(ProcessGroup& group, std::vector<size_t> sizes)
    : group_(group), sizes_(std::move(sizes)) {
  const int p = group_.size();
  size_t max_padded = 0;
  for (size_t n : sizes_) {
    const size_t padded = compressed_padded_size(n, p);
    padded_.push_back(padded);
    byte_offset_.push_back(message_bytes_);
    message_bytes_ += padded / static_cast<size_t>(p) / 8;
    worker_.emplace_back(padded, 0.0f);
    server_.emplace_back(padded / static_cast<size_t>(p), 0.0f);
    max_padded = std::max(max_padded, padded);
  }
  work_.resize(max_padded);
  send_.resize(static_cast<size_t>(p) * message_bytes_);
  recv_.resize(static_cast<size_t>(p) * message_bytes_);
  scales_.resize(sizes_.size());
  all_scales_.resize(static_cast<size_t>(p) * sizes_.size());
}

void CompressedAllreduce::run(std::span<float* const> buffers) {
  if (buffers.size() != sizes_.size())
    throw std::invalid_argument(fmt::format("compressed_allreduce: {} buffers, made for {}", buffers.size(), sizes_.size()));
  const size_t p = static_cast<size_t>(group_.size());
  const size_t K = sizes_.size(), B = message_bytes_;
  std::vector<uint8_t> bits;

  // Worker: compress x + e_w; chunk j of the signs goes to rank j.
  for (size_t k = 0; k < K; ++k) {
    const size_t N = padded_[k], chunk_bytes = N / p / 8;
    std::copy_n(buffers[k], sizes_[k], work_.begin());
    std::fill(work_.begin() + static_cast<std::ptrdiff_t>(sizes_[k]), work_.begin() + static_cast<std::ptrdiff_t>(N), 0.0f);
    bits.resize(N / 8);
    scales_[k] = compress_signs(std::span(work_).first(N), worker_[k], bits);
    for (size_t j = 0; j < p; ++j)
      std::memcpy(send_.data() + j * B + byte_offset_[k], bits.data() + j * chunk_bytes, chunk_bytes);
  }
  auto signs = group_.alltoall_async(send_.data(), recv_.data(), B, DataType::U8);
  auto scales = group_.allgather_async(scales_.data(), all_scales_.data(), K, DataType::F32);
  signs->wait();
  scales->wait();

  // Server: average this rank's chunk over the ranks, add e_s, compress again.
  const float inverse = static_cast<float>(1.0 / static_cast<double>(p));
  std::vector<float> term;
  for (size_t k = 0; k < K; ++k) {
    const size_t chunk = padded_[k] / p;
    std::span<float> z = std::span(work_).first(chunk);
    std::fill(z.begin(), z.end(), 0.0f);
    term.resize(chunk);
    for (size_t i = 0; i < p; ++i) {
      expand_signs(std::span(recv_).subspan(i * B + byte_offset_[k], chunk / 8), all_scales_[i * K + k] * inverse, term);
      for (size_t e = 0; e < chunk; ++e) z[e] += term[e];
    }
    scales_[k] = compress_signs(z, server_[k], std::span(send_).subspan(byte_offset_[k], chunk / 8));  // z + e_s
  }
  auto server_signs = group_.allgather_async(send_.data(), recv_.data(), B, DataType::U8);
  auto server_scales = group_.allgather_async(scales_.data(), all_scales_.data(), K, DataType::F32);
  server_signs->wait();
  server_scales->wait();

  // Every rank: buffer k is the concatenation of the servers' chunks, cut back to its size.
  for (size_t k = 0; k < K; ++k) {
    const size_t chunk = padded_[k] / p;
    for (size_t j = 0; j < p && j * chunk < sizes_[k]; ++j) {
      const size_t count = std::min(chunk, sizes_[k] - j * chunk);
      expand_signs(std::span(recv_).subspan(j * B + byte_offset_[k], chunk / 8), all_scales_[j * K + k],
                   std::span(buffers[k] + j * chunk, count));
    }
  }
}

void CompressedAllreduce::reset_errors() {
  for (auto& e : worker_) std::fill(e.begin(), e.end(), 0.0f);
  for (auto& e : server_) std::fill(e.begin(), e.end(), 0.0f);
}

size_t CompressedAllreduce::bytes() const {
  size_t floats = 0;
  for (size_t k = 0; k < sizes_.size(); ++k) floats += worker_[k].size() + server_[k].size();
  return floats * sizeof(float);
}

}  // namespace ds
