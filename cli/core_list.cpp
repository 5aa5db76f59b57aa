// Core lists for `--bind_cores_to_rank`, as DeepSpeed's parse_range_list and get_numactl_cmd do:
// the list must be written ascending and without overlap, each local rank gets
// len(cores) / local_size consecutive cores, and the remainder stays unused.
#include "core_list.h"

#include <charconv>
#include <stdexcept>

#include <fmt/format.h>

#include "errors.h"
#include "text.h"

namespace dsrun {

// Far above any machine's core count; bounds how many ids one range can expand to.
constexpr int kMaxCore = 65535;

std::vector<int> parse_core_list(std::string_view spec) {
  const auto error = [&](std::string_view why) {
    return InputError(fmt::format("--bind_core_list '{}': {}", spec, why));
  };
  if (spec.empty()) throw error("the list is empty");
  std::vector<int> cores;
  for (const std::string_view item : split(spec, ',')) {
    const auto core = [&](std::string_view digits) {
      int id = 0;
      if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos)
        throw error(fmt::format("'{}' is not a core id N or a range A-B", item));
      if (std::from_chars(digits.data(), digits.data() + digits.size(), id).ec != std::errc() ||
          id > kMaxCore)
        throw error(fmt::format("core id {} is above {}", digits, kMaxCore));
      return id;
    };
    const size_t dash = item.find('-');
    const int first = core(item.substr(0, dash));
    const int last = dash == std::string_view::npos ? first : core(item.substr(dash + 1));
    if (last < first) throw error(fmt::format("range '{}' is descending", item));
    if (!cores.empty() && first <= cores.back())
      throw error(fmt::format("'{}' does not come after {} (items must be ascending and not overlap)", item,
                              cores.back()));
    for (int id = first; id <= last; ++id) cores.push_back(id);
  }
  return cores;
}

std::vector<int> cores_for_rank(const std::vector<int>& cores, int local_rank, int local_size) {
  if (local_size < 1 || local_rank < 0 || local_rank >= local_size)
    throw std::invalid_argument(fmt::format("cores_for_rank: local rank {} of {}", local_rank, local_size));
  const size_t per_rank = cores.size() / static_cast<size_t>(local_size);
  if (per_rank == 0)
    throw InputError(
        fmt::format("--bind_cores_to_rank: {} cores ({}) for {} local ranks; each rank needs at least one core",
                    cores.size(), format_core_list(cores), local_size));
  const auto first = cores.begin() + static_cast<std::ptrdiff_t>(per_rank * static_cast<size_t>(local_rank));
  return {first, first + static_cast<std::ptrdiff_t>(per_rank)};
}

std::string format_core_list(const std::vector<int>& cores) {
  std::string text;
  for (size_t first = 0; first < cores.size();) {
    size_t last = first;
    while (last + 1 < cores.size() && cores[last + 1] == cores[last] + 1) ++last;
    if (!text.empty()) text += ',';
    text += last == first ? fmt::format("{}", cores[first]) : fmt::format("{}-{}", cores[first], cores[last]);
    first = last + 1;
  }
  return text;
}

}  // namespace dsrun
