// The plugin SDK on its own: Shape, Config (types, unknown keys, suggestions), and the C table
// that DS_PLUGIN generates, driven directly: exceptions of any kind become DS_ERROR + last_error
// (a bad model block in create(): DS_CONFIG_ERROR), argument checks run before the layer,
// descriptors stay valid.
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "backend/backend.h"
#include "plugin/ds_plugin_sdk.h"

namespace {

using ds::sdk::Shape;

// One layer y = w·x (w has one element) whose forward throws on request.
struct Scale : ds::sdk::Layer {
  Scale() : Layer("scale") { add_param("w", {1}, DS_INIT_ONES); }
  Shape output_shape(const Shape& in) const override { return in; }
  void forward(const ds::sdk::Forward& f) override {
    if (f.batch.step == 13) throw std::runtime_error("step 13 is unlucky");
    if (f.batch.step == 14) throw 42;  // not even a std::exception
    const float w = f.param(0).f32()[0];
    for (int64_t i = 0; i < f.input.numel(); ++i) f.output.f32()[i] = w * f.input.f32()[i];
  }
  void backward(const ds::sdk::Backward& b) override {
    float& gw = b.grad_param(0).f32()[0];
    for (int64_t i = 0; i < b.input.numel(); ++i) gw += b.grad_output.f32()[i] * b.input.f32()[i];
    b.grad_param(1);  // out of range: throws
  }
};

struct Toy : ds::sdk::Model {
  explicit Toy(ds::sdk::Config& cfg) {
    size_ = cfg.get<int64_t>("size", 3);
    (void)cfg.get<bool>("verbose", false);
    (void)cfg.get<std::string>("label", "x");
    add_layer<Scale>();
  }
  ds::sdk::DatasetInfo dataset_info() const override { return {10, DS_F32, {size_}, DS_I32, {}}; }
  void get_batch(std::span<const int64_t> idx, const ds::sdk::Tensor& in, const ds::sdk::Tensor& tg) override {
    for (size_t r = 0; r < idx.size(); ++r) {
      for (int64_t k = 0; k < size_; ++k) in.f32()[r * size_ + k] = static_cast<float>(idx[r]);
      tg.i32()[r] = static_cast<int32_t>(idx[r]);
    }
  }
  int64_t size_;
};

}  // namespace

DS_PLUGIN(Toy, "toy")

namespace {

ds_shape cs(std::initializer_list<int64_t> d) { return Shape(d).c(); }

struct Created {
  const ds_plugin_api* api = ds_plugin_entry();
  void* model = nullptr;
  explicit Created(const char* json = "{}") {
    char err[256];
    REQUIRE(api->create(json, ds::backend::cpu(), &model, err, sizeof err) == DS_OK);
  }
  ~Created() { api->destroy(model); }
};

}  // namespace

TEST_CASE("Shape basics") {
  const Shape s{2, 3};
  CHECK(s.numel() == 6);
  CHECK(s.str() == "[2, 3]");
  CHECK(Shape{}.numel() == 1);
  CHECK(Shape{}.str() == "[]");
  CHECK(Shape{3}.batched(5) == Shape{5, 3});
  CHECK(Shape(s.c()) == s);
  CHECK_THROWS_AS((Shape{1, 2, 3, 4, 5}), std::invalid_argument);
  CHECK_THROWS_AS((Shape{1, 2, 3, 4}.batched(2)), std::invalid_argument);
}

TEST_CASE("Config reads typed values and reports unknown keys with a suggestion") {
  ds::sdk::Config c(R"({"hidden": 64, "lr": 0.5, "name": "m", "flag": true, "steps": [1, 2], "hiden": 1})");
  CHECK(c.get<int>("hidden", 1) == 64);
  CHECK(c.get<double>("lr", 0.0) == 0.5);
  CHECK(c.get<std::string>("name", "") == "m");
  CHECK(c.get<bool>("flag", false));
  CHECK(c.get<std::vector<int>>("steps", {}) == std::vector<int>{1, 2});
  CHECK(c.get<int>("absent", 7) == 7);
  try {
    c.check_unknown_keys();
    FAIL("no error");
  } catch (const ds::sdk::ConfigError& e) {
    CHECK(std::string(e.what()).rfind("model.hiden: unknown key (did you mean 'hidden'?)", 0) == 0);
  }
  CHECK_THROWS_WITH_AS(c.get<int>("name", 0), "model.name: \"m\" is not an integer", ds::sdk::ConfigError);
  CHECK_THROWS_WITH_AS(c.get<int>("lr", 0), "model.lr: 0.5 is not an integer", ds::sdk::ConfigError);
  CHECK_THROWS_WITH_AS(c.get<bool>("hidden", false), "model.hidden: 64 is not a boolean", ds::sdk::ConfigError);
  ds::sdk::Config big(R"({"n": 300, "neg": -3})");
  CHECK_THROWS_WITH_AS(big.get<int8_t>("n", 0), "model.n: 300 is not a smaller integer", ds::sdk::ConfigError);
  CHECK_THROWS_WITH_AS(big.get<uint32_t>("neg", 0), "model.neg: -3 is not a non-negative integer",
                       ds::sdk::ConfigError);
  CHECK(big.get<int64_t>("neg", 0) == -3);
  CHECK_THROWS_WITH_AS(big.get_at_least<int64_t>("neg", 0, 1), "model.neg: -3 is not >= 1", ds::sdk::ConfigError);
}

TEST_CASE("DS_PLUGIN's table: identity and create") {
  const ds_plugin_api* api = ds_plugin_entry();
  CHECK(api->abi_version == DS_PLUGIN_ABI_VERSION);
  CHECK(std::string(api->name) == "toy");
  void* model = reinterpret_cast<void*>(1);
  char err[40];
  const ds_backend* cpu = ds::backend::cpu();
  CHECK(api->create(R"({"sise": 4})", cpu, &model, err, sizeof err) == DS_CONFIG_ERROR);  // a bad model block
  CHECK(model == nullptr);
  CHECK(std::strlen(err) == sizeof err - 1);  // truncated, NUL-terminated
  CHECK(std::string(err).rfind("model.sise: unknown key (did you mean", 0) == 0);
  CHECK(api->create("{", cpu, &model, err, sizeof err) == DS_CONFIG_ERROR);
  CHECK(api->create("{}", cpu, nullptr, err, sizeof err) == DS_ERROR);  // not the config's fault
  CHECK(api->create("{}", nullptr, &model, err, sizeof err) == DS_ERROR);  // no backend
  CHECK(api->create(nullptr, cpu, &model, err, sizeof err) == DS_OK);  // NULL config = {}
  api->destroy(model);
}

TEST_CASE("DS_PLUGIN's table: a model that reads its tensors runs on the CPU only") {
  const ds_plugin_api* api = ds_plugin_entry();
  ds_backend gpu = *ds::backend::cpu();
  gpu.name = "cuda";
  gpu.device = DS_DEVICE_CUDA;
  void* model = reinterpret_cast<void*>(1);
  char err[200];
  CHECK(api->create("{}", &gpu, &model, err, sizeof err) == DS_UNSUPPORTED);
  CHECK(model == nullptr);
  CHECK(std::string(err) == "this model runs on the CPU only (it reads its tensors itself), not on the cuda backend");
}

TEST_CASE("DS_PLUGIN's table: the optional functions by name") {
  const ds_plugin_api* api = ds_plugin_entry();
  CHECK((api->lookup("get_batch") != nullptr));
  CHECK((api->lookup("describe_predictions") != nullptr));
  CHECK((api->lookup("no_such_function") == nullptr));
  CHECK((api->lookup(nullptr) == nullptr));
}

TEST_CASE("DS_PLUGIN's table: descriptors and shapes") {
  Created c(R"({"size": 4, "verbose": true})");
  CHECK(c.api->num_layers(c.model) == 1);
  ds_layer_desc d1{}, d2{};
  REQUIRE(c.api->describe_layer(c.model, 0, &d1) == DS_OK);
  REQUIRE(c.api->describe_layer(c.model, 0, &d2) == DS_OK);
  CHECK(std::string(d1.name) == "scale");
  CHECK(d1.num_params == 1);
  CHECK(std::string(d1.params[0].name) == "w");
  CHECK(d1.params[0].init == DS_INIT_ONES);
  CHECK(d1.params == d2.params);  // stable pointers
  CHECK(c.api->describe_layer(c.model, 1, &d1) == DS_ERROR);
  CHECK(std::string(c.api->last_error(c.model)) == "layer 1 is not in [0, 1)");
  ds_shape in = cs({2, 4}), out{};
  REQUIRE(c.api->output_shape(c.model, 0, &in, &out) == DS_OK);
  CHECK(Shape(out) == Shape{2, 4});
  size_t bytes = 99;
  REQUIRE(c.api->workspace_bytes(c.model, 0, &in, &bytes) == DS_OK);
  CHECK(bytes == 0);
  ds_dataset_info info{};
  REQUIRE(c.api->dataset_info(c.model, &info) == DS_OK);
  CHECK(info.num_samples == 10);
  CHECK(Shape(info.input_shape) == Shape{4});
  CHECK(info.target_shape.ndim == 0);
}

TEST_CASE("DS_PLUGIN's table: no exception crosses and arguments are checked first") {
  Created c;
  float w = 2.0f, gw = 0.0f, x[3] = {1, 2, 3}, y[3] = {}, gy[3] = {1, 1, 1}, gx[3] = {};
  ds_tensor p{&w, DS_F32, cs({1}), DS_DEVICE_CPU}, g{&gw, DS_F32, cs({1}), DS_DEVICE_CPU};
  ds_tensor xt{x, DS_F32, cs({1, 3}), DS_DEVICE_CPU}, yt{y, DS_F32, cs({1, 3}), DS_DEVICE_CPU}, gyt{gy, DS_F32, cs({1, 3}), DS_DEVICE_CPU},
      gxt{gx, DS_F32, cs({1, 3}), DS_DEVICE_CPU};
  ds_batch batch{&xt, nullptr, 1, 0, nullptr};
  REQUIRE(c.api->forward(c.model, 0, &p, &xt, &yt, nullptr, &batch) == DS_OK);
  CHECK(y[2] == 6.0f);

  batch.step = 13;
  CHECK(c.api->forward(c.model, 0, &p, &xt, &yt, nullptr, &batch) == DS_ERROR);
  CHECK(std::string(c.api->last_error(c.model)) == "step 13 is unlucky");
  batch.step = 14;
  CHECK(c.api->forward(c.model, 0, &p, &xt, &yt, nullptr, &batch) == DS_ERROR);
  CHECK(std::string(c.api->last_error(c.model)) == "unknown exception");
  batch.step = 1;
  CHECK(c.api->backward(c.model, 0, &p, &xt, &yt, &gyt, &gxt, &g, nullptr, &batch) == DS_ERROR);
  CHECK(std::string(c.api->last_error(c.model)) == "parameter index 1 of 1");
  CHECK(gw == 6.0f);  // the layer ran up to its bad access

  ds_tensor wrong_out{y, DS_F32, cs({3, 1}), DS_DEVICE_CPU};
  CHECK(c.api->forward(c.model, 0, &p, &xt, &wrong_out, nullptr, &batch) == DS_ERROR);
  CHECK(std::string(c.api->last_error(c.model)) == "output shape [3, 1], expected [1, 3] for input [1, 3]");
  ds_tensor wrong_p{&w, DS_F32, cs({2}), DS_DEVICE_CPU};
  CHECK(c.api->forward(c.model, 0, &wrong_p, &xt, &yt, nullptr, &batch) == DS_ERROR);
  CHECK(std::string(c.api->last_error(c.model)) == "parameter w: shape [2], declared [1]");
  ds_tensor i32_in{x, DS_I32, cs({1, 3}), DS_DEVICE_CPU};
  CHECK(c.api->forward(c.model, 0, &p, &i32_in, &yt, nullptr, &batch) == DS_ERROR);
  CHECK(std::string(c.api->last_error(c.model)) == "input: dtype i32, expected f32");
  CHECK(c.api->forward(c.model, 0, &p, &xt, &yt, nullptr, nullptr) == DS_OK);  // NULL batch: empty views

  CHECK(c.api->forward(nullptr, 0, &p, &xt, &yt, nullptr, &batch) == DS_ERROR);
  CHECK(std::string(c.api->last_error(nullptr)) == "model handle is NULL");
}

TEST_CASE("DS_PLUGIN's table: get_batch checks indices and shapes") {
  Created c;
  const auto get_batch = reinterpret_cast<ds_get_batch_fn>(c.api->lookup("get_batch"));
  float x[6] = {};
  int32_t t[2] = {};
  ds_tensor xt{x, DS_F32, cs({2, 3}), DS_DEVICE_CPU}, tt{t, DS_I32, cs({2}), DS_DEVICE_CPU};
  const int64_t idx[2] = {4, 9};
  REQUIRE(get_batch(c.model, idx, 2, &xt, &tt) == DS_OK);
  CHECK(x[3] == 9.0f);
  CHECK(t[0] == 4);
  const int64_t bad[2] = {4, 10};
  CHECK(get_batch(c.model, bad, 2, &xt, &tt) == DS_ERROR);
  CHECK(std::string(c.api->last_error(c.model)) == "get_batch: sample index 10 is not in [0, 10)");
  ds_tensor short_t{t, DS_I32, cs({1}), DS_DEVICE_CPU};
  CHECK(get_batch(c.model, idx, 2, &xt, &short_t) == DS_ERROR);
  CHECK(std::string(c.api->last_error(c.model)) == "get_batch target shape [1], expected [2]");
}
