// Fuzz target: --include/--exclude specs, --num_nodes and --num_gpus against a hostfile.
// Input: byte 0 picks num_nodes (-1..4), byte 1 num_gpus (-1..8), then the include spec up to the
// first '\n', the exclude spec up to the second, and the hostfile text after it. The selection
// either throws InputError or keeps pool order, picks existing ascending slots, and has a slot.
#include <cstdint>
#include <string>
#include <string_view>

#include "errors.h"
#include "fuzz_check.h"
#include "hostfile.h"
#include "selection.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  dsrun::SelectionRequest request;
  request.num_nodes = data[0] % 6 - 1;
  request.num_gpus = data[1] % 10 - 1;
  std::string_view rest(reinterpret_cast<const char*>(data) + 2, size - 2);
  auto line = [&rest] {
    const size_t nl = rest.find('\n');
    std::string first(rest.substr(0, nl));
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    return first;
  };
  request.include = line();
  request.exclude = line();
  try {
    const auto pool = dsrun::pool_from_hostfile(dsrun::parse_hostfile(rest, "fuzz-hostfile"));
    const auto selected = dsrun::select_resources(pool, request);
    FUZZ_CHECK(!selected.empty());
    size_t at = 0, slots = 0;  // position in the pool, slots selected
    for (const auto& node : selected) {
      while (at < pool.size() && pool[at].host != node.host) ++at;
      FUZZ_CHECK(at < pool.size());  // a pool host, in pool order
      FUZZ_CHECK(!node.slots.empty() || pool[at].slots.empty());  // a slots=0 host is kept, with nothing
      slots += node.slots.size();
      for (size_t i = 0; i < node.slots.size(); ++i) {
        FUZZ_CHECK(node.slots[i] >= 0 && node.slots[i] < static_cast<int>(pool[at].slots.size()));
        FUZZ_CHECK(i == 0 || node.slots[i - 1] < node.slots[i]);
      }
      ++at;
    }
    FUZZ_CHECK(slots > 0);
  } catch (const dsrun::InputError&) {
  }
  return 0;
}
