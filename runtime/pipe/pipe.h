// Pipeline parallelism's plan, pure functions: where each rank sits in the pipe x data x model grid
// (DeepSpeed's PipeModelDataParallelTopology), which layers each stage holds (DeepSpeed's partition
// methods), and the order in which a stage runs its micro-batches (the 1F1B schedule).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ds::pipe {

// Ranks laid out as DeepSpeed and Megatron lay them out: the model (tensor-parallel) coordinate varies
// fastest, then the sequence-parallel one (Megatron's "tp-cp-dp-pp" order), then data, then pipe:
// rank = ((pipe·data_size + data)·seq_size + seq)·model_size + model. So a stage's ranks are adjacent,
// and tensor-parallel ranks share a host (then sequence-parallel ones, whose traffic is 1/S of theirs).
struct Topology {
  int pipe_size = 1, data_size = 1, model_size = 1, seq_size = 1;
  struct Coord {
    int pipe = 0, data = 0, model = 0, seq = 0;
  };
  int world() const { return pipe_size * data_size * seq_size * model_size; }
  Coord coord(int rank) const;
  int rank(Coord c) const;
  // The ranks that differ from `rank` in one coordinate only, in order of that coordinate: its
  // data-parallel group, its pipeline (one rank per stage), its tensor-parallel group, its
  // sequence-parallel group.
  std::vector<int> data_group(int rank) const;
  std::vector<int> pipe_group(int rank) const;
  std::vector<int> model_group(int rank) const;
  std::vector<int> seq_group(int rank) const;
  // The ranks that differ from `rank` in the data and sequence coordinates only, at index
  // data·seq_size + seq: they average gradients and share ZeRO partitions (DeepSpeed's seq-data group).
  std::vector<int> seq_data_group(int rank) const;
};

// Stage s holds layers [bounds[s], bounds[s+1]); bounds has stages + 1 entries, bounds[0] = 0 and
// bounds[stages] = the number of layers. `method` is DeepSpeed's partition_method:
//   "uniform"      the same number of layers per stage, the first stages one more when it does not divide;
//   "parameters"   balanced by each layer's parameter count (`params`);
//   "type:REGEX"   balanced by the layers whose name matches REGEX (POSIX extended, case-insensitive search).
// Balancing is DeepSpeed's: the split that minimises the spread (largest stage's weight - smallest's),
// the later boundary on ties; with no more layers than stages, uniform. Throws ConfigError (naming
// pipeline.partition and the value) on an unknown method, a bad regex, a regex matching no layer, or
// more stages than layers.
std::vector<int> partition(const std::string& method, int stages, const std::vector<std::string>& layer_names,
                           const std::vector<size_t>& params);
std::vector<int> partition_uniform(int items, int parts);
std::vector<int> partition_balanced(const std::vector<double>& weights, int parts);

// One stage's work in a training step, in order: the forward or backward pass of micro-batch `micro`.
struct Op {
  enum Kind { Forward, Backward } kind;
  int micro;
  bool operator==(const Op&) const = default;
};

// The 1F1B schedule (DeepSpeed's TrainSchedule, Megatron's non-interleaved schedule) for stage
// `stage` of `stages` with `micro_batches` micro-batches: min(stages - stage - 1, M) forwards
// (warm-up), then one forward and one backward alternately, then the remaining backwards (cool-down).
// At most min(stages - stage, M) micro-batches are in flight on the stage (forward done, backward
// not yet).
std::vector<Op> one_f_one_b(int stage, int stages, int micro_batches);
// Micro-batches in flight at once on the stage: the activation buffers it needs.
int in_flight(int stage, int stages, int micro_batches);

}  // namespace ds::pipe
