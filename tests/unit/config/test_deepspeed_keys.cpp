// Every key DeepSpeed reads (fixtures/deepspeed_keys.jsonl, taken from DeepSpeed's config code) is
// known to dsworker: accepted, accepted with a warning, or refused by name - never "unknown key",
// which is for typos and keys DeepSpeed does not have.
#include <fstream>
#include <string>

#include <doctest/doctest.h>

#include "config_test_util.h"

namespace {

// Errors and warnings of the config, one per line ("" when it parses without either).
std::string problems(const nlohmann::json& root) {
  std::string out;
  try {
    for (const auto& w : ds::parse_config(root, "ds_config.json", 1).warnings) out += w + "\n";
  } catch (const ds::ConfigErrors& e) {
    for (const auto& line : e.errors) out += line + "\n";
    for (const auto& line : e.warnings) out += line + "\n";
  }
  return out;
}

}  // namespace

TEST_CASE("deepspeed keys: every key DeepSpeed reads is known") {
  std::ifstream in(DS_CONFIG_FIXTURES "/deepspeed_keys.jsonl");
  REQUIRE(in);
  int fragments = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    nlohmann::json root = {{"train_batch_size", 8}, {"optimizer", {{"type", "Adam"}}}};
    root.merge_patch(nlohmann::json::parse(line));
    const std::string found = problems(root);
    CAPTURE(line);
    CAPTURE(found);
    CHECK(found.find("unknown key") == std::string::npos);
    ++fragments;
  }
  CHECK(fragments > 60);
}

TEST_CASE("deepspeed keys: a key DeepSpeed does not have is still unknown") {
  nlohmann::json root = {{"train_batch_size", 8}, {"zero_optimization", {{"stage", 2}, {"grad_hooks", true}}}};
  CHECK(problems(root) == "ds_config.json: zero_optimization.grad_hooks: unknown key\n");
}
