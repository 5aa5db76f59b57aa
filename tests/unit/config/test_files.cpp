// load_config on real files: JSON (comments, duplicate keys, syntax errors with line:column) and
// YAML (same resolved config as the JSON equivalent, errors naming file:line).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <cmath>
#include <limits>

#include <unistd.h>

#include "config/ds_config.h"
#include "core/errors.h"

namespace fs = std::filesystem;

namespace {

// Writes `text` to a fresh file named `name` in a per-process temp directory; returns its path.
std::string write_file(const std::string& name, const std::string& text) {
  fs::path dir = fs::temp_directory_path() / ("ds_config_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path path = dir / name;
  std::ofstream(path) << text;
  return path.string();
}

std::string load_error(const std::string& path, int world_size = 1) {
  try {
    ds::load_config(path, world_size);
  } catch (const ds::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

const char* kJson = R"({
  // comments are allowed, as in DeepSpeed's hjson reader
  "train_batch_size": 32,
  "gradient_accumulation_steps": 2,
  "gradient_clipping": 1.0,
  "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "betas": [0.9, 0.999], "adam_w_mode": false}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 100, "warmup_type": "linear"}},
  "fp16": {"enabled": true, "loss_scale_window": 500},
  "zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8, "offload_optimizer": {"device": "none", "nvme_path": null}},
  "comms_logger": {"enabled": true, "prof_ops": ["all_reduce", "all_gather"]},
  "csv_monitor": {"enabled": true, "output_path": "logs/", "job_name": "run1"},
  "checkpoint": {"dir": "/tmp/ckpt", "save_interval": 50},
  "model": {"name": "mlp", "layers": [784, 128, 10], "dropout": 0.0, "tag": "007"}
})";

const char* kYaml = R"(# the same config in YAML
train_batch_size: 32
gradient_accumulation_steps: 2
gradient_clipping: 1.0
optimizer:
  type: Adam
  params:
    lr: 1e-3
    betas: [0.9, 0.999]
    adam_w_mode: false
scheduler:
  type: WarmupLR
  params: {warmup_num_steps: 100, warmup_type: linear}
fp16:
  enabled: true
  loss_scale_window: 500
zero_optimization:
  stage: 2
  reduce_bucket_size: 5e8
  offload_optimizer:
    device: none
    nvme_path: ~
comms_logger:
  enabled: true
  prof_ops:
    - all_reduce
    - all_gather
csv_monitor: {enabled: true, output_path: logs/, job_name: run1}
checkpoint:
  dir: /tmp/ckpt
  save_interval: 50
model:
  name: mlp
  layers: [784, 128, 10]
  dropout: 0.0
  tag: "007"
)";

}  // namespace

TEST_CASE("files: YAML gives the same resolved config as JSON") {
  for (int ws : {1, 2, 4}) {
    CAPTURE(ws);
    auto from_json = ds::load_config(write_file("ds_config.json", kJson), ws);
    auto from_yaml = ds::load_config(write_file("ds_config.yaml", kYaml), ws);
    CHECK(ds::resolved_json(from_json).dump() == ds::resolved_json(from_yaml).dump());
    CHECK(from_yaml.model["tag"] == "007");  // quoted: stays a string
    CHECK(from_yaml.train_micro_batch_size_per_gpu == 16 / ws);
  }
  // .yml works too.
  CHECK(ds::load_config(write_file("ds_config.yml", kYaml), 1).zero_optimization.stage == 2);
}

TEST_CASE("files: YAML errors name file and line") {
  std::string path = write_file("bad_stage.yaml", "train_batch_size: 8\nzero_optimization:\n  stage: 5\n");
  CHECK(load_error(path) == path + ":3: zero_optimization.stage: 5 is not one of 0, 1, 2, 3");
  path = write_file("typo.yaml", "train_batch_size: 8\noptimizer:\n  type: Adam\n  params:\n    betaz: [0.9, 0.99]\n");
  CHECK(load_error(path) == path + ":5: optimizer.params.betaz: unknown key (did you mean 'betas'?)");
  path = write_file("quoted.yaml", "train_batch_size: \"8\"\n");
  CHECK(load_error(path) == path + ":1: train_batch_size: \"8\" is not an integer");
  // A missing key points at its parent's line.
  path = write_file("missing.yaml", "train_batch_size: 8\nscheduler:\n  type: WarmupDecayLR\n  params:\n    x: 1\n");
  CHECK(load_error(path) == path + ":5: scheduler.params.x: unknown key\n" + path +
                                ":4: scheduler.params.total_num_steps: missing (required by WarmupDecayLR)");
  path = write_file("missing2.yaml", "train_batch_size: 8\nscheduler:\n  type: WarmupDecayLR\n  params: {}\n");
  CHECK(load_error(path) == path + ":4: scheduler.params.total_num_steps: missing (required by WarmupDecayLR)");
  path = write_file("dup.yaml", "train_batch_size: 8\nfp16:\n  enabled: true\n  enabled: false\n");
  CHECK(load_error(path) == path + ":4: fp16.enabled: duplicate key");
  path = write_file("syntax.yaml", "train_batch_size: 8\noptimizer: [1, 2\nfp16: {}\n");
  CHECK(load_error(path).rfind(path + ":3:", 0) == 0);
  path = write_file("list.yaml", "- 1\n- 2\n");
  CHECK(load_error(path) == path + ": the top level must be an object, not array");
}

TEST_CASE("files: JSON errors") {
  std::string path = write_file("dup.json", R"({"train_batch_size": 8, "zero_optimization": {"stage": 1, "stage": 2}})");
  CHECK(load_error(path) == path + ": zero_optimization.stage: duplicate key");
  path = write_file("dup_top.json", R"({"train_batch_size": 8, "train_batch_size": 16})");
  CHECK(load_error(path) == path + ": train_batch_size: duplicate key");
  path = write_file("dup_array.json", R"({"train_batch_size": 8, "model": {"layers": [{"a": 1}, {"b": 1, "b": 2}]}})");
  CHECK(load_error(path) == path + ": model.layers[1].b: duplicate key");
  path = write_file("syntax.json", "{\n  \"train_batch_size\": 8,\n  \"fp16\": {\"enabled\": tru}\n}\n");
  std::string error = load_error(path);
  CHECK(error.rfind(path + ":3:", 0) == 0);
  CHECK(error.find("syntax error") != std::string::npos);
  CHECK(load_error("/nonexistent/ds_config.json") == "/nonexistent/ds_config.json: cannot read: No such file or directory");
}

TEST_CASE("files: YAML scalars follow the YAML 1.2 core schema") {
  auto c = ds::load_config(write_file("scalars.yaml", R"(train_batch_size: 0x10
optimizer: {type: SGD}
model:
  null_tilde: ~
  null_word: null
  yes_is_a_string: yes
  t: True
  octal: 0o17
  exp: 5e8
  inf: -.inf
  str: !!str 12
  empty:
)"),
                           1);
  CHECK(c.train_batch_size == 16);
  CHECK(c.model["null_tilde"].is_null());
  CHECK(c.model["null_word"].is_null());
  CHECK(c.model["yes_is_a_string"] == "yes");
  CHECK(c.model["t"] == true);
  CHECK(c.model["octal"] == 15);
  CHECK(c.model["exp"] == 5e8);
  CHECK(c.model["inf"] == -std::numeric_limits<double>::infinity());
  CHECK(c.model["str"] == "12");
  CHECK(c.model["empty"].is_null());
}

TEST_CASE("files: YAML numbers at the edges: long, out of range, and look-alikes that stay strings") {
  // Hundreds of digits and a million: floats (beyond int64), read without recursion (std::regex overflowed the stack).
  auto c = ds::load_config(write_file("long.yaml", "train_batch_size: 8\noptimizer: {type: SGD}\nmodel:\n  big: " +
                                                       std::string(300, '9') + "\n  long: 1" + std::string(300, '0') +
                                                       "\n  longer: " + std::string(1 << 20, '1') + "e-1048500\n"),
                           1);
  CHECK(c.model["big"].is_number_float());
  CHECK(c.model["long"] == 1e300);
  CHECK(c.model["longer"].is_number_float());
  auto forms = ds::load_config(write_file("forms.yaml", R"(train_batch_size: 8
optimizer: {type: SGD}
model: {a: .5, b: 1., c: +.5e-3, d: 1e, e: 0x, f: 0o8, g: +.inf, h: .NaN, i: -0, j: 1e+3, k: .e1, l: 0xFf}
)"),
                               1);
  CHECK(forms.model["a"] == 0.5);
  CHECK(forms.model["b"] == 1.0);
  CHECK(forms.model["c"] == 0.5e-3);
  CHECK(forms.model["d"] == "1e");
  CHECK(forms.model["e"] == "0x");
  CHECK(forms.model["f"] == "0o8");
  CHECK(forms.model["g"] == std::numeric_limits<double>::infinity());
  CHECK(std::isnan(forms.model["h"].get<double>()));
  CHECK(forms.model["i"] == 0);
  CHECK(forms.model["j"] == 1000.0);
  CHECK(forms.model["k"] == ".e1");
  CHECK(forms.model["l"] == 255);
  // Beyond the range of the type they would have: an error naming the line and key, as in JSON.
  std::string path = write_file("hex.yaml", "train_batch_size: 8\nmodel:\n  h: 0x10000000000000000\n");
  CHECK(load_error(path) == path + ":3: model.h: integer overflow parsing '0x10000000000000000'");
  path = write_file("exp.yaml", "train_batch_size: 8\nmodel:\n  e: 1e999\n");
  CHECK(load_error(path) == path + ":3: model.e: number overflow parsing '1e999'");
}

TEST_CASE("files: YAML aliases cannot expand a small file into billions of values") {
  std::string text = "a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n";
  for (int i = 1; i < 10; ++i) {  // each level holds the previous one 3 times: 10 * 3^9 = 196830 values
    const std::string previous = "*a" + std::to_string(i - 1);
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [" + previous + ", " + previous + ", " + previous + "]\n";
  }
  const std::string path = write_file("laughs.yaml", text);
  CHECK(load_error(path).find("aliases expand to more values than a config can hold") != std::string::npos);
}
