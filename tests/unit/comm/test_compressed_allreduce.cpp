// The 1-bit compressed all-reduce: the sign compression's invariants, the padding, and the whole
// collective against a dense single-process simulation of DeepSpeed's algorithm (unpacked ±1 floats,
// one buffer at a time, every rank's inputs known), at world sizes 1-4 over several calls so the
// error feedback matters; every rank must end with the same values.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "comm/compressed_allreduce.h"
#include "comm/thread_ranks.h"

using namespace ds;

namespace {

// Rank r's input element i of buffer k at call t: multiples of 1/64 in [-8, 8], some exact zeros.
float input(int r, size_t k, size_t i, int t) {
  uint64_t h = (static_cast<uint64_t>(r) * 1000003u + k * 7919u + i * 104729u + static_cast<uint64_t>(t) * 15485863u);
  h ^= h >> 13;
  h *= 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  return static_cast<float>(static_cast<int>(h % 1025) - 512) / 64.0f;
}

float sgn(float v) { return v < 0.0f ? -1.0f : 1.0f; }

// One compression of c = x + e as DeepSpeed writes it: returns s, e ← c − s·sgn(c), signs ← sgn(c).
float dense_compress(const std::vector<float>& x, std::vector<float>& e, std::vector<float>& signs) {
  double lanes[8] = {};  // the documented order: element i into partial sum i mod 8
  std::vector<float> c(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    c[i] = x[i] + e[i];
    lanes[i % 8] += static_cast<double>(c[i]) * c[i];
  }
  double sum = 0.0;
  for (double lane : lanes) sum += lane;
  const float s = static_cast<float>(std::sqrt(sum) / std::sqrt(static_cast<double>(x.size())));
  signs.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    signs[i] = sgn(c[i]);
    e[i] = c[i] - s * signs[i];
  }
  return s;
}

// Every rank's state of one buffer in the simulation.
struct DenseBuffer {
  size_t n = 0, N = 0;
  std::vector<std::vector<float>> worker, server;  // [rank][N], [rank][N/p]
};

// One call on every rank's input of buffer k: the output every rank should hold.
std::vector<float> dense_allreduce(DenseBuffer& b, int p, size_t k, int t) {
  const size_t chunk = b.N / static_cast<size_t>(p);
  std::vector<std::vector<float>> signs(p);
  std::vector<float> scales(p);
  for (int r = 0; r < p; ++r) {
    std::vector<float> x(b.N, 0.0f);
    for (size_t i = 0; i < b.n; ++i) x[i] = input(r, k, i, t);
    scales[r] = dense_compress(x, b.worker[r], signs[r]);
  }
  std::vector<float> out(b.N);
  const float inverse = static_cast<float>(1.0 / p);
  for (int j = 0; j < p; ++j) {
    std::vector<float> z(chunk, 0.0f), server_signs;
    for (int r = 0; r < p; ++r)
      for (size_t e = 0; e < chunk; ++e) z[e] += signs[r][j * chunk + e] * (scales[r] * inverse);
    const float s = dense_compress(z, b.server[j], server_signs);
    for (size_t e = 0; e < chunk; ++e) out[j * chunk + e] = s * server_signs[e];
  }
  out.resize(b.n);
  return out;
}

}  // namespace

TEST_CASE("compressed_allreduce: padding to p·lcm(p, 8)") {
  CHECK(compressed_padded_size(1, 1) == 8);
  CHECK(compressed_padded_size(8, 1) == 8);
  CHECK(compressed_padded_size(9, 1) == 16);
  CHECK(compressed_padded_size(16, 2) == 16);
  CHECK(compressed_padded_size(17, 2) == 32);
  CHECK(compressed_padded_size(1, 3) == 72);  // L = 24
  CHECK(compressed_padded_size(73, 3) == 144);
  CHECK(compressed_padded_size(32, 4) == 32);
  CHECK(compressed_padded_size(0, 4) == 0);
  for (int p = 1; p <= 8; ++p)
    for (size_t n : {size_t{1}, size_t{100}, size_t{1001}}) {
      const size_t N = compressed_padded_size(n, p);
      CHECK(N >= n);
      CHECK(N % (8 * p) == 0);  // whole bytes of signs per rank
      CHECK(N - n < static_cast<size_t>(p) * std::lcm(p, 8));
    }
}

TEST_CASE("compressed_allreduce: signs MSB first with 0 and -0 as +1; norm and error invariants") {
  const std::vector<float> x = {-1.0f, 0.0f, 2.0f, -3.0f, -0.0f, 0.5f, -0.25f, 4.0f, 1.0f, -2.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, -1.0f};
  std::vector<float> error(x.size(), 0.0f), before = error;
  std::vector<uint8_t> bits(2, 0xAA);
  const float s = compress_signs(x, error, bits);
  CHECK(bits[0] == 0b01101101);  // -1 0 2 -3 -0 .5 -.25 4
  CHECK(bits[1] == 0b10111110);  // 1 -2 0 0 0 0 0 -1
  double c_sq = 0.0, hat_sq = 0.0;
  std::vector<float> hat(x.size());
  expand_signs(bits, s, hat);
  for (size_t i = 0; i < x.size(); ++i) {
    const float c = x[i] + before[i];
    c_sq += static_cast<double>(c) * c;
    hat_sq += static_cast<double>(hat[i]) * hat[i];
    CHECK(hat[i] == (c < 0 ? -s : s));
    CHECK(hat[i] + error[i] == c);  // ĉ + e_new == x + e_old
  }
  CHECK(std::sqrt(hat_sq) == doctest::Approx(std::sqrt(c_sq)).epsilon(1e-7));  // ‖s·sgn(c)‖ = ‖c‖
}

TEST_CASE("compressed_allreduce: error feedback keeps the sum: ĉ + e_new == x + e_old over many calls") {
  const size_t n = 1000;
  std::vector<float> error(n, 0.0f), hat(n);
  std::vector<uint8_t> bits(n / 8);
  double worst = 0.0;
  for (int t = 0; t < 20; ++t) {
    std::vector<float> x(n), before = error;
    for (size_t i = 0; i < n; ++i) x[i] = input(0, 0, i, t) * 0.01f;
    const float s = compress_signs(x, error, bits);
    expand_signs(bits, s, hat);
    double c_sq = 0.0, hat_sq = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const float c = x[i] + before[i];
      c_sq += static_cast<double>(c) * c;
      hat_sq += static_cast<double>(hat[i]) * hat[i];
      // c − ĉ is rounded once to give e_new: adding ĉ back is c within half an ulp of max(|c|, |ĉ|).
      const double ulp = std::ldexp(1.0, -24) * std::max(std::abs(c), std::abs(hat[i]));
      worst = std::max(worst, std::abs(static_cast<double>(hat[i]) + error[i] - c) / (ulp > 0 ? ulp : 1));
    }
    CHECK(std::sqrt(hat_sq) == doctest::Approx(std::sqrt(c_sq)).epsilon(1e-6));
  }
  MESSAGE("worst |ĉ + e_new − (x + e_old)| in half-ulps: ", worst);
  CHECK(worst <= 1.0);
}

TEST_CASE("compressed_allreduce: equals the dense simulation on every rank for world sizes 1 to 4") {
  const std::vector<size_t> sizes = {1, 37, 200, 16};
  for (int p = 1; p <= 4; ++p) {
    INFO("world size ", p);
    run_ranks(p, [&](ProcessGroup& g) {
      std::vector<DenseBuffer> dense(sizes.size());
      for (size_t k = 0; k < sizes.size(); ++k) {
        dense[k].n = sizes[k];
        dense[k].N = compressed_padded_size(sizes[k], p);
        dense[k].worker.assign(p, std::vector<float>(dense[k].N, 0.0f));
        dense[k].server.assign(p, std::vector<float>(dense[k].N / p, 0.0f));
      }
      CompressedAllreduce reduce(g, sizes);
      for (int t = 0; t < 4; ++t) {
        std::vector<std::vector<float>> data(sizes.size());
        std::vector<float*> pointers;
        for (size_t k = 0; k < sizes.size(); ++k) {
          data[k].resize(sizes[k] + 1, 12345.0f);  // one guard element past the buffer
          for (size_t i = 0; i < sizes[k]; ++i) data[k][i] = input(g.rank(), k, i, t);
          pointers.push_back(data[k].data());
        }
        reduce.run(pointers);
        size_t wrong = 0, wrong_errors = 0;
        for (size_t k = 0; k < sizes.size(); ++k) {
          const std::vector<float> want = dense_allreduce(dense[k], p, k, t);
          for (size_t i = 0; i < sizes[k]; ++i) wrong += data[k][i] != want[i];
          wrong += data[k][sizes[k]] != 12345.0f;
          const auto worker = reduce.worker_error(k), server = reduce.server_error(k);
          for (size_t i = 0; i < worker.size(); ++i) wrong_errors += worker[i] != dense[k].worker[g.rank()][i];
          for (size_t i = 0; i < server.size(); ++i) wrong_errors += server[i] != dense[k].server[g.rank()][i];
        }
        CHECK(wrong == 0);
        CHECK(wrong_errors == 0);

        // Identical on all ranks: rank 0's result gathered everywhere.
        std::vector<float> mine = data[2], all(p * mine.size());
        g.allgather(mine.data(), all.data(), mine.size(), DataType::F32);
        size_t differ = 0;
        for (int r = 0; r < p; ++r)
          for (size_t i = 0; i < mine.size(); ++i) differ += all[r * mine.size() + i] != mine[i];
        CHECK(differ == 0);
      }
      reduce.reset_errors();
      for (size_t k = 0; k < sizes.size(); ++k)
        for (float e : reduce.worker_error(k)) CHECK(e == 0.0f);
    });
  }
}

TEST_CASE("compressed_allreduce: bytes sent are the packed signs and the scales") {
  for (int p = 2; p <= 4; ++p) {
    run_ranks(p, [p](ProcessGroup& g) {
      const std::vector<size_t> sizes = {1000, 10};
      CompressedAllreduce reduce(g, sizes);
      std::vector<float> a(1000, 1.0f), b(10, -1.0f);
      std::vector<float*> buffers = {a.data(), b.data()};
      reduce.run(buffers);
      const uint64_t sign_bytes = (compressed_padded_size(1000, p) + compressed_padded_size(10, p)) / 8;
      const uint64_t signs = g.comms().stats("alltoall").sent_bytes + g.comms().stats("allgather").sent_bytes;
      // Two sign messages of (p−1)/p of the bits each, two scale gathers of 2 floats from p−1 ranks.
      CHECK(signs * p == 2 * (p - 1) * sign_bytes + 2 * p * (p - 1) * 2 * 4);
      CHECK(g.comms().stats("allreduce").count == 0);
    });
  }
}
