// Helpers for ds_config tests: parse JSON text as "ds_config.json" (adding the required optimizer
// section, {"type": "Adam"}, when the text has none), capture the error message.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "config/ds_config.h"
#include "core/errors.h"

namespace ds::test {

inline DsConfig parse(const std::string& json_text, int world_size = 1) {
  nlohmann::json root = nlohmann::json::parse(json_text);
  if (root.is_object() && !root.contains("optimizer")) root["optimizer"] = {{"type", "Adam"}};
  return parse_config(root, "ds_config.json", world_size);
}

// The ConfigError message parsing `json_text` raises, or "no error".
inline std::string error_of(const std::string& json_text, int world_size = 1) {
  try {
    parse(json_text, world_size);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

// The warnings of a config that parses, one per line.
inline std::string warnings_of(const std::string& json_text, int world_size = 1) {
  std::string out;
  for (const auto& w : parse(json_text, world_size).warnings) out += (out.empty() ? "" : "\n") + w;
  return out;
}

}  // namespace ds::test
