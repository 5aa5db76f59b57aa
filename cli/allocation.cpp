// Reading Slurm's and MPI's environment (allocation.h).
#include "allocation.h"

#include <cstdlib>

#include <fmt/format.h>

#include "errors.h"

namespace dsrun {
namespace {

constexpr size_t kMaxHosts = 1 << 16;  // a list expanding past this is a mistake, not a cluster

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value && *value ? value : nullptr;
}

// A non-negative decimal number, or -1.
long number(std::string_view text) {
  if (text.empty() || text.size() > 9) return -1;
  long value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return -1;
    value = value * 10 + (c - '0');
  }
  return value;
}

// Expands one host expression (no top-level commas) into `out`, prefix by prefix.
void expand_one(std::string_view expr, std::string_view origin, std::vector<std::string>& out) {
  std::vector<std::string> names = {""};
  size_t i = 0;
  while (i < expr.size()) {
    const size_t open = expr.find('[', i);
    const std::string_view literal = expr.substr(i, open == std::string_view::npos ? std::string_view::npos : open - i);
    if (literal.find(']') != std::string_view::npos)
      throw InputError(fmt::format("{}: '{}': ']' without '['", origin, expr));
    for (auto& name : names) name += literal;
    if (open == std::string_view::npos) break;
    const size_t close = expr.find(']', open);
    if (close == std::string_view::npos) throw InputError(fmt::format("{}: '{}': '[' without ']'", origin, expr));
    std::vector<std::string> items;  // the bracket's values, as text with their padding
    std::string_view ranges = expr.substr(open + 1, close - open - 1);
    for (size_t start = 0; start <= ranges.size();) {
      size_t comma = ranges.find(',', start);
      if (comma == std::string_view::npos) comma = ranges.size();
      const std::string_view range = ranges.substr(start, comma - start);
      const size_t dash = range.find('-');
      const std::string_view first = range.substr(0, dash);
      const std::string_view last = dash == std::string_view::npos ? first : range.substr(dash + 1);
      const long a = number(first), b = number(last);
      if (a < 0 || b < 0 || b < a)
        throw InputError(fmt::format("{}: '{}': '{}' is not a number or an ascending range", origin, expr, range));
      if (items.size() + static_cast<size_t>(b - a) + 1 > kMaxHosts)
        throw InputError(fmt::format("{}: '{}' names more than {} hosts", origin, expr, kMaxHosts));
      for (long v = a; v <= b; ++v) {
        std::string digits = std::to_string(v);
        if (digits.size() < first.size()) digits.insert(0, first.size() - digits.size(), '0');  // node[01-04]
        items.push_back(std::move(digits));
      }
      start = comma + 1;
    }
    if (names.size() * items.size() > kMaxHosts)
      throw InputError(fmt::format("{}: '{}' names more than {} hosts", origin, expr, kMaxHosts));
    std::vector<std::string> product;
    product.reserve(names.size() * items.size());
    for (const auto& name : names)
      for (const auto& item : items) product.push_back(name + item);
    names = std::move(product);
    i = close + 1;
  }
  for (auto& name : names) {
    if (name.empty()) throw InputError(fmt::format("{}: an empty host name", origin));
    out.push_back(std::move(name));
  }
}

}  // namespace

std::vector<std::string> expand_slurm_hostlist(std::string_view list, std::string_view origin) {
  std::vector<std::string> hosts;
  size_t start = 0, depth = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i < list.size() && list[i] == '[') ++depth;
    if (i < list.size() && list[i] == ']' && depth > 0) --depth;
    if (i == list.size() || (list[i] == ',' && depth == 0)) {
      expand_one(list.substr(start, i - start), origin, hosts);
      if (hosts.size() > kMaxHosts) throw InputError(fmt::format("{}: more than {} hosts", origin, kMaxHosts));
      start = i + 1;
    }
  }
  return hosts;
}

std::vector<int> expand_slurm_counts(std::string_view text, size_t nodes, std::string_view origin) {
  std::vector<int> counts;
  for (size_t start = 0; start <= text.size();) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = text.substr(start, comma - start);
    long repeat = 1;
    if (const size_t x = item.find("(x"); x != std::string_view::npos && item.back() == ')') {
      repeat = number(item.substr(x + 2, item.size() - x - 3));
      item = item.substr(0, x);
    }
    const long count = number(item);
    if (count < 0 || repeat < 1 || counts.size() + static_cast<size_t>(repeat) > nodes)
      throw InputError(fmt::format("{}='{}': expected counts like 2(x3),1 for {} node{}", origin, text, nodes,
                                   nodes == 1 ? "" : "s"));
    counts.insert(counts.end(), static_cast<size_t>(repeat), static_cast<int>(count));
    start = comma + 1;
  }
  if (counts.size() != nodes)
    throw InputError(fmt::format("{}='{}': {} counts for {} nodes", origin, text, counts.size(), nodes));
  return counts;
}

std::optional<Allocation> slurm_allocation() {
  const char* list_name = env("SLURM_JOB_NODELIST") ? "SLURM_JOB_NODELIST" : "SLURM_NODELIST";
  const char* list = env(list_name);
  if (!list) return std::nullopt;
  const std::vector<std::string> hosts = expand_slurm_hostlist(list, list_name);
  std::vector<int> slots;
  std::string slots_from;
  if (const char* gpus = env("SLURM_GPUS_PER_NODE")) {  // "8" or "a100:8"
    std::string_view text(gpus);
    const long n = number(text.substr(text.rfind(':') == std::string_view::npos ? 0 : text.rfind(':') + 1));
    if (n < 1) throw InputError(fmt::format("SLURM_GPUS_PER_NODE='{}': not a GPU count", gpus));
    slots.assign(hosts.size(), static_cast<int>(n));
    slots_from = "SLURM_GPUS_PER_NODE";
  } else if (const char* tasks = env("SLURM_TASKS_PER_NODE")) {
    slots = expand_slurm_counts(tasks, hosts.size(), "SLURM_TASKS_PER_NODE");
    slots_from = "SLURM_TASKS_PER_NODE";
  } else {
    slots.assign(hosts.size(), 1);
    slots_from = "one per node: neither SLURM_GPUS_PER_NODE nor SLURM_TASKS_PER_NODE is set";
  }
  Allocation a;
  for (size_t i = 0; i < hosts.size(); ++i) {
    NodeSlots node{hosts[i], {}};
    for (int s = 0; s < slots[i]; ++s) node.slots.push_back(s);
    a.pool.push_back(std::move(node));
  }
  const char* job = env("SLURM_JOB_ID");
  a.note = fmt::format("no hostfile: the Slurm allocation{} {}={} ({} host{}; slots from {})",
                       job ? fmt::format(" of job {}", job) : "", list_name, list, hosts.size(),
                       hosts.size() == 1 ? "" : "s", slots_from);
  return a;
}

int allocation_cpus_per_node() {
  const char *cpus = env("SLURM_JOB_CPUS_PER_NODE"), *nodes = env("SLURM_JOB_NUM_NODES");
  if (!cpus || !nodes || number(nodes) < 1) return 0;
  try {
    int fewest = 0;
    for (int n : expand_slurm_counts(cpus, static_cast<size_t>(number(nodes)), "SLURM_JOB_CPUS_PER_NODE"))
      if (fewest == 0 || n < fewest) fewest = n;
    return fewest;
  } catch (const InputError&) {
    return 0;
  }
}

std::optional<ToolTask> tool_task() {
  struct Source {
    const char *rank, *size, *node;
  };
  // srun steps (not the batch script, whose SLURM_NTASKS is the job's), OpenMPI, MPICH's hydra.
  for (const Source& s : {Source{"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_NODEID"},
                          Source{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
                          Source{"PMI_RANK", "PMI_SIZE", "PMI_RANK"}}) {
    const char *rank = env(s.rank), *size = env(s.size), *node = env(s.node);
    if (!rank || !size || number(size) <= 1) continue;
    ToolTask t;
    t.rank = static_cast<int>(number(rank));
    t.size = static_cast<int>(number(size));
    t.node = node ? static_cast<int>(number(node)) : -1;
    t.rank_variable = s.rank;
    t.node_variable = s.node;
    return t;
  }
  return std::nullopt;
}

}  // namespace dsrun
