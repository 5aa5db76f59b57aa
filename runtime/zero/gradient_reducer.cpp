// Gradient reduction per unit, overlapped with backward (see gradient_reducer.h).
#include "zero/gradient_reducer.h"

#include <algorithm>
#include <stdexcept>

#include "cpu/convert.h"
#include "zero/collective_type.h"

namespace ds::zero {

GradientReducer::GradientReducer(const PartitionLayout& layout, ProcessGroup& group, Policy policy, Averaging averaging,
                                 bool overlap, amp::Storage storage)
    : layout_(layout),
      group_(group),
      policy_(policy),
      storage_(storage),
      type_(collective_type(storage)),
      elem_(amp::storage_bytes(storage)),
      max_in_flight_(overlap ? 1 : 0) {
  const double world = group.size();
  if (group.size() > 1) {
    pre_ = averaging.prescale ? 1.0 / world : 1.0 / averaging.predivide_factor;
    post_ = averaging.prescale ? 1.0 : averaging.predivide_factor / world;
  }
  grads_.assign((policy.gradients ? layout.partition_size() : layout.full_size()) * elem_, std::byte{0});
  accumulated_.assign(layout.units().size(), false);
}

GradientReducer::~GradientReducer() {
  for (auto& f : in_flight_) {  // a step that failed half-way: no reduction may outlive its buffer
    try {
      f.work->wait();
    } catch (...) {
    }
  }
}

void GradientReducer::begin_step(bool reduce) {
  if (!reduce && policy_.optimizer_state) throw std::logic_error("GradientReducer: only stage 0 can leave gradients unreduced");
  reduce_ = reduce;
  std::fill(grads_.begin(), grads_.end(), std::byte{0});
  std::fill(accumulated_.begin(), accumulated_.end(), false);
}

void* GradientReducer::unit_grads(size_t unit) {
  const Unit& u = layout_.units()[unit];
  if (!policy_.gradients) return at(grads_, u.begin);
  if (bucket_unit_ != unit) {
    bucket_ = pool_.acquire(u.padded() * elem_);
    std::fill(bucket_.begin(), bucket_.end(), std::byte{0});
    bucket_unit_ = unit;
  }
  return bucket_.data();
}

void GradientReducer::unit_done(size_t unit, bool last) {
  const Unit& u = layout_.units()[unit];
  const bool single = group_.size() == 1;
  if (!policy_.gradients) {
    accumulated_[unit] = true;
    if (!last || single || u.size == 0 || !reduce_) return;
    std::byte* data = at(grads_, u.begin);
    cpu::scale(storage_, data, u.padded(), pre_);
    in_flight_.push_back({unit, {}, !policy_.optimizer_state
                                        ? group_.allreduce_async(data, u.padded(), type_, ReduceOp::Sum)
                                        : group_.reduce_scatter_async(data, at(grads_, layout_.owned_begin(u)),
                                                                      u.chunk, type_, ReduceOp::Sum)});
    return;
  }
  BufferPool::Buffer bucket = std::move(bucket_);
  bucket_unit_ = SIZE_MAX;
  if (single || u.size == 0) {  // nothing to reduce: the bucket is this rank's chunk
    cpu::add(storage_, bucket.data(), at(grads_, u.part_offset), u.chunk);
    pool_.release(std::move(bucket));
    return;
  }
  cpu::scale(storage_, bucket.data(), u.padded(), pre_);
  std::byte* mine = at(bucket, static_cast<size_t>(layout_.rank()) * u.chunk);
  auto work = group_.reduce_scatter_async(bucket.data(), mine, u.chunk, type_, ReduceOp::Sum);
  in_flight_.push_back({unit, std::move(bucket), std::move(work)});
  while (in_flight_.size() > max_in_flight_) complete_oldest();
}

void GradientReducer::complete_oldest() {
  InFlight f = std::move(in_flight_.front());
  in_flight_.pop_front();
  f.work->wait();
  if (!policy_.gradients) return;
  const Unit& u = layout_.units()[f.unit];
  cpu::add(storage_, at(f.bucket, static_cast<size_t>(layout_.rank()) * u.chunk), at(grads_, u.part_offset), u.chunk);
  pool_.release(std::move(f.bucket));
}

void GradientReducer::finish() {
  while (!in_flight_.empty()) complete_oldest();
  if (post_ == 1.0 || !reduce_) return;
  if (policy_.optimizer_state && !policy_.gradients) {  // stage 1: the owned chunks of the full buffer
    for (const Unit& u : layout_.units()) cpu::scale(storage_, at(grads_, layout_.owned_begin(u)), u.chunk, post_);
  } else {
    cpu::scale(storage_, grads_.data(), grads_.size() / elem_, post_);
  }
}

void* GradientReducer::owned_grads(const Unit& unit) {
  if (policy_.gradients) return at(grads_, unit.part_offset);
  return at(grads_, policy_.optimizer_state ? layout_.owned_begin(unit) : unit.begin);
}

double GradientReducer::owned_sum_of_squares() {
  double sum = 0.0;
  for (const Unit& u : layout_.units()) sum = cpu::sum_squares(storage_, owned_grads(u), u.chunk, sum);
  return sum;
}

void GradientReducer::scale_owned(double factor) {
  for (const Unit& u : layout_.units()) cpu::scale(storage_, owned_grads(u), u.chunk, factor);
}

std::vector<std::span<std::byte>> GradientReducer::reserve_buckets() {
  if (!policy_.gradients) return {};
  size_t largest = 0;
  for (const Unit& u : layout_.units()) largest = std::max(largest, u.padded());
  return pool_.reserve(largest * elem_, max_in_flight_ + 1);  // one filling, the others being reduced
}

size_t GradientReducer::bytes() const { return grads_.capacity() + pool_.bytes(); }

}  // namespace ds::zero
