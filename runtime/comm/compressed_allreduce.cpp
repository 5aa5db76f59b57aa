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

namespace {

// The 8 signs of each byte value as ±1 floats (MSB first), so that a byte expands without branches.
struct SignTable {
  float v[256][8];
  SignTable() {
    for (int b = 0; b < 256; ++b)
      for (int k = 0; k < 8; ++k) v[b][k] = (b & (0x80 >> k)) ? 1.0f : -1.0f;
  }
};
const SignTable kSigns;

}  // namespace

float compress_signs(std::span<const float> x, std::span<float> error, std::span<uint8_t> bits) {
  const size_t n = error.size(), m = x.size();
  for (size_t i = 0; i < m; ++i) error[i] += x[i];  // c, in place
  double lanes[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (size_t k = 0; k < 8; ++k) lanes[k] += static_cast<double>(error[i + k]) * error[i + k];
  for (; i < n; ++i) lanes[i % 8] += static_cast<double>(error[i]) * error[i];
  double sum = 0.0;
  for (double lane : lanes) sum += lane;
  const float scale = static_cast<float>(std::sqrt(sum) / std::sqrt(static_cast<double>(n)));
  // 0, -0 and NaN count as +1, as torch's sign()+1 → bool.
  auto sign_out = [&](size_t i, size_t k) -> uint8_t {
    const float c = error[i];
    const bool negative = c < 0.0f;
    error[i] = c - (negative ? -scale : scale);
    return static_cast<uint8_t>(negative ? 0 : 0x80u >> k);
  };
  for (size_t j = 0; j < n / 8; ++j) {
    uint8_t byte = 0;
    for (size_t k = 0; k < 8; ++k) byte |= sign_out(8 * j + k, k);
    bits[j] = byte;
  }
  if (n % 8 != 0) {
    uint8_t byte = 0;
    for (size_t i = n / 8 * 8; i < n; ++i) byte |= sign_out(i, i % 8);
    bits[n / 8] = byte;
  }
  return scale;
}

void expand_signs(std::span<const uint8_t> bits, float scale, std::span<float> out) {
  const size_t n = out.size();
  for (size_t j = 0; j < n / 8; ++j)
    for (size_t k = 0; k < 8; ++k) out[8 * j + k] = scale * kSigns.v[bits[j]][k];
  for (size_t i = n / 8 * 8; i < n; ++i) out[i] = scale * kSigns.v[bits[i / 8]][i % 8];
}

void add_signs(std::span<const uint8_t> bits, float scale, std::span<float> out) {
  const size_t n = out.size();
  for (size_t j = 0; j < n / 8; ++j)
    for (size_t k = 0; k < 8; ++k) out[8 * j + k] += scale * kSigns.v[bits[j]][k];
  for (size_t i = n / 8 * 8; i < n; ++i) out[i] += scale * kSigns.v[bits[i / 8]][i % 8];
}

CompressedAllreduce::CompressedAllreduce(ProcessGroup& group, std::vector<size_t> sizes)
    : group_(group), sizes_(std::move(sizes)) {
  const int p = group_.size();
  size_t max_chunk = 0;
  for (size_t n : sizes_) {
    const size_t padded = compressed_padded_size(n, p);
    padded_.push_back(padded);
    byte_offset_.push_back(message_bytes_);
    message_bytes_ += padded / static_cast<size_t>(p) / 8;
    worker_.emplace_back(padded, 0.0f);
    server_.emplace_back(padded / static_cast<size_t>(p), 0.0f);
    max_chunk = std::max(max_chunk, padded / static_cast<size_t>(p));
  }
  work_.resize(max_chunk);
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
    bits.resize(N / 8);
    scales_[k] = compress_signs(std::span<const float>(buffers[k], sizes_[k]), worker_[k], bits);
    for (size_t j = 0; j < p; ++j)
      std::memcpy(send_.data() + j * B + byte_offset_[k], bits.data() + j * chunk_bytes, chunk_bytes);
  }
  auto signs = group_.alltoall_async(send_.data(), recv_.data(), B, DataType::U8);
  auto scales = group_.allgather_async(scales_.data(), all_scales_.data(), K, DataType::F32);
  signs->wait();
  scales->wait();

  // Server: average this rank's chunk over the ranks, add e_s, compress again.
  const float inverse = static_cast<float>(1.0 / static_cast<double>(p));
  for (size_t k = 0; k < K; ++k) {
    const size_t chunk = padded_[k] / p;
    std::span<float> z = std::span(work_).first(chunk);
    std::fill(z.begin(), z.end(), 0.0f);
    for (size_t i = 0; i < p; ++i)
      add_signs(std::span(recv_).subspan(i * B + byte_offset_[k], chunk / 8), all_scales_[i * K + k] * inverse, z);
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
