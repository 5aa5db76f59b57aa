// The mlp plugin through the loader: layer descriptions and shapes, dataset determinism and
// labels, a full forward/backward against central differences of the loss, fault injection,
// errors raised inside the plugin, and a short SGD run showing the labels are learnable.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "backend/backend.h"
#include "core/errors.h"
#include "mini_engine.h"
#include "plugin/plugin.h"

using ds::test::MiniEngine;
using ds::test::mlp_path;
using ds::test::shape_of;

namespace {

bool same_shape(const ds_shape& a, std::initializer_list<int64_t> dims) {
  const ds_shape b = shape_of(dims);
  if (a.ndim != b.ndim) return false;
  for (int i = 0; i < a.ndim; ++i)
    if (a.dims[i] != b.dims[i]) return false;
  return true;
}

std::vector<int64_t> range(int64_t from, int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), from);
  return v;
}

}  // namespace

TEST_CASE("mlp describes fc1 relu fc2 loss with PyTorch-style init") {
  auto p = ds::Plugin::load(mlp_path(), "{}");
  REQUIRE(p->num_layers() == 4);
  const char* names[] = {"fc1", "relu", "fc2", "loss"};
  for (int i = 0; i < 4; ++i) CHECK(p->layer(i).name == names[i]);
  const auto& fc1 = p->layer(0).params;
  REQUIRE(fc1.size() == 2);
  CHECK(fc1[0].name == "weight");
  CHECK(same_shape(fc1[0].shape, {128, 32}));
  CHECK(fc1[0].init == DS_INIT_UNIFORM);
  CHECK(fc1[0].a == doctest::Approx(-1.0 / std::sqrt(32.0)));
  CHECK(fc1[0].b == doctest::Approx(1.0 / std::sqrt(32.0)));
  CHECK(fc1[1].name == "bias");
  CHECK(same_shape(fc1[1].shape, {128}));
  CHECK(fc1[1].b == doctest::Approx(1.0 / std::sqrt(32.0)));
  const auto& fc2 = p->layer(2).params;
  CHECK(same_shape(fc2[0].shape, {10, 128}));
  CHECK(fc2[0].b == doctest::Approx(1.0 / std::sqrt(128.0)));
  CHECK(p->layer(1).params.empty());
  CHECK(p->layer(3).params.empty());
}

TEST_CASE("mlp shapes and workspace") {
  auto p = ds::Plugin::load(mlp_path(), "{}");
  CHECK(same_shape(p->output_shape(0, shape_of({7, 32})), {7, 128}));
  CHECK(same_shape(p->output_shape(1, shape_of({7, 128})), {7, 128}));
  CHECK(same_shape(p->output_shape(2, shape_of({7, 128})), {7, 10}));
  CHECK(same_shape(p->output_shape(3, shape_of({7, 10})), {1}));
  CHECK(p->workspace_bytes(0, shape_of({7, 32})) == 0);
  CHECK(p->workspace_bytes(3, shape_of({7, 10})) == 7 * 2 * sizeof(float));
  try {
    p->output_shape(0, shape_of({7, 31}));
    FAIL("no error");
  } catch (const ds::PluginError& e) {
    CHECK(std::string(e.what()) ==
          "plugin mlp: layer fc1: output_shape: input shape [7, 31], expected [n, 32] (in_features 32)");
  }
}

TEST_CASE("mlp with layers = 3 and a big configuration") {
  auto p = ds::Plugin::load(mlp_path(), R"({"layers": 3, "hidden": 16, "in_features": 5, "classes": 3})");
  std::vector<std::string> names;
  for (const auto& l : p->layers()) names.push_back(l.name);
  CHECK(names == std::vector<std::string>{"fc1", "relu1", "fc2", "relu2", "fc3", "relu3", "fc4", "loss"});
  CHECK(same_shape(p->layer(2).params[0].shape, {16, 16}));
  CHECK(same_shape(p->layer(6).params[0].shape, {3, 16}));
  // The benchmark size: descriptions only, nothing is allocated by the plugin.
  auto big = ds::Plugin::load(mlp_path(), R"({"hidden": 4096, "layers": 4})");
  int64_t total = 0;
  for (const auto& l : big->layers())
    for (const auto& prm : l.params) total += prm.numel();
  std::printf("  mlp {hidden 4096, layers 4}: %lld parameters\n", static_cast<long long>(total));
  CHECK(total > 45'000'000);
  CHECK(total < 55'000'000);
}

TEST_CASE("mlp dataset is deterministic and in range and seed-dependent") {
  auto p = ds::Plugin::load(mlp_path(), "{}");
  const ds_dataset_info info = p->dataset_info();
  CHECK(info.num_samples == 1000);
  CHECK(info.input_dtype == DS_F32);
  CHECK(same_shape(info.input_shape, {32}));
  CHECK(info.target_dtype == DS_I32);
  CHECK(info.target_shape.ndim == 0);  // one scalar label per sample: targets are [n]

  auto fetch = [](ds::Plugin& pl, const std::vector<int64_t>& idx, std::vector<float>& x, std::vector<int32_t>& y) {
    const int64_t n = static_cast<int64_t>(idx.size());
    x.assign(static_cast<size_t>(n * 32), 0.0f);
    y.assign(static_cast<size_t>(n), -1);
    ds_tensor xt{x.data(), DS_F32, shape_of({n, 32}), DS_DEVICE_CPU}, yt{y.data(), DS_I32, shape_of({n}), DS_DEVICE_CPU};
    pl.get_batch(idx.data(), n, xt, yt);
  };
  std::vector<float> x1, x2, x3;
  std::vector<int32_t> y1, y2, y3;
  const auto all = range(0, 1000);
  fetch(*p, all, x1, y1);
  auto q = ds::Plugin::load(mlp_path(), "{}");  // a second model (another rank) sees the same data
  fetch(*q, all, x2, y2);
  CHECK(std::memcmp(x1.data(), x2.data(), x1.size() * sizeof(float)) == 0);
  CHECK(y1 == y2);
  // Random access: any subset in any order gives the same samples.
  const std::vector<int64_t> some{999, 3, 500, 3};
  fetch(*p, some, x3, y3);
  for (size_t r = 0; r < some.size(); ++r) {
    CHECK(std::memcmp(&x3[r * 32], &x1[static_cast<size_t>(some[r]) * 32], 32 * sizeof(float)) == 0);
    CHECK(y3[r] == y1[static_cast<size_t>(some[r])]);
  }
  int counts[10] = {};
  for (int32_t y : y1) {
    REQUIRE(y >= 0);
    REQUIRE(y < 10);
    ++counts[y];
  }
  for (float v : x1) {
    CHECK(v >= -1.0f);
    CHECK(v < 1.0f);
  }
  std::printf("  mlp label counts:");
  for (int c : counts) std::printf(" %d", c);
  std::printf("\n");
  for (int c : counts) CHECK(c >= 30);  // every class present in earnest
  auto other = ds::Plugin::load(mlp_path(), R"({"data_seed": 99})");
  fetch(*other, all, x2, y2);
  CHECK(std::memcmp(x1.data(), x2.data(), x1.size() * sizeof(float)) != 0);
  CHECK(y1 != y2);
  CHECK_THROWS_AS(fetch(*p, {1000}, x3, y3), ds::PluginError);
}

TEST_CASE("mlp forward/backward through the loader matches central differences of the loss") {
  // A small configuration keeps the finite-difference sweep over every parameter cheap.
  auto p = ds::Plugin::load(mlp_path(), R"({"in_features": 6, "hidden": 9, "classes": 4, "layers": 2})");
  MiniEngine e(*p, 7);
  const std::vector<int64_t> idx{0, 5, 17, 42, 99};
  const float loss = e.forward(idx);
  CHECK(std::isfinite(loss));
  CHECK(loss > 0.0f);
  e.backward(1.0f);
  // Input gradient sanity: layer 0 gets no grad_input; all parameter gradients are finite.
  const float h = 1e-2f;
  double worst = 0.0;
  int checked = 0, kinks = 0;
  for (size_t l = 0; l < e.params.size(); ++l) {
    for (size_t j = 0; j < e.params[l].size(); ++j) {
      auto& w = e.params[l][j];
      for (size_t k = 0; k < w.size(); ++k) {
        const float w0 = w[k];
        w[k] = w0 + h;
        const double fp = e.run_forward();
        const float up = w[k];
        w[k] = w0 - h;
        const double fm = e.run_forward();
        const float dn = w[k];
        w[k] = w0;
        const double fd = (fp - fm) / (static_cast<double>(up) - dn);
        const double an = e.grads[l][j][k];
        const double err = std::fabs(fd - an);
        const double bound = 2e-4 + 2e-2 * std::fabs(fd);
        if (err > bound) {
          // A ReLU input within h of 0 makes the loss non-smooth there: re-check with a tiny step.
          w[k] = w0 + 1e-3f;
          const double fp2 = e.run_forward();
          const float up2 = w[k];
          w[k] = w0 - 1e-3f;
          const double fm2 = e.run_forward();
          const float dn2 = w[k];
          w[k] = w0;
          const double fd2 = (fp2 - fm2) / (static_cast<double>(up2) - dn2);
          ++kinks;
          INFO("layer " << p->layer(static_cast<int32_t>(l)).name << " param " << j << " element " << k
                        << ": analytic " << an << ", numeric " << fd << " / " << fd2);
          CHECK(std::fabs(fd2 - an) <= 1e-3 + 5e-2 * std::fabs(fd2));
        }
        worst = std::max(worst, err / bound);
        ++checked;
      }
    }
  }
  e.run_forward();
  std::printf("  mlp gradient check: %d parameters, worst %.2f of bound, %d re-checked near a ReLU kink\n",
              checked, worst, kinks);
  CHECK(kinks <= checked / 20);
}

TEST_CASE("mlp forward/backward is bit-identical run to run") {
  auto p = ds::Plugin::load(mlp_path(), "{}");
  MiniEngine a(*p, 1), b(*p, 1);
  const auto idx = range(100, 32);
  const float la = a.forward(idx), lb = b.forward(idx);
  CHECK(std::memcmp(&la, &lb, sizeof la) == 0);
  a.backward();
  b.backward();
  for (size_t l = 0; l < a.grads.size(); ++l)
    for (size_t j = 0; j < a.grads[l].size(); ++j)
      CHECK(std::memcmp(a.grads[l][j].data(), b.grads[l][j].data(), a.grads[l][j].size() * sizeof(float)) == 0);
}

TEST_CASE("mlp gradients accumulate across micro-batches") {
  auto p = ds::Plugin::load(mlp_path(), R"({"hidden": 16})");
  MiniEngine e(*p, 3);
  const auto idx = range(0, 8);
  e.forward(idx);
  e.backward();
  const auto once = e.grads;
  e.forward(idx);
  e.backward();
  for (size_t l = 0; l < once.size(); ++l)
    for (size_t j = 0; j < once[l].size(); ++j)
      for (size_t k = 0; k < once[l][j].size(); ++k)
        CHECK(e.grads[l][j][k] == doctest::Approx(2.0 * once[l][j][k]).epsilon(1e-5).scale(1e-6));
}

TEST_CASE("mlp injects +inf into fc2's weight gradient at the configured steps") {
  auto p = ds::Plugin::load(mlp_path(), R"({"inject_nonfinite_grad_steps": [2, 5]})");
  MiniEngine e(*p, 5);
  const auto idx = range(0, 4);
  for (int64_t step : {1, 2, 3, 5}) {
    e.zero_grads();
    e.forward(idx, step);
    e.backward();
    const bool inject = step == 2 || step == 5;
    for (size_t l = 0; l < e.grads.size(); ++l)
      for (size_t j = 0; j < e.grads[l].size(); ++j) {
        const bool target = l == 2 && j == 0;  // fc2.weight
        for (float g : e.grads[l][j]) {
          INFO("step " << step << " layer " << l << " param " << j);
          CHECK((g == INFINITY) == (inject && target));
          if (!(inject && target)) CHECK(std::isfinite(g));
        }
      }
  }
}

TEST_CASE("errors inside the plugin come back as PluginError naming the layer") {
  auto p = ds::Plugin::load(mlp_path(), R"({"classes": 3, "hidden": 4})");
  MiniEngine e(*p, 2);
  e.forward(range(0, 3));
  e.target[1] = 7;  // a label out of range
  try {
    e.run_forward();
    FAIL("no error");
  } catch (const ds::PluginError& err) {
    CHECK(std::string(err.what()) == "plugin mlp: layer loss: forward: cross_entropy: label 7 at row 1 is not in [0, 3)");
  }
  // A wrong parameter shape is caught by the SDK before the layer runs.
  std::vector<float> w(5), b(4), x(6), y(8);
  const ds_tensor params[2] = {{w.data(), DS_F32, shape_of({5}), DS_DEVICE_CPU}, {b.data(), DS_F32, shape_of({4}), DS_DEVICE_CPU}};
  ds_tensor xt{x.data(), DS_F32, shape_of({2, 32}), DS_DEVICE_CPU}, yt{y.data(), DS_F32, shape_of({2, 4}), DS_DEVICE_CPU};
  ds_batch batch{};
  try {
    p->forward(0, params, xt, yt, nullptr, batch);
    FAIL("no error");
  } catch (const ds::PluginError& err) {
    CHECK(std::string(err.what()) == "plugin mlp: layer fc1: forward: parameter weight: shape [5], declared [4, 32]");
  }
}

TEST_CASE("mlp labels are learnable: SGD takes the loss well below ln 10") {
  auto p = ds::Plugin::load(mlp_path(), "{}");
  MiniEngine e(*p, 11);
  const float lr = 0.5f;
  float first = 0.0f, last = 0.0f;
  for (int step = 0; step < 300; ++step) {
    const auto idx = range((step * 50) % 1000, 50);
    e.zero_grads();
    const float loss = e.forward(idx, step + 1);
    if (step == 0) first = loss;
    e.backward();
    for (size_t l = 0; l < e.params.size(); ++l)
      for (size_t j = 0; j < e.params[l].size(); ++j)
        for (size_t k = 0; k < e.params[l][j].size(); ++k) e.params[l][j][k] -= lr * e.grads[l][j][k];
  }
  double total = 0;
  for (int b = 0; b < 20; ++b) total += e.forward(range(b * 50, 50));
  last = static_cast<float>(total / 20);
  std::printf("  mlp SGD: loss %.3f -> %.3f (mean over the dataset) after 300 steps\n", first, last);
  CHECK(first > 2.0f);
  CHECK(last < 0.8f);
}

TEST_CASE("mlp on the CUDA backend (emulated) gives the CPU backend's loss and gradients") {
  const char* config = R"({"in_features": 19, "hidden": 33, "classes": 7, "layers": 2})";
  ds::backend::Cuda cuda(0);
  auto on_cpu = ds::Plugin::load(mlp_path(), config);
  auto on_cuda = ds::Plugin::load(mlp_path(), config, cuda.table());
  ds::test::MiniEngine a(*on_cpu, 5), b(*on_cuda, 5);
  const std::vector<int64_t> idx{3, 1, 4, 15, 9, 2, 6};
  CHECK(b.forward(idx) == doctest::Approx(a.forward(idx)).epsilon(1e-5));
  a.backward(0.5f);
  b.backward(0.5f);
  for (size_t l = 0; l < a.grads.size(); ++l)
    for (size_t j = 0; j < a.grads[l].size(); ++j)
      for (size_t k = 0; k < a.grads[l][j].size(); ++k)
        REQUIRE(b.grads[l][j][k] == doctest::Approx(a.grads[l][j][k]).epsilon(1e-4).scale(1e-3));
  // A test-only hook that writes a gradient itself says where it works.
  auto inject = ds::Plugin::load(mlp_path(), R"({"inject_nonfinite_grad_steps": [1]})", cuda.table());
  ds::test::MiniEngine c(*inject, 5);
  c.forward({0, 1});
  CHECK_THROWS_WITH_AS(c.backward(), doctest::Contains("inject_nonfinite_grad_steps works on the CPU backend only"),
                       ds::PluginError);
}
