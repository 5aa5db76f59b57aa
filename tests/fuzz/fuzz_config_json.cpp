// Fuzz target: ds_config.json text (comments allowed) through parsing, validation and resolution.
#include "fuzz_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz_config(data, size, "fuzz.json");
  return 0;
}
