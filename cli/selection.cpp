// Resource selection. A spec names hosts and optionally slot lists; pieces naming the same host merge
// (concatenated, deduplicated, sorted), and a bare piece adds nothing to a host that also has slots,
// so `w:1@w` means `w:1` for include and exclude alike (DeepSpeed's quirk, kept for compatibility).
#include "selection.h"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core_list.h"
#include "errors.h"
#include "text.h"

namespace dsrun {
namespace {

// One host named in a spec, its pieces merged.
struct HostSpec {
  std::string host;
  std::vector<int> slots;  // ascending, unique; empty = the whole host
};

// Parses `NODE[@NODE...]` given to `flag`; hosts in order of first mention.
std::vector<HostSpec> parse_spec(std::string_view flag, const std::string& spec) {
  const auto error = [&](std::string_view why) {
    return InputError(fmt::format("{} '{}': {}", flag, spec, why));
  };
  std::vector<HostSpec> hosts;
  for (const std::string_view node : split(spec, '@')) {
    const size_t colon = node.find(':');
    if (colon != std::string_view::npos && node.find(':', colon + 1) != std::string_view::npos)
      throw error(fmt::format("'{}' has more than one ':'", node));
    const std::string_view name = node.substr(0, colon);
    if (name.empty()) throw error(fmt::format("'{}' has no host name", node));
    auto host = std::ranges::find(hosts, name, &HostSpec::host);
    if (host == hosts.end()) host = hosts.insert(host, {std::string(name), {}});
    if (colon == std::string_view::npos) continue;
    for (const std::string_view item : split(node.substr(colon + 1), ',')) {
      const std::string_view number = trim(item);
      int slot = 0;
      const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), slot);
      if (ec == std::errc::result_out_of_range) throw error(fmt::format("slot '{}' is out of range", item));
      if (number.empty() || ec != std::errc() || end != number.data() + number.size())
        throw error(fmt::format("slot '{}' is not a number", item));
      host->slots.push_back(slot);
    }
  }
  for (HostSpec& host : hosts) {
    std::ranges::sort(host.slots);
    host.slots.erase(std::unique(host.slots.begin(), host.slots.end()), host.slots.end());
  }
  return hosts;
}

// The slots of `node` an include (`include` true) or exclude keeps; `named` is its spec entry, or null.
std::vector<int> kept_slots(const NodeSlots& node, const HostSpec* named, bool include) {
  if (named == nullptr) return include ? std::vector<int>{} : node.slots;
  if (named->slots.empty()) return include ? node.slots : std::vector<int>{};
  if (include) return named->slots;
  std::vector<int> kept;
  std::ranges::set_difference(node.slots, named->slots, std::back_inserter(kept));
  return kept;
}

// Applies an include (`include` true) or exclude spec to `pool`; hosts left without slots are dropped.
Selection apply_filter(const Selection& pool, std::string_view flag, const std::string& spec_text,
                       bool include) {
  const std::vector<HostSpec> spec = parse_spec(flag, spec_text);
  for (const HostSpec& named : spec) {
    const auto node = std::ranges::find(pool, named.host, &NodeSlots::host);
    if (node == pool.end())
      throw InputError(fmt::format("{}: host '{}' is not in the hostfile", flag, named.host));
    for (const int slot : named.slots)
      if (!std::ranges::binary_search(node->slots, slot))
        throw InputError(fmt::format("{}: host '{}' has no slot {} (it has {})", flag, named.host, slot,
                                     node->slots.empty() ? "none" : format_core_list(node->slots)));
  }
  Selection result;
  for (const NodeSlots& node : pool) {
    const auto named = std::ranges::find(spec, node.host, &HostSpec::host);
    std::vector<int> kept = kept_slots(node, named == spec.end() ? nullptr : &*named, include);
    if (!kept.empty()) result.push_back({node.host, std::move(kept)});
  }
  return result;
}

void check_count(std::string_view flag, int value) {
  if (value != -1 && value < 1) throw InputError(fmt::format("{} {}: must be at least 1", flag, value));
}

// The flags `request` gives, as the user would have typed them.
std::string describe(const SelectionRequest& request) {
  std::vector<std::string> flags;
  if (!request.include.empty()) flags.push_back(fmt::format("--include '{}'", request.include));
  if (!request.exclude.empty()) flags.push_back(fmt::format("--exclude '{}'", request.exclude));
  if (request.num_nodes != -1) flags.push_back(fmt::format("--num_nodes {}", request.num_nodes));
  if (request.num_gpus != -1) flags.push_back(fmt::format("--num_gpus {}", request.num_gpus));
  return fmt::format("{}", fmt::join(flags, " "));
}

}  // namespace

Selection pool_from_hostfile(const std::vector<HostEntry>& hosts) {
  Selection pool;
  for (const HostEntry& entry : hosts) {
    NodeSlots node{entry.host, std::vector<int>(static_cast<size_t>(entry.slots))};
    std::iota(node.slots.begin(), node.slots.end(), 0);
    pool.push_back(std::move(node));
  }
  return pool;
}

Selection select_resources(const Selection& pool, const SelectionRequest& request) {
  const bool filtered = !request.include.empty() || !request.exclude.empty();
  if (!request.include.empty() && !request.exclude.empty())
    throw InputError(fmt::format("--include '{}' and --exclude '{}': the two are mutually exclusive",
                                 request.include, request.exclude));
  if (filtered && (request.num_nodes != -1 || request.num_gpus != -1))
    throw InputError("--num_nodes/--num_gpus cannot be combined with --include/--exclude");
  check_count("--num_nodes", request.num_nodes);
  check_count("--num_gpus", request.num_gpus);

  Selection selection = pool;
  if (!request.include.empty()) selection = apply_filter(pool, "--include", request.include, true);
  if (!request.exclude.empty()) selection = apply_filter(pool, "--exclude", request.exclude, false);
  if (request.num_nodes != -1 || request.num_gpus != -1)  // slots=0 hosts start nothing: never count them
    std::erase_if(selection, [](const NodeSlots& node) { return node.slots.empty(); });
  if (request.num_nodes != -1) {
    // DeepSpeed slices the host list, so asking for more nodes than exist quietly runs on fewer; we refuse.
    if (static_cast<size_t>(request.num_nodes) > selection.size())
      throw InputError(fmt::format("--num_nodes {} is more than the number of hosts with slots ({})",
                                   request.num_nodes, selection.size()));
    selection.erase(selection.begin() + request.num_nodes, selection.end());
  }
  if (request.num_gpus != -1) {
    for (NodeSlots& node : selection) {
      if (node.slots.size() < static_cast<size_t>(request.num_gpus))
        throw InputError(fmt::format("--num_gpus {}: host '{}' has slots={}", request.num_gpus, node.host,
                                     node.slots.size()));
      node.slots.resize(static_cast<size_t>(request.num_gpus));  // the first N: 0..N-1 for a hostfile pool
    }
  }

  if (std::ranges::all_of(selection, [](const NodeSlots& node) { return node.slots.empty(); })) {
    const std::string flags = describe(request);
    throw InputError(flags.empty() ? "selection is empty: every host has slots=0"
                                   : fmt::format("selection is empty: no slots left after {}", flags));
  }
  return selection;
}

}  // namespace dsrun
