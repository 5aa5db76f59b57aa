// A NUL byte in a config file, or a YAML file that is not UTF-8, is an error naming where. nlohmann's
// parser takes a NUL for the end of the text, so everything after it was silently ignored (found by the
// config_json fuzz target); likewise a number beyond double.
#include <doctest/doctest.h>

#include <string>

#include "config/ds_config.h"
#include "core/errors.h"

namespace {

std::string error_of(const std::string& text, const std::string& name) {
  try {
    ds::load_config_text(text, name, 1);
  } catch (const ds::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("files: a NUL byte is an error, not the end of the config") {
  const std::string json = std::string("{\"train_batch_size\": 8}\n") + '\0' + "{\"train_batch_size\": 16}";
  CHECK(error_of(json, "ds_config.json") == "ds_config.json:2:1: a NUL byte (is this a text file?)");
  const std::string yaml = std::string("train_batch_size: 8\nfp16:\n  enabled: tr") + '\0' + "ue\n";
  CHECK(error_of(yaml, "ds_config.yaml") == "ds_config.yaml:3:14: a NUL byte (is this a text file?)");
  CHECK(error_of("{\"train_batch_size\": 8}", "ds_config.json") == "(no error)");
}

TEST_CASE("files: a YAML file that is not UTF-8 is an error naming the byte") {
  // Found by the config_yaml fuzz target: the byte reached the model block, and printing the resolved
  // config (--print_config) failed with nlohmann's "invalid UTF-8 byte" instead of a config error.
  const std::string yaml = "train_batch_size: 8\nmodel: {in_features: 32,\xd6hidden: 16}\n";
  CHECK(error_of(yaml, "ds_config.yml") == "ds_config.yml:2:25: byte 0xd6 is not UTF-8");
  CHECK(error_of("train_batch_size: 8  # caf\xc3\xa9\n", "ds_config.yaml") == "(no error)");
}

TEST_CASE("files: a JSON number beyond double is a config error") {
  // Found by the config_json fuzz target: nlohmann's out_of_range escaped load_config (dsworker exit 1).
  CHECK(error_of("{\"train_batch_size\": 1e5003}", "ds_config.json") ==
        "ds_config.json: number overflow parsing '1e5003'");
}

TEST_CASE("files: a YAML string that is not UTF-8 is an error") {
  // 0xf6 never starts UTF-8, though its bit pattern is a 4-byte lead's: the first check let it through
  // (found by the config_yaml fuzz target). Overlong forms and surrogates are refused too.
  CHECK(error_of("train_batch_size: 8\nmodel: {name: a\xf6\x98\x8d\x9e" "b}\n", "ds_config.yaml") ==
        "ds_config.yaml:2:16: byte 0xf6 is not UTF-8");
  CHECK(error_of("model: {name: \xc0\xaf}\n", "ds_config.yaml") == "ds_config.yaml:1:15: byte 0xc0 is not UTF-8");
  CHECK(error_of("model: {name: \xed\xa0\x80}\n", "ds_config.yaml") == "ds_config.yaml:1:15: byte 0xed is not UTF-8");
}
