// Fuzz target: ds_config YAML text through parsing, validation and resolution.
#include "fuzz_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz_config(data, size, "fuzz.yaml");
  return 0;
}
