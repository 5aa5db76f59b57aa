// The body shared by the ds_config fuzz targets: load_config_text on the input as a file named
// `name` (its extension picks JSON or YAML), for 4 ranks, then resolved_json of the result, which
// must itself load. Only ConfigError may come out; any other exception escapes and crashes.
#pragma once
#include <cstdint>
#include <string>

#include "config/ds_config.h"
#include "fuzz_check.h"

inline void fuzz_config(const uint8_t* data, size_t size, const std::string& name) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const ds::DsConfig config = ds::load_config_text(text, name, /*world_size=*/4);
    const std::string resolved = ds::resolved_json(config).dump();
    try {
      ds::load_config_text(resolved, "resolved.json", 4);
    } catch (const ds::ConfigError& e) {
      std::fprintf(stderr, "the resolved config does not load: %s\n%s\n", e.what(), resolved.c_str());
      FUZZ_CHECK(!"a resolved config loads");
    }
  } catch (const ds::ConfigError&) {
  }
}
