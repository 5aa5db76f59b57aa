// The training engine: owns every parameter, gradient, activation and optimizer buffer, and runs
// one optimizer step at a time: GAS micro-batches of forward and backward through the plugin's
// layers, gradient averaging across data-parallel ranks, clipping by global norm, the optimizer
// update and the LR schedule. Deterministic: same seed, same world size → bit-identical runs on CPU.
//
// ZeRO stage 0: every rank keeps everything; gradients are all-reduced in buckets, overlapped with
// the last micro-batch's backward. Stage 1: the flat buffers are padded to W equal partitions
// (rank r owns elements [r·P, (r+1)·P)); optimizer state exists for the rank's partition only;
// gradients are reduce-scattered (each rank receives the average of its partition), the rank
// updates its partition, and the updated partitions are all-gathered. Both move 2Ψ(W−1)/W
// elements per rank per step.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "engine/sampler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "plugin/plugin.h"

namespace ds {

struct EngineConfig {
  int64_t micro_batch = 1;                  // samples per rank per micro-step
  int64_t grad_accum = 1;                   // micro-steps per optimizer step (GAS)
  double gradient_clipping = 0.0;           // max global L2 norm; 0 = off
  int zero_stage = 0;                       // 0 or 1 (see above)
  int64_t reduce_bucket_elems = 500000000;  // gradient elements per all-reduce bucket (stage 0)
  bool prescale_gradients = false;          // divide by world size before summing (else after)
  double predivide_factor = 1.0;            // DeepSpeed's gradient_predivide_factor
  uint64_t seed = 42;                       // parameter init and data order
};

// One parameter tensor inside the flat buffers.
struct ParamSlot {
  std::string name;  // "<layer>.<param>"
  ds_shape shape;
  size_t offset = 0;  // elements from the start of the flat buffer
  size_t size = 0;    // elements
};

struct StepStats {
  int64_t step = 0;          // optimizer steps taken, counted from 1
  int64_t epoch = 0;
  double loss = 0.0;         // mean over micro-batches and ranks
  double lr = 0.0;           // learning rate applied at this step
  double grad_norm = 0.0;    // global L2 norm of the averaged gradient, before clipping
  double seconds = 0.0;      // wall time of the step on this rank
  int64_t samples = 0;       // samples in the global batch
};

// Bytes held by this rank, by kind.
struct MemoryReport {
  size_t params = 0, grads = 0, optimizer_state = 0, activations = 0, workspace = 0;
};

// Builds the optimizer for the n parameters this rank updates (all of them at stage 0, its partition
// at stage 1), once the model's size is known; `reducer` sums per-tensor norms across ranks (Lamb).
using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(size_t n, NormReducer reducer)>;

class Engine {
 public:
  Engine(const EngineConfig& config, Plugin& plugin, ProcessGroup& group, const OptimizerFactory& make_optimizer,
         std::unique_ptr<LrSchedule> schedule);
  // Runs one optimizer step; throws on a plugin or communication error, or a non-finite gradient.
  StepStats step();

  int64_t steps_taken() const { return steps_; }
  // Optimizer steps in one pass over the data: floor(per-rank samples / (micro_batch · GAS)).
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t global_batch() const { return config_.micro_batch * config_.grad_accum * group_.size(); }
  size_t num_parameters() const { return num_params_; }
  std::span<const float> parameters() const { return {params_.data(), num_params_}; }
  const std::vector<ParamSlot>& slots() const { return slots_; }
  MemoryReport memory() const;

 private:
  struct Layer {
    std::string name;
    size_t first_slot = 0, num_slots = 0;  // into slots_
    size_t begin = 0, end = 0;             // element range of its parameters in the flat buffers
    ds_shape input_shape{}, output_shape{};
    std::vector<float> output;             // activation [micro_batch, ...]
    std::vector<float> workspace;
  };
  void build_layers();
  void init_parameters();
  void forward(const ds_batch& batch);
  void backward(const ds_batch& batch, bool reduce_during);
  void launch_reduction(size_t begin, size_t end);
  double reduce_gradients();  // averages gradients across ranks; returns the global gradient norm
  void update(double lr);
  std::vector<ds_tensor> views(std::vector<float>& buffer, const Layer& layer);

  EngineConfig config_;
  Plugin& plugin_;
  ProcessGroup& group_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  DistributedSampler sampler_;
  ds_dataset_info data_{};

  std::vector<ParamSlot> slots_;
  std::vector<Layer> layers_;
  size_t num_params_ = 0;                       // Ψ
  size_t part_size_ = 0;                        // P = ceil(Ψ / W); the flat buffers hold W·P elements
  size_t part_begin_ = 0;                       // this rank's partition: [part_begin_, part_begin_ + P)
  std::vector<float> params_, grads_;           // flat, [W·P], zero padding after Ψ
  std::vector<float> grad_a_, grad_b_;          // activation gradients, ping-pong, [max activation]
  std::vector<float> input_data_;               // micro-batch input (F32 or I32 bit patterns)
  std::vector<int32_t> target_data_;            // micro-batch target (I32) or F32 bit patterns
  std::vector<TensorRange> tensor_ranges_;     // the tensors inside what this rank updates
  std::vector<std::unique_ptr<Work>> pending_;  // in-flight gradient all-reduces
  int64_t steps_ = 0;
  int64_t steps_per_epoch_ = 0;
};

}  // namespace ds
