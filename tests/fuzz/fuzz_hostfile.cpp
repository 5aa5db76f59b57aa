// Fuzz target: the hostfile parser. Any text either parses into hosts with slots >= 0, unique names
// and lines in file order, or throws InputError; nothing else.
#include <cstdint>
#include <set>
#include <string_view>

#include "errors.h"
#include "fuzz_check.h"
#include "hostfile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto hosts = dsrun::parse_hostfile(text, "fuzz-hostfile");
    FUZZ_CHECK(!hosts.empty());
    std::set<std::string> names;
    int line = 0;
    for (const auto& h : hosts) {
      FUZZ_CHECK(h.slots >= 0 && !h.host.empty() && h.line > line);
      FUZZ_CHECK(names.insert(h.host).second);
      line = h.line;
    }
  } catch (const dsrun::InputError&) {
  }
  return 0;
}
