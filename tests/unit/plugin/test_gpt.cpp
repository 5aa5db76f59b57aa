// The gpt plugin through the loader: layer descriptions (nanoGPT names, shapes, init, the LM head
// tied to embed.wte), the loss at initialisation, a full forward/backward against central
// differences of the loss for every parameter (wte through both its uses), predictions, and
// config errors. MiniEngine feeds f32 inputs only, so this file drives the layers itself (token
// input i32), handling the tied parameter as the engine does: the head gets embed.wte's values,
// and what it adds into its own gradient slot is added to embed.wte's gradient.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/errors.h"
#include "mini_engine.h"
#include "plugin/plugin.h"
#include "plugin/sdk/ops.h"

using ds::test::shape_of;
using ds::test::splitmix64;

namespace {

std::string gpt_path() { return std::string(DS_TEST_PLUGIN_DIR) + "/libds_model_gpt.so"; }

const char* kTiny = R"({"n_layer": 2, "n_head": 2, "n_embd": 8, "seq_len": 5, "vocab_size": 11})";

bool same_shape(const ds_shape& a, std::initializer_list<int64_t> dims) {
  const ds_shape b = shape_of(dims);
  if (a.ndim != b.ndim) return false;
  for (int i = 0; i < a.ndim; ++i)
    if (a.dims[i] != b.dims[i]) return false;
  return true;
}

double normal(uint64_t& rng) {  // Box-Muller
  const double u1 = (static_cast<double>(splitmix64(rng) >> 11) + 1.0) / 9007199254740993.0;
  const double u2 = static_cast<double>(splitmix64(rng) >> 11) / 9007199254740992.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// Owns parameters, gradients, activations and workspaces for a batch of B token sequences of
// length T, and runs every layer forward and backward (on the CPU backend, or the emulated CUDA one).
class Net {
 public:
  // perturb = false: the declared init. perturb = true: every parameter gets noise on top
  // (LayerNorm weights 1 ± 0.1, biases ± 0.1, weights std 0.3), so no term of the gradient is
  // trivially zero or tiny in the gradient check.
  Net(ds::Plugin& p, int64_t B, int64_t T, uint64_t seed, bool perturb) : p_(p), B_(B), T_(T) {
    uint64_t rng = seed;
    const int32_t L = p.num_layers();
    params.resize(static_cast<size_t>(L));
    grads.resize(static_cast<size_t>(L));
    for (int32_t l = 0; l < L; ++l)
      for (const ds::ParamInfo& d : p.layer(l).params) {
        std::vector<float> v(d.tied_to.empty() ? static_cast<size_t>(d.numel()) : 0);
        for (float& x : v) {
          const double n = normal(rng);
          if (!perturb)
            x = d.init == DS_INIT_ZEROS ? 0.0f : d.init == DS_INIT_ONES ? 1.0f : static_cast<float>(d.a + d.b * n);
          else
            x = static_cast<float>(d.init == DS_INIT_ONES ? 1.0 + 0.1 * n : d.init == DS_INIT_ZEROS ? 0.1 * n : 0.3 * n);
        }
        params[static_cast<size_t>(l)].push_back(std::move(v));
        grads[static_cast<size_t>(l)].emplace_back(static_cast<size_t>(d.numel()), 0.0f);
      }
    const int64_t V = p.layer(0).params[0].shape.dims[0];
    tokens.resize(static_cast<size_t>(B * T));
    targets.resize(tokens.size());
    for (auto& t : tokens) t = static_cast<int32_t>(splitmix64(rng) % static_cast<uint64_t>(V));
    for (auto& t : targets) t = static_cast<int32_t>(splitmix64(rng) % static_cast<uint64_t>(V));
  }

  // The storage of parameter j of layer l (the owner's, for a tied parameter).
  std::vector<float>& storage(int32_t l, size_t j) {
    const std::string& tied = p_.layer(l).params[j].tied_to;
    if (tied.empty()) return params[static_cast<size_t>(l)][j];
    for (int32_t o = 0; o < l; ++o)
      for (size_t k = 0; k < p_.layer(o).params.size(); ++k)
        if (p_.layer(o).name + "." + p_.layer(o).params[k].name == tied) return params[static_cast<size_t>(o)][k];
    throw std::logic_error("no owner for " + tied);
  }

  float forward(float* predictions = nullptr) {
    in_t = tensor(tokens.data(), DS_I32, shape_of({B_, T_}));
    tg_t = tensor(targets.data(), DS_I32, shape_of({B_, T_}));
    pred_t = tensor(predictions, DS_F32, p_.predictions_shape(in_t.shape));
    batch = ds_batch{&in_t, &tg_t, 1, 0, predictions ? &pred_t : nullptr};
    const int32_t L = p_.num_layers();
    acts.assign(static_cast<size_t>(L + 1), {});
    shapes.assign(static_cast<size_t>(L + 1), {});
    ws.assign(static_cast<size_t>(L), {});
    shapes[0] = in_t.shape;
    for (int32_t i = 0; i < L; ++i) {
      shapes[i + 1] = p_.output_shape(i, shapes[i]);
      acts[i + 1].assign(static_cast<size_t>(ds::shape_numel(shapes[i + 1])), 0.0f);
      ws[i].assign(p_.workspace_bytes(i, shapes[i]) / sizeof(float) + 1, 0.0f);  // float-aligned
      const auto pt = param_tensors(i, false);
      ds_tensor x = input_of(i);
      ds_tensor y = tensor(acts[i + 1].data(), DS_F32, shapes[i + 1]);
      p_.forward(i, pt.data(), x, y, ws[i].data(), batch);
    }
    return acts[static_cast<size_t>(L)][0];
  }

  // Backward with d(total)/d(loss) = 1; gradients accumulate. The head's gradient for its tied wte
  // is added into embed.wte's (and its own slot cleared), as the engine does. head_wte_grad keeps
  // the head's part of the last call.
  void backward() {
    const int32_t L = p_.num_layers();
    std::vector<float> dy{1.0f};
    for (int32_t i = L - 1; i >= 0; --i) {
      std::vector<float> dx(i > 0 ? acts[static_cast<size_t>(i)].size() : 0);
      const auto pt = param_tensors(i, false);
      auto gt = param_tensors(i, true);
      ds_tensor x = input_of(i);
      ds_tensor y = tensor(acts[i + 1].data(), DS_F32, shapes[i + 1]);
      ds_tensor gy = tensor(dy.data(), DS_F32, shapes[i + 1]);
      ds_tensor gx = tensor(dx.data(), DS_F32, shapes[i]);
      p_.backward(i, pt.data(), x, y, gy, i > 0 ? &gx : nullptr, gt.data(), ws[i].data(), batch);
      dy = std::move(dx);
    }
    auto& head = grads.back();
    head_wte_grad = head[2];
    auto& wte = grads[0][0];
    for (size_t k = 0; k < wte.size(); ++k) wte[k] += head[2][k];
    std::fill(head[2].begin(), head[2].end(), 0.0f);
  }

  std::vector<std::vector<std::vector<float>>> params, grads;  // [layer][param][element]; tied: empty param
  std::vector<float> head_wte_grad;
  std::vector<int32_t> tokens, targets;
  std::vector<std::vector<float>> acts;  // acts[i + 1] = output of layer i

 private:
  ds_tensor input_of(int32_t i) {
    return i == 0 ? in_t : tensor(acts[static_cast<size_t>(i)].data(), DS_F32, shapes[static_cast<size_t>(i)]);
  }
  std::vector<ds_tensor> param_tensors(int32_t l, bool grad) {
    std::vector<ds_tensor> out;
    const auto& descs = p_.layer(l).params;
    for (size_t j = 0; j < descs.size(); ++j) {
      float* data = grad ? grads[static_cast<size_t>(l)][j].data() : storage(l, j).data();
      out.push_back(tensor(data, DS_F32, descs[j].shape));
    }
    return out;
  }
  // A tensor on the plugin's backend's device (the emulated CUDA device's memory is host memory).
  ds_tensor tensor(void* data, ds_dtype dtype, const ds_shape& shape) const {
    return ds_tensor{data, dtype, shape, p_.backend().device};
  }
  ds::Plugin& p_;
  int64_t B_, T_;
  ds_tensor in_t{}, tg_t{}, pred_t{};
  ds_batch batch{};
  std::vector<ds_shape> shapes;
  std::vector<std::vector<float>> ws;
};

}  // namespace

TEST_CASE("gpt describes embed h0 h1 head with nanoGPT names and the LM head tied to embed.wte") {
  auto p = ds::Plugin::load(gpt_path(), kTiny);
  CHECK(p->name() == "gpt");
  REQUIRE(p->num_layers() == 4);
  const char* names[] = {"embed", "h0", "h1", "head"};
  for (int i = 0; i < 4; ++i) CHECK(p->layer(i).name == names[i]);

  const auto& e = p->layer(0).params;
  REQUIRE(e.size() == 2);
  CHECK(e[0].name == "wte");
  CHECK(same_shape(e[0].shape, {11, 8}));
  CHECK(e[0].init == DS_INIT_NORMAL);
  CHECK(e[0].b == doctest::Approx(0.02));
  CHECK(e[1].name == "wpe");
  CHECK(same_shape(e[1].shape, {5, 8}));
  CHECK(e[0].tied_to.empty());

  struct Want {
    const char* name;
    std::initializer_list<int64_t> shape;
    ds_init_kind init;
    double std;
  };
  const double proj = 0.02 / std::sqrt(4.0);  // 0.02/√(2·n_layer)
  const Want block[] = {
      {"ln_1.weight", {8}, DS_INIT_ONES, 0},          {"ln_1.bias", {8}, DS_INIT_ZEROS, 0},
      {"attn.c_attn.weight", {24, 8}, DS_INIT_NORMAL, 0.02}, {"attn.c_attn.bias", {24}, DS_INIT_ZEROS, 0},
      {"attn.c_proj.weight", {8, 8}, DS_INIT_NORMAL, proj},  {"attn.c_proj.bias", {8}, DS_INIT_ZEROS, 0},
      {"ln_2.weight", {8}, DS_INIT_ONES, 0},          {"ln_2.bias", {8}, DS_INIT_ZEROS, 0},
      {"mlp.c_fc.weight", {32, 8}, DS_INIT_NORMAL, 0.02},    {"mlp.c_fc.bias", {32}, DS_INIT_ZEROS, 0},
      {"mlp.c_proj.weight", {8, 32}, DS_INIT_NORMAL, proj},  {"mlp.c_proj.bias", {8}, DS_INIT_ZEROS, 0},
  };
  for (int l = 1; l <= 2; ++l) {
    const auto& ps = p->layer(l).params;
    REQUIRE(ps.size() == 12);
    for (size_t j = 0; j < 12; ++j) {
      INFO("layer " << l << " param " << j);
      CHECK(ps[j].name == block[j].name);
      CHECK(same_shape(ps[j].shape, block[j].shape));
      CHECK(ps[j].init == block[j].init);
      if (block[j].init == DS_INIT_NORMAL) {
        CHECK(ps[j].a == 0.0f);
        CHECK(ps[j].b == doctest::Approx(block[j].std));
      }
      CHECK(ps[j].tied_to.empty());
    }
  }
  const auto& h = p->layer(3).params;
  REQUIRE(h.size() == 3);
  CHECK(h[0].name == "ln_f.weight");
  CHECK(h[1].name == "ln_f.bias");
  CHECK(h[2].name == "wte");
  CHECK(same_shape(h[2].shape, {11, 8}));
  CHECK(h[2].tied_to == "embed.wte");
  CHECK(h[0].tied_to.empty());

  // Shapes, data and predictions.
  CHECK(same_shape(p->output_shape(0, shape_of({3, 5})), {3, 5, 8}));
  CHECK(same_shape(p->output_shape(1, shape_of({3, 5, 8})), {3, 5, 8}));
  CHECK(same_shape(p->output_shape(3, shape_of({3, 5, 8})), {1}));
  CHECK(same_shape(p->output_shape(0, shape_of({3, 2})), {3, 2, 8}));  // shorter sequences (generation)
  CHECK_THROWS_AS(p->output_shape(0, shape_of({3, 6})), ds::PluginError);
  CHECK_THROWS_AS(p->output_shape(1, shape_of({3, 5, 9})), ds::PluginError);
  CHECK(same_shape(p->predictions_shape(shape_of({3, 5})), {3, 5, 11}));
  const ds_dataset_info info = p->dataset_info();
  CHECK(info.num_samples == 0);
  CHECK(info.input_dtype == DS_I32);
  CHECK(same_shape(info.input_shape, {5}));
  CHECK(info.target_dtype == DS_I32);
  CHECK(same_shape(info.target_shape, {5}));
  std::vector<int32_t> x(5), y(5);
  ds_tensor xt{x.data(), DS_I32, shape_of({1, 5}), DS_DEVICE_CPU}, yt{y.data(), DS_I32, shape_of({1, 5}), DS_DEVICE_CPU};
  const int64_t idx = 0;
  CHECK_THROWS_AS(p->get_batch(&idx, 1, xt, yt), ds::PluginError);  // no sample 0 (num_samples 0)
  xt.shape = shape_of({0, 5});
  yt.shape = shape_of({0, 5});
  try {
    p->get_batch(nullptr, 0, xt, yt);  // past the SDK's index checks: the model's own get_batch
    FAIL("no error");
  } catch (const ds::PluginError& err) {
    CHECK(std::string(err.what()).find("the gpt model has no data of its own") != std::string::npos);
  }
}

TEST_CASE("gpt default config: parameter count and the loss at initialisation is about ln(vocab)") {
  auto p = ds::Plugin::load(gpt_path(), "{}");
  REQUIRE(p->num_layers() == 6);
  CHECK(p->layer(5).name == "head");
  int64_t total = 0;
  for (const auto& l : p->layers())
    for (const auto& prm : l.params)
      if (prm.tied_to.empty()) total += prm.numel();
  // wte 256·128 + wpe 64·128 + 4 blocks · (12·128² + 13·128) + ln_f 2·128
  CHECK(total == 256 * 128 + 64 * 128 + 4 * (12 * 128 * 128 + 13 * 128) + 2 * 128);
  Net net(*p, 2, 64, 17, false);
  const float loss = net.forward();
  std::printf("  gpt default config: %lld parameters, loss at init %.4f (ln 256 = %.4f)\n",
              static_cast<long long>(total), loss, std::log(256.0));
  CHECK(std::fabs(loss - std::log(256.0)) < 0.1);
  // The tiny config, too.
  auto q = ds::Plugin::load(gpt_path(), kTiny);
  Net tiny(*q, 3, 5, 5, false);
  CHECK(std::fabs(tiny.forward() - std::log(11.0)) < 0.1);
}

TEST_CASE("gpt forward/backward matches central differences of the loss for every parameter") {
  auto p = ds::Plugin::load(gpt_path(), kTiny);
  Net net(*p, 3, 5, 2024, true);
  const float loss = net.forward();
  REQUIRE(std::isfinite(loss));
  net.backward();
  // Both uses of wte contribute: the head's part and the embedding's own part are each non-zero.
  double head_part = 0, embed_part = 0;
  for (size_t k = 0; k < net.head_wte_grad.size(); ++k) {
    head_part += std::fabs(net.head_wte_grad[k]);
    embed_part += std::fabs(net.grads[0][0][k] - net.head_wte_grad[k]);
  }
  CHECK(head_part > 1e-3);
  CHECK(embed_part > 1e-3);

  // Step, stencil and tolerance. The loss is a mean over 15 positions computed in fp32: each
  // evaluation carries rounding noise of ~1e-7 relative (~3e-7 absolute at a loss of ~2.5), so a
  // difference quotient with step h has noise ~3e-7/h, and h must not be small. A plain central
  // difference with h = 1e-2 is then limited by its truncation error h²·|f‴|/6: with parameters
  // of size ~0.3 it measured up to ~1.2% relative (worst 0.94 of a 1e-4 + 1e-2·|fd| bound), too
  // close to call. Richardson extrapolation of the central differences at h and 2h,
  // (4·D(h) − D(2h))/3, cancels the h² term (error O(h⁴)) at the same noise level (~5e-5
  // absolute), so h = 1e-2 with the bound 1e-4 absolute + 2e-3 relative has a margin on both
  // sides, while a real bug (a missing term, a wrong transpose, a factor) is an O(1) relative
  // error. Gradients here are ~1e-4..1e-1.
  const float h = 1e-2f;
  const double atol = 1e-4, rtol = 2e-3;
  double worst_ratio = 0, worst_abs = 0, worst_rel = 0, worst_rel_plain = 0;
  int checked = 0, failed = 0;
  for (int32_t l = 0; l < p->num_layers(); ++l) {
    for (size_t j = 0; j < p->layer(l).params.size(); ++j) {
      if (!p->layer(l).params[j].tied_to.empty()) continue;  // checked through its owner, embed.wte
      auto& w = net.params[static_cast<size_t>(l)][j];
      const auto& g = net.grads[static_cast<size_t>(l)][j];
      for (size_t k = 0; k < w.size(); ++k) {
        const float w0 = w[k];
        auto central = [&](float step) {  // (f(w0 + step) − f(w0 − step)) / (actual step taken)
          w[k] = w0 + step;
          const double fp = net.forward();
          const float up = w[k];
          w[k] = w0 - step;
          const double fm = net.forward();
          const float dn = w[k];
          w[k] = w0;
          return (fp - fm) / (static_cast<double>(up) - dn);
        };
        const double d1 = central(h), d2 = central(2 * h);
        const double fd = (4 * d1 - d2) / 3;
        const double an = g[k];
        const double err = std::fabs(fd - an);
        const double bound = atol + rtol * std::fabs(fd);
        if (err > bound) {
          ++failed;
          INFO(p->layer(l).name << "." << p->layer(l).params[j].name << "[" << k << "]: analytic " << an
                                << ", numeric " << fd);
          CHECK(err <= bound);
        }
        worst_ratio = std::max(worst_ratio, err / bound);
        worst_abs = std::max(worst_abs, err);
        if (std::fabs(fd) > 1e-2) {
          worst_rel = std::max(worst_rel, err / std::fabs(fd));
          worst_rel_plain = std::max(worst_rel_plain, std::fabs(d1 - an) / std::fabs(fd));
        }
        ++checked;
      }
    }
  }
  std::printf(
      "  gpt gradient check: %d parameters, worst |err| %.2e, worst rel err (|fd|>1e-2) %.2e (plain central "
      "difference: %.2e), worst %.2f of bound\n",
      checked, worst_abs, worst_rel, worst_rel_plain, worst_ratio);
  CHECK(checked == 11 * 8 + 5 * 8 + 2 * (12 * 8 * 8 + 13 * 8) + 2 * 8);
  CHECK(failed == 0);
}

TEST_CASE("gpt writes the logits as predictions and they give back the loss") {
  auto p = ds::Plugin::load(gpt_path(), kTiny);
  Net net(*p, 3, 5, 77, true);
  const float plain = net.forward();
  std::vector<float> logits(3 * 5 * 11, NAN);
  const float loss = net.forward(logits.data());
  CHECK(loss == plain);
  double total = 0;
  for (size_t r = 0; r < 15; ++r) {
    const float* z = &logits[r * 11];
    double m = -INFINITY;
    for (int c = 0; c < 11; ++c) {
      REQUIRE(std::isfinite(z[c]));
      m = std::max(m, static_cast<double>(z[c]));
    }
    double s = 0;
    for (int c = 0; c < 11; ++c) s += std::exp(z[c] - m);
    total += -(z[net.targets[r]] - m - std::log(s));
  }
  CHECK(total / 15 == doctest::Approx(loss).epsilon(1e-5));
}

TEST_CASE("gpt config errors are ConfigErrors naming the key") {
  auto config_error_of = [](const std::string& json) -> std::string {
    try {
      ds::Plugin::load(gpt_path(), json);
    } catch (const ds::ConfigError& e) {  // dsworker: exit 2
      return e.what();
    } catch (const std::exception& e) {
      return std::string("not a ConfigError: ") + e.what();
    }
    return "(no error)";
  };
  const std::string where = "plugin " + gpt_path() + ": ";
  CHECK(config_error_of(R"({"n_embd": 10, "n_head": 4})") ==
        where + "model.n_embd: 10 is not a multiple of model.n_head 4");
  CHECK(config_error_of(R"({"n_layer": 0})") == where + "model.n_layer: 0 is not >= 1");
  CHECK(config_error_of(R"({"n_embed": 64})").rfind(where + "model.n_embed: unknown key (did you mean 'n_embd'?)", 0) == 0);
  CHECK(config_error_of(R"({"init_std": -1})").rfind(where + "model.init_std: ", 0) == 0);
  CHECK(config_error_of(R"({"vocab_size": 4294967296})").rfind(where + "model.vocab_size: ", 0) == 0);
}

TEST_CASE("gpt split for tensor parallelism declares its shares and how they were cut; mlp cannot be split") {
  const char* config = R"({"n_layer": 1, "n_head": 4, "n_embd": 16, "seq_len": 8, "vocab_size": 32})";
  auto split = ds::Plugin::load(gpt_path(), config, nullptr, ds::ParallelRank{1, 2});
  CHECK(split->tensor_parallel().size == 2);
  const ds::LayerInfo& h0 = split->layer(1);
  auto param = [&](const std::string& name) {
    return *std::find_if(h0.params.begin(), h0.params.end(), [&](const ds::ParamInfo& p) { return p.name == name; });
  };
  CHECK(ds::shape_str(param("attn.c_attn.weight").shape) == "[24, 16]");  // q, k, v of 2 of the 4 heads
  CHECK(param("attn.c_attn.weight").shard.dim == 0);
  CHECK(param("attn.c_attn.weight").shard.blocks == 3);
  CHECK(ds::shape_str(param("attn.c_proj.weight").shape) == "[16, 8]");
  CHECK(param("attn.c_proj.weight").shard.dim == 1);
  CHECK(ds::shape_str(param("mlp.c_fc.bias").shape) == "[32]");
  CHECK(param("mlp.c_fc.bias").shard.dim == 0);
  CHECK(param("mlp.c_proj.bias").shard.dim == -1);  // replicated, added after the sum
  CHECK(param("ln_1.weight").shard.dim == -1);
  CHECK(split->layer(0).params[0].shard.dim == 0);  // the vocabulary split too: rows [16, 32) of wte here
  CHECK(ds::shape_str(split->layer(0).params[0].shape) == "[16, 16]");
  CHECK(ds::shape_str(split->layers().back().params[2].shape) == "[16, 16]");  // the tied head's share
  CHECK(split->layer(0).params[1].shard.dim == -1);  // wpe stays whole
  auto whole = ds::Plugin::load(gpt_path(), R"({"n_layer": 1, "n_head": 4, "n_embd": 16, "vocab_size": 33})", nullptr,
                                ds::ParallelRank{1, 2});
  CHECK(whole->layer(0).params[0].shard.dim == -1);  // 33 classes do not split in 2: the embedding stays whole
  const std::string where = "plugin " + gpt_path() + ": ";
  CHECK_THROWS_WITH_AS(ds::Plugin::load(gpt_path(), config, nullptr, ds::ParallelRank{0, 3}),
                       (where + "model.n_head: 4 heads do not split over 3 tensor-parallel ranks "
                                "(tensor_parallel.autotp_size)").c_str(),
                       ds::ConfigError);
  const std::string mlp = std::string(DS_TEST_PLUGIN_DIR) + "/libds_model_mlp.so";
  CHECK_THROWS_WITH_AS(ds::Plugin::load(mlp, "{}", nullptr, ds::ParallelRank{0, 2}),
                       ("plugin " + mlp + ": the mlp model cannot be split for tensor parallelism "
                                          "(tensor_parallel.autotp_size 2)").c_str(),
                       ds::ConfigError);
}

TEST_CASE("gpt under sequence parallelism: each rank takes its chunk of positions; what cannot split is refused") {
  const std::string config = R"({"n_layer": 1, "n_head": 4, "n_embd": 16, "seq_len": 8, "vocab_size": 32})";
  auto split = ds::Plugin::load(gpt_path(), config, nullptr, {}, ds::ParallelRank{1, 2});
  CHECK(split->sequence_parallel().size == 2);
  CHECK(ds::shape_str(split->layer(1).params[2].shape) == "[48, 16]");  // parameters stay whole
  CHECK(ds::shape_str(split->output_shape(0, ds_shape{2, {3, 4}})) == "[3, 4, 16]");
  CHECK_THROWS_WITH_AS(split->output_shape(0, ds_shape{2, {3, 8}}),
                       ::doctest::Contains("with 1 <= T <= seq_len / sequence-parallel ranks 4"), ds::PluginError);
  const std::string where = "plugin " + gpt_path() + ": ";
  CHECK_THROWS_WITH_AS(ds::Plugin::load(gpt_path(), config, nullptr, ds::ParallelRank{0, 2}, ds::ParallelRank{0, 4}),
                       (where + "model.n_head: 4 heads do not split over 2 tensor-parallel x 4 sequence-parallel ranks "
                                "(sequence_parallel_size)").c_str(),
                       ds::ConfigError);
  CHECK_THROWS_WITH_AS(
      ds::Plugin::load(gpt_path(), R"({"n_head": 4, "n_embd": 16, "seq_len": 6})", nullptr, {}, ds::ParallelRank{0, 4}),
      (where + "model.seq_len: 6 positions do not split over 4 sequence-parallel ranks (sequence_parallel_size)").c_str(),
      ds::ConfigError);
  const std::string mlp = std::string(DS_TEST_PLUGIN_DIR) + "/libds_model_mlp.so";
  CHECK_THROWS_WITH_AS(ds::Plugin::load(mlp, "{}", nullptr, {}, ds::ParallelRank{0, 2}),
                       ("plugin " + mlp + ": the mlp model cannot split its sequences for sequence parallelism "
                                          "(sequence_parallel_size 2)").c_str(),
                       ds::ConfigError);
}

TEST_CASE("gpt on the CUDA backend (emulated) gives the CPU backend's loss, gradients and logits") {
  // The same plugin, written once against the backend's ops: on the emulated CUDA backend every op
  // is kernels/cuda's kernel on the SIMT emulator (GEMMs on the CPU reference), tensors in "device"
  // memory. Odd sizes: T = 13 of seq_len 16, heads of 6, a vocabulary of 37.
  const char* config = R"({"n_layer": 2, "n_head": 4, "n_embd": 24, "seq_len": 16, "vocab_size": 37})";
  ds::backend::Cuda cuda(0);
  auto on_cpu = ds::Plugin::load(gpt_path(), config);
  auto on_cuda = ds::Plugin::load(gpt_path(), config, cuda.table());
  CHECK(std::string(on_cuda->backend().name) == "cuda");
  Net a(*on_cpu, 3, 13, 7, true), b(*on_cuda, 3, 13, 7, true);
  std::vector<float> logits_a(3 * 13 * 37), logits_b(logits_a.size());
  const float loss_a = a.forward(logits_a.data()), loss_b = b.forward(logits_b.data());
  CHECK(loss_b == doctest::Approx(loss_a).epsilon(1e-5));
  for (size_t i = 0; i < logits_a.size(); ++i) REQUIRE(std::fabs(logits_a[i] - logits_b[i]) <= 1e-4f * (1 + std::fabs(logits_a[i])));
  a.backward();
  b.backward();
  for (size_t l = 0; l < a.grads.size(); ++l)
    for (size_t j = 0; j < a.grads[l].size(); ++j) {
      const auto& ga = a.grads[l][j];
      const auto& gb = b.grads[l][j];
      float scale = 0;
      for (float g : ga) scale = std::max(scale, std::fabs(g));
      double worst = 0;
      for (size_t k = 0; k < ga.size(); ++k) worst = std::max(worst, static_cast<double>(std::fabs(ga[k] - gb[k])));
      INFO(on_cpu->layer(static_cast<int32_t>(l)).name << "." << on_cpu->layer(static_cast<int32_t>(l)).params[j].name);
      CHECK(worst <= 1e-5 * (1.0 + scale));
    }
}

TEST_CASE("the vocabulary-parallel ops on the CUDA backend (emulated) give the CPU backend's results") {
  // Through the tables gpt's Embed and Head call (the same argument order on both), in "device" memory
  // (host memory on the emulated device): one shard, classes [6, 12) of a vocabulary of 18.
  ds::backend::Cuda cuda(0);
  const ds_backend* tables[] = {ds::backend::cpu(), cuda.table()};
  const int64_t n = 5, C = 3, first = 6, classes = 6, vocab = 18;
  const std::vector<int32_t> ids{0, 7, 11, 6, 17};
  std::vector<float> wte(classes * C), logits(n * classes), dout(n * C);
  for (size_t i = 0; i < wte.size(); ++i) wte[i] = 0.1f * static_cast<float>(i);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = std::cos(static_cast<float>(i));
  std::vector<float> out[2], grad[2], stats[2], loss[2], dlogits[2];
  for (int t = 0; t < 2; ++t) {
    const ds::sdk::Ops ops(tables[t]);
    out[t].assign(n * C, -1.0f);
    grad[t].assign(classes * C, 0.0f);
    stats[t].assign(3 * n, 0.0f);
    loss[t].assign(1, 0.0f);
    dlogits[t].assign(n * classes, 0.0f);
    ops.embedding_rows_forward(ids.data(), wte.data(), out[t].data(), n, C, first, classes, vocab);
    ops.embedding_rows_backward(ids.data(), dout.data(), grad[t].data(), n, C, first, classes, vocab);
    ops.cross_entropy_shard_max(logits.data(), ids.data(), n, classes, first, vocab, stats[t].data());
    ops.cross_entropy_shard_sumexp(logits.data(), n, classes, stats[t].data());
    ops.cross_entropy_shard_loss(stats[t].data(), n, loss[t].data());
    const float dloss = 0.5f;
    ops.cross_entropy_shard_backward(logits.data(), ids.data(), stats[t].data(), &dloss, n, classes, first,
                                     dlogits[t].data());
  }
  CHECK(out[0][0] == 0.0f);  // token 0 is off the shard
  CHECK(out[0][C] == wte[C]);  // token 7 is the shard's row 1
  CHECK(out[1] == out[0]);
  CHECK(grad[1] == grad[0]);
  CHECK(stats[1] == stats[0]);
  CHECK(loss[1] == loss[0]);
  CHECK(std::isfinite(loss[0][0]));
  CHECK(dlogits[1] == dlogits[0]);
}
