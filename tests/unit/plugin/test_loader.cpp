// The plugin loader: resolution by path and by name, and every load error naming the file.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "backend/backend.h"
#include "core/errors.h"
#include "mini_engine.h"
#include "plugin/plugin.h"

namespace fs = std::filesystem;
using ds::test::fixture;
using ds::test::mlp_path;

namespace {

// The PluginError message of f(), or "" if it did not throw.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ds::PluginError& e) {
    return e.what();
  }
  return "";
}

// Sets DSWORKER_PLUGIN_PATH for one scope.
struct PluginPathEnv {
  explicit PluginPathEnv(const std::string& v) { setenv("DSWORKER_PLUGIN_PATH", v.c_str(), 1); }
  ~PluginPathEnv() { unsetenv("DSWORKER_PLUGIN_PATH"); }
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("load by path") {
  auto p = ds::Plugin::load(mlp_path(), "{}");
  CHECK(p->path() == fs::path(mlp_path()).lexically_normal().string());
  CHECK(p->name() == "mlp");
  CHECK(p->num_layers() == 4);
}

TEST_CASE("load by name searches DSWORKER_PLUGIN_PATH in order") {
  PluginPathEnv env("/nonexistent/a::" + std::string(DS_TEST_PLUGIN_DIR));
  const auto dirs = ds::Plugin::search_dirs();
  REQUIRE(dirs.size() == 4);  // two from the env (the empty entry is skipped), two beside the exe
  CHECK(dirs[0] == "/nonexistent/a");
  CHECK(dirs[1] == DS_TEST_PLUGIN_DIR);
  CHECK(contains(dirs[2], "/plugins"));
  CHECK(contains(dirs[3], "/lib/dsrun/plugins"));
  auto p = ds::Plugin::load("mlp", "");
  CHECK(p->path() == fs::path(mlp_path()).lexically_normal().string());
  CHECK(p->name() == "mlp");
}

TEST_CASE("a missing plugin name lists every place searched") {
  PluginPathEnv env("/nonexistent/a:/nonexistent/b");
  const std::string msg = error_of([] { ds::Plugin::load("nosuch", "{}"); });
  INFO(msg);
  CHECK(contains(msg, "plugin 'nosuch': libds_model_nosuch.so not found in /nonexistent/a, /nonexistent/b, "));
  CHECK(contains(msg, "/lib/dsrun/plugins"));
  CHECK(contains(msg, "DSWORKER_PLUGIN_PATH"));
}

TEST_CASE("a missing path or a bad name") {
  CHECK(error_of([] { ds::Plugin::load("/nonexistent/libx.so", "{}"); }) == "plugin /nonexistent/libx.so: no such file");
  const std::string rel = error_of([] { ds::Plugin::load("libnothere.so", "{}"); });  // .so: a path, from the cwd
  CHECK(rel == "plugin " + (fs::current_path() / "libnothere.so").string() + ": no such file");
  CHECK(contains(error_of([] { ds::Plugin::load("bad name!", "{}"); }), "not a plugin name"));
}

TEST_CASE("a file that is not a shared library: dlopen's error") {
  const fs::path dir = fs::temp_directory_path() / ("ds_plugin_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string file = (dir / "libds_model_garbage.so").string();
  std::ofstream(file) << "not an ELF file\n";
  const std::string msg = error_of([&] { ds::Plugin::load(file, "{}"); });
  fs::remove_all(dir);
  INFO(msg);
  CHECK(contains(msg, "plugin " + file + ": cannot load: "));
  CHECK(contains(msg, "libds_model_garbage.so"));  // dlerror names the file too
}

TEST_CASE("a library without ds_plugin_entry") {
  const std::string file = fixture("libds_model_noentry.so");
  const std::string msg = error_of([&] { ds::Plugin::load(file, "{}"); });
  CHECK(contains(msg, "plugin " + file + ": no 'ds_plugin_entry' symbol"));
}

TEST_CASE("a plugin with another ABI version") {
  const std::string file = fixture("libds_model_badabi.so");
  CHECK(error_of([&] { ds::Plugin::load(file, "{}"); }) ==
        "plugin " + file + ": ABI version 99, this dsworker supports 2 and " + std::to_string(DS_PLUGIN_ABI_VERSION));
  PluginPathEnv env(DS_TEST_FIXTURE_DIR);  // by name, the same
  CHECK(error_of([] { ds::Plugin::load("badabi", "{}"); }) ==
        "plugin " + fixture("libds_model_badabi.so") + ": ABI version 99, this dsworker supports 2 and " + std::to_string(DS_PLUGIN_ABI_VERSION));
}

TEST_CASE("a plugin built for ABI 2 still loads, computes and trains, on the CPU") {
  auto p = ds::Plugin::load(fixture("libds_model_abi2.so"), "{}");
  CHECK(p->abi_version() == 2);
  CHECK(p->name() == "abi2");
  REQUIRE(p->num_layers() == 1);
  CHECK(p->layer(0).params[0].name == "w");
  CHECK(p->predictions_shape(ds::test::shape_of({4, 2})).ndim == 0);
  ds::test::MiniEngine e(*p, 1);
  e.params[0][0] = {0.0f, 0.0f};
  // w = 0: loss = mean t² over samples 0..3 (t = 1, 4, 7, 10) = 166/4; dw = -2·mean(t·x).
  CHECK(e.forward({0, 1, 2, 3}) == doctest::Approx(41.5));
  e.backward();
  CHECK(e.grads[0][0][0] == doctest::Approx(-2.0 * (4 * 1 + 7 * 2 + 10 * 3) / 4.0));
  CHECK(e.grads[0][0][1] == doctest::Approx(-2.0 * 22 / 4.0));
  for (int step = 0; step < 2000; ++step) {  // gradient descent reaches w = (3, 1)
    e.zero_grads();
    e.forward({0, 1, 2, 3, 4, 5, 6, 7});
    e.backward();
    for (int k = 0; k < 2; ++k) e.params[0][0][k] -= 0.05f * e.grads[0][0][k];
  }
  CHECK(e.params[0][0][0] == doctest::Approx(3.0).epsilon(1e-3));
  CHECK(e.params[0][0][1] == doctest::Approx(1.0).epsilon(1e-3));
}

TEST_CASE("an ABI-2 plugin, or a model that runs on the CPU only, is refused on another backend") {
  ds_backend gpu = *ds::backend::cpu();
  gpu.name = "cuda";
  gpu.device = DS_DEVICE_CUDA;
  const std::string file = fixture("libds_model_abi2.so");
  CHECK(error_of([&] { ds::Plugin::load(file, "{}", &gpu); }) ==
        "plugin " + file + ": create failed (unsupported): an ABI-2 plugin runs on the CPU only, not on the cuda backend");
}

TEST_CASE("model-config errors from create() are ConfigErrors naming the key") {
  // dsworker exits 2 for a ConfigError (a bad config), 1 for a PluginError.
  auto config_error_of = [](const std::string& json) -> std::string {
    try {
      ds::Plugin::load(mlp_path(), json);
    } catch (const ds::ConfigError& e) {
      return e.what();
    } catch (const std::exception& e) {
      return std::string("not a ConfigError: ") + e.what();
    }
    return "(no error)";
  };
  const std::string where = "plugin " + mlp_path() + ": ";
  CHECK(config_error_of(R"({"hiden": 64})") ==
        where + "model.hiden: unknown key (did you mean 'hidden'?); known keys: classes, data_seed, hidden, "
                "in_features, inject_nonfinite_grad_steps, layers, num_samples");
  CHECK(config_error_of(R"({"zzz": 1})").rfind(where + "model.zzz: unknown key; known", 0) == 0);
  CHECK(config_error_of(R"({"hidden": "wide"})") == where + "model.hidden: \"wide\" is not an integer");
  CHECK(config_error_of(R"({"hidden": 0})") == where + "model.hidden: 0 is not >= 1");
  CHECK(config_error_of(R"({"data_seed": -1})") == where + "model.data_seed: -1 is not a non-negative integer");
  CHECK(config_error_of(R"({"inject_nonfinite_grad_steps": [3, 0]})") ==
        where + "model.inject_nonfinite_grad_steps: 0 is not a step (integer >= 1)");
  CHECK(config_error_of(R"({"inject_nonfinite_grad_steps": 3})") ==
        where + "model.inject_nonfinite_grad_steps: 3 is not a list");
  CHECK(config_error_of("[1]") == where + "model: config must be a JSON object, got [1]");
}

TEST_CASE("a plugin can be loaded and unloaded and loaded again") {
  for (int i = 0; i < 3; ++i) {
    auto a = ds::Plugin::load(mlp_path(), "{}");
    auto b = ds::Plugin::load(mlp_path(), R"({"hidden": 8})");  // two models from one library
    CHECK(a->layer(0).params[0].shape.dims[0] == 128);
    CHECK(b->layer(0).params[0].shape.dims[0] == 8);
  }
}

TEST_CASE("checked wrappers reject bad layer indices and missing parameters") {
  auto p = ds::Plugin::load(mlp_path(), "{}");
  CHECK(error_of([&] { p->layer(4); }) == "plugin mlp: layer: layer 4 is not in [0, 4)");
  CHECK(error_of([&] { p->output_shape(-1, ds::test::shape_of({2, 32})); }) ==
        "plugin mlp: output_shape: layer -1 is not in [0, 4)");
  ds_tensor x{}, y{};
  ds_batch b{};
  CHECK(error_of([&] { p->forward(0, nullptr, x, y, nullptr, b); }) ==
        "plugin mlp: layer fc1: forward: no parameter tensors, the layer declares 2");
  CHECK(error_of([&] { p->backward(2, nullptr, x, y, y, &x, nullptr, nullptr, b); }) ==
        "plugin mlp: layer fc2: backward: no parameter or gradient tensors, the layer declares 2");
  CHECK(error_of([&] { p->forward(9, nullptr, x, y, nullptr, b); }) == "plugin mlp: forward: layer 9 is not in [0, 4)");
}
