// The process groups between pipeline stages (links.h).
#include "pipe/links.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ds::pipe {

StageLinks::StageLinks(std::shared_ptr<Store> store, const Topology& topology, int rank,
                       std::chrono::milliseconds timeout)
    : store_(std::move(store)), topology_(topology), coord_(topology.coord(rank)), rank_(rank), timeout_(timeout) {
  // The pair groups are made from the first stage on (each rank makes its link to the previous stage
  // first), so the chain of joins resolves without waiting on itself.
  auto neighbour = [&](int stage) {
    Topology::Coord c = coord_;
    c.pipe = stage;
    return topology_.rank(c);
  };
  if (!first()) {
    const std::vector<int> pair{neighbour(stage() - 1), rank_};
    activations_in_ = group(pair, "act");
    gradients_out_ = group(pair, "grad");
  }
  if (!last()) {
    const std::vector<int> pair{rank_, neighbour(stage() + 1)};
    activations_out_ = group(pair, "act");
    gradients_in_ = group(pair, "grad");
  }
  pipe_ = group(topology_.pipe_group(rank_), "stages");
}

StageLinks::~StageLinks() = default;

std::unique_ptr<ProcessGroup> StageLinks::group(const std::vector<int>& ranks, const std::string& name) {
  const auto me = std::find(ranks.begin(), ranks.end(), rank_);
  if (me == ranks.end()) throw std::logic_error("StageLinks: a group without this rank");
  return make_gloo_group(store_, static_cast<int>(me - ranks.begin()), static_cast<int>(ranks.size()),
                         fmt::format("pipe-{}-{}", name, fmt::join(ranks, "-")), timeout_);
}

std::unique_ptr<Work> StageLinks::send_activation(float* data, size_t n) {
  return activations_out_->broadcast_async(data, n, DataType::F32, 0);
}

std::unique_ptr<Work> StageLinks::send_gradient(float* data, size_t n) {
  return gradients_out_->broadcast_async(data, n, DataType::F32, 1);
}

void StageLinks::receive_activation(float* data, size_t n) { activations_in_->broadcast(data, n, DataType::F32, 0); }

void StageLinks::receive_gradient(float* data, size_t n) { gradients_in_->broadcast(data, n, DataType::F32, 1); }

ProcessGroup& StageLinks::stages_group(const std::vector<int>& stages) {
  auto& slot = stage_groups_[stages];
  if (!slot) {
    std::vector<int> ranks;
    for (int s : stages) {
      Topology::Coord c = coord_;
      c.pipe = s;
      ranks.push_back(topology_.rank(c));
    }
    slot = group(ranks, "tied");
  }
  return *slot;
}

uint64_t StageLinks::sent_bytes() const {
  uint64_t n = pipe_->comms().sent_bytes();
  for (const auto* g : {&activations_in_, &gradients_out_, &activations_out_, &gradients_in_})
    if (*g) n += (*g)->comms().sent_bytes();
  for (const auto& [stages, g] : stage_groups_) n += g->comms().sent_bytes();
  return n;
}

}  // namespace ds::pipe
