// Fuzz target: the .deepspeed_env parser and --export NAME=VALUE. Either parses (names non-empty,
// without '=') or throws InputError.
#include <cstdint>
#include <string_view>

#include "env_file.h"
#include "errors.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    std::vector<dsrun::EnvVar> merged;
    for (const auto& var : dsrun::parse_env_file(text, "fuzz.deepspeed_env")) {
      FUZZ_CHECK(!var.name.empty() && var.name.find('=') == std::string::npos);
      dsrun::set_env(merged, var.name, var.value);
    }
  } catch (const dsrun::InputError&) {
  }
  try {
    const auto var = dsrun::parse_export(text.substr(0, text.find('\n')));
    FUZZ_CHECK(var.name.find('=') == std::string::npos);
  } catch (const dsrun::InputError&) {
  }
  return 0;
}
