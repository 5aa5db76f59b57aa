// Muon (DeepSpeed's MuonWithAuxAdam) on a 2×3 matrix, a bias and a 4×3 matrix: the matrices move by their
// Nesterov momentum orthogonalized (cpu::newton_schulz, tested on its own), scaled by √max(1, rows/cols), after
// decoupled decay; the bias by AdamW at adam_lr/muon_lr times the step's lr. On a partition (two ranks as threads,
// the tall matrix split between them, the matrices dealt out) the ranks' parts are the one-rank step's bits.
#include <doctest/doctest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "cpu/newton_schulz.h"
#include "optim/optimizer.h"
#include "optim_test_util.h"

using ds::test::check_close;

namespace {

const ds::MuonParams kParams{0.001, 0.9, 0.1, 0.9, 0.95, 1e-10};  // adam_lr, momentum, wd, betas, eps
constexpr double kMuonLr = 0.02;

std::unique_ptr<ds::Optimizer> muon(size_t n) {
  return ds::make_optimizer(ds::test::optimizer_config(ds::OptimizerType::Muon, kMuonLr, kParams), n);
}

// The three tensors over the whole 21 elements: A [2, 3], the bias [3], B [4, 3].
const std::vector<ds::TensorRange> kWhole = {{0, 6, 2, 3, 0, 0}, {6, 3}, {9, 12, 4, 3, 9, 0}};

std::vector<float> randoms(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

}  // namespace

TEST_CASE("muon: the matrices by Newton–Schulz of the Nesterov momentum, the rest by AdamW at the Adam group's lr") {
  std::vector<float> p = randoms(21, 1), g = randoms(21, 2);
  const std::vector<float> p0 = p;
  auto opt = muon(21);
  CHECK(!opt->elementwise());
  CHECK(opt->reads_whole_tensors());
  const double lr = 0.01;  // half the Muon group's lr (a schedule's): the Adam group's is then 0.0005
  opt->step(p.data(), g.data(), 21, kWhole, lr, 1);

  // The first step's momentum is (1−β)·g and u = (1−β)·g + β·m: g scaled, which Newton–Schulz's normalization undoes.
  for (auto [begin, rows, cols] : {std::tuple{0, 2, 3}, std::tuple{9, 4, 3}}) {
    CAPTURE(rows);
    std::vector<float> o(static_cast<size_t>(rows * cols));
    ds::cpu::newton_schulz(g.data() + begin, o.data(), rows, cols);
    const double scale = std::sqrt(std::max(1.0, static_cast<double>(rows) / cols));
    for (int i = 0; i < rows * cols; ++i)
      check_close(p[static_cast<size_t>(begin + i)], p0[static_cast<size_t>(begin + i)] * (1.0 - lr * 0.1) - lr * scale * o[static_cast<size_t>(i)], 1e-5);
  }
  std::vector<float> adam_p(p0.begin() + 6, p0.begin() + 9);
  auto adam = ds::make_optimizer(ds::test::optimizer_config(ds::OptimizerType::AdamW, 0.0005,
                                                            ds::AdamParams{0.9, 0.95, 1e-10, 0.1, true, true, false}),
                                 3);
  adam->step(adam_p.data(), g.data() + 6, 3, {}, lr * kParams.adam_lr / kMuonLr, 1);
  CHECK(std::vector<float>(p.begin() + 6, p.begin() + 9) == adam_p);

  const auto state = opt->state();
  REQUIRE(state.size() == 2);
  CHECK(state[0].name == "exp_avg");  // Muon's momentum for the matrices, Adam's m for the bias
  CHECK(state[1].name == "exp_avg_sq");
  check_close(ds::test::values(state[0])[0], 0.1 * g[0]);
  CHECK(ds::test::values(state[1])[0] == 0.0f);  // (a matrix's: unused)
}

// Two ranks as two threads, exchanging through memory: the full buffer is rank 0's 11 elements then rank 1's 10.
// The matrices are dealt B (the costlier) to rank 0 and A to rank 1, so each rank's parts of B and A come from the
// one rank that orthogonalized them.
TEST_CASE("muon: on a partition the ranks deal out the matrices and each gets its parts of the one-rank step, bit for bit") {
  const std::vector<float> p0 = randoms(21, 3);
  const std::vector<std::vector<float>> grads = {randoms(21, 4), randoms(21, 5), randoms(21, 6)};
  // Rank 0 holds [0, 11): A, the bias and B's first 2 elements; rank 1 [11, 21): B's other 10.
  const std::vector<std::vector<ds::TensorRange>> ranges = {
      {{0, 6, 2, 3, 0, 0}, {6, 3}, {9, 2, 4, 3, 9, 0}}, {{0, 0, 2, 3, 0, 0}, {0, 0}, {0, 10, 4, 3, 9, 2}}};
  const size_t begin[] = {0, 11}, size[] = {11, 10};

  std::vector<float> whole = p0;
  auto one = muon(21);
  for (int64_t step = 1; step <= 3; ++step) one->step(whole.data(), grads[step - 1].data(), 21, kWhole, 0.02, step);

  std::barrier sync(2);
  std::vector<float> shared(21);
  std::vector<std::vector<float>> contributions(2);
  std::vector<std::vector<float>> part(2);
  std::vector<size_t> formed(2, 0);  // matrices each rank orthogonalized (nonzero elements it contributed)
  auto rank = [&](int r) {
    part[r].assign(p0.begin() + begin[r], p0.begin() + begin[r] + size[r]);
    auto opt = muon(size[r]);
    ds::PartitionExchange exchange{r, 2, {}, {}};
    exchange.gather = [&, r](const float* mine, std::vector<float>& full) {
      std::copy_n(mine, size[r], shared.begin() + begin[r]);
      sync.arrive_and_wait();
      full = shared;
      sync.arrive_and_wait();
    };
    exchange.scatter = [&, r](const std::vector<float>& full, float* mine) {
      contributions[r] = full;
      formed[r] += static_cast<size_t>(std::count_if(full.begin(), full.end(), [](float x) { return x != 0.0f; }));
      sync.arrive_and_wait();
      for (size_t i = 0; i < size[r]; ++i) mine[i] = contributions[0][begin[r] + i] + contributions[1][begin[r] + i];
      sync.arrive_and_wait();
    };
    opt->set_exchange(exchange);
    for (int64_t step = 1; step <= 3; ++step)
      opt->step(part[r].data(), grads[step - 1].data() + begin[r], size[r], ranges[r], 0.02, step);
  };
  std::thread other(rank, 1);
  rank(0);
  other.join();
  std::vector<float> joined = part[0];
  joined.insert(joined.end(), part[1].begin(), part[1].end());
  CHECK(joined == whole);
  CHECK(joined != p0);
  CHECK(formed[0] == 3 * 12);  // B, each step
  CHECK(formed[1] == 3 * 6);   // A
}

TEST_CASE("muon_matrix: DeepSpeed's rule, 2-D and up without embed or lm_head in the name") {
  const int64_t matrix[] = {8, 4}, conv[] = {8, 3, 3, 3}, vector[] = {8}, empty[] = {0, 4};
  CHECK(ds::muon_matrix("h0.attn.qkv_w", matrix) == std::pair<size_t, size_t>{8, 4});
  CHECK(ds::muon_matrix("conv1.weight", conv) == std::pair<size_t, size_t>{8, 27});
  CHECK(ds::muon_matrix("embed.wte", matrix) == std::pair<size_t, size_t>{0, 0});
  CHECK(ds::muon_matrix("model.Embed_tokens.weight", matrix) == std::pair<size_t, size_t>{0, 0});
  CHECK(ds::muon_matrix("LM_HEAD.weight", matrix) == std::pair<size_t, size_t>{0, 0});
  CHECK(ds::muon_matrix("h0.ln1.weight", vector) == std::pair<size_t, size_t>{0, 0});
  CHECK(ds::muon_matrix("h0.empty", empty) == std::pair<size_t, size_t>{0, 0});
}
