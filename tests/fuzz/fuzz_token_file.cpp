// Fuzz target: the token-file reader (runtime/data/token_file.h). Byte 0: when odd, the target
// writes the magic and version into the header of the rest, so inputs get to the count, size and
// vocabulary checks. Either the file reads (N tokens, all below the vocabulary when it is known)
// or std::runtime_error names it.
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "data/token_file.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) && bytes.size() >= 8) {
    std::memcpy(bytes.data(), &ds::kTokenFileMagic, 4);
    std::memcpy(bytes.data() + 4, &ds::kTokenFileVersion, 4);
  }
  try {
    const ds::TokenFile file = ds::parse_token_file(bytes, "fuzz.bin");
    FUZZ_CHECK(!file.tokens.empty() && bytes.size() == ds::kTokenFileHeaderBytes + 2 * file.tokens.size());
    FUZZ_CHECK(file.vocab >= 0 && file.vocab <= ds::kMaxVocab);
    for (uint16_t t : file.tokens) FUZZ_CHECK(file.vocab == 0 || t < file.vocab);
  } catch (const std::runtime_error& e) {
    FUZZ_CHECK(std::string(e.what()).rfind("fuzz.bin: ", 0) == 0);
  }
  return 0;
}
