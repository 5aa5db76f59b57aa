// The engine's pipeline stage (engine.h): the 1F1B micro-batch loop with its transfers to the
// neighbouring stages, the tied and data-parallel gradient reduction after it, and forward-only
// passes through every stage.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "amp/storage.h"
#include "engine/engine.h"
#include "zero/collective_type.h"

namespace ds {
namespace {

// Elements of `shape` with its first (batch) dimension set to `rows`.
size_t elements_of(const ds_shape& shape, int64_t rows) {
  size_t n = static_cast<size_t>(rows);
  for (int d = 1; d < shape.ndim; ++d) n *= static_cast<size_t>(shape.dims[d]);
  return n;
}

}  // namespace

// An activation to / from the neighbouring stage: this tensor-parallel rank's slice (pipe_partitioned).
std::unique_ptr<Work> Engine::send_activation(pipe::StageLinks& links, float* data, size_t n) {
  const Slice part = stage_slice(n, config_.pipe_partitioned);
  return links.send_activation(data + part.offset, part.count);
}

void Engine::receive_activation(pipe::StageLinks& links, float* data, size_t n) {
  const Slice part = stage_slice(n, config_.pipe_partitioned);
  links.receive_activation(data + part.offset, part.count);
  gather_slices(data, n, config_.pipe_partitioned);
}

double Engine::pipeline_micro_batches(int64_t epoch, int64_t within, double scale, double& compute_seconds) {
  using Clock = std::chrono::steady_clock;
  pipe::StageLinks& links = *config_.pipeline;
  double loss_sum = 0.0;
  std::vector<ds_tensor> inputs(in_flight_.size()), targets(in_flight_.size());
  std::vector<ds_batch> batches(in_flight_.size());
  for (const pipe::Op& op : pipe::one_f_one_b(links.stage(), links.stages(), static_cast<int>(config_.grad_accum))) {
    buffer_ = static_cast<size_t>(op.micro) % in_flight_.size();
    MicroBatch& m = current();
    if (op.kind == pipe::Op::Forward) {
      if (m.activation_sent) m.activation_sent->wait();  // the buffer's previous micro-batch has left
      batches[buffer_] = load_micro_batch(epoch, within, op.micro, inputs[buffer_], targets[buffer_]);
      if (!links.first()) receive_activation(links, m.stage_input.data(), m.stage_input.size());
      const auto start = Clock::now();
      forward(batches[buffer_], true);
      compute_seconds += std::chrono::duration<double>(Clock::now() - start).count();
      if (links.last()) loss_sum += m.outputs.back()[0];
      else m.activation_sent = send_activation(links, m.outputs.back().data(), m.outputs.back().size());
    } else {
      if (!links.last()) {
        const Slice part = stage_slice(m.grad_output.size(), config_.grad_partitioned);
        links.receive_gradient(m.grad_output.data() + part.offset, part.count);
        gather_slices(m.grad_output.data(), m.grad_output.size(), config_.grad_partitioned);
      }
      const auto start = Clock::now();
      const float* grad_input = backward(batches[buffer_], false, scale);
      compute_seconds += std::chrono::duration<double>(Clock::now() - start).count();
      if (links.first()) continue;
      if (m.gradient_sent) m.gradient_sent->wait();
      std::copy_n(grad_input, m.grad_input.size(), m.grad_input.data());
      const Slice part = stage_slice(m.grad_input.size(), config_.grad_partitioned);
      m.gradient_sent = links.send_gradient(m.grad_input.data() + part.offset, part.count);
    }
  }
  for (MicroBatch& m : in_flight_) {
    if (m.activation_sent) m.activation_sent->wait();
    if (m.gradient_sent) m.gradient_sent->wait();
    m.activation_sent.reset();
    m.gradient_sent.reset();
  }
  return loss_sum;
}

// DeepSpeed's ReduceTiedGrads then ReduceGrads: each tied parameter's accumulated gradient summed
// over the stages holding it (before the data-parallel mean, which is linear), then every unit
// reduced across the stage's data-parallel ranks, last unit first as backward would.
void Engine::reduce_pipeline_gradients() {
  const size_t elem = amp::storage_bytes(config_.grad_storage);
  std::vector<std::unique_ptr<Work>> sums;
  for (size_t layer = 0; layer < layers_.size(); ++layer) {
    const size_t unit = layout_->unit_index(layer);
    for (size_t s = layers_[layer].first_slot; s < layers_[layer].first_slot + layers_[layer].num_slots; ++s) {
      const ParamSlot& slot = slots_[s];
      if (slot.owner >= 0 || slot.tie_stages.empty()) continue;
      auto* grads = static_cast<std::byte*>(grads_->unit_grads(unit)) + (slot.offset - layout_->units()[unit].begin) * elem;
      sums.push_back(config_.pipeline->stages_group(slot.tie_stages)
                         .allreduce_async(grads, slot.size, zero::collective_type(config_.grad_storage), ReduceOp::Sum));
    }
  }
  for (auto& work : sums) work->wait();
  for (size_t unit = layout_->units().size(); unit-- > 0;) grads_->unit_done(unit, true);
}

// Forward only, one micro-batch through every stage in turn (evaluation, prediction).
void Engine::pipeline_forward(const ds_batch& batch) {
  pipe::StageLinks& links = *config_.pipeline;
  MicroBatch& m = current();
  if (!links.first()) receive_activation(links, m.stage_input.data(), elements_of(layers_.front().input_shape, rows_));
  forward(batch, false);
  if (!links.last()) send_activation(links, m.outputs.back().data(), elements_of(layers_.back().output_shape, rows_))->wait();
}

Engine::Slice Engine::stage_slice(size_t n, bool partitioned) const {
  const ProcessGroup* tp = config_.tensor_parallel;
  if (!partitioned || tp == nullptr || n % static_cast<size_t>(tp->size()) != 0) return {0, n};
  const size_t count = n / static_cast<size_t>(tp->size());
  return {count * static_cast<size_t>(tp->rank()), count};
}

void Engine::gather_slices(float* data, size_t n, bool partitioned) {
  const Slice part = stage_slice(n, partitioned);
  if (part.count == n) return;
  slices_.resize(n);
  config_.tensor_parallel->allgather(data + part.offset, slices_.data(), part.count, DataType::F32);
  std::copy_n(slices_.data(), n, data);
}

}  // namespace ds
