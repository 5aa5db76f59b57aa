// Pipeline parallelism's plan: topology, layer partitioning and the 1F1B schedule (pipe.h).
#include "pipe/pipe.h"

#include <regex.h>

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "core/errors.h"

namespace ds::pipe {

Topology::Coord Topology::coord(int rank) const {
  return Coord{rank / (data_size * seq_size * model_size), rank / (seq_size * model_size) % data_size,
               rank % model_size, rank / model_size % seq_size};
}

int Topology::rank(Coord c) const { return ((c.pipe * data_size + c.data) * seq_size + c.seq) * model_size + c.model; }

namespace {
// The ranks whose coordinates equal `rank`'s but for the one `axis` selects, in its order.
std::vector<int> line(const Topology& t, int rank, int Topology::Coord::*axis, int size) {
  std::vector<int> out;
  Topology::Coord c = t.coord(rank);
  for (int i = 0; i < size; ++i) {
    c.*axis = i;
    out.push_back(t.rank(c));
  }
  return out;
}
}  // namespace

std::vector<int> Topology::data_group(int r) const { return line(*this, r, &Coord::data, data_size); }
std::vector<int> Topology::pipe_group(int r) const { return line(*this, r, &Coord::pipe, pipe_size); }
std::vector<int> Topology::model_group(int r) const { return line(*this, r, &Coord::model, model_size); }
std::vector<int> Topology::seq_group(int r) const { return line(*this, r, &Coord::seq, seq_size); }

std::vector<int> Topology::seq_data_group(int r) const {
  std::vector<int> out;
  for (int d : data_group(r))
    for (int s : seq_group(d)) out.push_back(s);
  return out;
}

std::vector<int> partition_uniform(int items, int parts) {
  std::vector<int> bounds(static_cast<size_t>(parts) + 1);
  if (items <= parts) {
    for (int p = 0; p <= parts; ++p) bounds[static_cast<size_t>(p)] = std::min(p, items);
    return bounds;
  }
  const int size = items / parts, extra = items % parts;
  for (int p = 1; p <= parts; ++p) bounds[static_cast<size_t>(p)] = bounds[static_cast<size_t>(p) - 1] + size + (p <= extra ? 1 : 0);
  return bounds;
}

// Dynamic programming over (first i items, j parts): the best split's largest and smallest part and
// its spread; the last part starts at position[i][j].
std::vector<int> partition_balanced(const std::vector<double>& weights, int parts) {
  const int n = static_cast<int>(weights.size());
  if (n <= parts) return partition_uniform(n, parts);
  constexpr double inf = std::numeric_limits<double>::infinity();
  const auto cols = static_cast<size_t>(parts) + 1;
  auto at = [cols](int i, int j) { return static_cast<size_t>(i) * cols + static_cast<size_t>(j); };
  std::vector<double> best_max((static_cast<size_t>(n) + 1) * cols, inf), best_min(best_max), cost(best_max);
  std::vector<int> position(best_max.size(), 0);
  std::vector<double> prefix(static_cast<size_t>(n) + 1, 0.0);
  for (int i = 0; i < n; ++i) prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + weights[static_cast<size_t>(i)];
  best_max[at(0, 0)] = 0.0;
  cost[at(0, 0)] = 0.0;
  for (int i = 1; i <= n; ++i)
    for (int j = 1; j <= std::min(i, parts); ++j)
      for (int k = 0; k < i; ++k) {
        const double part = prefix[static_cast<size_t>(i)] - prefix[static_cast<size_t>(k)];
        const double hi = std::max(best_max[at(k, j - 1)], part), lo = std::min(best_min[at(k, j - 1)], part);
        if (cost[at(i, j)] >= hi - lo) {
          cost[at(i, j)] = hi - lo;
          best_max[at(i, j)] = hi;
          best_min[at(i, j)] = lo;
          position[at(i, j)] = k;
        }
      }
  std::vector<int> bounds(cols);
  bounds[static_cast<size_t>(parts)] = n;
  for (int j = parts; j >= 1; --j) bounds[static_cast<size_t>(j) - 1] = position[at(bounds[static_cast<size_t>(j)], j)];
  return bounds;
}

std::vector<int> partition(const std::string& method, int stages, const std::vector<std::string>& layer_names,
                           const std::vector<size_t>& params) {
  const int layers = static_cast<int>(layer_names.size());
  if (stages > layers)
    throw ConfigError(fmt::format("pipeline.stages: {} stages, but the model has only {} layers", stages, layers));
  std::string lower = method;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "uniform") return partition_uniform(layers, stages);
  std::vector<double> weights(layer_names.size(), 0.0);
  if (lower == "parameters") {
    for (size_t i = 0; i < params.size(); ++i) weights[i] = static_cast<double>(params[i]);
  } else if (lower.starts_with("type:")) {
    const std::string pattern = method.substr(5);
    regex_t re;  // POSIX extended, case-insensitive: std::regex trips GCC 12's -Wmaybe-uninitialized under ASan
    if (const int error = regcomp(&re, pattern.c_str(), REG_EXTENDED | REG_ICASE | REG_NOSUB); error != 0) {
      char why[256];
      regerror(error, &re, why, sizeof why);
      throw ConfigError(fmt::format("pipeline.partition: '{}': the pattern '{}' is not a regular expression ({})",
                                    method, pattern, why));
    }
    bool any = false;
    for (size_t i = 0; i < layer_names.size(); ++i)
      if (regexec(&re, layer_names[i].c_str(), 0, nullptr, 0) == 0) weights[i] = 1.0, any = true;
    regfree(&re);
    if (!any)
      throw ConfigError(fmt::format("pipeline.partition: '{}' matches none of the model's layer names ({} ... {})",
                                    method, layer_names.front(), layer_names.back()));
  } else {
    throw ConfigError(fmt::format("pipeline.partition: '{}' is not one of \"parameters\", \"uniform\", \"type:REGEX\"",
                                  method));
  }
  return partition_balanced(weights, stages);
}

int in_flight(int stage, int stages, int micro_batches) { return std::min(stages - stage, micro_batches); }

std::vector<Op> one_f_one_b(int stage, int stages, int micro_batches) {
  const int warmup = std::min(stages - stage - 1, micro_batches);
  std::vector<Op> ops;
  int forward = 0, backward = 0;
  for (; forward < warmup; ++forward) ops.push_back({Op::Forward, forward});
  for (; forward < micro_batches; ++forward, ++backward) {
    ops.push_back({Op::Forward, forward});
    ops.push_back({Op::Backward, backward});
  }
  for (; backward < micro_batches; ++backward) ops.push_back({Op::Backward, backward});
  return ops;
}

}  // namespace ds::pipe
