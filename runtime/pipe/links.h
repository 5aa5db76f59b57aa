// The process groups one rank of a pipeline talks through, besides its stage's data-parallel group:
//   - with each neighbouring stage (the rank with the same data and model coordinates) two 2-rank
//     groups, one per direction: activations go forward in one, their gradients backward in the
//     other, so the two streams of a 1F1B schedule never queue behind each other. A transfer is a
//     broadcast from the sender (as DeepSpeed's p2p over 2-rank groups);
//   - the pipe group: one rank per stage (this rank's data coordinate), for the loss and the
//     gradient norm;
//   - groups of the stages that hold copies of one tied parameter (the GPT's embedding and head).
// Made collectively: every rank of the job constructs its StageLinks at the same point.
#pragma once
#include <chrono>
#include <map>
#include <memory>
#include <vector>

#include "comm/process_group.h"
#include "pipe/pipe.h"

namespace ds::pipe {

class StageLinks {
 public:
  StageLinks(std::shared_ptr<Store> store, const Topology& topology, int rank, std::chrono::milliseconds timeout);
  ~StageLinks();

  int stage() const { return coord_.pipe; }
  int stages() const { return topology_.pipe_size; }
  bool first() const { return stage() == 0; }
  bool last() const { return stage() == stages() - 1; }

  // n fp32 values to the next stage / the previous stage: asynchronous, `data` must stay unchanged
  // until the Work is waited on.
  std::unique_ptr<Work> send_activation(float* data, size_t n);
  std::unique_ptr<Work> send_gradient(float* data, size_t n);
  // n fp32 values from the previous stage / the next stage, into `data`; blocks until they are in.
  void receive_activation(float* data, size_t n);
  void receive_gradient(float* data, size_t n);

  ProcessGroup& pipe() { return *pipe_; }
  // The group of these stages' ranks at this rank's data and model coordinates (ascending stages,
  // this rank's among them), made on first use: every rank of those stages must ask for it in the
  // same order.
  ProcessGroup& stages_group(const std::vector<int>& stages);
  // Bytes this rank sent to its neighbours and in its pipe and tied groups.
  uint64_t sent_bytes() const;

 private:
  std::unique_ptr<ProcessGroup> group(const std::vector<int>& ranks, const std::string& name);

  std::shared_ptr<Store> store_;
  Topology topology_;
  Topology::Coord coord_;
  int rank_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<ProcessGroup> activations_in_, gradients_out_;   // with the previous stage
  std::unique_ptr<ProcessGroup> activations_out_, gradients_in_;   // with the next stage
  std::unique_ptr<ProcessGroup> pipe_;
  std::map<std::vector<int>, std::unique_ptr<ProcessGroup>> stage_groups_;
};

}  // namespace ds::pipe
