// Fuzz target: Slurm's compressed host lists and per-node counts (cli/allocation.h), as dsrun reads
// them from SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE. The input is "<node list>\n<counts>". A list
// expands to 1..65536 non-empty names or throws InputError; counts give exactly one per node, each
// at least 0, or throw InputError; nothing else.
#include <cstdint>
#include <string_view>

#include "allocation.h"
#include "errors.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const size_t newline = text.find('\n');
  const std::string_view list = text.substr(0, newline);
  try {
    const auto hosts = dsrun::expand_slurm_hostlist(list, "SLURM_JOB_NODELIST");
    FUZZ_CHECK(!hosts.empty() && hosts.size() <= 65536);
    for (const auto& h : hosts) FUZZ_CHECK(!h.empty());
    if (newline == std::string_view::npos) return 0;
    const auto counts = dsrun::expand_slurm_counts(text.substr(newline + 1), hosts.size(), "SLURM_TASKS_PER_NODE");
    FUZZ_CHECK(counts.size() == hosts.size());
    for (int c : counts) FUZZ_CHECK(c >= 0);
  } catch (const dsrun::InputError&) {
  }
  return 0;
}
